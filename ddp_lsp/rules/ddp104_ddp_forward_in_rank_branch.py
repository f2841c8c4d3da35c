"""DDP104 ddp-forward-in-rank-branch.

## What it does
Finds calls of a `DistributedDataParallel`-wrapped model (`model(x)`, `self.model(x)`,
`model.forward(x)`) that only some ranks make: inside a rank-guarded branch without the same
call on the other path, after a rank-guarded `return`/`break`/`continue`, in a
`@rank_zero_only` function, or in a function of the same file that is only ever called under
a rank-0 guard (`if rank == 0: evaluate(model, val_loader)`).

## Why is this bad?
DDP's forward is not a local computation. Before running the module it broadcasts the
module's buffers (BatchNorm running statistics) from rank 0 to every rank, whenever the
previous forward was a training forward and `broadcast_buffers=True` (the default), and
SyncBatchNorm layers all-reduce their statistics in training mode. `torch.no_grad()` does
not turn the broadcast off: we ran a two-process gloo job on PyTorch 2.x where rank 0
evaluated a DDP model with a BatchNorm layer under `torch.no_grad()` after a training step,
and the ranks desynchronised and aborted. Evaluating on rank 0 through the DDP wrapper
therefore hangs, or pairs rank 0's broadcast with whatever collective the other ranks make
next. A model without buffers and without SyncBatchNorm happens to survive, until someone
adds a BatchNorm.

## Example
```python
if rank == 0:
    model.eval()
    with torch.no_grad():
        val_loss = criterion(model(x_val), y_val)
```

## Use instead
```python
if rank == 0:
    model.eval()
    with torch.no_grad():
        val_loss = criterion(model.module(x_val), y_val)
```

## Fix
Where rank 0 alone makes the call (evaluation, sampling, a `@rank_zero_only` hook), calls the
wrapped module instead (`model.module(x)`, `self.model.module(x)`). No fix where some ranks
leave a loop or return early and the others go on: the ranks must agree on stopping, and
`.module` in a training loop would skip gradient synchronisation. The fix is marked
unsafe: it skips DDP's buffer broadcast (harmless on rank 0, which is the broadcast's source),
but SyncBatchNorm layers in training mode still communicate, so call `model.eval()` first.
Fix-all leaves it alone.

A model sharded with FSDP or FSDP2's `fully_shard` (the `shards-model` entries of the framework
tables) is reported the same way: its forward all-gathers the parameter shards, a collective
every rank must join. No fix is offered for it (`.module` does not exist on an FSDP2 module,
and an FSDP module's inner module holds only this rank's shard).

## Known false positives
Models that are not DDP-wrapped, `model.module(...)`, and calls every rank makes (also when
the other ranks make the same call in the `else` branch) are not reported. A function only
called under a rank-0 guard is reported when the model is a module global, an attribute
(`self.model`) or a parameter annotated as `DistributedDataParallel`, not when it is a plain
parameter: the module facts merge call sites without their order, so
`model_without_ddp = model` written before `model = DDP(model)` would look DDP-wrapped. A model wrapped
with `broadcast_buffers=False` in the same function or class is not reported either; one
wrapped elsewhere is, even though a model without buffers and SyncBatchNorm does not
communicate in its forward (nanoGPT's `estimate_loss()` on the master process works for
that reason only).

## References
- https://pytorch.org/docs/stable/generated/torch.nn.parallel.DistributedDataParallel.html
- https://pytorch.org/docs/stable/generated/torch.nn.SyncBatchNorm.html
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from ddp_lsp.core import chunktext
from ddp_lsp.core import edits as text_edits
from ddp_lsp.core import facts as fact_model
from ddp_lsp.core import frameworks as framework_tables
from ddp_lsp.core import names as known_names
from ddp_lsp.core import rankpaths as rank_paths
from ddp_lsp.core.facts import path_of
from ddp_lsp.core.rule import ChunkContext, Invalid, Rule, Valid
from ddp_lsp.core.types import (
    Finding,
    Fix,
    FixAvailability,
    Related,
    RuleMeta,
    Severity,
)
from ddp_lsp.rules import _collectives as collectives
from ddp_lsp.rules import _patterns as patterns

_TRANSPARENT = frozenset({"torch.compile", "torch.nn.SyncBatchNorm.convert_sync_batchnorm"})


def _wraps_ddp(ctx: ChunkContext, value: ast.AST) -> bool | None:
    """True: ``value`` is ``DDP(...)`` (possibly compiled); False: another call; None: unknown."""
    node = value
    seen_call = False
    while isinstance(node, ast.Call):
        seen_call = True
        qual = ctx.call_qualname(node)
        if qual == known_names.DDP:
            return True
        if qual not in _TRANSPARENT or not node.args:
            return False
        node = node.args[0]
    return False if seen_call else None


def _assignments(ctx: ChunkContext, root: ast.AST, path: str) -> list[tuple[ast.stmt, ast.expr]]:
    out: list[tuple[ast.stmt, ast.expr]] = []
    for node in patterns.walk_scope(root):
        if isinstance(node, ast.Assign) and any(path_of(t) == path for t in node.targets):
            out.append((node, node.value))
        elif (
            isinstance(node, ast.AnnAssign)
            and node.value is not None
            and path_of(node.target) == path
        ):
            out.append((node, node.value))
    return out


def _wrapped_here(ctx: ChunkContext, target: ast.expr, call: ast.Call) -> bool:
    """The DDP wrap happened before this call in the call's own frame (or elsewhere)."""
    path = path_of(target)
    assert path is not None
    root = patterns.scope_root(ctx, call)
    found = _assignments(ctx, root, path)
    holders = {id(a) for a in ctx.ancestors(call)}
    before = [(s, v) for s, v in found if patterns.before(s, call) and id(s) not in holders]
    if before:
        # The latest binding before the call decides (`model = build().cuda(g)` then
        # `model = DDP(model)`): the scope walk is not in source order.
        value = max(before, key=lambda sv: patterns.order(sv[0]))[1]
        verdict = _wraps_ddp(ctx, value)
        if verdict is None:  # `model = other`: DDP only if `other` is
            return path_of(value) is not None and ctx.kind(value, call) == fact_model.DDP
        return verdict
    return not any(_wraps_ddp(ctx, v) for s, v in found)


