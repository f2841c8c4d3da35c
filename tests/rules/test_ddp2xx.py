"""DDP202-DDP205 beyond their own cases: a realistic AMP training script with its exact
findings and fix-all result, fixes applied in any subset, and edge cases of the edits."""

from __future__ import annotations

import ast
import itertools

import pytest

from ddp_lsp.core.engine import analyze, fix_text
from ddp_lsp.core.fixes import apply_edits
from ddp_lsp.core.settings import Settings
from ddp_lsp.core.types import Finding

AMP_RULES = Settings(select=("DDP202", "DDP203", "DDP204", "DDP205"))

SCRIPT = '''\
"""Train a ResNet with DDP and AMP (deliberately buggy)."""
import os

import torch
import torch.distributed as dist
from torch.cuda.amp import GradScaler, autocast
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler


def build(model, dataset, local_rank):
    model = DDP(model.cuda(local_rank), device_ids=[local_rank])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=30)
    sampler = DistributedSampler(dataset)
    loader = DataLoader(dataset, batch_size=64, sampler=sampler, num_workers=4, pin_memory=True)
    return model, optimizer, scheduler, sampler, loader


def train_one_epoch(model, loader, optimizer, scheduler, scaler, use_amp):
    model.train()
    for images, targets in loader:
        images, targets = images.cuda(non_blocking=True), targets.cuda(non_blocking=True)
        with autocast(enabled=use_amp):
            loss = torch.nn.functional.cross_entropy(model(images), targets)
        optimizer.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        optimizer.step()
        scheduler.step()


def finetune(model, loader, optimizer, scaler):
    for images, targets in loader:
        with torch.cuda.amp.autocast(True, torch.bfloat16):
            loss = model(images).sum()
        scaler.scale(loss).backward()
        scaler.update()
        scaler.step(optimizer)


def distill(student, loader, optimizer, scaler, epochs):
    for epoch in range(epochs):
        for images, _ in loader:
            scaler.scale(student(images).sum()).backward()
            scaler.step(optimizer)
        scaler.update()


def train_correct(model, loader, optimizer, scheduler, scaler, grad_clip):
    for images, targets in loader:
        with torch.amp.autocast("cuda"):
            loss = model(images).sum()
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
        scaler.step(optimizer)
        scaler.update()
        scheduler.step()


def evaluate(model, loader):
    model.eval()
    with torch.no_grad(), autocast():
        return sum(model(x).sum().item() for x, _ in loader)


def main():
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl")
    scaler = GradScaler()
    dist.destroy_process_group()
    return scaler


if __name__ == "__main__":
    main()
'''

# (rule, 1-based line, column, text under the span)
EXPECTED = [
    ("DDP205", 6, 27, "GradScaler"),
    ("DDP205", 6, 39, "autocast"),
    ("DDP205", 25, 13, "autocast"),
    ("DDP203", 29, 8, "optimizer.step()"),
    ("DDP205", 35, 13, "torch.cuda.amp.autocast"),
    ("DDP204", 38, 8, "scaler.update()"),
    ("DDP202", 46, 12, "scaler.step(optimizer)"),
    ("DDP205", 64, 26, "autocast"),
    ("DDP205", 72, 13, "GradScaler"),
]


def _text(source: str, f: Finding) -> str:
    lines = source.splitlines()
    assert f.span.start.line == f.span.end.line
    return lines[f.span.start.line][f.span.start.col : f.span.end.col]


def test_script_findings_exact() -> None:
    found = analyze(SCRIPT, AMP_RULES).findings
    got = [(f.rule_id, f.span.start.line + 1, f.span.start.col, _text(SCRIPT, f)) for f in found]
    assert got == EXPECTED


def test_script_safe_fix_all_keeps_grad_scaler() -> None:
    """The GradScaler rewrite needs PyTorch >= 2.3: fix-all (safe fixes) leaves it alone."""
    fixed, applied = fix_text(SCRIPT, AMP_RULES)
    assert applied == 7
    assert "    scaler = GradScaler()\n" in fixed
    assert "from torch.cuda.amp import GradScaler\n" in fixed
    left = [(f.rule_id, _text(fixed, f)) for f in analyze(fixed, AMP_RULES).findings]
    assert left == [("DDP205", "GradScaler"), ("DDP205", "GradScaler")]


