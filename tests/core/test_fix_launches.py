"""Safe fixes keep every launch working.

A script is launched with DDP (and AMP) under a launcher, and as one plain process; the kind
facts say which names are DDP, scalers or samplers on *some* launches only (wrapped under
`if args.distributed:`, a scaler that is None without AMP). For each conditional-wrap shape
below (our own code), every safe fix of the rule it triggers is applied, the result must parse,
must not call a DDP-only method unguarded on a possibly plain module, and, run as the
single-process launch (CPU, `distributed=False`, `amp=False`), must finish without error.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from types import SimpleNamespace

import pytest

from ddp_lsp.core.engine import analyze
from ddp_lsp.core.fixes import apply_edits
from ddp_lsp.core.settings import Settings

torch = pytest.importorskip("torch")

# Every rule, DDP304 (off by default) included.
SETTINGS = Settings(select=("DDP", "DDP304"), assume_distributed=True)

_HEAD = """\
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler

"""


@dataclass(frozen=True)
class Shape:
    name: str
    rule: str
    code: str  # defines run(args, loader); `loader` yields (x, y) pairs of shape (2, 4)


SHAPES = [
    Shape(
        "ddp101-wrap-under-if",
        "DDP101",
        """\
def run(args, loader):
    model = torch.nn.Linear(4, 4)
    if args.distributed:
        dist.init_process_group("nccl")
        model = DDP(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for i, (x, y) in enumerate(loader):
        loss = (model(x) - y).pow(2).mean() / 4
        loss.backward()
        if (i + 1) % 4 == 0:
            optimizer.step()
            optimizer.zero_grad()
""",
    ),
    Shape(
        "ddp101-wrap-in-if-else",
        "DDP101",
        """\
def run(args, loader):
    net = torch.nn.Linear(4, 4)
    if args.distributed:
        model = DDP(net)
    else:
        model = net
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for i, (x, y) in enumerate(loader):
        loss = (model(x) - y).pow(2).mean() / 4
        loss.backward()
        if (i + 1) % 4 == 0:
            optimizer.step()
            optimizer.zero_grad()
""",
    ),
    Shape(
        "ddp101-helper-of-conditional-wrap",
        "DDP101",
        """\
def train(model, loader, optimizer):
    for step, (x, y) in enumerate(loader):
        loss = (model(x) - y).pow(2).mean()
        loss.backward()
        if (step + 1) % 2 == 0:
            optimizer.step()
            optimizer.zero_grad()


def run(args, loader):
    model = torch.nn.Linear(4, 4)
    if args.distributed:
        model = DDP(model)
    train(model, loader, torch.optim.SGD(model.parameters(), lr=0.1))
""",
    ),
    Shape(
        "ddp101-trainer-wraps-in-init",
        "DDP101",
        """\
class Trainer:
    def __init__(self, args):
        self.model = torch.nn.Linear(4, 4)
        if args.distributed:
            self.model = DDP(self.model)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.1)

    def fit(self, loader):
        for i, (x, y) in enumerate(loader):
            loss = (self.model(x) - y).pow(2).mean()
            loss.backward()
            if (i + 1) % 4 == 0:
                self.optimizer.step()
                self.optimizer.zero_grad()


def run(args, loader):
    Trainer(args).fit(loader)
""",
    ),
    Shape(
        "ddp304-wrap-under-if",
        "DDP304",
        """\
def run(args, loader):
    model = torch.nn.Linear(4, 4)
    if args.distributed:
        dist.init_process_group("nccl")
        model = DDP(model)
    if not args.distributed or dist.get_rank() == 0:
        torch.save(model.state_dict(), args.path)
""",
    ),
    Shape(
        "ddp304-helper-of-conditional-wrap",
        "DDP304",
        """\
def save(model, path):
    torch.save(model.state_dict(), path)


def run(args, loader):
    model = torch.nn.Linear(4, 4)
    if args.distributed:
        model = DDP(model)
    save(model, args.path)
""",
    ),
    Shape(
        "ddp201-scaler-none-without-amp",
        "DDP201",
        """\
def run(args, loader):
    model = torch.nn.Linear(4, 4)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cuda") if args.amp else None
    for x, y in loader:
        loss = (model(x) - y).pow(2).mean()
        if scaler is not None:
            scaler.scale(loss).backward()
        else:
            loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        if scaler is not None:
            scaler.step(optimizer)
            scaler.update()
        else:
            optimizer.step()
""",
    ),
    Shape(
        "ddp201-scaler-made-under-amp-flag",
        "DDP201",
        """\