def _sharded_before(ctx: ChunkContext, target: ast.expr, call: ast.Call) -> bool:
    """``target`` was sharded (FSDP, ``fully_shard``: the framework tables' `shards-model`)
    before ``call`` in its frame, and not rebound since; or it is not assigned in the frame at
    all (a parameter or attribute whose kind came from elsewhere)."""
    path = path_of(target)
    assert path is not None
    root = patterns.scope_root(ctx, call)
    last: tuple[ast.AST, bool] | None = None
    for node in patterns.walk_scope(root):
        if not patterns.before(node, call) or not isinstance(node, ast.Assign | ast.Expr):
            continue
        value = node.value
        if isinstance(node, ast.Assign):
            if not any(path_of(t) == path for t in node.targets):
                continue
        elif not (isinstance(value, ast.Call) and value.args and path_of(value.args[0]) == path):
            continue
        shards = isinstance(value, ast.Call) and (
            patterns.framework_call(ctx, value, framework_tables.Meaning.SHARDS_MODEL) is not None
        )
        if isinstance(node, ast.Expr) and not shards:
            continue
        last = (node, shards)
    if last is None:
        return not _assignments(ctx, root, path)
    return last[1]


def _no_buffer_broadcast(ctx: ChunkContext) -> set[str]:
    """Paths wrapped as ``DDP(..., broadcast_buffers=False)`` in this chunk."""
    if any((ctx.call_qualname(c) or "").endswith("convert_sync_batchnorm") for c in ctx.calls()):
        return set()
    out: set[str] = set()
    for node in ctx.nodes(ast.Assign):
        value = node.value
        if isinstance(value, ast.Call) and ctx.call_qualname(value) == known_names.DDP:
            for kw in value.keywords:
                if (
                    kw.arg == "broadcast_buffers"
                    and isinstance(kw.value, ast.Constant)
                    and kw.value.value is False
                ):
                    out.update(p for p in (path_of(t) for t in node.targets) if p)
    return out


