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
from the CPU is reported unless the code says so: the rule cannot see how a file was
written, and `map_location="cpu"` costs nothing there. What says a file holds no CUDA tensors
(F32), not reported: `mmap=True` (memory-mapping only spares memory for tensors that stay on
the host: a converted checkpoint); a file the same function writes with `torch.save(value,
path)` where `value` is not model state (a load-or-compute cache: a spectrogram, a tokenised
dataset rank 0 builds once); a path that names data through the name it was assigned
(`train_fname = f"{out}/traindata_{key}.pt"`); a load that fills only learning-rate
schedulers (`lr_scheduler.load_state_dict(state)`: Python numbers); a load inside
`from_pretrained` (released weights); a path parameter whose default names one fixed weights
file (`pretrained_path: str = "checkpoints/7B/model.pth"`, weights downloaded or converted
before training) that the function does not write itself. Still reported: what the program
restores from its own training, named by its output folder or its resume or weights argument
(`args.resume`, `cfg.pretrained_weights`), and a load that fills a model or an optimizer as
well as a scheduler. DDP504 reports `map_location="cuda:0"`.

Distributed code only: in a project, a function that no distributed entry point reaches on
every rank and that does nothing distributed itself (an export tool, a tokenizer, a plotting
script, a helper called on rank 0 only) is single-process code, and this rule is silent there.
Test code (with the project view, which knows the module's path: a `tests` folder,
`test_*.py`, `conftest.py`) is not reported either: a test reads back the files it wrote
itself, and where they land is what it checks (F33).

Severity `information` (not `warning`): on the triage corpus of 52 public training
repositories (docs/accuracy.md) 10 of its 11 labelled findings are real (precision 0.91);
the one false alarm reads sharded objects (host-side extra state) that another function of
the module writes. Raise it with `severity = { DDP303 = "warning" }` in `[tool.ddp-lsp]`.

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
        for call in ctx.calls_to(known_names.TORCH_LOAD):
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
            if _no_cuda_tensors(ctx, call) or ctx.facts.is_test_module():
                continue  # F32; F33: a test reads back what it wrote itself
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
    """The path names data and no model state, as written or through the name it was assigned
    to (``train_fname = f"{out}/traindata_{key}.pt"``)."""
    text = chunktext.segment(ctx.chunk, path)
    if isinstance(path, ast.Name):
        value = guards.assigned_value(ctx, path.id, patterns.scope_root(ctx, path), path)
        if value is not None:
            text = chunktext.segment(ctx.chunk, value)
    return bool(_DATA_WORDS.search(text)) and not _STATE_WORDS.search(text)


def _no_cuda_tensors(ctx: ChunkContext, call: ast.Call) -> bool:
    """What the code says about the file tells it holds no CUDA tensors (F32)."""
    return (
        _memory_mapped(call)
        or _cache_written_here(ctx, call)
        or _scheduler_state(ctx, call)
        or _released_weights(ctx, call)
        or _fixed_artifact(ctx, call)
    )


def _memory_mapped(call: ast.Call) -> bool:
    """``torch.load(path, mmap=True)``: the storages are mapped from the file, which only
    spares memory for tensors that stay on the host; the author loads a file saved from the
    CPU (a converted checkpoint)."""
    return any(
        kw.arg == "mmap" and isinstance(kw.value, ast.Constant) and kw.value.value is True
        for kw in call.keywords
    )


def _same_path(ctx: ChunkContext, a: ast.expr, b: ast.expr) -> bool:
    return "".join(chunktext.segment(ctx.chunk, a).split()) == "".join(
        chunktext.segment(ctx.chunk, b).split()
    )


def _state_value(ctx: ChunkContext, value: ast.expr) -> bool:
    """What a ``torch.save`` writes is model or optimizer state: a ``state_dict()``, a dict
    built there (a checkpoint), or a name that says so (``ckpt``, ``model``, ``state``), as
    written or through what the name was assigned (``obj = {"net": net.state_dict()}``)."""
    exprs: list[ast.expr] = [value]
    if isinstance(value, ast.Name):
        assigned = guards.assigned_value(ctx, value.id, patterns.scope_root(ctx, value), value)
        if assigned is not None:
            exprs.append(assigned)
    return any(_names_state(e) for e in exprs)


def _names_state(value: ast.expr) -> bool:
    for n in ast.walk(value):
        if isinstance(n, ast.Dict | ast.DictComp):
            return True
        if isinstance(n, ast.Call) and (known_names.last_name(n) or "").endswith("state_dict"):
            return True
        if isinstance(n, ast.Name | ast.Attribute):
            name = (known_names.dotted(n) or "").rsplit(".", 1)[-1]
            if _STATE_WORDS.search(name) or re.search(r"ckp", name, re.IGNORECASE):
                return True
    return False