def run(args, loader):
    model = torch.nn.Linear(4, 4)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    if args.amp:
        scaler = torch.amp.GradScaler("cuda")
    for x, y in loader:
        loss = (model(x) - y).pow(2).mean()
        if args.amp:
            scaler.scale(loss).backward()
        else:
            loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        if args.amp:
            scaler.step(optimizer)
            scaler.update()
        else:
            optimizer.step()
""",
    ),
    Shape(
        "ddp202-scaler-none-without-amp",
        "DDP202",
        """\
def run(args, loader):
    model = torch.nn.Linear(4, 4)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cuda") if args.amp else None
    for x, y in loader:
        loss = (model(x) - y).pow(2).mean()
        if scaler:
            scaler.scale(loss).backward()
            scaler.step(optimizer)
        else:
            loss.backward()
            optimizer.step()
""",
    ),
    Shape(
        "ddp402-sampler-none-without-ddp",
        "DDP402",
        """\
def run(args, loader):
    dataset = [(torch.randn(4), torch.randn(4)) for _ in range(8)]
    if args.distributed:
        dist.init_process_group("nccl")
    sampler = DistributedSampler(dataset) if args.distributed else None
    data = DataLoader(dataset, batch_size=2, sampler=sampler, shuffle=sampler is None)
    model = torch.nn.Linear(4, 4)
    for epoch in range(2):
        for x, y in data:
            (model(x) - y).pow(2).mean().backward()
""",
    ),
    Shape(
        "ddp506-group-only-when-distributed",
        "DDP506",
        """\
def run(args, loader):
    if args.distributed:
        dist.init_process_group("nccl")
    model = torch.nn.Linear(4, 4)
    for x, y in loader:
        (model(x) - y).pow(2).mean().backward()
""",
    ),
]

# Calls and attributes that exist on a DDP wrapper only.
_DDP_ONLY = frozenset({"no_sync", "module"})


def _unguarded_ddp_only(text: str) -> list[str]:
    """``x.no_sync`` / ``x.module`` not under a ``hasattr(x, ...)`` test in the same
    expression, nor inside ``getattr(x, "module", x)``."""
    tree = ast.parse(text)
    bad = []
    parents = {id(c): p for p in ast.walk(tree) for c in ast.iter_child_nodes(p)}
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Attribute) and node.attr in _DDP_ONLY):
            continue
        guarded = False
        cur: ast.AST | None = node
        while cur is not None and not isinstance(cur, ast.stmt):
            if isinstance(cur, ast.IfExp) and any(
                isinstance(n, ast.Call) and getattr(n.func, "id", "") in ("hasattr", "isinstance")
                for n in ast.walk(cur.test)
            ):
                guarded = True
            cur = parents.get(id(cur))
        if not guarded:
            bad.append(ast.unparse(node))
    return bad


def _safe_fixes(text: str, rule: str) -> list[str]:
    """The text after each safe fix of ``rule``'s findings, applied one at a time."""
    out = []
    for f in analyze(text, SETTINGS).findings:
        if f.rule_id != rule:
            continue
        for fix in f.fixes:
            if fix.safe:
                out.append(apply_edits(text, fix.edits))
    return out


def _single_process_launch(text: str, tmp_path: object) -> None:
    """Run ``run(args, loader)`` as the plain launch: one process, no DDP, no AMP, on CPU."""
    namespace: dict[str, object] = {}
    exec(compile(text, "<fixed>", "exec"), namespace)  # our own snippet, fixed
    loader = [(torch.randn(2, 4), torch.randn(2, 4)) for _ in range(8)]
    args = SimpleNamespace(distributed=False, amp=False, path=f"{tmp_path}/model.pt")
    namespace["run"](args, loader)  # type: ignore[operator]


@pytest.mark.parametrize("shape", SHAPES, ids=[s.name for s in SHAPES])
def test_safe_fixes_keep_the_single_process_launch_working(shape: Shape, tmp_path: object) -> None:
    text = _HEAD + shape.code
    _single_process_launch(text, tmp_path)  # the shape itself runs
    fixed_texts = _safe_fixes(text, shape.rule)
    assert fixed_texts, f"{shape.rule} offers no safe fix on {shape.name}"
    for fixed in fixed_texts:
        ast.parse(fixed)
        assert not _unguarded_ddp_only(fixed), fixed
        _single_process_launch(fixed, tmp_path)


def test_the_ddp_only_check_sees_an_unguarded_call() -> None:
    """The static check is not vacuous: a bare `model.no_sync()` / `.module` is caught."""
    assert _unguarded_ddp_only("with model.no_sync():\n    pass\n") == ["model.no_sync"]
    assert _unguarded_ddp_only("m.module.state_dict()\n") == ["m.module"]
    guarded = 'with m.no_sync() if hasattr(m, "no_sync") else c():\n    pass\n'
    assert not _unguarded_ddp_only(guarded)
