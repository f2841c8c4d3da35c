"""DDP304 state-dict-of-ddp-wrapper.

## What it does
Finds `ddp_model.state_dict()` written to a checkpoint, where `ddp_model` is the
`DistributedDataParallel` wrapper: `torch.save(model.state_dict(), path)`, a dict holding it
(`torch.save({"model": model.state_dict()}, path)`, also spelled
`dict(model=model.state_dict())`), or a dict built first and saved later in the same
function, also through a save helper (`save_on_master`, `save_checkpoint`).

## Why is this bad?
The wrapper holds the real model as `module`, so every key of its state dict starts with
`module.` (`module.conv1.weight`). Loading that checkpoint into a plain model (for evaluation,
export, fine-tuning on one GPU) fails with "Missing key(s) in state_dict ... Unexpected
key(s): module.conv1.weight ...", and every consumer has to strip the prefix by hand.

## Example
```python
model = DDP(model, device_ids=[local_rank])
...
torch.save(model.state_dict(), "model.pt")
```

## Use instead
```python
torch.save(model.module.state_dict(), "model.pt")
```

## Fix
Inserts `.module` before `.state_dict()`. When the model is DDP on some launches only (wrapped
under `if args.distributed:`, or a caller passes a plain model), it writes
`getattr(model, "module", model).state_dict()` instead, which also works on the single-GPU
launch.

## Known false positives
Not reported: `model.module.state_dict()`, models that are not DDP-wrapped in this file, a name
rebound after the wrap (`model = model.module`), `accelerator.unwrap_model(model).state_dict()`,
`getattr(model, "module", model).state_dict()`, and saves through `accelerator.save` /
`fabric.save` / `trainer.save_checkpoint` (the frameworks unwrap), and saves in a function
that also restores a checkpoint into the wrapper (`model.load_state_dict(ckpt["model"])` on
the DDP model, or the DDP model handed to a restore helper such as
`restart_from_checkpoint(path, state_dict=model)`): those are resume checkpoints whose
`module.` keys round-trip, and `.module.state_dict()` would break the restore (a consumer
that loads them into a plain model strips the prefix; the rule cannot see it). A restore in
another function of the class or module is not seen. Reported although wrong: a save helper
in another file given `model_without_ddp` bound as `model_without_ddp = model` before
`model = DDP(model)` (the project view gives the alias the wrapper's kind).

Off by default: on the triage corpus (docs/accuracy.md) every one of its 13 findings was a
false alarm, 10 of them resume checkpoints (now silent) and 3 the alias above. Turn it on
with `extend-select = ["DDP304"]` (or `select = ["DDP", "DDP304"]`) in `[tool.ddp-lsp]`, or
`ddp-lsp check --select DDP,DDP304`.

## References
- https://pytorch.org/tutorials/intermediate/ddp_tutorial.html#save-and-load-checkpoints
- https://discuss.pytorch.org/t/missing-keys-unexpected-keys-in-state-dict-when-loading-self-trained-model/22379
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator

from ddp_lsp.core import chunktext
from ddp_lsp.core import edits as text_edits
from ddp_lsp.core import facts as fact_model
from ddp_lsp.core import frameworks as framework_tables
from ddp_lsp.core import names as known_names
from ddp_lsp.core import walk as tree_walk
from ddp_lsp.core.rule import ChunkContext, Invalid, Rule, Valid
from ddp_lsp.core.types import Finding, Fix, FixAvailability, RuleMeta, Severity
from ddp_lsp.rules import _guard as guards
from ddp_lsp.rules import _launch as launch_rules
from ddp_lsp.rules import _patterns as patterns

_SAVE_NAME = re.compile(r"save", re.IGNORECASE)
# Helpers that restore a checkpoint into the objects they are given.
_RESTORE_NAME = re.compile(r"load|restore|resume|restart", re.IGNORECASE)
# Framework objects whose saves unwrap the model themselves (`accelerator.save`,
# `model_engine.save_checkpoint`) and save methods that write the bare model
# (`save_pretrained`): the tables' `saves-unwrapped` entries.
_UNWRAPPING = framework_tables.BUILTIN.receiver_pattern(framework_tables.Meaning.SAVES_UNWRAPPED)
_UNWRAPPED_SAVES = tuple(
    sorted(framework_tables.BUILTIN.functions(framework_tables.Meaning.SAVES_UNWRAPPED))
)
# Calls that return their first argument still DDP-wrapped.
_TRANSPARENT = frozenset(
    {known_names.DDP, "torch.compile", "torch.nn.SyncBatchNorm.convert_sync_batchnorm"}
)


class StateDictOfDdpWrapper(Rule):
    meta = RuleMeta(
        id="DDP304",
        name="state-dict-of-ddp-wrapper",
        severity=Severity.INFORMATION,
        summary="Checkpoint of the DDP wrapper: keys prefixed with 'module.'.",
        fix=FixAvailability.ALWAYS,
        default_on=False,
    )

    def check(self, ctx: ChunkContext) -> Iterator[Finding]:
        for call in ctx.calls():
            func = call.func
            if not (isinstance(func, ast.Attribute) and func.attr == "state_dict"):
                continue
            if call.args or call.keywords:
                continue
            receiver = func.value
            if ctx.kind(receiver, call) != fact_model.DDP or _rebound(ctx, receiver, call):
                continue
            save = _saved_by(ctx, call)
            if save is None or _restores_into_wrapper(ctx, call):
                continue
            text = chunktext.segment(ctx.chunk, receiver)
            source = ctx.kind_source(receiver, call)
            if launch_rules.kind_on_every_launch(ctx, receiver, call):
                fix = Fix(
                    title=f"Save {text}.module.state_dict()",
                    edits=(text_edits.insert_after_node(ctx, receiver, ".module"),),
                    safe=True,
                    preferred=True,
                )
            else:
                # DDP on some launches only (`if args.distributed: model = DDP(model)`, or a
                # caller passes a plain model): `.module` would raise on the single-GPU one.
                fix = Fix(
                    title=f'Save getattr({text}, "module", {text}).state_dict()',
                    edits=(
                        text_edits.replace_node(
                            ctx, receiver, f'getattr({text}, "module", {text})'
                        ),
                    ),
                    safe=True,
                    preferred=True,
                )
            yield ctx.finding(
                self,
                call,
                f"`{text}` is the DistributedDataParallel wrapper: its state dict, saved by "
                f"`{save}`, has every key prefixed with `module.` and does not load into a "
                f"plain model; save `{text}.module.state_dict()`",
                fixes=[fix],
                cite=(source,),
            )


def _restores_into_wrapper(ctx: ChunkContext, at: ast.AST) -> bool:
    """The function that saves also restores a checkpoint into a DDP wrapper: ``model.
    load_state_dict(ckpt["model"])`` on the wrapper, or the wrapper handed to a restore helper
    (``restart_from_checkpoint(path, state_dict=model)``). Its checkpoints are resume
    checkpoints whose `module.` keys round-trip; saving ``.module.state_dict()`` would break
    that restore."""
    for node in patterns.walk_scope(patterns.scope_root(ctx, at)):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr == "load_state_dict":
            if ctx.kind(func.value, node) == fact_model.DDP:
                return True
            continue
        name = known_names.dotted(func)
        if name is None or not _RESTORE_NAME.search(name.rsplit(".", 1)[-1]):
            continue
        if ctx.call_qualname(node) == known_names.TORCH_LOAD:
            continue
        args = [*node.args, *(k.value for k in node.keywords)]
        if any(ctx.kind(a, node) == fact_model.DDP for a in args):
            return True
    return False


def _rebound(ctx: ChunkContext, receiver: ast.expr, at: ast.AST) -> bool:
    """``model = model.module`` (or anything but a DDP wrap) before ``at`` in this scope."""
    if not isinstance(receiver, ast.Name):
        return False
    value = guards.assigned_value(ctx, receiver.id, patterns.scope_root(ctx, at), at)
    if value is None:
        return False
    while isinstance(value, ast.Call) and ctx.call_qualname(value) in _TRANSPARENT:
        if ctx.call_qualname(value) == known_names.DDP:
            return False
        if not value.args:
            return True
        value = value.args[0]
    return ctx.kind(value, at) != fact_model.DDP


def _save_label(ctx: ChunkContext, call: ast.Call) -> str | None:
    """``torch.save`` or a save helper (not a framework method that unwraps by itself)."""
    if ctx.call_qualname(call) == known_names.TORCH_SAVE:
        return chunktext.segment(ctx.chunk, call.func)
    name = known_names.dotted(call.func)
    if name is None or not _SAVE_NAME.search(name.rsplit(".", 1)[-1]):
        return None
    if "." in name and _UNWRAPPING.search(name.rsplit(".", 1)[0]):
        return None
    if name.endswith(_UNWRAPPED_SAVES):
        return None
    return name


def _saved_by(ctx: ChunkContext, sd: ast.Call) -> str | None:
    """What writes this state dict: a save call around it, or one that later receives the
    name it was stored in (``ckpt = {"model": m.state_dict()}; torch.save(ckpt, path)``)."""
    child: ast.AST = sd
    for a in ctx.ancestors(sd):
        if isinstance(a, ast.Call) and a.func is not child and _builds_container(ctx, a):
            child = a  # `dict(model=m.state_dict(), step=step)`: a dict literal spelled as a call
            continue
        if isinstance(a, ast.Call):
            label = _save_label(ctx, a)
            if label is not None:
                return label if a.args and _contains(a.args[0], child) else None
            if a.func is not child:
                return None  # passed to some other function first (a converter, a copy)
        if isinstance(a, (ast.Dict, ast.List, ast.Tuple, ast.keyword)):
            child = a
            continue
        if isinstance(a, ast.Assign):
            names = [t.id for t in a.targets if isinstance(t, ast.Name)]
            if not names:
                return None
            root = patterns.scope_root(ctx, sd)
            for node in patterns.walk_scope(root):
                if isinstance(node, ast.Call) and patterns.before(a, node):
                    label = _save_label(ctx, node)
                    if label is None or not node.args:
                        continue
                    if any(
                        isinstance(n, ast.Name) and n.id in names
                        for n in tree_walk.bfs(node.args[0])
                    ):
                        return label
            return None
        if isinstance(a, ast.stmt):
            return None
        child = a
    return None


_CONTAINERS = frozenset({"collections.OrderedDict", "builtins.dict", "builtins.list"})


def _builds_container(ctx: ChunkContext, call: ast.Call) -> bool:
    """``dict(...)``, ``OrderedDict(...)``, ``list(...)``: holds what it is given, unchanged."""
    if isinstance(call.func, ast.Name) and call.func.id in ("dict", "list", "tuple"):
        return call.func.id not in ctx.facts.aliases  # not a name imported as `dict`
    return ctx.call_qualname(call) in _CONTAINERS


def _contains(tree: ast.AST, node: ast.AST) -> bool:
    return any(n is node for n in tree_walk.bfs(tree))


_HEAD = """\
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