def _cache_written_here(ctx: ChunkContext, call: ast.Call) -> bool:
    """The same function writes the file with ``torch.save(value, path)`` and ``value`` is not
    model state: a load-or-compute cache (a spectrogram of a CPU waveform, a tokenised dataset
    rank 0 builds once), not a checkpoint restored from the training GPUs (F32)."""
    root = patterns.scope_root(ctx, call)
    for other in ctx.calls():
        if (
            other is not call
            and len(other.args) >= 2
            and ctx.call_qualname(other) == known_names.TORCH_SAVE
            and patterns.scope_root(ctx, other) is root
            and _same_path(ctx, other.args[1], call.args[0])
            and not _state_value(ctx, other.args[0])
        ):
            return True
    return False


_SCHEDULER = re.compile(r"sched", re.IGNORECASE)


def _scheduler_state(ctx: ChunkContext, call: ast.Call) -> bool:
    """What the load returns fills only learning-rate schedulers
    (``lr_scheduler.load_state_dict(state)``): a scheduler's state is Python numbers, no
    tensors (F32)."""
    node: ast.AST = call
    parent = ctx.parent(node)
    names: set[str] = set()
    if isinstance(parent, ast.Assign) and parent.value is node:
        names = {t.id for t in parent.targets if isinstance(t, ast.Name)}
        if not names:
            return False
    root = patterns.scope_root(ctx, call)
    receivers: list[str] = []
    for other in ctx.calls():
        if not (
            isinstance(other.func, ast.Attribute)
            and other.func.attr == "load_state_dict"
            and other.args
            and patterns.scope_root(ctx, other) is root
        ):
            continue
        arg = other.args[0]
        while isinstance(arg, ast.Subscript):
            arg = arg.value
        if arg is call or (isinstance(arg, ast.Name) and arg.id in names):
            receivers.append((known_names.dotted(other.func.value) or "").rsplit(".", 1)[-1])
    return bool(receivers) and all(_SCHEDULER.search(r) for r in receivers)


def _released_weights(ctx: ChunkContext, call: ast.Call) -> bool:
    """In a ``from_pretrained`` loader: it builds a model from released weights (a downloaded
    archive, a hub folder), published as CPU tensors (F32)."""
    return any(
        isinstance(a, ast.FunctionDef | ast.AsyncFunctionDef) and a.name == "from_pretrained"
        for a in ctx.ancestors(call)
    )


_WEIGHTS_FILE = re.compile(r"\.(?:pth|pt|bin|ckpt|pkl|tar)$", re.IGNORECASE)


def _fixed_artifact(ctx: ChunkContext, call: ast.Call) -> bool:
    """The path is a parameter whose default names one fixed weights file
    (``pretrained_path: str = "checkpoints/7B/model.pth"``) and the function writes no file
    by that name: weights prepared before training (downloaded or converted), not a
    checkpoint this program wrote from its GPUs, which a run names by its output folder or
    its resume argument (F32)."""
    path = call.args[0]
    fn = ctx.enclosing_function(call)
    if not isinstance(path, ast.Name) or fn is None:
        return False
    if guards.assigned_value(ctx, path.id, fn, call) is not None:
        return False
    a = fn.args
    positional = [*a.posonlyargs, *a.args]
    pairs = list(zip(positional[len(positional) - len(a.defaults) :], a.defaults, strict=True))
    pairs += [(p, d) for p, d in zip(a.kwonlyargs, a.kw_defaults, strict=True) if d is not None]
    default = next((d for p, d in pairs if p.arg == path.id), None)
    if isinstance(default, ast.Call) and len(default.args) == 1:
        default = default.args[0]  # Path("checkpoints/model.pth")
    if not (
        isinstance(default, ast.Constant)
        and isinstance(default.value, str)
        and _WEIGHTS_FILE.search(default.value)
    ):
        return False
    for other in ctx.calls():
        if (
            known_names.last_name(other) == "save"
            and patterns.scope_root(ctx, other) is fn
            and any(
                isinstance(n, ast.Name) and n.id == path.id
                for arg in [*other.args, *(kw.value for kw in other.keywords)]
                for n in ast.walk(arg)
            )
        ):
            return False  # the run writes the file it reads back
    return True


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
def load_full_checkpoint(model, checkpoint_path, device):
    state_dict = torch.load(checkpoint_path, mmap=True)
    model.load_state_dict(state_dict, assign=True)
    return model.to(device)
