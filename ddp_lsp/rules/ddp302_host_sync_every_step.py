"""DDP302 host-sync-every-step.

## What it does
Finds `.item()`, `.cpu()`, `.tolist()`, `.numpy()` and `print(tensor)` that run on every
iteration of a training loop (a loop whose own body runs `backward()` or an optimizer step),
not under an occasional condition such as `if step % log_every == 0:`.

## Why is this bad?
CUDA kernels run asynchronously: the Python loop normally queues the next step while the GPU
still works on this one. Reading a value back to the host makes the CPU wait until every queued
kernel has finished, so the queue drains on every step and the GPU idles while Python prepares
the next batch. In DDP the slowest rank sets the pace of every all-reduce, so the stall is paid
by the whole job. Typical cost: a few to 20 % of step time, more for small models.

## Example
```python
for step, (x, y) in enumerate(loader):
    loss = criterion(model(x), y)
    loss.backward()
    optimizer.step()
    running_loss += loss.item()
```

## Use instead
```python
for step, (x, y) in enumerate(loader):
    loss = criterion(model(x), y)
    loss.backward()
    optimizer.step()
    running_loss += loss.detach()
    if step % log_every == 0:
        print(f"loss {running_loss.item() / (step + 1):.4f}")
```

## Fix
None: where to accumulate and how often to log is the author's choice.

## Known false positives
Not reported: reads under a condition (`if step % log_every == 0:`, `if is_last_step:`; a rank
guard such as `if rank == 0:` is *not* occasional: rank 0 then syncs every step and the other
ranks wait for it at the next all-reduce), after the loop, in loops without backward or
optimizer step (evaluation loops, with or without `torch.no_grad()`, and inner loops of a
training step),
values the loop's control flow needs (`if not math.isfinite(loss.item()):`, a variable read by
an `if`/`assert`/`while` test in the same loop, NaN checks), and the second read of a chain
(`x.cpu().numpy()` is reported once, at `.cpu()`). `print` is reported only for values known to
be tensors (a loss or model output). All reads of one step are one stall: one finding per
training loop, at its first read, with the others as related locations. A same-file helper
called every step that calls `.item()` / `.tolist()` on a parameter or a loop variable outside
any `if` (`for p in model.parameters(): norms.append(p.grad.norm().item())`) is reported once,
at the call.

Any module: the bug is a bug in a single-process script too, so this rule runs in every
module (`RuleMeta.any_module`), also in one that is not distributed code at all (a single-GPU
script, a benchmark, a test), where no other rule runs, and in a project it reports in the
functions no distributed entry point reaches (a tokenizer, a plotting script, an export tool),
where the rules that need several ranks are silent.

## References
- https://pytorch.org/docs/stable/notes/cuda.html#asynchronous-execution
- https://pytorch.org/tutorials/recipes/recipes/tuning_guide.html
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator

from ddp_lsp.core import chunktext
from ddp_lsp.core import facts as fact_model
from ddp_lsp.core import names as known_names
from ddp_lsp.core import uniformity as rank_uniformity
from ddp_lsp.core import walk as tree_walk
from ddp_lsp.core.rule import LOOPS, ChunkContext, Invalid, Rule, Valid
from ddp_lsp.core.types import Finding, FixAvailability, Related, RuleMeta, Severity
from ddp_lsp.rules import _graph as graph
from ddp_lsp.rules import _patterns as patterns

_SYNCS = frozenset({"item", "cpu", "tolist", "numpy"})
_STEPPER = re.compile(r"optim|opt$|^opt|scaler", re.IGNORECASE)
_TENSOR_NAME = re.compile(
    r"loss|logit|output|^out$|^outs$|pred|score|acc|correct|norm|prob", re.IGNORECASE
)
_NESTED = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef, *LOOPS)


class HostSyncEveryStep(Rule):
    meta = RuleMeta(
        id="DDP302",
        name="host-sync-every-step",
        severity=Severity.HINT,
        summary="A host-device synchronisation on every training step stalls the GPU pipeline.",
        fix=FixAvailability.NONE,
        any_module=True,
    )

    def check(self, ctx: ChunkContext) -> Iterator[Finding]:
        training: dict[int, bool] = {}
        tested: dict[int, set[str]] = {}
        flows: dict[int, graph.GraphFlow] = {}
        # Every read of one training loop's iteration is one stall: one finding per loop, at
        # its first read, the others as related locations.
        per_loop: dict[int, list[tuple[ast.AST, str]]] = {}
        for call in ctx.calls():
            target, label = self._sync(ctx, call, flows)
            if target is None:
                target, label = self._helper_sync(ctx, call)
            if target is None:
                continue
            loops = ctx.enclosing_loops(call)
            if not loops:
                continue
            loop = loops[0]
            known = training.get(id(loop))
            if known is None:
                known = training[id(loop)] = _is_training_loop(ctx, loop)
            if not known or not _every_iteration(ctx, call, loop):
                continue
            if _feeds_control_flow(ctx, call, loop, tested):
                continue
            per_loop.setdefault(id(loop), []).append((target, label))
        for reads in per_loop.values():
            reads.sort(key=lambda r: patterns.order(r[0]))
            target, label = reads[0]
            more = len(reads) - 1
            also = (
                f" (and {more} more read{'s' if more > 1 else ''} in the same step)" if more else ""
            )
            yield ctx.finding(
                self,
                target,
                f"{label}{also} on every training step makes the CPU wait for the GPU (a device "
                "synchronisation per iteration); keep the value on the device (`.detach()`) and "
                "read it every N steps (`if step % log_every == 0:`)",
                related=tuple(
                    Related(
                        chunktext.span(ctx.chunk, t),
                        f"{lab} reads back to the host in the same step",
                    )
                    for t, lab in reads[1:]
                ),
            )

    @staticmethod
    def _helper_sync(ctx: ChunkContext, call: ast.Call) -> tuple[ast.AST | None, str]:
        """A call of a helper that reads tensors back to the host on every call
        (``grad_norms(model)`` looping ``p.grad.norm().item()`` over the parameters): one
        stall per call, reported at the call."""
        if fact_model.HOST_SYNC not in ctx.callee_props(call):
            return None, ""
        return (
            call,
            f"`{chunktext.segment(ctx.chunk, call.func)}(...)` (it calls `.item()`/`.tolist()`)",
        )

    @staticmethod
    def _sync(
        ctx: ChunkContext, call: ast.Call, flows: dict[int, graph.GraphFlow]
    ) -> tuple[ast.AST | None, str]:
        func = call.func
        if isinstance(func, ast.Attribute) and func.attr in _SYNCS:
            if func.attr != "cpu" and (call.args or call.keywords):
                return None, ""
            if ctx.call_qualname(call) is not None:
                return None, ""  # a module function (`np.cpu`...), not a tensor method
            # Only the first read of a chain: `x.cpu().numpy()` syncs once, at `.cpu()`.
            inner = func.value
            while isinstance(inner, (ast.Call, ast.Attribute, ast.Subscript)):
                if (
                    isinstance(inner, ast.Call)
                    and isinstance(inner.func, ast.Attribute)
                    and inner.func.attr in _SYNCS
                ):
                    return None, ""
                inner = inner.func if isinstance(inner, ast.Call) else inner.value
            root = patterns.scope_root(ctx, call)
            flow = flows.get(id(root))
            if flow is None:
                flow = flows[id(root)] = graph.GraphFlow.of(ctx, root)
            if not _device_tensor(flow, func.value):
                return None, ""
            return call, f"`.{func.attr}()`"
        if isinstance(func, ast.Name) and func.id == "print" and "print" not in ctx.facts.aliases:
            root = patterns.scope_root(ctx, call)
            flow = flows.get(id(root))
            if flow is None:
                flow = flows[id(root)] = graph.GraphFlow.of(ctx, root)
            for a in call.args:
                values = [a]
                if isinstance(a, ast.JoinedStr):
                    values = [v.value for v in a.values if isinstance(v, ast.FormattedValue)]
                for v in values:
                    if isinstance(v, (ast.Name, ast.Attribute)) and _carries(flow, v):
                        return v, f"`print({chunktext.segment(ctx.chunk, v)})` of a tensor"
        return None, ""


def _device_tensor(flow: graph.GraphFlow, receiver: ast.AST) -> bool:
    """The value read back is a GPU tensor of the step: it is computed from a loss or a model
    output, or named like one (``loss``, ``logits``, ``outputs``, ``correct``, ``grad_norm``).
    Numbers from elsewhere (a NumPy array, a list of labels) are not assumed to be on the GPU."""
    for node in tree_walk.bfs(receiver):
        if isinstance(node, (ast.Name, ast.Attribute)):
            name = (known_names.dotted(node) or "").rsplit(".", 1)[-1]
            if _TENSOR_NAME.search(name):
                return True
            if _carries(flow, node):
                return True
        elif isinstance(node, ast.Call) and _safe_taint(flow, node) is graph.CARRY:
            return True
    return False


def _carries(flow: graph.GraphFlow, value: ast.Name | ast.Attribute) -> bool:
    """The value certainly carries autograd history (a loss, a model output).

    Only values assigned earlier in the same pass are asked: ``_graph.GraphFlow`` recurses
    without end on a name whose only binding is a later ``x += 1`` in the enclosing loop."""
    path = known_names.dotted(value)
    if path is None:
        return False
    where = patterns.order(value)
    prior = [
        stmt
        for end, stmt, _ in flow.assigns.get(path, [])
        if end <= where and not isinstance(stmt, ast.AugAssign)
    ]
    if not prior and path not in flow.targets:
        return False
    return _safe_taint(flow, value) is graph.CARRY


def _safe_taint(flow: graph.GraphFlow, value: ast.AST) -> graph.Taint:
    try:
        return flow.taint(value)
    except RecursionError:  # see _carries
        return graph.UNKNOWN


def _own_nodes(loop: ast.AST) -> Iterator[ast.AST]:
    """Nodes of ``loop``'s body and else, not inside nested loops or definitions."""
    stack: list[ast.AST] = [*getattr(loop, "body", []), *getattr(loop, "orelse", [])]
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, _NESTED):
            continue
        stack.extend(tree_walk.children(node))