def forward_extractor(ctx: ChunkContext) -> rank_paths.Extractor:
    quiet = _no_buffer_broadcast(ctx)

    def extract(call: ast.Call) -> rank_paths.Event | None:
        func = call.func
        target = func.value if isinstance(func, ast.Attribute) and func.attr == "forward" else func
        path = path_of(target)
        if path is None or path in quiet:
            return None
        kind = ctx.kind(target, call)
        if kind == fact_model.FSDP and _sharded_before(ctx, target, call):
            return rank_paths.Event(
                call, path, f"{path}(...)"
            )  # the forward all-gathers the shards
        if kind != fact_model.DDP or not _wrapped_here(ctx, target, call):
            return None
        return rank_paths.Event(call, path, f"{path}(...)")

    return extract


def _is_param(ctx: ChunkContext, root: ast.AST, target: ast.expr) -> bool:
    """``target`` is a parameter not annotated as DDP (its kind came from the call sites)."""
    if not isinstance(root, (ast.FunctionDef, ast.AsyncFunctionDef)) or not isinstance(
        target, ast.Name
    ):
        return False
    args = root.args
    for a in (*args.posonlyargs, *args.args, *args.kwonlyargs):
        if a.arg == target.id:
            return a.annotation is None or ctx.qualname(a.annotation) != known_names.DDP
    return False


def _target(call: ast.Call) -> ast.expr:
    func = call.func
    return func.value if isinstance(func, ast.Attribute) and func.attr == "forward" else func


class DdpForwardInRankBranch(Rule):
    meta = RuleMeta(
        id="DDP104",
        name="ddp-forward-in-rank-branch",
        severity=Severity.WARNING,
        summary="The DDP-wrapped model's forward on some ranks only: it broadcasts buffers and can hang.",
        fix=FixAvailability.SOMETIMES,
    )

    def check(self, ctx: ChunkContext) -> Iterator[Finding]:
        if not rank_paths.may_split(ctx) and not rank_paths.guarded_functions(ctx):
            return  # no frame can strand a forward, whatever the calls (rank_paths.may_split)
        extract = rank_paths.memoised(forward_extractor(ctx))  # asked again per frame and path
        seen: set[int] = set()
        for root in rank_paths.event_roots(ctx, extract):
            try:
                misses = rank_paths.Flow(ctx, root, extract, callers_guarded=True).run()
            except RecursionError:  # absurdly nested code: no findings rather than a crash
                continue
            for miss in misses:
                call = miss.event.node
                if id(call) in seen:
                    continue
                seen.add(id(call))
                target = _target(call)
                if miss.reason.kind == "caller" and _is_param(ctx, root, target):
                    # The model's kind came from the call sites, which the facts merge without
                    # order (`model_without_ddp = model` before `model = DDP(model)` counts as
                    # DDP): too weak to report a function for being called on rank 0.
                    continue
                name = chunktext.segment(ctx.chunk, target)
                if ctx.kind(target, call) == fact_model.FSDP:
                    message, related = collectives.explain(
                        ctx,
                        miss,
                        "the forward hangs: a sharded (FSDP) model all-gathers its parameter "
                        "shards in its forward, a collective every rank must join; run the "
                        "forward on every rank (or gather a full state dict first)",
                    )
                    yield ctx.finding(
                        self,
                        call,
                        message,
                        related=tuple(Related(chunktext.span(ctx.chunk, n), m) for n, m in related),
                        cite=(ctx.kind_source(target, call),),
                    )
                    continue
                consequence = (
                    "the forward can hang: DDP first broadcasts the module's buffers "
                    "(BatchNorm statistics) from rank 0, even under `torch.no_grad()`, and "
                    f"SyncBatchNorm layers all-reduce; call `{name}.module(...)` here instead"
                )
                message, related = collectives.explain(ctx, miss, consequence)
                source = ctx.kind_source(target, call)
                fixes = []
                # `.module` on the plain model a single-GPU caller passes would raise.
                if (
                    miss.reason.runner == rank_paths.Z
                    and not miss.reason.loop
                    and (source is None or not source.mixed)
                ):
                    # Rank 0 alone runs it (evaluation, sampling): the wrapped module gives the
                    # same result there. Elsewhere (a loop some ranks leave) the ranks must
                    # agree instead, and `.module` would skip gradient synchronisation.
                    end = chunktext.span(ctx.chunk, target).end
                    fixes.append(
                        Fix(
                            title=f"Call `{name}.module(...)` (bypass the DDP wrapper)",
                            edits=(text_edits.insert_at(end, ".module"),),
                            safe=False,
                            preferred=True,
                        )
                    )
                yield ctx.finding(
                    self,
                    call,
                    message,
                    fixes=tuple(fixes),
                    related=tuple(Related(chunktext.span(ctx.chunk, n), m) for n, m in related),
                    cite=(source,),
                )


