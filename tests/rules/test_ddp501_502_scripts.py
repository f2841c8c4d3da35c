"""DDP501 / DDP502 beyond their own cases: a realistic torchrun script with its exact findings
and its fix-all result, CRLF files, and the places where the rank-0 guard fix must not be
offered."""

from __future__ import annotations

import ast

from ddp_lsp.core.engine import analyze, fix_text
from ddp_lsp.core.fixes import apply_edits
from ddp_lsp.core.settings import Settings

SETTINGS = Settings(select=("DDP501", "DDP502"))

SCRIPT = '''\
"""Train a classifier with DDP under torchrun."""
import argparse
import logging
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler

logger = logging.getLogger(__name__)


def is_main_process():
    return not dist.is_initialized() or dist.get_rank() == 0


def save_on_master(state, path):
    if is_main_process():
        torch.save(state, path)


def train_one_epoch(model, loader, optimizer, criterion, epoch, args):
    model.train()
    for step, (images, target) in enumerate(loader):
        images, target = images.cuda(args.gpu), target.cuda(args.gpu)
        loss = criterion(model(images), target)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % args.print_freq == 0:
            print(f"epoch {epoch} step {step} loss {loss.item():.4f}")


def evaluate(model, loader, args):
    model.eval()
    correct = total = 0
    with torch.no_grad():
        for images, target in loader:
            output = model(images.cuda(args.gpu))
            correct += (output.argmax(1).cpu() == target).sum().item()
            total += target.numel()
    acc = correct / total
    logger.info("accuracy %.3f", acc)
    return acc


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--output-dir", default="out")
    parser.add_argument("--print-freq", type=int, default=50)
    args = parser.parse_args()
    args.rank = int(os.environ["RANK"])
    args.gpu = int(os.environ["LOCAL_RANK"])
    dist.init_process_group("nccl")
    torch.cuda.set_device(args.gpu)
    print(f"rank {args.rank} uses GPU {args.gpu}")
    model = DDP(nn.Linear(10, 10).cuda(args.gpu), device_ids=[args.gpu])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    criterion = nn.CrossEntropyLoss()
    dataset = torch.utils.data.TensorDataset(torch.randn(64, 10), torch.randint(0, 10, (64,)))
    sampler = DistributedSampler(dataset)
    train_loader = DataLoader(dataset, batch_size=8, sampler=sampler)
    val_loader = DataLoader(dataset, batch_size=8)
    best = 0.0
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        train_one_epoch(model, train_loader, optimizer, criterion, epoch, args)
        acc = evaluate(model, val_loader, args)
        print(f"[rank {args.rank}] epoch {epoch} acc {acc:.3f}")
        logger.info("epoch %d acc %.3f", epoch, acc)
        save_on_master(
            {"model": model.module.state_dict(), "epoch": epoch},
            os.path.join(args.output_dir, "checkpoint.pth"),
        )
        if acc > best:
            best = acc
            torch.save(model.module.state_dict(), os.path.join(args.output_dir, "best.pth"))
    torch.save(optimizer.state_dict(), os.path.join(args.output_dir, f"optim_rank{args.rank}.pt"))
    if args.rank == 0:
        with open(os.path.join(args.output_dir, "final.ckpt"), "wb") as f:
            torch.save(model.module.state_dict(), f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
'''


def _line(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines()) if needle in line)


def test_script_findings_are_exactly_the_unguarded_metric_logs_and_save() -> None:
    found = analyze(SCRIPT, SETTINGS).findings
    got = [(f.rule_id, f.span.start.line) for f in found]
    assert got == [
        ("DDP502", _line(SCRIPT, 'print(f"epoch {epoch} step {step}')),
        ("DDP502", _line(SCRIPT, 'logger.info("epoch %d acc')),
        ("DDP501", _line(SCRIPT, '"best.pth"')),
    ]
    titles = [f.fixes[0].title for f in found]
    assert titles == [
        "Log on rank 0 only: wrap in `if is_main_process():`",
        "Log on rank 0 only: wrap in `if args.rank == 0:`",
        "Save on rank 0 only: wrap in `if args.rank == 0:`",
    ]
    assert all(f.fixes[0].safe for f in found)


def test_script_fix_all() -> None:
    fixed, applied = fix_text(SCRIPT, SETTINGS)
    assert applied == 3
    expected = (
        SCRIPT.replace(
            """\
        if step % args.print_freq == 0:
            print(f"epoch {epoch} step {step} loss {loss.item():.4f}")
""",
            """\
        if step % args.print_freq == 0:
            if is_main_process():
                print(f"epoch {epoch} step {step} loss {loss.item():.4f}")
""",
        )
        .replace(
            """\
        logger.info("epoch %d acc %.3f", epoch, acc)
""",
            """\
        if args.rank == 0:
            logger.info("epoch %d acc %.3f", epoch, acc)
""",
        )
        .replace(
            """\
            torch.save(model.module.state_dict(), os.path.join(args.output_dir, "best.pth"))
""",
            """\
            if args.rank == 0:
                torch.save(model.module.state_dict(), os.path.join(args.output_dir, "best.pth"))
""",
        )
    )
    assert fixed == expected
    ast.parse(fixed)
    assert analyze(fixed, SETTINGS).findings == ()
    assert fix_text(fixed, SETTINGS) == (fixed, 0)