def _is_training_loop(ctx: ChunkContext, loop: ast.AST) -> bool:
    """The loop's own body runs a backward pass or an optimizer step."""
    for node in _own_nodes(loop):
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
            continue
        if node.func.attr == "backward":
            return True
        if node.func.attr == "step":
            receiver = node.func.value
            kind = ctx.kind(receiver, node)
            if kind in (fact_model.OPTIMIZER, fact_model.SCALER):
                return True
            name = known_names.dotted(receiver) or ""
            if _STEPPER.search(name.rsplit(".", 1)[-1]) and "sched" not in name.lower():
                return True
    return False


def _every_iteration(ctx: ChunkContext, call: ast.Call, loop: ast.AST) -> bool:
    """No occasional condition between ``call`` and ``loop`` (rank guards do not count)."""
    child: ast.AST = call
    for a in ctx.ancestors(call):
        if a is loop:
            # In the loop's own test (`while loss.item() > eps`): control flow.
            return not (isinstance(loop, ast.While) and child is loop.test)
        if isinstance(a, (ast.If, ast.IfExp, ast.While)):
            if child is a.test:
                return False  # the value decides control flow
            if not _pure_rank_guard(ctx, a.test):
                return False
        elif isinstance(a, (ast.Assert, ast.ExceptHandler, ast.comprehension)):
            return False
        elif isinstance(a, ast.BoolOp) and child is not a.values[0]:
            return False
        elif isinstance(a, ast.Try) and any(child is s for s in a.orelse):
            return False
        child = a
    return False


