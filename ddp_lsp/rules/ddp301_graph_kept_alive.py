"""DDP301 graph-kept-alive.

## What it does
Finds a tensor that still carries its autograd graph (the value `.backward()` runs on, a model's
or criterion's output, or anything computed from them) stored past its iteration of the
training loop: `losses.append(loss)`, `history += [loss]`, `total_loss += loss`,
`self.losses.append(loss)`, `history[step] = loss`.

## Why is this bad?
A tensor with autograd history references the graph that produced it. Keeping it after the
iteration keeps that graph (and, until `backward()` frees them, its activations) alive; adding
into a running total chains every iteration's graph onto the next. Memory grows linearly with
the number of steps, so the job dies after hours, never in a two-step smoke test, and each rank
of a DDP job dies on its own schedule.

## Example
```python
total_loss = 0.0
for x, y in loader:
    loss = criterion(model(x), y)
    loss.backward()
    optimizer.step()
    total_loss += loss
```

## Use instead
```python
total_loss = 0.0
for x, y in loader:
    loss = criterion(model(x), y)
    loss.backward()
    optimizer.step()
    total_loss += loss.detach()
```

## Fix
The preferred fix stores `value.detach()`: the value stays on the device, without a host
synchronisation, and without its graph (safe). The alternative stores `value.item()`, a Python
number; it is offered only for scalar values (the loss `.backward()` runs on, a `.mean()`) and is
marked unsafe because it changes the type and synchronises with the device on every call.

## Known false positives
Values are followed only within one function; a loss returned by a helper is not tracked, and
an evaluation loop without `torch.no_grad()` and without `backward()` is not reported. Containers
(re)created or cleared inside the training loop are fine and not reported. An entry stored under
a constant key (`log["loss"] = loss`) is overwritten every iteration and not reported. A loop of
a fixed, small number of steps (`for _ in range(20)`, or `range(steps)` with a literal default
of at most 1,000) collecting into a local list the function returns keeps a bounded number of
graphs, and they are what the caller asked for (a numerics test comparing a few steps' losses):
not reported. A loop over a loader, or a longer one, is.

Any module: the bug is a bug in a single-process script too, so this rule runs in every
module (`RuleMeta.any_module`), also in one that is not distributed code at all (a single-GPU
script, a benchmark, a test), where no other rule runs, and in a project it reports in the
functions no distributed entry point reaches (a tokenizer, a plotting script, an export tool),
where the rules that need several ranks are silent.

## References
- https://pytorch.org/docs/stable/notes/faq.html#my-model-reports-cuda-runtime-error-2-out-of-memory
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from dataclasses import dataclass

from ddp_lsp.core import chunktext
from ddp_lsp.core import edits as text_edits
from ddp_lsp.core import names as known_names
from ddp_lsp.core import walk as tree_walk
from ddp_lsp.core.rule import ChunkContext, Invalid, Rule, Valid
from ddp_lsp.core.types import Edit, Finding, Fix, FixAvailability, Pos, RuleMeta, Severity, Span
from ddp_lsp.rules import _graph as graph
from ddp_lsp.rules import _patterns as patterns

_APPENDERS = {"append": 0, "appendleft": 0, "insert": 1, "extend": 0}
_ATOMS = (ast.Name, ast.Attribute, ast.Call, ast.Subscript)
# A loop of at most this many iterations whose values a function returns keeps a bounded
# number of graphs (docs/accuracy.md F18).
_FEW_STEPS = 1000
_TRIGGERS = frozenset({"backward"}) | graph.TRAINING_STEP_NAMES


# The statements and calls `_recreated` looks at (exact classes).
_RECREATING = frozenset(
    {
        ast.Assign,
        ast.AnnAssign,
        ast.For,
        ast.AsyncFor,
        ast.With,
        ast.AsyncWith,
        ast.Call,
        ast.Delete,
    }
)


@dataclass(frozen=True)
class _Store:
    node: ast.AST  # the statement or call that stores
    container: ast.expr  # where the value goes
    values: tuple[ast.expr, ...]
    accumulates: bool  # `total += loss` / `total = total + loss`
    verb: str


class GraphKeptAlive(Rule):
    meta = RuleMeta(
        id="DDP301",
        name="graph-kept-alive",
        severity=Severity.WARNING,
        summary="A tensor with its autograd graph is stored past its iteration: memory grows "
        "every step.",
        fix=FixAvailability.ALWAYS,
        any_module=True,
    )

    def triggers(self, ctx: ChunkContext) -> frozenset[str]:
        # A finding needs a `.backward(...)` in its frame, or a function named as a training
        # step (core/triggers.py; function names are words).
        return _TRIGGERS

    def check(self, ctx: ChunkContext) -> Iterator[Finding]:
        flows: dict[int, graph.GraphFlow] = {}
        module_key = 0
        for node in ctx.nodes(ast.Call, ast.AugAssign, ast.Assign):
            store = self._store(node)
            if store is None:
                continue
            fn = ctx.enclosing_function(node)
            key = id(fn) if fn is not None else module_key
            flow = flows.get(key)
            if flow is None:
                flow = flows[key] = graph.GraphFlow.of(ctx, patterns.scope_root(ctx, node))
            if not flow.backward_calls and not (
                fn is not None and fn.name in graph.TRAINING_STEP_NAMES
            ):
                continue
            if graph.under_no_grad(ctx, node):
                continue
            root_path = graph.dotted_path(store.container)
            if root_path is None:
                continue
            if (known_names.dotted(store.container) or root_path) in flow.consumed:
                continue  # `total += loss_i` ... `(total / k).backward()`: the loss being built
            if not self._survives(ctx, flow, node, fn, root_path):
                continue
            for leaf in self._leaves(store.values):
                if flow.taint(leaf) is not graph.CARRY:
                    continue
                yield self._finding(ctx, flow, store, leaf)

    # -- what is stored where ------------------------------------------------------------------

    @staticmethod
    def _store(node: ast.AST) -> _Store | None:
        if isinstance(node, ast.Call):
            func = node.func
            if not isinstance(func, ast.Attribute) or func.attr not in _APPENDERS:
                return None
            if not isinstance(func.value, ast.Name | ast.Attribute | ast.Subscript):
                return None
            idx = _APPENDERS[func.attr]
            if len(node.args) != idx + 1 or node.keywords:
                return None
            value = node.args[idx]
            if func.attr == "extend":
                if not isinstance(value, ast.List | ast.Tuple):
                    return None
                return _Store(node, func.value, tuple(value.elts), False, "adding it to")
            return _Store(node, func.value, (value,), False, "appending it to")
        if isinstance(node, ast.AugAssign):
            if not isinstance(node.op, ast.Add):
                return None
            if isinstance(node.value, ast.List | ast.Tuple):
                return _Store(node, node.target, tuple(node.value.elts), False, "adding it to")
            return _Store(node, node.target, (node.value,), True, "adding it into")
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
            value = node.value
            if isinstance(target, ast.Subscript):
                key = target.slice
                if isinstance(key, ast.Constant) or not isinstance(
                    target.value, ast.Name | ast.Attribute | ast.Subscript
                ):
                    return None  # overwritten every iteration
                return _Store(node, target.value, (value,), False, "storing it in")
            if (
                isinstance(target, ast.Name | ast.Attribute)
                and isinstance(value, ast.BinOp)
                and isinstance(value.op, ast.Add)
                and known_names.dotted(value.left) is not None
                and known_names.dotted(value.left) == known_names.dotted(target)
            ):
                right = value.right
                if isinstance(right, ast.List | ast.Tuple):
                    return _Store(node, target, tuple(right.elts), False, "adding it to")
                return _Store(node, target, (right,), True, "adding it into")
        return None

    @classmethod
    def _leaves(cls, values: tuple[ast.expr, ...]) -> Iterator[ast.expr]:
        for v in values:
            if isinstance(v, ast.List | ast.Tuple | ast.Set):
                yield from cls._leaves(tuple(v.elts))
            elif isinstance(v, ast.Dict):
                yield from cls._leaves(tuple(x for x in v.values if x is not None))
            elif isinstance(v, ast.Starred):
                continue
            else:
                yield v

    # -- does the container outlive the iteration ----------------------------------------------

    def _survives(
        self,
        ctx: ChunkContext,
        flow: graph.GraphFlow,
        node: ast.AST,
        fn: ast.FunctionDef | ast.AsyncFunctionDef | None,
        root_path: str,
    ) -> bool:
        for loop in ctx.enclosing_loops(node):
            if flow.has_backward_in(loop):
                if fn is not None and self._bounded_result(loop, fn, root_path):
                    return False
                # Asked for each store into the same container in the loop: once each.
                return not ctx.memo(
                    ("DDP301 recreated", root_path, id(loop)),
                    functools.partial(self._recreated, root_path, patterns.walk_all(ctx, loop)),
                )
        # No training loop around it: a training step method keeping values on `self`.
        if fn is None or not root_path.startswith("self."):
            return False
        return not self._recreated(root_path, patterns.walk_all(ctx, fn))

    @staticmethod
    def _bounded_result(
        loop: ast.AST, fn: ast.FunctionDef | ast.AsyncFunctionDef, path: str
    ) -> bool:
        """A fixed number of iterations whose values are the function's result: ``for _ in
        range(20)`` (or ``range(steps)`` with ``steps=20`` by default) collecting into a local
        list that the function returns. What is kept is bounded, and it is what the caller
        asked for (a numerics test comparing the losses of a few steps)."""
        if "." in path or not isinstance(loop, ast.For | ast.AsyncFor):
            return False
        it = loop.iter
        if not (
            isinstance(it, ast.Call)
            and isinstance(it.func, ast.Name)
            and it.func.id == "range"
            and len(it.args) == 1
            and not it.keywords
        ):
            return False
        bound = it.args[0]
        if isinstance(bound, ast.Name):
            args = fn.args
            positional = [*args.posonlyargs, *args.args]
            tail = positional[len(positional) - len(args.defaults) :]
            defaults = {a.arg: d for a, d in zip(tail, args.defaults, strict=True)}
            defaults.update(
                (a.arg, d)
                for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True)
                if d is not None
            )
            bound = defaults.get(bound.id, bound)
        if not (
            isinstance(bound, ast.Constant)
            and type(bound.value) is int
            and 0 < bound.value <= _FEW_STEPS
        ):
            return False
        for n in tree_walk.scope_nodes(fn):
            if isinstance(n, ast.Return) and n.value is not None:
                parts = n.value.elts if isinstance(n.value, ast.Tuple) else [n.value]
                if any(isinstance(x, ast.Name) and x.id == path for x in parts):
                    return True
        return False

    @staticmethod
    def _recreated(path: str, nodes: list[ast.AST]) -> bool:
        """``path`` is assigned a fresh value (not one built from itself), or cleared, in
        the scope whose nodes (``patterns.walk_all``) are ``nodes``."""
        for n in nodes:
            if n.__class__ not in _RECREATING:
                continue  # (most nodes: one set lookup instead of the chain below)
            targets: list[ast.AST] = []
            value: ast.AST | None = None
            if isinstance(n, ast.Assign):
                targets, value = list(n.targets), n.value
            elif isinstance(n, ast.AnnAssign) and n.value is not None:
                targets, value = [n.target], n.value
            elif isinstance(n, ast.For | ast.AsyncFor):
                targets = [n.target]
            elif isinstance(n, ast.With | ast.AsyncWith):
                targets = [i.optional_vars for i in n.items if i.optional_vars is not None]
            elif isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute):
                if n.func.attr == "clear" and known_names.dotted(n.func.value) == path:
                    return True
                continue
            elif isinstance(n, ast.Delete):
                for d in n.targets:
                    if isinstance(d, ast.Subscript) and known_names.dotted(d.value) == path:
                        return True
                continue
            else:
                continue
            flat: list[ast.AST] = []
            for tgt in targets:
                flat.extend(tree_walk.bfs(tgt) if isinstance(tgt, ast.Tuple | ast.List) else [tgt])
            if any(known_names.dotted(x) == path for x in flat):
                if value is not None and any(
                    known_names.dotted(x) == path for x in tree_walk.bfs(value)
                ):
                    continue  # `losses = losses + [loss]` keeps the old list
                return True
        return False

    # -- the finding ---------------------------------------------------------------------------

    @staticmethod
    def _grouping_parens(ctx: ChunkContext, store: _Store, leaf: ast.expr) -> Span | None:
        """The span of ``(leaf)`` when the value is written in grouping parentheses (never a
        call's own parentheses)."""
        if isinstance(leaf, _ATOMS) or isinstance(store.node, ast.Call) and leaf in store.values:
            return None
        sp = chunktext.span(ctx.chunk, leaf)
        lines = ctx.chunk.lines
        if sp.start.col == 0 or sp.end.line >= len(lines):
            return None
        if lines[sp.start.line][sp.start.col - 1] != "(":
            return None
        if lines[sp.end.line][sp.end.col : sp.end.col + 1] != ")":
            return None
        return Span(Pos(sp.start.line, sp.start.col - 1), Pos(sp.end.line, sp.end.col + 1))

    def _finding(
        self, ctx: ChunkContext, flow: graph.GraphFlow, store: _Store, leaf: ast.expr
    ) -> Finding:
        text = chunktext.segment(ctx.chunk, leaf)
        wrapped = text if isinstance(leaf, _ATOMS) else f"({text})"
        short = wrapped if "\n" not in text and len(text) <= 40 else "value"
        container = chunktext.segment(ctx.chunk, store.container)
        if "\n" in container or len(container) > 40:
            container = graph.dotted_path(store.container) or "the container"
        scalar = flow.is_scalar(leaf)
        span = chunktext.span(ctx.chunk, leaf)
        grouped = self._grouping_parens(ctx, store, leaf)
        if grouped is not None:
            # `total += (loss * n)`: reuse the parentheses already there.
            span, wrapped = grouped, f"({text})"

        def edit(method: str) -> Edit:
            return text_edits.replace_span(span, f"{wrapped}.{method}()")

        fixes = [
            Fix(
                title=f"Store `{short}.detach()`",
                edits=(edit("detach"),),
                safe=True,
                preferred=True,
            )
        ]
        if scalar:
            fixes.append(
                Fix(
                    title=f"Store `{short}.item()` (a Python number; syncs with the device)",
                    edits=(edit("item"),),
                    safe=False,
                )
            )
        where = f"{store.verb} `{container}`"
        if store.verb == "storing it in":
            where = f"storing it in `{container}[...]`"
        return ctx.finding(
            self,
            leaf,
            f"`{text if short != 'value' else 'value'}` still carries its autograd graph; {where} keeps every iteration's graph "
            "alive, so memory grows with every step until the job dies: store "
            f"`{short}.detach()`" + (" (or `.item()`)" if scalar else ""),
            fixes=fixes,
        )


_HEAD = """\
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

"""

GraphKeptAlive.cases = (
    Valid(
        _HEAD
        + """\
def train(model, loader, optimizer, criterion):
    losses = []
    total_loss = 0.0
    for x, y in loader:
        loss = criterion(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        total_loss += loss.detach()
        history = [float(loss)]
    return losses, total_loss
""",
        note="values already .item()ed, .detach()ed, float(...)",
    ),
    Valid(
        _HEAD
        + """\
def train(model, loader, optimizer, criterion):
    running_loss, correct, preds, probs = 0.0, 0, [], []
    for x, y in loader:
        out = model(x)
        loss = criterion(out, y)
        loss.backward()
        optimizer.step()
        running_loss += loss.item() * x.size(0)
        correct += (out.argmax(1) == y).sum()
        preds.append(out.argmax(dim=1))
        probs.append(F.softmax(out, dim=1).detach().cpu().numpy())
    return running_loss, correct, preds, probs
""",
        note="torchvision tutorial metrics: .item(), argmax, comparisons, .detach().cpu().numpy()",
    ),
    Valid(
        _HEAD
        + """\
def train(model, loader, optimizer, criterion, val_loader):
    for x, y in loader:
        loss = criterion(model(x), y)
        loss.backward()
        optimizer.step()
    outputs, val_losses = [], []
    with torch.no_grad():
        for x, y in val_loader:
            out = model(x)
            outputs.append(out)
            val_losses.append(criterion(out, y))
    return outputs, val_losses
""",
        note="stored inside torch.no_grad()",
    ),
    Valid(
        _HEAD
        + """\
@torch.no_grad()
def evaluate(model, loader, criterion):
    losses = []
    for x, y in loader:
        loss = criterion(model(x), y)
        losses.append(loss)
    return torch.stack(losses).mean()

@torch.inference_mode()
def predict(model, loader):
    return [model(x) for x in loader]
""",
        note="functions decorated with torch.no_grad() / torch.inference_mode()",
    ),
    Valid(
        _HEAD
        + """\
def train(model, heads, loader, optimizer, criterion):
    for x, y in loader:
        feats = model(x)
        losses = []
        total = 0
        for head in heads:
            loss_i = criterion(head(feats), y)
            losses.append(loss_i)
            total += loss_i
        (total + sum(losses)).backward()
        optimizer.step()
""",
        note="containers re-created inside the training loop, consumed by its backward",
    ),
    Valid(
        _HEAD
        + """\
def train(model, loader, optimizer, criterion, accum_steps):
    micro_losses = []
    for i, (x, y) in enumerate(loader):
        micro_losses.append(criterion(model(x), y))
        if len(micro_losses) == accum_steps:
            torch.stack(micro_losses).mean().backward()
            optimizer.step()
            micro_losses.clear()
""",
        note="a list cleared inside the loop after its backward",
    ),
    Valid(
        _HEAD
        + """\
def train(model, loader, optimizer, teacher):
    kept = []
    for x, y in loader:
        with torch.no_grad():
            t_out = teacher(x)
            out_ref = model(x)
        kept.append(t_out)
        kept.append(out_ref)
        loss = F.mse_loss(model(x), t_out)
        loss.backward()
        optimizer.step()
        stats = {}
        stats["loss"] = loss
""",
        note="values computed under no_grad, stored after it; a constant key is overwritten",
    ),
    Valid(
        _HEAD
        + """\
def train(model, get_batch, optimizer, scaler, ctx, gradient_accumulation_steps, log):
    for iter_num in range(100):
        for micro_step in range(gradient_accumulation_steps):
            with ctx:
                logits, loss = model(*get_batch("train"))
                loss = loss / gradient_accumulation_steps
            scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        lossf = loss.item() * gradient_accumulation_steps
        log.append(lossf)
""",
        note="nanoGPT: .item() before it is kept",
    ),
    Valid(
        _HEAD
        + """\
def train_one_epoch(model, criterion, data_loader, optimizer, metric_logger, loss_meter):
    for samples, targets in data_loader:
        outputs = model(samples)
        loss = criterion(outputs, targets)
        loss_value = loss.item()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        metric_logger.update(loss=loss_value)
        loss_meter.update(loss.item(), samples.size(0))
        reduced = reduce_tensor(loss.data)
        metric_logger.history.append(reduced)
""",
        note="DeiT / timm: loss_value = loss.item(), meters fed numbers, .data",
    ),
    Valid(
        _HEAD
        + """\
class LitModel:
    def __init__(self):
        self.losses = []

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self.model(x), y)
        self.losses.append(loss.detach())
        return loss
""",
        note="Lightning training_step keeping detached losses",
    ),
    Valid(
        _HEAD
        + """\
def evaluate(model, loader):
    outputs = []
    for x, _ in loader:
        outputs.append(model(x))
    return outputs
""",
        note="no backward in the loop and no no_grad: not a training loop (documented miss)",
    ),
    Valid(
        _HEAD
        + """\
def train(model, loader, optimizer, criterion):
    works, seen, accs, norms, total = [], [], [], [], 0.0
    for x, y in loader:
        out = model(x)
        loss = criterion(out, y)
        loss.backward()
        works.append(dist.all_reduce(loss.detach(), async_op=True))
        works.append(dist.all_reduce(loss, async_op=True))
        seen.append(x.size(0))
        accs.append((out.argmax(1) == y).float().mean())
        norms.append(torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0))
        total += loss.item() if torch.is_tensor(loss) else loss
        optimizer.step()
""",
        note="work handles, sizes, accuracy from comparisons, grad norms, a defensive .item()",
    ),
    Valid(
        _HEAD
        + """\
def train(model, loader, optimizer, k, loss_acc):
    for i, x in enumerate(loader):
        loss_acc += model(x).mean()
        if (i + 1) % k == 0:
            (loss_acc / k).backward()
            optimizer.step()
            optimizer.zero_grad()
            loss_acc.zero_()
""",
        note="a loss built over micro-steps and consumed by its own backward",
    ),
    Valid(
        _HEAD
        + """\
from detectron2.utils import comm

class SimpleTrainer:
    def run_step(self):
        data = next(self._data_loader_iter)
        loss_dict = self.model(data)
        losses = sum(loss_dict.values())
        self.optimizer.zero_grad()
        losses.backward()
        metrics_dict = {k: v.detach().cpu().item() for k, v in loss_dict.items()}
        self.history.append(metrics_dict)
        self.optimizer.step()
""",
        note="detectron2's run_step: metrics turned into numbers before they are kept",
    ),
    Valid(
        _HEAD
        + """\
class Trainer:
    def training_step(self, model, inputs):
        loss = self.compute_loss(model, inputs)
        self.accelerator.backward(loss)
        return loss.detach()

    def train(self, model, epoch_iterator):
        tr_loss = torch.tensor(0.0)
        for step, inputs in enumerate(epoch_iterator):
            tr_loss_step = self.training_step(model, inputs)
            tr_loss += tr_loss_step
""",
        note="HF Trainer: training_step returns loss.detach(); a helper's result is not followed",
    ),
    Valid(
        _HEAD
        + """\
def losses_of_a_few_steps(model, batch, target, optimizer, criterion, steps=16):
    history = []
    for _ in range(steps):
        optimizer.zero_grad()
        loss = criterion(model(batch), target)
        loss.backward()
        optimizer.step()
        history.append(loss)
    return history

def first_steps(model, batch, target, optimizer, criterion):
    seen = []
    for _ in range(8):
        loss = criterion(model(batch), target)
        loss.backward()
        optimizer.step()
        seen.append(loss)
    return seen, model
""",
        note="a fixed number of steps whose losses are the function's result (docs F18)",
    ),
    Invalid(
        _HEAD
        + """\
def fit(model, loader, optimizer, criterion, epochs=16):
    history = []
    for _ in range(epochs):
        for x, y in loader:
            loss = criterion(model(x), y)
            loss.backward()
            optimizer.step()
            history.append(«loss»)
    return history
""",
        fixed=_HEAD
        + """\
def fit(model, loader, optimizer, criterion, epochs=16):
    history = []
    for _ in range(epochs):
        for x, y in loader:
            loss = criterion(model(x), y)
            loss.backward()
            optimizer.step()
            history.append(loss.detach())
    return history
""",
        note="returned, but a whole loader runs per counted step",
    ),
    Invalid(
        _HEAD
        + """\
def fit_long(model, batch, target, optimizer, criterion, steps=100_000):
    history = []
    for _ in range(steps):
        loss = criterion(model(batch), target)
        loss.backward()
        optimizer.step()
        history.append(«loss»)
    return history
""",
        fixed=_HEAD
        + """\
def fit_long(model, batch, target, optimizer, criterion, steps=100_000):
    history = []
    for _ in range(steps):
        loss = criterion(model(batch), target)
        loss.backward()
        optimizer.step()
        history.append(loss.detach())
    return history
""",
        note="returned, but too many steps to be a few",
    ),
    Invalid(
        _HEAD
        + """\
def train(model, loader, optimizer, criterion):
    losses = []
    for x, y in loader:
        optimizer.zero_grad()
        loss = criterion(model(x), y)
        loss.backward()
        optimizer.step()
        losses.append(«loss»)  # for the plot
    return losses
""",
        fixed=_HEAD
        + """\
def train(model, loader, optimizer, criterion):
    losses = []
    for x, y in loader:
        optimizer.zero_grad()
        loss = criterion(model(x), y)
        loss.backward()
        optimizer.step()
        losses.append(loss.detach())  # for the plot
    return losses
""",
        note="losses.append(loss)",
    ),
    Invalid(
        _HEAD
        + """\
def train(model, loader, optimizer, criterion):
    total_loss = 0
    for i in range(10000):
        optimizer.zero_grad()
        output = model(loader[i])
        loss = criterion(output)
        loss.backward()
        optimizer.step()
        total_loss += «loss»
""",
        fixed=_HEAD
        + """\
def train(model, loader, optimizer, criterion):
    total_loss = 0
    for i in range(10000):
        optimizer.zero_grad()
        output = model(loader[i])
        loss = criterion(output)
        loss.backward()
        optimizer.step()
        total_loss += loss.item()
""",
        fix_title=".item()",
        note="the PyTorch FAQ's total_loss += loss; the .item() alternative",
    ),
    Invalid(
        _HEAD
        + """\
def train(loader, optimizer, local_rank):
    model = DDP(build_model().cuda(local_rank), device_ids=[local_rank])
    history = []
    epoch_loss = 0.0
    for x, y in loader:
        logits = model(x)
        loss = F.cross_entropy(logits, y)
        scaled = loss * x.size(0)
        scaled.backward()
        history += [«loss»]
        epoch_loss += «loss * x.size(0)»
        epoch_loss = epoch_loss + «scaled»
""",
        fixed=_HEAD
        + """\
def train(loader, optimizer, local_rank):
    model = DDP(build_model().cuda(local_rank), device_ids=[local_rank])
    history = []
    epoch_loss = 0.0
    for x, y in loader:
        logits = model(x)
        loss = F.cross_entropy(logits, y)
        scaled = loss * x.size(0)
        scaled.backward()
        history += [loss.detach()]
        epoch_loss += loss * x.size(0)
        epoch_loss = epoch_loss + scaled
""",
        note="history += [loss], a running sum of an expression, total = total + x",
    ),
    Invalid(
        _HEAD
        + """\
def train(model, loader, optimizer, criterion):
    epoch_loss = 0.0
    for x, y in loader:
        loss = criterion(model(x), y)
        loss.backward()
        epoch_loss += «loss * x.size(0)»
""",
        fixed=_HEAD
        + """\
def train(model, loader, optimizer, criterion):
    epoch_loss = 0.0
    for x, y in loader:
        loss = criterion(model(x), y)
        loss.backward()
        epoch_loss += (loss * x.size(0)).detach()
""",
        note="an expression is wrapped in parentheses before .detach()",
    ),
    Invalid(
        _HEAD
        + """\
class Trainer:
    def __init__(self, model):
        self.model = DDP(model)
        self.losses = []
        self.history = {"loss": [], "logits": []}
        self.per_step = {}

    def fit(self, loader, optimizer):
        for step, (x, y) in enumerate(loader):
            out = self.model(x)
            loss = F.cross_entropy(out, y)
            loss.backward()
            optimizer.step()
            self.losses.append(«loss»)
            self.history["logits"].append(«out»)
            self.per_step[step] = {"loss": «loss», "step": step}
""",
        fixed=_HEAD
        + """\
class Trainer:
    def __init__(self, model):
        self.model = DDP(model)
        self.losses = []
        self.history = {"loss": [], "logits": []}
        self.per_step = {}

    def fit(self, loader, optimizer):
        for step, (x, y) in enumerate(loader):
            out = self.model(x)
            loss = F.cross_entropy(out, y)
            loss.backward()
            optimizer.step()
            self.losses.append(loss.detach())
            self.history["logits"].append(out)
            self.per_step[step] = {"loss": loss, "step": step}
""",
        note="self.losses, a dict of lists, a dict entry per step; model output kept too",
    ),
    Invalid(
        _HEAD
        + """\
class LitModel:
    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self.model(x), y)
        self.train_losses.append(«loss»)
        return loss
""",
        fixed=_HEAD
        + """\
class LitModel:
    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self.model(x), y)
        self.train_losses.append(loss.detach())
        return loss
""",
        note="Lightning training_step storing the loss it returns on self",
    ),
    Invalid(
        _HEAD
        + """\
class Engine:
    def train_step(self, images, targets):
        loss = self.criterion(self.model(images), targets)
        self.step_losses.append(«loss»)
        return loss
""",
        fixed=_HEAD
        + """\
class Engine:
    def train_step(self, images, targets):
        loss = self.criterion(self.model(images), targets)
        self.step_losses.append(loss.detach())
        return loss
""",
        note="a train_step whose caller runs the backward on the loss it returns",
    ),
    Invalid(
        _HEAD
        + """\
def train(model, loader, optimizer, criterion, epochs):
    for epoch in range(epochs):
        epoch_losses = []
        for x, y in loader:
            loss = criterion(model(x), y)
            loss.backward()
            optimizer.step()
            epoch_losses.append(«loss»)
        print(epoch, sum(epoch_losses) / len(epoch_losses))
""",
        fixed=_HEAD
        + """\
def train(model, loader, optimizer, criterion, epochs):
    for epoch in range(epochs):
        epoch_losses = []
        for x, y in loader:
            loss = criterion(model(x), y)
            loss.backward()
            optimizer.step()
            epoch_losses.append(loss.detach())
        print(epoch, sum(epoch_losses) / len(epoch_losses))
""",
        note="re-created per epoch is not enough: every batch of the epoch is kept",
    ),
    Invalid(
        """\
import torch


def finetune(net, loader, make_engine):
    net = make_engine(net)
    seen = []
    for batch in loader:
        out = net(**batch)
        net.backward(out.loss)
        net.step()
        seen.append(«out.loss»)
""",
        fixed="""\
import torch


def finetune(net, loader, make_engine):
    net = make_engine(net)
    seen = []
    for batch in loader:
        out = net(**batch)
        net.backward(out.loss)
        net.step()
        seen.append(out.loss.detach())
""",
        note="`net.backward(loss)` on a module the loop calls (a training engine under any "
        "name): a tensor is not callable, so this is the engine's backward of the loss; "
        "not distributed code, reported all the same",
        distributed=False,
    ),
    Valid(
        """\
import torch


def jacobian_rows(net, xs, grads):
    rows = []
    for x, g in zip(xs, grads):
        y = net(x)
        y.backward(g)
        rows.append(x.grad.clone())
    return rows
""",
        note="`y.backward(g)` is Tensor.backward with a gradient: `y` is an output, never called",
        distributed=False,
    ),
)