"""

StateDictOfDdpWrapper.cases = (
    Valid(
        _HEAD
        + """\
import os

def main(net, rank, epochs):
    model = DDP(net)
    if os.path.exists("checkpoint.pth"):
        ckpt = torch.load("checkpoint.pth", map_location="cpu")
        model.load_state_dict(ckpt["model"])
    for epoch in range(epochs):
        if rank == 0:
            state = dict(epoch=epoch + 1, model=model.state_dict())
            torch.save(state, "checkpoint.pth")
""",
        note="a resume checkpoint the function restores into the wrapper: the keys round-trip",
    ),
    Valid(
        _HEAD
        + """\
from helpers import restart_from_checkpoint, save_on_master

def train(net, optimizer, epochs):
    model = DDP(net)
    start = {"epoch": 0}
    restart_from_checkpoint("checkpoint.pth", run_variables=start, state_dict=model)
    for epoch in range(start["epoch"], epochs):
        save_on_master({"state_dict": model.state_dict(), "epoch": epoch}, "checkpoint.pth")
""",
        note="the wrapper handed to a restore helper: a resume checkpoint",
    ),
    Invalid(
        _HEAD
        + """\
def main(net, rank, epochs):
    model = DDP(net)
    ckpt = torch.load("checkpoint.pth", map_location="cpu")
    model.module.load_state_dict(ckpt["model"])
    for epoch in range(epochs):
        if rank == 0:
            torch.save({"model": «model.state_dict()»}, "checkpoint.pth")