def _pure_rank_guard(ctx: ChunkContext, test: ast.AST) -> bool:
    """``rank == 0``, ``is_main_process()``: true on the same ranks every step. ``step % N == 0
    and master_process`` is occasional."""
    if isinstance(test, ast.BoolOp):
        return all(_pure_rank_guard(ctx, v) for v in test.values)
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return _pure_rank_guard(ctx, test.operand)
    return rank_uniformity.uniformity(ctx).test(test) is not None


def _feeds_control_flow(
    ctx: ChunkContext, call: ast.Call, loop: ast.AST, tested: dict[int, set[str]]
) -> bool:
    """``value = loss.item()`` read by an ``if``/``while``/``assert`` test in the same loop
    (``tested`` holds each loop's test names, computed once)."""
    stmt = ctx.statement(call)
    if not isinstance(stmt, (ast.Assign, ast.AnnAssign)):
        return False
    targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
    names = {n.id for t in targets for n in tree_walk.bfs(t) if isinstance(n, ast.Name)}
    if not names:
        return False
    in_tests = tested.get(id(loop))
    if in_tests is None:
        in_tests = tested[id(loop)] = set()
        for node in patterns.walk_scope(loop):
            if isinstance(node, (ast.If, ast.While, ast.IfExp, ast.Assert)):
                in_tests.update(n.id for n in tree_walk.bfs(node.test) if isinstance(n, ast.Name))
    return not names.isdisjoint(in_tests)