def test_script_fix_all() -> None:
    fixed, applied = fix_text(SCRIPT, AMP_RULES, unsafe=True)
    ast.parse(fixed)
    assert applied == 9
    assert analyze(fixed, AMP_RULES).findings == ()
    assert "from torch.cuda.amp" not in fixed
    assert fixed.count("scaler.update()") == 4
    # train_one_epoch: the scaler steps the optimizer, the scheduler is untouched.
    assert (
        "        scaler.scale(loss).backward()\n"
        "        scaler.step(optimizer)\n"
        "        scaler.update()\n"
        "        scheduler.step()\n"
    ) in fixed
    # finetune: keywords for the old positional autocast arguments, update after the step.
    assert 'torch.amp.autocast("cuda", enabled=True, dtype=torch.bfloat16)' in fixed
    assert "        scaler.step(optimizer)\n        scaler.update()\n\n\ndef distill" in fixed
    # distill: the per-epoch update moved into the iteration.
    assert (
        "            scaler.step(optimizer)\n            scaler.update()\n\n\ndef train_correct"
    ) in fixed
    assert 'scaler = torch.amp.GradScaler("cuda")' in fixed
    assert 'with torch.no_grad(), torch.amp.autocast("cuda"):' in fixed
    again, n = fix_text(fixed, AMP_RULES, unsafe=True)
    assert (again, n) == (fixed, 0)


FROM_IMPORT = """\
import torch.distributed as dist
from torch.cuda.amp import GradScaler, autocast

scaler = GradScaler(enabled=True)


def step(model, x, use_amp):
    with autocast(use_amp):
        return model(x)
"""


def _bound_names(tree: ast.Module) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            for a in node.names:
                out.add((a.asname or a.name).split(".")[0])
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            out.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            out.add(node.id)
        elif isinstance(node, ast.arg):
            out.add(node.arg)
    return out


def _loaded_names(tree: ast.Module) -> set[str]:
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


@pytest.mark.parametrize(
    "source",
    [
        FROM_IMPORT,
        FROM_IMPORT.replace(
            "import torch.distributed as dist\n", "import os\nimport torch.distributed as dist\n"
        ),
    ],
)
def test_any_subset_of_fixes_leaves_working_code(source: str) -> None:
    """Call sites and the import line are fixed independently: whichever fixes a user
    applies (one at a time in the editor, in any order), no name is left unbound."""
    text = source
    for _ in range(6):
        found = [f for f in analyze(text, AMP_RULES).findings if f.fixes]
        if not found:
            break
        for k in range(1, len(found) + 1):
            for subset in itertools.combinations(found, k):
                edits = [e for f in subset for e in f.fixes[0].edits]
                try:
                    out = apply_edits(text, edits)
                except ValueError:
                    continue  # overlapping fixes are never applied together
                tree = ast.parse(out)
                missing = _loaded_names(tree) - _bound_names(tree) - {"print", "len"}
                assert not missing, (missing, out)
        text = apply_edits(text, found[0].fixes[0].edits)
    assert analyze(text, AMP_RULES).findings == ()
    assert "import torch\n" in text
    assert 'torch.amp.GradScaler("cuda", enabled=True)' in text
    assert 'torch.amp.autocast("cuda", enabled=use_amp)' in text


def test_import_kept_while_used() -> None:
    found = analyze(FROM_IMPORT, AMP_RULES).findings
    imports = [f for f in found if f.span.start.line == 1]
    assert len(imports) == 2 and all(not f.fixes for f in imports)
    calls = [f for f in found if f.span.start.line > 1]
    assert [f.fixes[0].title for f in calls] == [
        'Use torch.amp.GradScaler("cuda", ...)',
        'Use torch.amp.autocast("cuda", ...)',
    ]


def test_crlf_fix_keeps_line_endings() -> None:
    src = (
        "import torch.distributed as dist\n"
        "def train(model, loader, optimizer, scaler):\n"
        "    for x in loader:\n"
        "        scaler.scale(model(x).sum()).backward()\n"
        "        scaler.step(optimizer)\n"
        "        log(x)\n"
    ).replace("\n", "\r\n")
    fixed, n = fix_text(src, AMP_RULES)
    assert n == 1
    assert fixed == src.replace(
        "scaler.step(optimizer)\r\n", "scaler.step(optimizer)\r\n        scaler.update()\r\n"
    )


def test_insert_after_last_line_without_newline() -> None:
    src = (
        "import torch.distributed as dist\n"
        "def train(model, loader, optimizer, scaler):\n"
        "    for x in loader:\n"
        "        scaler.scale(model(x).sum()).backward()\n"
        "        scaler.step(optimizer)"
    )
    fixed, n = fix_text(src, AMP_RULES)
    assert n == 1
    assert fixed == src + "\n        scaler.update()"
    ast.parse(fixed)


