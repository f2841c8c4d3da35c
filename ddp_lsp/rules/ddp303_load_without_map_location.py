"""DDP303 load-without-map-location.

## What it does
Finds `torch.load(path)` without `map_location` in distributed code.

## Why is this bad?
`torch.load` restores every tensor onto the device it was saved from. Checkpoints are usually
written by rank 0, from `cuda:0`, so every rank of the job loads a full copy of the checkpoint
onto GPU 0: GPU 0 runs out of memory (N copies of the model and the optimizer state), or the
ranks silently share one GPU until the first mismatch. `map_location="cpu"` loads onto the host;
`load_state_dict` then copies each tensor to the device of the parameter it fills.

## Example
```python
state = torch.load("checkpoint.pt")
model.load_state_dict(state["model"])
```

## Use instead
```python
state = torch.load("checkpoint.pt", map_location="cpu")
model.load_state_dict(state["model"])
```

## Fix
Adds `map_location="cpu"` after the last argument.

## Known false positives
Not reported: loads inside a `Dataset` (preprocessed samples, read in DataLoader workers), loads
under `if args.gpu is None:` (no GPU index: one process drives every GPU of its node), files
named by the rank (each rank reads back what it wrote from its own GPU), paths
that name data and no model state (`os.path.join(args.data_dir, "train_tokens.pt")`) unless
what the load fills names model state (`ckpt_optim_states[k] = torch.load(shard_path)`: a
ZeRO or tensor-parallel checkpoint shard), any
`map_location` (a device, a dict, a function, the second positional argument), `**kwargs` that
may carry one, loads under a rank condition (rank 0 alone reading onto GPU 0 is where it saved
from, and it then broadcasts), the parent process after `mp.spawn`, and launches with one
process per node (or a machine with one GPU): GPU 0 is then every process's. A checkpoint saved
from the CPU is reported too: the rule cannot see how the file was written, and
`map_location="cpu"` costs nothing there. DDP504 reports `map_location="cuda:0"`.

Distributed code only: in a project, a function that no distributed entry point reaches on
every rank and that does nothing distributed itself (an export tool, a tokenizer, a plotting
script, a helper called on rank 0 only) is single-process code, and this rule is silent there.

Severity `information` (not `warning`): on the triage corpus of 52 public training
repositories (docs/accuracy.md) 10 of its 26 labelled findings are real (precision 0.38,
below the 0.90 a warning must reach). Most false alarms load files that hold no CUDA tensors
(converted or released weights, tokenised data saved from the CPU: the rule cannot see how a
file was written) and single-process tests or conversion scripts inside a distributed
project. Raise it back with `severity = { DDP303 = "warning" }` in `[tool.ddp-lsp]`.

## References
- https://pytorch.org/docs/stable/generated/torch.load.html
- https://pytorch.org/tutorials/intermediate/ddp_tutorial.html#save-and-load-checkpoints
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator

from ddp_lsp.core import chunktext
from ddp_lsp.core import edits as text_edits
from ddp_lsp.core import names as known_names
from ddp_lsp.core import triggers as rule_triggers
from ddp_lsp.core.rule import ChunkContext, Invalid, Rule, Valid
from ddp_lsp.core.types import Finding, Fix, FixAvailability, RuleMeta, Severity
from ddp_lsp.rules import _device as device_rules
from ddp_lsp.rules import _guard as guards
from ddp_lsp.rules import _patterns as patterns

_TRIGGERS = rule_triggers.qual_words({known_names.TORCH_LOAD})


class LoadWithoutMapLocation(Rule):
    meta = RuleMeta(
        id="DDP303",
        name="load-without-map-location",
        severity=Severity.INFORMATION,
        summary="torch.load without map_location: every rank loads onto the saving GPU.",
        fix=FixAvailability.ALWAYS,
        distributed_only=True,
    )

    def triggers(self, ctx: ChunkContext) -> frozenset[str]:
        return _TRIGGERS  # every finding is at a `torch.load` (core/triggers.py)

    def check(self, ctx: ChunkContext) -> Iterator[Finding]:
        if device_rules.one_gpu_per_node(ctx):
            return
        for call in ctx.calls():
            if ctx.call_qualname(call) != known_names.TORCH_LOAD:
                continue
            if not call.args or len(call.args) > 1:
                continue  # no file, or map_location given positionally
            if any(isinstance(a, ast.Starred) for a in call.args):
                continue
            if any(kw.arg in (None, "map_location") for kw in call.keywords):
                continue
            if device_rules.guarded(ctx, call) or guards.spawns_processes(
                ctx, patterns.scope_root(ctx, call)
            ):
                continue
            if _in_dataset(ctx, call) or (
                _data_file(ctx, call.args[0]) and not _loads_state(ctx, call)
            ):
                continue
            if _no_gpu_branch(ctx, call) or _rank_file(ctx, call.args[0]):
                continue
            parts: list[ast.expr] = [*call.args, *(kw.value for kw in call.keywords)]
            last = max(parts, key=lambda n: (n.end_lineno or 0, n.end_col_offset or 0))
            fix = Fix(
                title='Add map_location="cpu"',
                edits=(text_edits.insert_after_node(ctx, last, ', map_location="cpu"'),),
                safe=True,
                preferred=True,
            )
            yield ctx.finding(
                self,
                call,
                "`torch.load` without `map_location` restores tensors onto the GPU they were "
                'saved from (usually cuda:0) on every rank; pass `map_location="cpu"`',
                fixes=[fix],
            )


# Paths that name model state (reported) and paths that name data (tensors saved by a
# preprocessing step, from the CPU: not reported when nothing says model state).
_STATE_WORDS = re.compile(
    r"ckpt|checkpoint|model|weight|state|resume|pretrain|snapshot|best|last|epoch|step|optim",
    re.IGNORECASE,
)
_DATA_WORDS = re.compile(
    r"data|feature|token|embedding|cache|split|vocab|label|sample|shard|\.npy", re.IGNORECASE
)


def _data_file(ctx: ChunkContext, path: ast.expr) -> bool:
    text = chunktext.segment(ctx.chunk, path)
    return bool(_DATA_WORDS.search(text)) and not _STATE_WORDS.search(text)


def _loads_state(ctx: ChunkContext, call: ast.Call) -> bool:
    """What the load is assigned to names model state (``ckpt_optim_states[k] = torch.load(
    shard_path)``, ``state_dict = torch.load(f)``): a checkpoint shard, whatever the path is
    called (ZeRO and tensor-parallel checkpoints are "shards" of the model, not of the data)."""
    node: ast.AST = call
    parent = ctx.parent(node)
    while isinstance(parent, ast.Subscript | ast.Attribute) and parent.value is node:
        node, parent = parent, ctx.parent(parent)  # `torch.load(p)["model"]`
    if not isinstance(parent, ast.Assign | ast.AnnAssign) or parent.value is not node:
        return False
    targets = parent.targets if isinstance(parent, ast.Assign) else [parent.target]
    for t in targets:
        while isinstance(t, ast.Subscript):
            t = t.value
        name = known_names.dotted(t) or ""
        if _STATE_WORDS.search(name.rsplit(".", 1)[-1]) or re.search(r"ckp", name, re.IGNORECASE):
            return True
    return False


_GPU_INDEX = re.compile(r"gpu|device|local_rank", re.IGNORECASE)


def _no_gpu_branch(ctx: ChunkContext, call: ast.Call) -> bool:
    """Under ``if args.gpu is None:``: no GPU index for this process, which then drives every
    GPU of its node (one process per node), so no two ranks restore onto cuda:0 (F30)."""
    child: ast.AST = call
    for a in ctx.ancestors(call):
        if isinstance(a, ast.If) and any(child is b for b in a.body):
            t = a.test
            if (
                isinstance(t, ast.Compare)
                and len(t.ops) == 1
                and isinstance(t.ops[0], ast.Is)
                and isinstance(t.comparators[0], ast.Constant)
                and t.comparators[0].value is None
                and _GPU_INDEX.search((known_names.dotted(t.left) or "").rsplit(".", 1)[-1])
            ):
                return True
        if isinstance(a, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            break
        child = a
    return False


def _rank_file(ctx: ChunkContext, path: ast.expr) -> bool:
    """A file named by the rank (``f"queue{rank}.pth"``, ``"mb" + str(args.rank)``): each rank
    reads back what it wrote from its own GPU (F31)."""
    root = patterns.scope_root(ctx, path)
    exprs: list[ast.AST] = [path]
    if isinstance(path, ast.Name):
        value = guards.assigned_value(ctx, path.id, root, path)
        if value is not None:
            exprs.append(value)
    for e in exprs:
        for n in ast.walk(e):
            if isinstance(n, ast.Name | ast.Attribute) and (
                ctx.ranks.mentions_rank(n)
                or "rank" in (known_names.dotted(n) or "").rsplit(".", 1)[-1].lower()
            ):
                return True
    return False


_DATASET_METHODS = frozenset({"__getitem__", "__getitems__", "__iter__", "__len__"})


def _in_dataset(ctx: ChunkContext, call: ast.Call) -> bool:
    """Inside a ``Dataset`` (its methods run in DataLoader workers and read preprocessed
    samples, saved from the CPU): not a checkpoint restore."""
    fn = ctx.enclosing_function(call)
    if fn is not None and fn.name in _DATASET_METHODS:
        return True
    for a in ctx.ancestors(call):
        if isinstance(a, ast.ClassDef):
            return any("Dataset" in (known_names.dotted(b) or "") for b in a.bases)
    _, cls = ctx.scope(call)
    return cls is not None and "dataset" in cls.lower()


_HEAD = """\
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