_HEAD = """\
import math
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

"""

HostSyncEveryStep.cases = (
    Valid(
        _HEAD
        + """\
def train(model, loader, optimizer, criterion, log_every):
    running = torch.zeros((), device="cuda")
    for step, (x, y) in enumerate(loader):
        loss = criterion(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        running += loss.detach()
        if step % log_every == 0:
            print(f"step {step} loss {running.item() / (step + 1):.4f}")
    return running.item()
""",
        note="detach every step, .item() under a log condition and after the loop",
    ),
    Valid(
        _HEAD
        + """\
def evaluate(model, loader):
    correct = 0
    with torch.no_grad():
        for x, y in loader:
            correct += (model(x).argmax(1) == y).sum().item()
    return correct
""",
        note="evaluation under no_grad (no backward either)",
    ),
    Valid(
        _HEAD
        + """\
def train_one_epoch(model, criterion, data_loader, optimizer):
    for samples, targets in data_loader:
        loss = criterion(model(samples), targets)
        loss_value = loss.item()
        if not math.isfinite(loss_value):
            print("Loss is {}, stopping training".format(loss_value))
            sys.exit(1)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
""",
        note="DeiT/MAE: the value feeds a NaN check (control flow needs it)",
    ),
    Valid(
        _HEAD
        + """\
def train(model, loader, optimizer, max_iters, master_process):
    for iter_num, (x, y) in enumerate(loader):
        logits, loss = model(x, y)
        loss.backward()
        optimizer.step()
        if iter_num % 10 == 0 and master_process:
            lossf = loss.item()
            print(f"iter {iter_num}: loss {lossf:.4f}")
""",
        note="nanoGPT: under an occasional log condition",
    ),
    Valid(
        _HEAD
        + """\
def train(model, loader, optimizer):
    for epoch in range(10):
        for x, y in loader:
            loss = model(x).sum()
            loss.backward()
            optimizer.step()
        print(f"epoch {epoch} last loss {loss.item():.3f}")
""",
        note="once per epoch, after the step loop",
    ),
    Valid(
        _HEAD
        + """\
def train(model, loader, optimizer):
    for x, y in loader:
        loss = model(x).sum()
        if not torch.isfinite(loss).item():
            continue
        loss.backward()
        optimizer.step()
""",
        note="a NaN check in an if test",
    ),
    Valid(
        _HEAD
        + """\
def train(model, loader, optimizer):
    seen = []
    for x, y, idx in loader:
        model(x).sum().backward()
        optimizer.step()
        seen.extend(idx.tolist())
""",
        note="a value not known to be on the GPU (the loader's CPU indices)",
    ),
    Invalid(
        _HEAD
        + """\
def train(model, loader, optimizer, criterion):
    total = 0.0
    for x, y in loader:
        loss = criterion(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        total += «loss.item()»
        preds = model(x).argmax(1).cpu().numpy()
        print(loss)
    return total
""",
        fixed=None,
        note="three reads in one step are one stall: one finding, the others related",
    ),
    Invalid(
        _HEAD
        + """\
def grad_norms(model):
    norms = []
    for p in model.parameters():
        norms.append(p.grad.norm().item())
    return norms


def train(model, loader, optimizer):
    for x, y in loader:
        model(x).sum().backward()
        history = «grad_norms(model)»
        optimizer.step()
        optimizer.zero_grad()
""",
        fixed=None,
        note="a per-parameter read in a helper called every step: one finding, at the call",
    ),
    Invalid(
        _HEAD
        + """\
def train(model, loader, optimizer, scaler, rank, metric_logger):
    for x, y in loader:
        with torch.autocast("cuda"):
            loss = model(x).sum()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        if rank == 0:
            metric_logger.update(loss=«loss.item()»)
""",
        fixed=None,
        note="a rank guard is not an occasional condition: rank 0 syncs every step",
    ),
    Invalid(
        _HEAD
        + """\
def train(model, loader, optimizer):
    for x, y in loader:
        logits = model(x)
        logits.sum().backward()
        optimizer.step()
        with torch.no_grad():
            correct = (logits.argmax(1) == y).sum()
        print(f"correct {«correct.item()»}")
""",
        fixed=None,
        note="no_grad inside a training step still synchronises every step",
    ),
)