""",
        note="F32: memory-mapped, so a file of host tensors (a converted checkpoint)",
    ),
    Valid(
        _HEAD
        + """\
def mel(path, compute):
    cache = path.replace(".wav", ".mel.pt")
    if os.path.exists(cache):
        features = torch.load(cache)
    else:
        features = compute(path)
        torch.save(features, cache)
    return features
""",
        note="F32: a load-or-compute cache this function writes itself, not model state",
    ),
    Valid(
        _HEAD
        + """\
def cached_splits(output_dir, key, build, rank):
    train_fname = f"{output_dir}/traindata_{key}.pt"
    if rank == 0 and not os.path.exists(train_fname):
        build(train_fname)
    dist.barrier()
    return torch.load(train_fname, weights_only=False)
""",
        note="F32: the name was assigned a path that names data",
    ),
    Valid(
        _HEAD
        + """\
def load_scheduler(lr_scheduler, folder):
    state = torch.load(os.path.join(folder, "lr_scheduler.pt"))
    lr_scheduler.load_state_dict(state)
""",
        note="F32: a learning-rate scheduler's state holds Python numbers",
    ),
    Invalid(
        _HEAD
        + """\
def resume(model, optimizer, scheduler, folder):
    state = «torch.load(os.path.join(folder, "last.pt"))»
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
""",
        fixed=_HEAD
        + """\
def resume(model, optimizer, scheduler, folder):
    state = torch.load(os.path.join(folder, "last.pt"), map_location="cpu")
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
""",
        note="F32: a checkpoint that fills a scheduler and the model and optimizer too",
    ),
    Valid(
        _HEAD
        + """\
class Encoder(torch.nn.Module):
    @classmethod
    def from_pretrained(cls, archive, config):
        model = cls(config)
        model.load_state_dict(torch.load(os.path.join(archive, "weights.bin")))
        return model
""",
        note="F32: `from_pretrained` builds a model from released weights",
    ),
    Valid(
        _HEAD
        + """\
def main(pretrained_path: str = "checkpoints/base-7b/model.pth", out_dir: str = "out"):
    checkpoint = torch.load(pretrained_path)
    model = torch.nn.Linear(4, 4)
    model.load_state_dict(checkpoint, strict=False)
    model = DDP(model.cuda())
    torch.save(model.module.state_dict(), os.path.join(out_dir, "finetuned.pth"))
""",
        note="F32: a fixed weights file named by the default, prepared before training",
    ),
    Invalid(
        _HEAD
        + """\
def main(ckpt_path: str = "out/last.pth"):
    model = DDP(torch.nn.Linear(4, 4).cuda())
    if os.path.exists(ckpt_path):
        model.module.load_state_dict(«torch.load(ckpt_path)»)
    torch.save(model.module.state_dict(), ckpt_path)
""",
        fixed=_HEAD
        + """\
def main(ckpt_path: str = "out/last.pth"):
    model = DDP(torch.nn.Linear(4, 4).cuda())
    if os.path.exists(ckpt_path):
        model.module.load_state_dict(torch.load(ckpt_path, map_location="cpu"))
    torch.save(model.module.state_dict(), ckpt_path)
""",
        note="F32: a fixed default path the run writes itself from the GPU model",
    ),
    Invalid(
        _HEAD
        + """\
def restore_pair(generator, critic, path):
    if os.path.exists(path):
        both = «torch.load(path)»
        generator.load_state_dict(both["g"])
        critic.load_state_dict(both["d"])
    obj = {"g": generator.state_dict(), "d": critic.state_dict()}
    torch.save(obj, path)
""",
        fixed=_HEAD
        + """\
def restore_pair(generator, critic, path):
    if os.path.exists(path):
        both = torch.load(path, map_location="cpu")
        generator.load_state_dict(both["g"])
        critic.load_state_dict(both["d"])
    obj = {"g": generator.state_dict(), "d": critic.state_dict()}
    torch.save(obj, path)
""",
        note="F32: what the function saves to the path was assigned a checkpoint dict",
    ),
    Invalid(
        _HEAD
        + """\
def restore(model, path):
    if os.path.exists(path):
        model.load_state_dict(«torch.load(path)»)
    torch.save(model.state_dict(), path)
""",
        fixed=_HEAD
        + """\
def restore(model, path):
    if os.path.exists(path):
        model.load_state_dict(torch.load(path, map_location="cpu"))
    torch.save(model.state_dict(), path)
""",
        note="F32: the same function writes the path, but with model state: a checkpoint",
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
