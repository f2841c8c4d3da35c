"""DDP302-DDP304 beyond their own cases: real training loops (torchvision, nanoGPT, DeiT,
accelerate), the boundary with DDP301 (no expression reported twice), fixes that keep
comments and layout, CRLF, and idempotent fix-all."""

from __future__ import annotations

import ast

import pytest

from ddp_lsp.core.engine import analyze, fix_text
from ddp_lsp.core.fixes import apply_edits
from ddp_lsp.core.settings import Settings

FAMILY = ("DDP302", "DDP303", "DDP304")


def _found(code: str, rules: tuple[str, ...] = FAMILY) -> list:
    result = analyze(code, Settings(select=rules))
    assert result.errors == ()
    return list(result.findings)


def _lines(code: str, found: list) -> list[tuple[str, str]]:
    lines = code.splitlines()
    return [(f.rule_id, lines[f.span.start.line].strip()) for f in found]


# -- real training loops --------------------------------------------------------------------------

TORCHVISION_TRAIN = """\
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import utils


def train_one_epoch(model, criterion, optimizer, data_loader, device, epoch, args, scaler=None):
    model.train()
    metric_logger = utils.MetricLogger(delimiter="  ")
    for i, (image, target) in enumerate(metric_logger.log_every(data_loader, args.print_freq)):
        image, target = image.to(device), target.to(device)
        with torch.autocast("cuda", enabled=scaler is not None):
            output = model(image)
            loss = criterion(output, target)
        optimizer.zero_grad()
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        else:
            loss.backward()
            optimizer.step()
        acc1, acc5 = utils.accuracy(output, target, topk=(1, 5))
        metric_logger.update(loss=loss.item(), lr=optimizer.param_groups[0]["lr"])


def evaluate(model, criterion, data_loader, device):
    model.eval()
    with torch.inference_mode():
        for image, target in data_loader:
            output = model(image.to(device))
            loss = criterion(output, target.to(device))
            print(loss.item())
"""

NANOGPT_LOOP = """\
import time

import torch
from torch.nn.parallel import DistributedDataParallel as DDP

model = DDP(model, device_ids=[ddp_local_rank])
raw_model = model.module if ddp else model
while True:
    if iter_num % eval_interval == 0 and master_process:
        losses = estimate_loss()
        checkpoint = {"model": raw_model.state_dict(), "iter_num": iter_num}
        torch.save(checkpoint, os.path.join(out_dir, "ckpt.pt"))
    for micro_step in range(gradient_accumulation_steps):
        if ddp:
            model.require_backward_grad_sync = micro_step == gradient_accumulation_steps - 1
        with ctx:
            logits, loss = model(X, Y)
            loss = loss / gradient_accumulation_steps
        X, Y = get_batch("train")
        scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    if iter_num % log_interval == 0 and master_process:
        lossf = loss.item() * gradient_accumulation_steps
        print(f"iter {iter_num}: loss {lossf:.4f}")
    iter_num += 1
"""

ACCELERATE_LOOP = """\
import torch
from accelerate import Accelerator


def train(model, optimizer, loader):
    accelerator = Accelerator()
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    for step, batch in enumerate(loader):
        outputs = model(**batch)
        accelerator.backward(outputs.loss)
        optimizer.step()
        optimizer.zero_grad()
        if accelerator.sync_gradients and step % 100 == 0:
            accelerator.log({"loss": outputs.loss.item()}, step=step)
    accelerator.wait_for_everyone()
    accelerator.save(accelerator.unwrap_model(model).state_dict(), "model.pt")
"""


def test_torchvision_train_one_epoch_reports_the_per_step_item_only() -> None:
    found = _found(TORCHVISION_TRAIN)
    assert _lines(TORCHVISION_TRAIN, found) == [
        ("DDP302", 'metric_logger.update(loss=loss.item(), lr=optimizer.param_groups[0]["lr"])')
    ]


def test_nanogpt_loop_is_silent() -> None:
    assert _found(NANOGPT_LOOP) == []


def test_accelerate_loop_is_silent() -> None:
    assert _found(ACCELERATE_LOOP) == []


# -- DDP302 and DDP301 never report the same expression ------------------------------------------

BOTH = """\
import torch
import torch.distributed as dist


def train(model, loader, optimizer, criterion):
    history = []
    total = 0.0
    for x, y in loader:
        loss = criterion(model(x), y)
        loss.backward()
        optimizer.step()
        history.append(loss)
        total += loss.item()
    return history, total
"""


def test_graph_kept_alive_and_host_sync_are_distinct_findings() -> None:
    found = _found(BOTH, ("DDP301", "DDP302"))
    assert _lines(BOTH, found) == [
        ("DDP301", "history.append(loss)"),
        ("DDP302", "total += loss.item()"),
    ]
    spans = [(f.span.start, f.span.end) for f in found]
    assert len(set(spans)) == len(spans)


def test_one_finding_per_read_chain() -> None:
    code = """\
import torch
import torch.distributed as dist


def train(model, loader, optimizer):
    for x, y in loader:
        logits = model(x)
        logits.sum().backward()
        optimizer.step()
        preds = logits.detach().cpu().numpy().tolist()
"""
    (f,) = _found(code)
    assert "`.cpu()`" in f.message


