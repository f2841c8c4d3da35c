"""DDP101 on whole training scripts: several loops, fix-all, imports added once, CRLF."""

from __future__ import annotations

import ast

from ddp_lsp.core.engine import analyze, fix_text
from ddp_lsp.core.fixes import apply_edits
from ddp_lsp.core.settings import Settings

RULE = "DDP101"
SETTINGS = Settings(select=(RULE,))

SCRIPT = '''\
"""Fine-tune a classifier with torchrun."""
import argparse
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("--accum-steps", type=int, default=4)
    return p.parse_args()


def train_one_epoch(model, loader, optimizer, criterion, accum_steps, epoch):
    model.train()
    for i, (images, targets) in enumerate(loader):
        images = images.cuda(non_blocking=True)
        targets = targets.cuda(non_blocking=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(images)
            loss = criterion(logits, targets) / accum_steps
        loss.backward()
        if (i + 1) % accum_steps == 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)


def distill(model, loader, optimizer, micro_batches):
    for batch in loader:
        for k in range(micro_batches):
            out = model(batch[k])
            out.mean().backward()
        optimizer.step()
        optimizer.zero_grad()


def main():
    args = parse_args()
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl")
    model = DDP(build_model().cuda(), device_ids=[local_rank])
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    dataset = build_dataset()
    loader = DataLoader(dataset, batch_size=32, sampler=DistributedSampler(dataset))
    criterion = torch.nn.CrossEntropyLoss()
    for epoch in range(10):
        train_one_epoch(model, loader, optimizer, criterion, args.accum_steps, epoch)
        distill(model, loader, optimizer, 4)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
'''


def _found(text: str) -> list:
    return [f for f in analyze(text, SETTINGS).findings if f.rule_id == RULE]


def test_script_reports_both_loops_with_fixes() -> None:
    found = _found(SCRIPT)
    lines = SCRIPT.splitlines()
    assert [lines[f.span.start.line].strip() for f in found] == [
        "loss.backward()",
        "out.mean().backward()",
    ]
    assert all(f.preferred_fix is not None and f.preferred_fix.safe for f in found)


def test_fix_all_wraps_both_and_imports_contextlib_once() -> None:
    fixed, applied = fix_text(SCRIPT, SETTINGS)
    assert applied == 2
    ast.parse(fixed)
    assert fixed.count("import contextlib\n") == 1
    assert "        is_accumulating = (i + 1) % accum_steps != 0\n" in fixed
    assert (
        "        with model.no_sync() if is_accumulating else contextlib.nullcontext():\n"
        '            with torch.autocast("cuda", dtype=torch.bfloat16):\n'
        "                logits = model(images)\n"
    ) in fixed
    assert "            is_accumulating = k < micro_batches - 1\n" in fixed
    assert _found(fixed) == []
    again, applied_again = fix_text(fixed, SETTINGS)
    assert again == fixed and applied_again == 0


def test_existing_contextlib_import_is_reused() -> None:
    text = SCRIPT.replace("import argparse\n", "import argparse\nimport contextlib\n")
    fixed, _ = fix_text(text, SETTINGS)
    assert fixed.count("import contextlib") == 1
    ast.parse(fixed)


def test_crlf_file_keeps_crlf() -> None:
    text = SCRIPT.replace("\n", "\r\n")
    found = _found(text)
    assert len(found) == 2
    fixed = apply_edits(text, found[0].preferred_fix.edits)
    assert "\n" not in fixed.replace("\r\n", "")
    ast.parse(fixed)


def test_suppression_comment() -> None:
    text = SCRIPT.replace(
        "        loss.backward()\n", "        loss.backward()  # ddp-lsp: ignore[DDP101]\n"
    )
    assert len(_found(text)) == 1


def test_non_distributed_script_is_silent() -> None:
    plain = """\
import torch

def train(model, loader, optimizer, accum_steps):
    for i, (x, y) in enumerate(loader):
        loss = model(x).sum()
        loss.backward()
        if (i + 1) % accum_steps == 0:
            optimizer.step()
            optimizer.zero_grad()
"""
    assert analyze(plain, SETTINGS).findings == ()


NANOGPT = """\
import os
import torch
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.distributed import init_process_group, destroy_process_group

ddp = int(os.environ.get("RANK", -1)) != -1
gradient_accumulation_steps = 40
if ddp:
    init_process_group(backend="nccl")
    ddp_local_rank = int(os.environ["LOCAL_RANK"])
model = GPT(gptconf)
optimizer = model.configure_optimizers(weight_decay, learning_rate, (beta1, beta2), device_type)
if ddp:
    model = DDP(model, device_ids=[ddp_local_rank])
X, Y = get_batch("train")
while True:
    for micro_step in range(gradient_accumulation_steps):
        if ddp:
            model.require_backward_grad_sync = (micro_step == gradient_accumulation_steps - 1)
        with ctx:
            logits, loss = model(X, Y)
            loss = loss / gradient_accumulation_steps
        X, Y = get_batch("train")
        scaler.scale(loss).backward()
    if grad_clip != 0.0:
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
"""


def test_nanogpt_module_level_loop_is_silent() -> None:
    assert _found(NANOGPT) == []


def test_nanogpt_without_require_backward_grad_sync_is_reported() -> None:
    text = (
        "\n".join(
            line
            for line in NANOGPT.splitlines()
            if "require_backward_grad_sync" not in line and "        if ddp:" not in line
        )
        + "\n"
    )
    found = _found(text)
    assert len(found) == 1
    fixed, _ = fix_text(text, SETTINGS)
    ast.parse(fixed)
    assert "        is_accumulating = micro_step < gradient_accumulation_steps - 1\n" in fixed
    assert "                logits, loss = model(X, Y)\n" in fixed
    assert _found(fixed) == []


MODULE_LEVEL = """\
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("nccl")
model = DDP(build_model())
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
data_iter = iter(loader)
for step in range(1000):
    for _ in range(8):
        x, y = next(data_iter)
        loss = model(x).sum()
        loss.backward()
    optimizer.step()
    optimizer.zero_grad()
"""


def test_module_level_underscore_loop_variable_is_named() -> None:
    found = _found(MODULE_LEVEL)
    assert len(found) == 1
    fixed = apply_edits(MODULE_LEVEL, found[0].preferred_fix.edits)
    assert "    for micro_step in range(8):\n" in fixed
    assert "        is_accumulating = micro_step < 7\n" in fixed
    assert fixed.count("import contextlib\n") == 1
    ast.parse(fixed)
    assert _found(fixed) == []


def test_existing_is_accumulating_name_gets_no_fix() -> None:
    text = MODULE_LEVEL.replace(
        "        loss = model(x).sum()\n",
        "        is_accumulating = True\n        loss = model(x).sum()\n",
    )
    found = _found(text)
    assert len(found) == 1 and found[0].fixes == ()