"""

LoadWithoutMapLocation.cases = (
    Valid(
        _HEAD
        + """\
def resume(model, path, local_rank, device):
    a = torch.load(path, map_location="cpu")
    b = torch.load(path, map_location=device)
    c = torch.load(path, map_location={"cuda:0": f"cuda:{local_rank}"})
    d = torch.load(path, "cpu", weights_only=True)
    e = torch.load(path, map_location=lambda storage, loc: storage)
    return a, b, c, d, e
""",
        note="map_location given in any form",
    ),
    Valid(
        _HEAD
        + """\
def resume(path, **kwargs):
    return torch.load(path, **kwargs)
""",
        note="**kwargs may carry map_location",
    ),
    Valid(
        _HEAD
        + """\
def resume(model, path, rank):
    if rank == 0:
        state = torch.load(path)
        model.load_state_dict(state)
    for p in model.parameters():
        dist.broadcast(p.data, src=0)
""",
        note="rank 0 alone loads, then broadcasts",
    ),
    Valid(
        _HEAD
        + """\
import torch.multiprocessing as mp

def main(worker):
    mp.spawn(worker, nprocs=4)
    result = torch.load("result.pt")
    print(result)
""",
        note="the parent process after mp.spawn",
    ),
    Valid(
        _HEAD
        + """\