def test_crlf_file_gets_crlf_fix() -> None:
    code = (
        "import torch\r\n"
        "import torch.distributed as dist\r\n"
        "\r\n"
        "def finish(model, rank):\r\n"
        "    torch.save(model.state_dict(), 'model.pt')  # last\r\n"
    )
    fixed, applied = fix_text(code, SETTINGS)
    assert applied == 1
    assert fixed == (
        "import torch\r\n"
        "import torch.distributed as dist\r\n"
        "\r\n"
        "def finish(model, rank):\r\n"
        "    if rank == 0:\r\n"
        "        torch.save(model.state_dict(), 'model.pt')  # last\r\n"
    )


HEAD = "import torch\nimport torch.distributed as dist\n\n"


def _only(code: str, rule: str = "DDP501"):
    found = [f for f in analyze(HEAD + code, SETTINGS).findings if f.rule_id == rule]
    assert len(found) == 1, found
    return found[0]


def test_no_fix_when_the_statement_shares_its_line() -> None:
    f = _only("def f(model, rank):\n    x = 1; torch.save(model, 'm.pt')\n")
    assert f.fixes == ()
    f = _only("def f(model, rank):\n    torch.save(model, 'm.pt'); x = 1\n")
    assert f.fixes == ()


def test_no_fix_when_the_guarded_block_leaves_or_binds_names_used_later() -> None:
    f = _only(
        "def f(model, rank):\n"
        "    with open('ckpt.pt', 'wb') as fh:\n"
        "        torch.save(model, fh)\n"
        "        return fh.name\n"
    )
    assert f.fixes == ()
    f = _only(
        "def f(model, rank):\n"
        "    with open('ckpt.pt', 'wb') as fh:\n"
        "        torch.save(model, fh)\n"
        "    size = fh.tell()\n"
    )
    assert f.fixes == ()


def test_adjacent_log_and_save_share_one_guard() -> None:
    code = HEAD + (
        "def f(model, rank, epoch):\n"
        "    for epoch in range(3):\n"
        "        model(1).backward()\n"
        "        print(f'saving epoch {epoch}')\n"
        "        torch.save(model, 'last.pt')\n"
        "        torch.save(model, f'rank{rank}.pt')\n"
    )
    found = analyze(code, SETTINGS).findings
    assert [f.rule_id for f in found] == ["DDP502", "DDP501"]
    assert found[0].fixes[0].edits == found[1].fixes[0].edits
    fixed, applied = fix_text(code, SETTINGS)
    assert fixed == HEAD + (
        "def f(model, rank, epoch):\n"
        "    for epoch in range(3):\n"
        "        model(1).backward()\n"
        "        if rank == 0:\n"
        "            print(f'saving epoch {epoch}')\n"
        "            torch.save(model, 'last.pt')\n"
        "        torch.save(model, f'rank{rank}.pt')\n"
    )


def test_fallback_is_offered_but_unsafe() -> None:
    f = _only("def f(model):\n    torch.save(model, 'm.pt')\n")
    (fix,) = f.fixes
    assert fix.title == "Save on rank 0 only: wrap in `if dist.get_rank() == 0:`"
    assert fix.preferred and not fix.safe
    # fix-all (safe fixes only) leaves it; the explicit quick fix applies it.
    assert fix_text(HEAD + "def f(model):\n    torch.save(model, 'm.pt')\n", SETTINGS)[1] == 0
    assert apply_edits(HEAD + "def f(model):\n    torch.save(model, 'm.pt')\n", fix.edits) == (
        HEAD + "def f(model):\n    if dist.get_rank() == 0:\n        torch.save(model, 'm.pt')\n"
    )


def test_megatron_style_group_rank_guard_is_a_guard() -> None:
    code = (
        "from megatron.core import mpu\n\n"
        "def save(state, name):\n"
        "    if mpu.get_data_parallel_rank() == 0:\n"
        "        torch.save(state, name + '.pt')\n"
    )
    assert [f for f in analyze(HEAD + code, SETTINGS).findings] == []


def test_suppression_comment() -> None:
    code = HEAD + "def f(model):\n    torch.save(model, 'm.pt')  # ddp-lsp: ignore[DDP501]\n"
    assert analyze(code, SETTINGS).findings == ()


TUTORIAL = (
    HEAD
    + """\
from torch.nn.parallel import DistributedDataParallel as DDP


class Trainer:
    def __init__(self, model, gpu_id, save_every):
        self.gpu_id = gpu_id
        self.save_every = save_every
        self.model = DDP(model.to(gpu_id), device_ids=[gpu_id])

    def _save_checkpoint(self, epoch):
        ckp = self.model.module.state_dict()
        torch.save(ckp, "checkpoint.pt")
        print(f"Epoch {epoch} | Training checkpoint saved at checkpoint.pt")

    def train(self, max_epochs):
        for epoch in range(max_epochs):
            self._run_epoch(epoch)
            if self.gpu_id == 0 and epoch % self.save_every == 0:
                self._save_checkpoint(epoch)
"""
)


def test_ddp_tutorial_caller_guard_by_gpu_id() -> None:
    """The PyTorch DDP tutorial guards the save helper's only call with ``self.gpu_id == 0``
    (``gpu_id`` is a default rank name), so the save is known to run on rank 0 only. Under
    another name the guard is unknown (a documented false positive) until the name is given in
    ``rank-guard-names``."""
    assert analyze(TUTORIAL, SETTINGS).findings == ()
    renamed = TUTORIAL.replace("gpu_id", "dev_index")
    found = analyze(renamed, SETTINGS).findings
    assert [(f.rule_id, f.span.start.line) for f in found] == [
        ("DDP501", _line(renamed, 'torch.save(ckp, "checkpoint.pt")'))
    ]
    taught = Settings(select=("DDP501", "DDP502"), rank_guard_names=("dev_index",))
    assert analyze(renamed, taught).findings == ()