_HEAD = """\
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

"""

DdpForwardInRankBranch.cases = (
    Invalid(
        _HEAD
        + """\
def build_model():
    return nn.Sequential(nn.Linear(8, 8), nn.BatchNorm1d(8))


def run(gpu, rank, x_val):
    model = build_model().cuda(gpu)
    model = DDP(model, device_ids=[gpu])
    if rank == 0:
        with torch.no_grad():
            print(«model(x_val)».mean())
""",
        fixed=_HEAD
        + """\
def build_model():
    return nn.Sequential(nn.Linear(8, 8), nn.BatchNorm1d(8))


def run(gpu, rank, x_val):
    model = build_model().cuda(gpu)
    model = DDP(model, device_ids=[gpu])
    if rank == 0:
        with torch.no_grad():
            print(model.module(x_val).mean())
""",
        note="the wrap rebinds the name: the latest binding before the call decides",
    ),
    Valid(
        _HEAD
        + """\
def run(net, gpu, rank, x_val):
    model = DDP(net.cuda(gpu), device_ids=[gpu])
    model = model.module
    if rank == 0:
        with torch.no_grad():
            print(model(x_val).mean())
""",
        note="rebound to the wrapped module after the wrap: a plain forward",
    ),
    Invalid(
        """\
import torch
import torch.distributed as dist
from torch.distributed.fsdp import fully_shard

def evaluate(net, batch):
    dist.init_process_group("nccl")
    for layer in net.layers:
        fully_shard(layer)
    fully_shard(net)
    if dist.get_rank() == 0:
        with torch.no_grad():
            print(«net(batch)».mean())
""",
        note="FSDP2: fully_shard in place, then a forward on rank 0 (an implicit all-gather)",
    ),
    Invalid(
        """\
import torch.distributed as dist
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

def sample(build, prompt, rank):
    dist.init_process_group("nccl")
    model = FSDP(build())
    if rank == 0:
        return «model(prompt)»
    return None
""",
        note="FSDP wrapper: a rank-0 forward all-gathers the shards",
    ),
    Valid(
        """\
import torch
import torch.distributed as dist
from torch.distributed.fsdp import fully_shard

def evaluate(net, plain, batch):
    fully_shard(net)
    out = net(batch)
    if dist.get_rank() == 0:
        print(out.mean(), plain(batch).mean())
""",
        note="the sharded forward on every rank; rank 0 only runs an unsharded model",
    ),
    Valid(
        """\
import torch.distributed as dist
from torch.distributed.fsdp import fully_shard

def evaluate(build, batch):
    net = build()
    fully_shard(net)
    net = build()
    if dist.get_rank() == 0:
        return net(batch)
""",
        note="rebound to a fresh unsharded model after the shard",
    ),
    Valid(
        _HEAD
        + """\
def evaluate(model, x_val, rank):
    model = DDP(model)
    if rank == 0:
        with torch.no_grad():
            out = model.module(x_val)
        print(out.mean())
""",
        note="model.module(...) bypasses the wrapper",
    ),
    Valid(
        _HEAD
        + """\
def evaluate(model, x_val, rank):
    if rank == 0:
        with torch.no_grad():
            print(model(x_val).mean())
""",
        note="a model that is not DDP-wrapped",
    ),
    Valid(
        _HEAD
        + """\
def train(net, loader, optimizer, rank):
    model = DDP(net)
    for x, y in loader:
        loss = model(x).sum()
        loss.backward()
        optimizer.step()
        if rank == 0:
            print(loss.item())
""",
        note="forward on every rank, logging on rank 0",
    ),
    Valid(
        _HEAD
        + """\
def evaluate(net, x, rank):
    model = DDP(net)
    model.eval()
    with torch.no_grad():
        if rank == 0:
            out = model(x)
            print(out.argmax(1))
        else:
            out = model(x)
""",
        note="every rank calls the forward (twin in the else branch)",
    ),
    Valid(
        _HEAD
        + """\
def setup(net, x, rank):
    model = net
    if rank == 0:
        print(model(x).shape)
    model = DDP(model)
    return model
""",
        note="called before the DDP wrap",
    ),
    Valid(
        _HEAD
        + """\
def evaluate(net, x, rank):
    model = DDP(net, broadcast_buffers=False)
    if rank == 0:
        with torch.no_grad():
            print(model(x).mean())
""",
        note="broadcast_buffers=False without SyncBatchNorm: the eval forward does not communicate",
    ),
    Invalid(
        _HEAD
        + """\
def train(net, loader, val_x, optimizer, rank):
    model = DDP(net.cuda(rank), device_ids=[rank])
    for x, y in loader:
        model(x).sum().backward()
        optimizer.step()
    if rank == 0:
        model.eval()
        with torch.no_grad():
            val = «model(val_x)»  # rank 0 only
        print(val.mean())
""",
        fixed=_HEAD
        + """\
def train(net, loader, val_x, optimizer, rank):
    model = DDP(net.cuda(rank), device_ids=[rank])
    for x, y in loader:
        model(x).sum().backward()
        optimizer.step()
    if rank == 0:
        model.eval()
        with torch.no_grad():
            val = model.module(val_x)  # rank 0 only
        print(val.mean())
""",
        note="evaluation on rank 0 under no_grad still broadcasts buffers",
    ),
    Invalid(
        _HEAD
        + """\
class Trainer:
    def __init__(self, net, rank):
        self.model = DDP(net)
        self.rank = rank

    def validate(self, x):
        if self.rank != 0:
            return None
        return «self.model.forward(x)»
""",
        fixed=_HEAD
        + """\
class Trainer:
    def __init__(self, net, rank):
        self.model = DDP(net)
        self.rank = rank

    def validate(self, x):
        if self.rank != 0:
            return None
        return self.model.module.forward(x)
""",
        note="self.model.forward after a rank-guarded return",
    ),
    Invalid(
        _HEAD
        + """\
from lightning.pytorch.utilities import rank_zero_only

class GAN:
    def __init__(self, generator):
        self.generator = DDP(generator)

    @rank_zero_only
    def sample_images(self, z):
        with torch.no_grad():
            return «self.generator(z)»
""",
        fixed=_HEAD
        + """\
from lightning.pytorch.utilities import rank_zero_only

class GAN:
    def __init__(self, generator):
        self.generator = DDP(generator)

    @rank_zero_only
    def sample_images(self, z):
        with torch.no_grad():
            return self.generator.module(z)
""",
        note="a @rank_zero_only method calling the wrapped generator",
    ),
    Invalid(
        _HEAD
        + """\
def train(net, loader, optimizer, rank):
    model = DDP(net)
    for x, y in loader:
        loss = «model(x)».sum()
        loss.backward()
        optimizer.step()
        if rank == 0 and loss.item() < 0.01:
            break
""",
        fixed=None,
        note="rank 0 leaves the loop: the others run the forward alone in the next iteration; "
        "no fix (the ranks must agree on stopping, model.module would skip gradient sync)",
    ),
    Invalid(
        _HEAD
        + """\
model = DDP(nn.Linear(4, 4))

@torch.no_grad()
def estimate_loss(x):
    model.eval()
    out = «model(x)»
    model.train()
    return out.mean()

def main(x, rank):
    if rank == 0:
        print(estimate_loss(x))
""",
        fixed=_HEAD
        + """\
model = DDP(nn.Linear(4, 4))

@torch.no_grad()
def estimate_loss(x):
    model.eval()
    out = model.module(x)
    model.train()
    return out.mean()

def main(x, rank):
    if rank == 0:
        print(estimate_loss(x))
""",
        note="a helper only called under a rank-0 guard (nanoGPT's estimate_loss on the master)",
    ),
)
