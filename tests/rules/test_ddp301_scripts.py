"""DDP301 on whole training scripts: fix-all with .detach(), the unsafe .item() alternative,
idempotence, and the idioms that must stay silent."""

from __future__ import annotations

import ast

from ddp_lsp.core.engine import analyze, fix_text
from ddp_lsp.core.settings import Settings

RULE = "DDP301"
SETTINGS = Settings(select=(RULE,))

SCRIPT = """\
import os

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP


class Trainer:
    def __init__(self, model, optimizer, local_rank):
        self.model = DDP(model.cuda(local_rank), device_ids=[local_rank])
        self.optimizer = optimizer
        self.train_losses = []

    def train_epoch(self, loader, epoch):
        running = 0.0
        outputs = {}
        for step, (x, y) in enumerate(loader):
            logits = self.model(x)
            loss = F.cross_entropy(logits, y)
            self.optimizer.zero_grad()
            loss.backward()
            self.optimizer.step()
            running += loss
            self.train_losses.append(loss)
            outputs[step] = logits
        return running / (step + 1)

    @torch.no_grad()
    def validate(self, loader):
        losses = []
        for x, y in loader:
            losses.append(F.cross_entropy(self.model(x), y))
        return torch.stack(losses).mean()


def main():
    dist.init_process_group("nccl")
    local_rank = int(os.environ["LOCAL_RANK"])
    trainer = Trainer(build_model(), build_optimizer(), local_rank)
    for epoch in range(3):
        trainer.train_epoch(build_loader(), epoch)
"""


def _found(text: str) -> list:
    return [f for f in analyze(text, SETTINGS).findings if f.rule_id == RULE]


def test_script_findings() -> None:
    found = _found(SCRIPT)
    lines = SCRIPT.splitlines()
    assert [lines[f.span.start.line].strip() for f in found] == [
        "running += loss",
        "self.train_losses.append(loss)",
        "outputs[step] = logits",
    ]
    # .item() only where the value is the scalar loss.
    assert [len(f.fixes) for f in found] == [2, 2, 1]
    assert all(f.preferred_fix.safe and ".detach()" in f.preferred_fix.title for f in found)
    assert all(not f.fixes[1].safe for f in found if len(f.fixes) == 2)


def test_fix_all_detaches_everything_once() -> None:
    fixed, applied = fix_text(SCRIPT, SETTINGS)
    assert applied == 3
    ast.parse(fixed)
    assert "            running += loss.detach()\n" in fixed
    assert "            self.train_losses.append(loss.detach())\n" in fixed
    assert "            outputs[step] = logits.detach()\n" in fixed
    assert _found(fixed) == []
    again, n = fix_text(fixed, SETTINGS)
    assert again == fixed and n == 0


def test_unsafe_fix_all_uses_preferred_detach() -> None:
    fixed, _ = fix_text(SCRIPT, SETTINGS, unsafe=True)
    assert ".item()" not in fixed


def test_non_distributed_code_reports_the_same() -> None:
    # A graph kept alive leaks in a single-GPU script too (RuleMeta.any_module).
    plain = (
        SCRIPT.replace("import torch.distributed as dist\n", "")
        .replace("from torch.nn.parallel import DistributedDataParallel as DDP\n", "")
        .replace('    dist.init_process_group("nccl")\n', "")
        .replace('int(os.environ["LOCAL_RANK"])', "0")
        .replace("DDP(model.cuda(local_rank), device_ids=[local_rank])", "model")
    )
    assert "distributed" not in plain and "DDP" not in plain
    assert [f.message for f in _found(plain)] == [f.message for f in _found(SCRIPT)] != []


def test_multiline_value_is_wrapped() -> None:
    text = """\
import torch.distributed as dist

def train(model, loader, optimizer, criterion):
    total = 0.0
    for x, y in loader:
        loss = criterion(model(x), y)
        loss.backward()
        total += (loss
                  * x.size(0))
"""
    fixed, applied = fix_text(text, SETTINGS)
    assert applied == 1
    ast.parse(fixed)
    assert "        total += (loss\n                  * x.size(0)).detach()\n" in fixed


def test_reassigned_to_item_is_silent() -> None:
    text = """\
import torch.distributed as dist

def train(model, loader, optimizer, criterion):
    losses = []
    for x, y in loader:
        loss = criterion(model(x), y)
        loss.backward()
        loss = loss.item()
        losses.append(loss)
        dist.all_reduce(loss_t := model(x).sum().detach())
        losses.append(loss_t)
"""
    assert _found(text) == []


def test_crlf_fix() -> None:
    text = SCRIPT.replace("\n", "\r\n")
    fixed, applied = fix_text(text, SETTINGS)
    assert applied == 3
    assert "running += loss.detach()\r\n" in fixed
    assert "\n" not in fixed.replace("\r\n", "")


def test_loop_carried_augmented_assignment_does_not_recurse() -> None:
    """`iter_num += 1` later in the loop is the only binding of `iter_num`: looking it up used to
    recurse forever (a RecursionError inside the rule)."""
    from ddp_lsp.core.engine import analyze
    from ddp_lsp.core.settings import Settings

    src = (
        "import torch.distributed as dist\n"
        "def train(model, loader, opt, losses):\n"
        "    for x in loader:\n"
        '        print(f"{iter_num}")\n'
        "        loss = model(x).sum()\n"
        "        loss.backward()\n"
        "        opt.step()\n"
        "        losses.append(loss + iter_num)\n"
        "        iter_num += 1\n"
    )
    result = analyze(src, Settings(select=("DDP301",)))
    assert result.errors == ()
    assert [f.rule_id for f in result.findings] == ["DDP301"]