def test_bypass_in_optimizer_loop_then_update_after_it() -> None:
    """DDP203 replaces each step, DDP202 then adds one update after the optimizer loop."""
    src = (
        "import torch.distributed as dist\n"
        "def train(model, loader, optimizers, scaler):\n"
        "    for x in loader:\n"
        "        scaler.scale(model(x).sum()).backward()\n"
        "        for opt in optimizers:\n"
        "            opt.step()\n"
        "        print(x)\n"
    )
    fixed, _ = fix_text(src, AMP_RULES)
    assert fixed == (
        "import torch.distributed as dist\n"
        "def train(model, loader, optimizers, scaler):\n"
        "    for x in loader:\n"
        "        scaler.scale(model(x).sum()).backward()\n"
        "        for opt in optimizers:\n"
        "            scaler.step(opt)\n"
        "        scaler.update()\n"
        "        print(x)\n"
    )


def test_two_bypassing_optimizers_get_one_update() -> None:
    src = (
        "import torch.distributed as dist\n"
        "def train(model, loader, opt_g, opt_d, scaler):\n"
        "    for x in loader:\n"
        "        scaler.scale(model(x).sum()).backward()\n"
        "        opt_g.step()\n"
        "        opt_d.step()\n"
    )
    fixed, _ = fix_text(src, AMP_RULES)
    assert fixed.endswith(
        "        scaler.step(opt_g)\n        scaler.step(opt_d)\n        scaler.update()\n"
    )


def test_fallback_import_in_other_chunk_is_not_reported() -> None:
    src = (
        "import torch.distributed as dist\n"
        "try:\n"
        "    from torch.amp import GradScaler\n"
        "except ImportError:\n"
        "    from torch.cuda.amp import GradScaler\n"
        "\n"
        "scaler = GradScaler()\n"
    )
    assert analyze(src, AMP_RULES).findings == ()


REAL_WORLD = '''\
import torch
import torch.distributed as dist
from torch.cuda.amp import autocast


class NativeScalerWithGradNormCount:
    """MAE / BEiT: a scaler wrapper that scales, unscales, clips, steps and updates."""

    def __init__(self):
        self._scaler = torch.amp.GradScaler("cuda")

    def __call__(self, loss, optimizer, clip_grad=None, parameters=None, update_grad=True):
        self._scaler.scale(loss).backward()
        if update_grad:
            self._scaler.unscale_(optimizer)
            norm = torch.nn.utils.clip_grad_norm_(parameters, clip_grad)
            self._scaler.step(optimizer)
            self._scaler.update()
        else:
            norm = None
        return norm


def yolo_train(model, train_loader, optimizer, scheduler, ema, amp, accumulate, epochs):
    scaler = torch.amp.GradScaler("cuda", enabled=amp)
    last_opt_step = -1
    for epoch in range(epochs):
        for i, (imgs, targets) in enumerate(train_loader):
            ni = i + len(train_loader) * epoch
            with torch.amp.autocast("cuda", enabled=amp):
                loss = model(imgs).sum()
            scaler.scale(loss).backward()
            if ni - last_opt_step >= accumulate:
                scaler.unscale_(optimizer)
                torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=10.0)
                scaler.step(optimizer)
                scaler.update()
                optimizer.zero_grad()
                if ema:
                    ema.update(model)
                last_opt_step = ni
        scheduler.step()


class AMPTrainer:
    """detectron2: one iteration per run_step, the loop lives in the base class."""

    def run_step(self, data):
        with autocast(dtype=self.precision):
            losses = sum(self.model(data).values())
        self.optimizer.zero_grad()
        self.grad_scaler.scale(losses).backward()
        self.grad_scaler.step(self.optimizer)
        self.grad_scaler.update()


def closure_update(model, loader, optimizer, scaler, meters):
    def finish():
        scaler.update()
        meters.update(loss=0.0)

    for x in loader:
        scaler.scale(model(x).sum()).backward()
        scaler.step(optimizer)
        finish()
'''


def test_real_world_loops_are_clean() -> None:
    """Training code shaped like MAE, YOLOv5, detectron2: only the deprecated autocast."""
    found = analyze(REAL_WORLD, AMP_RULES).findings
    got = [(f.rule_id, f.span.start.line + 1, _text(REAL_WORLD, f)) for f in found]
    assert got == [("DDP205", 3, "autocast"), ("DDP205", 49, "autocast")]