from torch.utils.data import Dataset

class FeatureDataset(Dataset):
    def __init__(self, files):
        self.index = torch.load(files[0])
        self.files = files

    def __getitem__(self, i):
        return torch.load(self.files[i])
""",
        note="a Dataset reading preprocessed samples (saved from the CPU)",
    ),
    Valid(
        _HEAD
        + """\
def load_data(args):
    tokens = torch.load(os.path.join(args.data_dir, "train_tokens.pt"))
    labels = torch.load(args.label_file)
    return tokens, labels
""",
        note="preprocessed data files (saved from the CPU), not model state",
    ),
    Invalid(
        _HEAD
        + """\
def resume(model, args):
    checkpoint = «torch.load(args.resume)»  # resume training
    model.module.load_state_dict(checkpoint["model"])
""",
        fixed=_HEAD
        + """\
def resume(model, args):
    checkpoint = torch.load(args.resume, map_location="cpu")  # resume training
    model.module.load_state_dict(checkpoint["model"])
""",
    ),
    Invalid(
        _HEAD
        + """\
def resume(model, path):
    state = «torch.load(
        os.path.join(path, "ckpt.pt"),
        weights_only=True,
    )»
    model.load_state_dict(state)
""",
        fixed=_HEAD
        + """\
def resume(model, path):
    state = torch.load(
        os.path.join(path, "ckpt.pt"),
        weights_only=True, map_location="cpu",
    )
    model.load_state_dict(state)
""",
        note="multi-line call with a trailing comma",
    ),
    Valid(
        _HEAD
        + """\
def resume(args, model):
    if args.gpu is None:
        ckpt = torch.load(args.resume)
    else:
        ckpt = torch.load(args.resume, map_location=f"cuda:{args.gpu}")
    model.load_state_dict(ckpt["state_dict"])
""",
        note="F30: no GPU index, one process drives every GPU of the node",
    ),
    Valid(
        _HEAD
        + """\
def restore_queue(args):
    queue_path = os.path.join(args.dump_path, "queue" + str(args.rank) + ".pth")
    if os.path.isfile(queue_path):
        return torch.load(queue_path)["queue"]
    return None
""",
        note="F31: a per-rank file, written by this rank from its own GPU",
    ),
    Invalid(
        _HEAD
        + """\
def resume(args, model):
    if args.gpu is not None:
        ckpt = «torch.load(args.resume)»
        model.load_state_dict(ckpt["state_dict"])
""",
        fixed=_HEAD
        + """\
def resume(args, model):
    if args.gpu is not None:
        ckpt = torch.load(args.resume, map_location="cpu")
        model.load_state_dict(ckpt["state_dict"])
""",
        note="a GPU index per process: every rank restores onto the saving GPU",
    ),
    Invalid(
        _HEAD
        + """\
def merge_zero_shards(shard_paths, parse):
    ckp_optim_states = {}
    for shard_path in shard_paths:
        ckp_optim_states[parse(shard_path)] = «torch.load(shard_path)»
    return ckp_optim_states
""",
        fixed=_HEAD
        + """\
def merge_zero_shards(shard_paths, parse):
    ckp_optim_states = {}
    for shard_path in shard_paths:
        ckp_optim_states[parse(shard_path)] = torch.load(shard_path, map_location="cpu")
    return ckp_optim_states
""",
        note="a checkpoint shard (what it fills names optimizer state), not a data shard",
    ),
    Valid(
        _HEAD
        + """\
def load_tokens(shard_path):
    tokens = torch.load(shard_path)
    return tokens
""",
        note="a data shard: the path and what it fills both name data",
    ),
)