""",
        fixed=_HEAD
        + """\
def main(net, rank, epochs):
    model = DDP(net)
    ckpt = torch.load("checkpoint.pth", map_location="cpu")
    model.module.load_state_dict(ckpt["model"])
    for epoch in range(epochs):
        if rank == 0:
            torch.save({"model": model.module.state_dict()}, "checkpoint.pth")
""",
        note="restored into the plain module, saved from the wrapper: the resume itself fails",
    ),
    Valid(
        _HEAD
        + """\
def main(net, rank, wrap):
    model = net
    if wrap == "ddp-legacy":
        model = DDP(net)
        raise ValueError("--wrap ddp-legacy was removed; launch with torchrun instead")
    if rank == 0:
        torch.save(model.state_dict(), "model.pt")
""",
        note="the wrap is in a branch that ends in raise: the saved model is never the wrapper",
    ),
    Invalid(
        _HEAD
        + """\
def main(net, rank, epoch):
    model = DDP(net)
    if rank == 0:
        torch.save(dict(model=«model.state_dict()», epoch=epoch), "checkpoint.pt")
""",
        fixed=_HEAD
        + """\
def main(net, rank, epoch):
    model = DDP(net)
    if rank == 0:
        torch.save(dict(model=model.module.state_dict(), epoch=epoch), "checkpoint.pt")
""",
        note="a dict built with dict(...) is a dict literal",
    ),
    Valid(
        _HEAD
        + """\
def main(net, rank):
    model = DDP(net)
    if rank == 0:
        torch.save(model.module.state_dict(), "model.pt")
""",
        note="model.module.state_dict()",
    ),
    Valid(
        _HEAD
        + """\
def main(net, rank):
    torch.save(net.state_dict(), "model.pt")