def test_reads_in_a_gradient_accumulation_inner_loop() -> None:
    code = """\
import torch
import torch.distributed as dist


def train(model, loader, optimizer, accum):
    for batch in loader:
        for micro in batch.split(accum):
            loss = model(micro).mean()
            loss.backward()
            print(loss)
        optimizer.step()
"""
    found = _found(code)
    assert [f.message.split(" on every")[0] for f in found] == ["`print(loss)` of a tensor"]


def test_scheduler_step_alone_is_not_a_training_loop() -> None:
    code = """\
import torch
import torch.distributed as dist


def evaluate(model, loader, scheduler):
    for x, y in loader:
        out = model(x)
        scheduler.step()
        print(out.mean().item())
"""
    assert _found(code) == []


# -- DDP303 fix ---------------------------------------------------------------------------------

LOADS = """\
import torch
import torch.distributed as dist


def resume(model, optimizer, path):
    ckpt = torch.load(path)  # the full training state
    model.load_state_dict(ckpt["model"])
    optimizer.load_state_dict(torch.load(
        path + ".optim",  # written next to it
        weights_only=False))
"""


def test_map_location_fix_keeps_comments_and_layout() -> None:
    found = _found(LOADS, ("DDP303",))
    assert len(found) == 2
    fixed, n = fix_text(LOADS, Settings(select=("DDP303",)))
    assert n == 2
    assert 'ckpt = torch.load(path, map_location="cpu")  # the full training state' in fixed
    assert '        weights_only=False, map_location="cpu"))\n' in fixed
    assert 'path + ".optim",  # written next to it\n' in fixed
    ast.parse(fixed)
    assert _found(fixed, ("DDP303",)) == []


def test_map_location_fix_on_crlf() -> None:
    code = "import torch\r\nimport torch.distributed as dist\r\n\r\nstate = torch.load('a.pt')\r\n"
    fixed, n = fix_text(code, Settings(select=("DDP303",)))
    assert n == 1
    assert fixed.endswith("state = torch.load('a.pt', map_location=\"cpu\")\r\n")


@pytest.mark.parametrize(
    "call",
    [
        "torch.load(path, map_location=None)",
        "torch.load(path, None)",
        "torch.load(*args)",
        "torch.load(path, **load_kwargs)",
        "torch.jit.load(path)",
    ],
)
def test_loads_that_are_left_alone(call: str) -> None:
    code = f"import torch\nimport torch.distributed as dist\n\ndef f(path, args, load_kwargs):\n    return {call}\n"
    assert _found(code, ("DDP303",)) == []


# -- DDP304 -------------------------------------------------------------------------------------


def test_state_dict_fix_on_a_compiled_ddp_model() -> None:
    code = """\
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def main(net, rank):
    model = torch.compile(DDP(net))
    if rank == 0:
        torch.save({"model": model.state_dict(), "step": 1}, "ckpt.pt")
"""
    (f,) = _found(code, ("DDP304",))
    fixed = apply_edits(code, f.fixes[0].edits)
    assert 'torch.save({"model": model.module.state_dict(), "step": 1}, "ckpt.pt")' in fixed
    assert _found(fixed, ("DDP304",)) == []


def test_state_dict_passed_through_another_function_is_not_reported() -> None:
    code = """\
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def main(net, strip_prefix):
    model = DDP(net)
    torch.save(strip_prefix(model.state_dict()), "model.pt")
"""
    assert _found(code, ("DDP304",)) == []


def test_reads_of_one_step_are_one_finding_with_the_others_related() -> None:
    code = """\
import torch
import torch.distributed as dist


def train(model, loader, optimizer):
    for x, y in loader:
        out = model(x)
        loss = (out - y).pow(2).mean()
        loss.backward()
        optimizer.step()
        stats = {"loss": loss.item(), "max": out.max().item()}
        top = out.argmax(1).cpu()
        print(stats, top)
"""
    [f] = _found(code, ("DDP302",))
    lines = code.splitlines()
    assert lines[f.span.start.line].strip().startswith("stats = ")
    assert "(and 2 more reads in the same step)" in f.message
    related = [(r.span.start.line, r.span.start.col) for r in f.related]
    assert related == [(10, 45), (11, 14)]
    assert all("reads back to the host in the same step" in r.message for r in f.related)


def test_a_helper_read_every_step_is_reported_at_the_call() -> None:
    code = """\
import torch
import torch.distributed as dist


def log_grads(model, history):
    for name, p in model.named_parameters():
        history[name].append(p.grad.norm().item())


def occasional(model):
    for p in model.parameters():
        if p.grad is None:
            print(p.grad.norm().item())


def train(model, loader, optimizer, history):
    for x, y in loader:
        model(x).sum().backward()
        log_grads(model, history)
        occasional(model)
        optimizer.step()
"""
    [f] = _found(code, ("DDP302",))
    assert code.splitlines()[f.span.start.line].strip() == "log_grads(model, history)"
    assert "`log_grads(...)`" in f.message