""",
        note="not DDP-wrapped",
    ),
    Valid(
        _HEAD
        + """\
def main(args, net):
    model = DDP(net)
    model_without_ddp = model.module
    checkpoint = {"model": model_without_ddp.state_dict(), "args": args}
    torch.save(checkpoint, "checkpoint.pth")
    unwrapped = getattr(model, "module", model)
    torch.save(unwrapped.state_dict(), "m.pt")
    torch.save(getattr(model, "module", model).state_dict(), "m2.pt")
""",
        note="torchvision's model_without_ddp and a getattr unwrap",
    ),
    Valid(
        _HEAD
        + """\
from accelerate import Accelerator

def main(net):
    accelerator = Accelerator()
    model = DDP(net)
    accelerator.save(accelerator.unwrap_model(model).state_dict(), "model.pt")
    accelerator.save(model.state_dict(), "raw.pt")
""",
        note="accelerate unwraps and saves",
    ),
    Valid(
        _HEAD
        + """\
def main(net):
    model = DDP(net)
    model = model.module
    torch.save(model.state_dict(), "model.pt")
""",
        note="the name is rebound to the inner module",
    ),
    Valid(
        _HEAD
        + """\
import copy

def main(net):
    model = DDP(net)
    ema = copy.deepcopy(model.state_dict())
    model.load_state_dict(ema)
""",
        note="a state dict that is not saved",
    ),
    Invalid(
        _HEAD
        + """\
def main(net, rank):
    model = DDP(net)
    if rank == 0:
        torch.save(«model.state_dict()», "model.pt")
""",
        fixed=_HEAD
        + """\
def main(net, rank):
    model = DDP(net)
    if rank == 0:
        torch.save(model.module.state_dict(), "model.pt")
""",
    ),
    Invalid(
        _HEAD
        + """\
def main(args):
    model = torch.nn.Linear(4, 4)
    if args.distributed:
        dist.init_process_group("nccl")
        model = DDP(model)
    if not args.distributed or dist.get_rank() == 0:
        torch.save(«model.state_dict()», "model.pt")
""",
        fixed=_HEAD
        + """\
def main(args):
    model = torch.nn.Linear(4, 4)
    if args.distributed:
        dist.init_process_group("nccl")
        model = DDP(model)
    if not args.distributed or dist.get_rank() == 0:
        torch.save(getattr(model, "module", model).state_dict(), "model.pt")
""",
        note="DDP on distributed launches only: `.module` would raise on the single-GPU one",
    ),
    Invalid(
        _HEAD
        + """\
def save(model, path):
    torch.save(«model.state_dict()», path)


def main(args):
    model = torch.nn.Linear(4, 4)
    if args.distributed:
        model = DDP(model)
    save(model, "model.pt")
""",
        fixed=_HEAD
        + """\
def save(model, path):
    torch.save(getattr(model, "module", model).state_dict(), path)


def main(args):
    model = torch.nn.Linear(4, 4)
    if args.distributed:
        model = DDP(model)
    save(model, "model.pt")
""",
        note="a helper given a model its caller wraps on distributed launches only",
    ),
    Invalid(
        _HEAD
        + """\
class Trainer:
    def __init__(self, net, gpu_id):
        self.model = DDP(net, device_ids=[gpu_id])

    def _save_checkpoint(self, epoch):
        ckp = «self.model.state_dict()»
        torch.save(ckp, f"checkpoint_{epoch}.pt")
""",
        fixed=_HEAD
        + """\
class Trainer:
    def __init__(self, net, gpu_id):
        self.model = DDP(net, device_ids=[gpu_id])

    def _save_checkpoint(self, epoch):
        ckp = self.model.module.state_dict()
        torch.save(ckp, f"checkpoint_{epoch}.pt")
""",
        note="PyTorch DDP tutorial series: a name saved later",
    ),
    Invalid(
        _HEAD
        + """\
def save_on_master(*args, **kwargs):
    torch.save(*args, **kwargs)

def train(model, optimizer, epoch):
    state = {
        "model": «model.state_dict()»,  # weights
        "optimizer": optimizer.state_dict(),
    }
    save_on_master(state, "checkpoint.pth")

def main(net, optimizer):
    model = DDP(net)
    train(model, optimizer, 0)
""",
        fixed=_HEAD
        + """\
def save_on_master(*args, **kwargs):
    torch.save(*args, **kwargs)

def train(model, optimizer, epoch):
    state = {
        "model": model.module.state_dict(),  # weights
        "optimizer": optimizer.state_dict(),
    }
    save_on_master(state, "checkpoint.pth")

def main(net, optimizer):
    model = DDP(net)
    train(model, optimizer, 0)
""",
        note="a DDP model passed to a same-file function; a dict saved through a helper",
    ),
)
