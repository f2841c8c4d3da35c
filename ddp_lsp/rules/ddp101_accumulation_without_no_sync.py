"""DDP101 accumulation-without-no-sync.

## What it does
Finds gradient accumulation on a `DistributedDataParallel` model without `no_sync()`:
`loss.backward()` runs on every micro-step, but `optimizer.step()` only on every k-th
(`if (i + 1) % accum_steps == 0:`, a flag such as `do_step`, `if ...: continue`, or after an
inner loop over micro-batches, also when the optimizers step in a loop of their own). A
function with no optimizer step whose loop walks the micro-batches of one batch (`for i in
range(0, len(batch), micro)`, `batch.split(micro)`, a `micro_step` variable) and runs the
DDP model's forward and backward is accumulation too: its caller steps after it (a trainer's
`forward_backward()` then `optimize()`). So is a loop over the micro-batches whose losses an
earlier loop computed (all forwards, then all backwards: `losses.append(model(x).sum())`, then
`losses[i].backward()`): the earlier loop's forwards are the ones that decide the sync.

## Why is this bad?
DDP all-reduces the gradients during every `backward()`. When the optimizer steps only every
k-th iteration, k-1 of every k all-reduces are wasted: the gradients keep accumulating locally
anyway and only the last synchronisation matters. On a multi-node job that is most of the step
time. `model.no_sync()` skips the all-reduce; the next synchronised backward reduces the
accumulated sum, which gives the same averaged gradients.

## Example
```python
for i, (x, y) in enumerate(loader):
    loss = criterion(model(x), y) / accum_steps
    loss.backward()
    if (i + 1) % accum_steps == 0:
        optimizer.step()
        optimizer.zero_grad()
```

## Use instead
```python
for i, (x, y) in enumerate(loader):
    is_accumulating = (i + 1) % accum_steps != 0
    with model.no_sync() if is_accumulating else contextlib.nullcontext():
        loss = criterion(model(x), y) / accum_steps
        loss.backward()
    if (i + 1) % accum_steps == 0:
        optimizer.step()
        optimizer.zero_grad()
```

## Fix
Computes `is_accumulating` from the loop's own condition (the negated step condition, the
`continue` condition, or "not the last micro-step" of a `range(...)` / `enumerate(...)` loop)
and wraps the statements from the forward pass to the backward in
`with model.no_sync() if is_accumulating else contextlib.nullcontext():` (the forward must be
inside: DDP prepares its reducer there). `import contextlib` is added when needed. No fix is
offered when the condition cannot be evaluated before the forward (it depends on values
computed later in the iteration, or calls a function), or when the loop's length is unknown.

## Known false positives
MAE's form is found too (for timm's `NativeScaler` and classes copied under its names, the
tables' `scaler-wrapper` entries, in a file alone; for any other project class across files):
`loss_scaler(loss, optimizer, update_grad=(i + 1) % accum_iter == 0)`, where `loss_scaler` is a
project class wrapping a GradScaler (its call runs the backward every micro-step and steps only
when `update_grad` holds); no fix is offered for it. A model a caller in another file
wraps in DDP counts (`main.py` wraps it, `engine.py`'s `train_one_epoch(model, ...)`
accumulates); the message says where it was wrapped. When another caller passes a plain model
(a single-GPU entry point sharing the engine), the finding stays, since the DDP launch wastes
the all-reduces, and the fix adds `and hasattr(model, "no_sync")` so the single-GPU launch keeps
working.

A model wrapped under an `if` (`model = build(); if args.distributed: model = DDP(model)`,
also in a caller or a trainer's `__init__`) is reported, and the fix adds the same
`hasattr(model, "no_sync")` test, since the single-GPU launch's model has no `no_sync()`.

A framework's backward (`accelerator.backward(loss)`, `fabric.backward(loss)`: the `backward`
entries of the framework tables, and your own in `[tool.ddp-lsp]`) in a hand-written
accumulation loop is reported too, unless the loop runs under the framework's way of skipping
the sync (`accelerator.accumulate(model)` / `accelerator.no_sync(model)`, `fabric.no_sync`) or
the prepared model's `no_sync()` (judged as below); no fix is offered. DeepSpeed makes the rule moot: its engine (`accumulates-itself` in the tables)
skips the all-reduce of accumulation micro-steps by itself (`gradient_accumulation_steps` in
its config), so loops over `engine.backward(loss)` are never reported.

## What counts as skipping the sync
DDP decides in the forward whether the next backward all-reduces: the forward reads
`require_backward_grad_sync` (what `no_sync()` clears) and prepares the reducer, whose hooks
then all-reduce in the backward whatever the flag says by then. So a forward run under
`with model.no_sync():` skips the sync even when the backward runs after the block, and a
`no_sync()` around the backward alone, after a forward outside it, skips nothing: that is
reported ("the forward runs outside `model.no_sync()`"). A `with` counts when its context is a
use of `no_sync` (`model.no_sync()`, `model.no_sync() if acc else nullcontext()`, a name bound
to either, `accelerator.accumulate(model)`, a same-file helper returning one); a forward in the
other arm of an `if` on the accumulation condition (alone or with a mode flag: `last or not
distributed`) whose arm enters it is the synchronising step of that choice (`if has_no_sync and not need_update: with model.no_sync(): ... else:
...`). Every forward of the loop must be under one: a mode whose forward runs outside it
(another arm of an `if` on anything else) is reported. A capability check is no use:
`hasattr(model, "no_sync")` and a flag named for it (`has_no_sync`, bound or read in a test)
handle nothing, nor does a context made and never entered (`ctx = model.no_sync() if acc else
nullcontext()` with no `with ctx:`). Any other use (`model.require_backward_grad_sync = ...`, an ExitStack entering
`no_sync()`, a helper named for it such as `maybe_no_sync`) is taken as handling the whole
function, even if it covers a different loop. A forward or backward in a closure the loop
defines and calls (`def _forward(): ...` then `loss = _forward()`) counts at the loop's call.

Models wrapped in a conditional expression (`model = DDP(model) if distributed else model`)
are not tracked and not reported. FSDP's own `no_sync` is not this rule's business.

## References
- https://pytorch.org/docs/stable/generated/torch.nn.parallel.DistributedDataParallel.html#torch.nn.parallel.DistributedDataParallel.no_sync
- https://github.com/karpathy/nanoGPT/blob/master/train.py (require_backward_grad_sync)
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass, replace

from ddp_lsp.core import chunktext, spelling
from ddp_lsp.core import edits as text_edits
from ddp_lsp.core import facts as fact_model
from ddp_lsp.core import frameworks as framework_tables
from ddp_lsp.core import names as known_names
from ddp_lsp.core import triggers as rule_triggers
from ddp_lsp.core import walk as tree_walk
from ddp_lsp.core.rule import ChunkContext, Invalid, Rule, Valid
from ddp_lsp.core.types import Edit, Finding, Fix, FixAvailability, Related, RuleMeta, Severity
from ddp_lsp.rules import _accum as accum
from ddp_lsp.rules import _launch as launch_rules
from ddp_lsp.rules import _patterns as patterns

_FLAG = "is_accumulating"


@dataclass(frozen=True)
class _Plan:
    step: ast.Call
    cond: ast.expr | None  # the accumulation condition (pattern "if" / "continue")
    cond_stmt: ast.stmt | None  # the if statement holding it
    accumulating_when: bool  # cond's truth value on accumulation steps
    micro_loop: bool  # the step comes after an inner loop over micro-steps
    # No step in this function: the loop walks one batch's micro-batches and the caller steps
    # after it (`forward_backward()` then `optimize()`, M16). `step` is the backward then.
    caller_steps: bool = False


_UNCONDITIONAL = object()


def _loops_over_receiver(loop: ast.AST, step: ast.Call) -> bool:
    """``for opt in optimizers: opt.step()``: the loop binds the stepping object."""
    if not isinstance(loop, ast.For | ast.AsyncFor) or not isinstance(step.func, ast.Attribute):
        return False
    head: ast.AST = step.func.value
    while isinstance(head, ast.Attribute):
        head = head.value
    if not isinstance(head, ast.Name):
        return False
    return any(isinstance(n, ast.Name) and n.id == head.id for n in tree_walk.bfs(loop.target))


class AccumulationWithoutNoSync(Rule):
    meta = RuleMeta(
        id="DDP101",
        name="accumulation-without-no-sync",
        severity=Severity.WARNING,
        summary="Gradient accumulation on a DDP model without no_sync(): k-1 of k all-reduces "
        "are wasted.",
        fix=FixAvailability.SOMETIMES,
    )

    def triggers(self, ctx: ChunkContext) -> frozenset[str]:
        # Every finding is at a `.backward()`, a framework's backward, or a scaler wrapper
        # called with `update_grad=` (core/triggers.py).
        return frozenset({"backward", "update_grad"}) | rule_triggers.framework_words(
            ctx.ranks.frameworks, framework_tables.Meaning.BACKWARD
        )

    def check(self, ctx: ChunkContext) -> Iterator[Finding]:
        seen: set[int] = set()
        backward_words = rule_triggers.framework_words(
            ctx.ranks.frameworks, framework_tables.Meaning.BACKWARD
        )
        for call in ctx.calls():
            if not self._may_start(ctx, call, backward_words):
                continue
            wrapped = self._wrapper_accumulation(ctx, call, seen)
            if wrapped is None:
                wrapped = self._framework_backward(ctx, call, seen)
            if wrapped is not None:
                yield wrapped
                continue
            backward = accum.is_plain_backward(call)
            if backward is None:
                continue
            # A backward in a closure defined in the loop (`def _backward(loss): ...` then
            # `_backward(loss)`): the loop's call of the closure stands for it.
            anchor = call
            closure = None
            loops = ctx.enclosing_loops(call)
            if not loops:
                closure, anchor = self._closure_call(ctx, call)
                loops = ctx.enclosing_loops(anchor) if closure is not None else []
            if not loops or id(loops[0]) in seen:
                continue
            inner = loops[0]
            root = patterns.scope_root(ctx, anchor)
            # The accumulation plan first: most loops step every iteration (no plan), and the
            # forwards and no_sync() uses asked next cost ten times more to find. Each
            # condition below is necessary for the finding, so their order changes nothing
            # but the cost (and the facts read: only those a finding could rest on).
            steps = [
                n
                for n in (
                    *patterns.walk_scope(root),
                    *(patterns.walk_scope(closure) if closure is not None else ()),
                )
                if isinstance(n, ast.Call) and accum.is_optimizer_step(ctx, n)
            ]
            plan = self._plan(ctx, anchor, loops, steps, root)
            if plan is None:
                continue
            sites = accum.forward_sites(ctx, inner, inner if closure else call, anchor)
            if not sites:
                sites = accum.stored_forward_sites(ctx, inner, backward.target, root)
            models = [m for m, _site in sites]
            if not models:
                continue
            outside = self._outside_no_sync(ctx, self._roots(ctx, root), sites)
            if outside is None:
                continue
            seen.add(id(inner))
            model_texts = sorted({chunktext.segment(ctx.chunk, m) for m in models})
            model = model_texts[0]
            fixes = []
            if len(model_texts) == 1 and not plan.caller_steps and not outside and closure is None:
                fix = self._fix(ctx, plan, inner, models, call, root, model)
                if fix is not None:
                    fixes.append(fix)
            # The model may be DDP only because a caller in another file wraps it.
            model_expr = next(m for m in models if chunktext.segment(ctx.chunk, m) == model)
            when, how, related = self._explain(
                ctx,
                plan,
                outside,
                f"run the forward and backward of accumulation steps under `{model}.no_sync()`",
                f"`{model}.no_sync()`",
            )
            yield ctx.finding(
                self,
                call,
                f"`{chunktext.segment(ctx.chunk, call)}` all-reduces the gradients of DDP model `{model}` on every "
                f"micro-step, but the optimizer steps {when}: {how}",
                fixes=fixes,
                related=related,
                cite=(ctx.kind_source(model_expr, call),),
            )

    @staticmethod
    def _may_start(ctx: ChunkContext, call: ast.Call, backward_words: frozenset[str]) -> bool:
        """``call`` may be where a finding starts: a call with ``update_grad=``
        (``_wrapper_accumulation``), or an attribute call that is a ``.backward()`` or whose
        name (or qualified name's last part) is a framework backward's word: the framework
        tables match no other (core/triggers.py). Most calls of a loop are none of these."""
        if any(kw.arg == "update_grad" for kw in call.keywords):
            return True
        func = call.func
        if not isinstance(func, ast.Attribute):
            return False
        if func.attr == "backward" or func.attr in backward_words:
            return True
        qual = ctx.call_qualname(call)
        return qual is not None and qual.rsplit(".", 1)[-1] in backward_words

    @staticmethod
    def _roots(ctx: ChunkContext, root: ast.AST) -> list[ast.AST]:
        """The scope of the loop and the functions around it: where a ``with`` skipping the
        sync may stand."""
        return [
            root,
            *(
                a
                for a in ctx.ancestors(root)
                if isinstance(a, ast.FunctionDef | ast.AsyncFunctionDef)
            ),
        ]

    @staticmethod
    def _explain(
        ctx: ChunkContext, plan: _Plan, outside: list[ast.AST], how: str, skipper: str
    ) -> tuple[str, str, tuple[Related, ...]]:
        """(when the optimizer steps, what to do, related locations) of a finding: ``how``
        skips the sync; when the scope skips it but not around ``outside``'s forwards, the
        advice is to move them under ``skipper`` (DDP decides in the forward whether the next
        backward all-reduces)."""
        if plan.caller_steps:
            when = "only after this loop over the micro-batches of one batch (in the caller)"
        elif plan.micro_loop:
            when = "once after the micro-step loop"
        else:
            assert plan.cond is not None
            cond = accum.one_line(ctx, plan.cond) or "its condition"
            when = f"only when `{cond}` {'is false' if plan.accumulating_when else 'holds'}"
        related = (
            []
            if plan.caller_steps
            else [Related(chunktext.span(ctx.chunk, plan.step), "the optimizer steps here")]
        )
        if not outside:
            return when, f"{how} to skip the wasted all-reduces", tuple(related)
        first = accum.one_line(ctx, outside[0]) or "the forward"  # type: ignore[arg-type]
        related.extend(
            Related(chunktext.span(ctx.chunk, site), "this forward runs outside no_sync()")
            for site in outside
        )
        how = (
            f"`{first}` runs outside {skipper}, and DDP decides in the forward whether the "
            "backward all-reduces: run the forward of accumulation steps under it too"
        )
        return when, how, tuple(related)

    @staticmethod
    def _closure_call(ctx: ChunkContext, node: ast.Call) -> tuple[ast.FunctionDef | None, ast.Call]:
        """``node`` in a closure defined in a loop (``def _backward(loss): loss.backward()``)
        and the loop's first call of it: (the closure, the call), else (None, node)."""
        fn = ctx.enclosing_function(node)
        if not isinstance(fn, ast.FunctionDef):
            return None, node
        loops = ctx.enclosing_loops(fn)
        if not loops:
            return None, node
        calls = [
            n
            for n in patterns.walk_scope(loops[0])
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == fn.name
        ]
        if not calls:
            return None, node
        return fn, min(calls, key=patterns.order)

    @staticmethod
    def _outside_no_sync(
        ctx: ChunkContext, roots: list[ast.AST], sites: list[tuple[ast.expr, ast.AST]]
    ) -> list[ast.AST] | None:
        """None when the scope handles the sync; else the forwards that run outside the
        ``with`` statements skipping it (empty when the scope never skips it).

        What handles accumulation is a forward run under a context that skips the sync (DDP's
        forward reads ``require_backward_grad_sync`` and prepares the reducer, whose hooks then
        all-reduce in the backward): ``with model.no_sync():`` around the forward (the backward
        may be outside it), the same chosen by a condition (``no_sync() if acc else
        nullcontext()``, a name bound to either, or the other arm of an ``if`` whose arm enters
        it). Any other use (``require_backward_grad_sync = ...``, an ExitStack, a helper)
        handles the whole scope. A capability check (``hasattr(model, "no_sync")``) is none."""
        mentions = accum.sync_mentions(ctx, roots)
        if not mentions:
            return []
        withs = accum.sync_withs(ctx, roots, mentions)
        if withs.loose:
            return None
        if not withs.withs:
            return []  # only contexts made and never entered
        if not sites:
            return None  # no forward of a known DDP model to judge: trust the with
        outside = []
        for _model, site in sites:
            if not accum.covered(ctx, site, withs.withs, roots[0]) and site not in outside:
                outside.append(site)
        return sorted(outside, key=patterns.order) or None

    def _wrapper_accumulation(
        self, ctx: ChunkContext, call: ast.Call, seen: set[int]
    ) -> Finding | None:
        """MAE's form: ``loss_scaler(loss, optimizer, update_grad=(i + 1) % k == 0)``, where
        ``loss_scaler`` is a project class wrapping a GradScaler: its call runs the backward on
        every micro-step and steps only when ``update_grad`` holds."""
        # The keyword first: asking the kind of every call's callee costs a scope walk each.
        update = next((kw.value for kw in call.keywords if kw.arg == "update_grad"), None)
        if update is None or isinstance(update, ast.Constant):
            return None
        if ctx.kind(call.func, call) != fact_model.SCALER_WRAPPER:
            return None
        loops = ctx.enclosing_loops(call)
        if not loops or id(loops[0]) in seen:
            return None
        root = patterns.scope_root(ctx, call)
        if not accum.accumulation_test(ctx, update, root):
            return None
        models = accum.forward_models(ctx, loops[0], call, call)
        if not models:
            return None
        roots: list[ast.AST] = [root]
        roots.extend(
            a for a in ctx.ancestors(root) if isinstance(a, ast.FunctionDef | ast.AsyncFunctionDef)
        )
        if accum.sync_managed(ctx, roots):
            return None
        seen.add(id(loops[0]))
        model = sorted({chunktext.segment(ctx.chunk, m) for m in models})[0]
        model_expr = next(m for m in models if chunktext.segment(ctx.chunk, m) == model)
        cond = accum.one_line(ctx, update) or "update_grad"
        wrapper = chunktext.segment(ctx.chunk, call.func)
        return ctx.finding(
            self,
            call,
            f"`{wrapper}(...)` runs the backward on every micro-step, all-reducing the "
            f"gradients of DDP model `{model}`, but steps only when `{cond}` holds: run the "
            f"forward and `{wrapper}(...)` of accumulation steps under `{model}.no_sync()` to "
            "skip the wasted all-reduces",
            cite=(ctx.kind_source(model_expr, call), ctx.kind_source(call.func, call)),
        )

    def _framework_backward(
        self, ctx: ChunkContext, call: ast.Call, seen: set[int]
    ) -> Finding | None:
        """A framework's backward (the tables' `backward` meaning: ``accelerator.backward(loss)``)
        in a hand-written accumulation loop, with nothing that skips the sync
        (``accelerator.accumulate(model)``): each micro-step all-reduces the prepared DDP model's
        gradients. Engines that accumulate by themselves (`accumulates-itself`: DeepSpeed)
        make the rule moot."""
        if not call.args or not isinstance(call.func, ast.Attribute):
            return None  # (asked first: the table lookup costs more)
        api = patterns.framework_call(ctx, call, framework_tables.Meaning.BACKWARD)
        if api is None:
            return None
        if framework_tables.Meaning.ACCUMULATES_ITSELF in api.means:
            return None
        loops = ctx.enclosing_loops(call)
        if not loops or id(loops[0]) in seen:
            return None
        root = patterns.scope_root(ctx, call)
        sites = accum.forward_sites(ctx, loops[0], call, call)
        outside = self._outside_no_sync(ctx, self._roots(ctx, root), sites)
        if outside is None or self._engine_in_module(ctx):
            return None
        steps = [
            n
            for n in patterns.walk_scope(root)
            if isinstance(n, ast.Call) and accum.is_optimizer_step(ctx, n)
        ]
        plan = self._plan(ctx, call, loops, steps, root)
        if plan is None:
            return None
        models = [m for m, _site in sites]
        if plan.caller_steps and not models:
            return None  # no DDP forward in sight: nothing says this loop all-reduces
        seen.add(id(loops[0]))
        receiver = chunktext.segment(ctx.chunk, call.func.value)
        skippers = " or ".join(
            f"`{receiver}.{m}(model)`" for m in accum.sync_skippers(ctx, receiver)
        )
        texts = sorted({chunktext.segment(ctx.chunk, m) for m in models})
        how = (
            f"run the accumulation steps under {skippers}"
            if skippers
            else f"run the forward and backward of accumulation steps under `{texts[0]}.no_sync()`"
            if texts
            else "skip the gradient sync of the accumulation steps"
        )
        model = f"DDP model `{texts[0]}`" if texts else "the prepared DDP model"
        when, how, related = self._explain(
            ctx, plan, outside, how, "the context that skips the sync"
        )
        return ctx.finding(
            self,
            call,
            f"`{chunktext.segment(ctx.chunk, call)}` all-reduces the gradients of {model} on "
            f"every micro-step, but the optimizer steps {when}: {how}",
            related=related,
        )

    def _engine_in_module(self, ctx: ChunkContext) -> bool:
        """The module builds an engine that accumulates by itself (``deepspeed.initialize``)."""
        model = ctx.ranks.frameworks
        quals = model.calls(framework_tables.Meaning.ACCUMULATES_ITSELF)
        return any(q in quals for q in ctx.facts.aliases.values()) or any(
            q.rpartition(".")[0] in ctx.facts.aliases.values() for q in quals
        )

    # -- finding the accumulation --------------------------------------------------------------

    def _plan(
        self,
        ctx: ChunkContext,
        backward: ast.Call,
        loops: list[ast.For | ast.AsyncFor | ast.While],
        steps: list[ast.Call],
        root: ast.AST,
    ) -> _Plan | None:
        inner = loops[0]
        in_loop = [s for s in steps if any(lp is inner for lp in self._loops(ctx, s))]
        if in_loop:
            found: _Plan | None = None
            for s in in_loop:
                if self._loops(ctx, s)[0] is not inner:
                    return None  # a step in a nested loop: not a shape we understand
                r = self._conditional(ctx, s, backward, inner, root)
                if r is None or r is _UNCONDITIONAL:
                    return None  # some optimizer steps every iteration, or we cannot tell
                assert isinstance(r, _Plan)
                found = found or r
            return found
        # An inner loop over micro-steps, the step after it in the same outer iteration.
        if not isinstance(inner, ast.For | ast.AsyncFor):
            return None
        outer = loops[1:]
        for s in steps:
            # `for opt, sched in zip(optimizers, schedulers): opt.step()` after the micro-step
            # loop: a loop over the optimizers is not an iteration.
            s_loops = [lp for lp in ctx.enclosing_loops(s) if not _loops_over_receiver(lp, s)]
            if len(s_loops) == len(outer) and all(
                a is b for a, b in zip(s_loops, outer, strict=True)
            ):
                if not self._inside(ctx, s, inner):
                    return _Plan(s, None, None, True, True)
        # No step in this function at all, and the loop walks one batch's micro-batches: the
        # caller steps after it (guided-diffusion's `forward_backward()` then `optimize()`).
        if (
            not steps
            and not outer
            and isinstance(root, ast.FunctionDef | ast.AsyncFunctionDef)
            and accum.micro_batch_loop(inner)
            and not self._may_step(inner)
        ):
            return _Plan(backward, None, None, True, True, caller_steps=True)
        return None

    @classmethod
    def _loops(cls, ctx: ChunkContext, node: ast.Call) -> list[ast.For | ast.AsyncFor | ast.While]:
        """Loops around ``node``; in a closure the loop calls, the loops around that call."""
        loops = ctx.enclosing_loops(node)
        if loops:
            return loops
        closure, call = cls._closure_call(ctx, node)
        return ctx.enclosing_loops(call) if closure is not None else []

    @staticmethod
    def _may_step(loop: ast.AST) -> bool:
        """A call in the loop named for stepping or updating (``self.optimize()``,
        ``take_step()``): it may step inside the loop."""
        for n in patterns.walk_scope(loop):
            if isinstance(n, ast.Call):
                last = (known_names.dotted(n.func) or "").rsplit(".", 1)[-1].lower()
                if "optim" in last or "step" in last:
                    return True
        return False

    @staticmethod
    def _inside(ctx: ChunkContext, node: ast.AST, outer: ast.AST) -> bool:
        """``node`` is ``outer`` or under it (up from ``node``, not down through ``outer``)."""
        return node is outer or any(a is outer for a in ctx.ancestors(node))

    def _conditional(
        self, ctx: ChunkContext, step: ast.Call, backward: ast.Call, inner: ast.AST, root: ast.AST
    ) -> _Plan | object | None:
        child: ast.AST = step
        other_condition = False
        for a in ctx.ancestors(step):
            if a is inner:
                break
            if isinstance(a, ast.If) and child is not a.test and not self._inside(ctx, backward, a):
                in_else = any(child is x for x in a.orelse)
                if not accum.accumulation_test(ctx, a.test, root):
                    # `if scaler is not None: scaler.step(opt) else: opt.step()` inside the
                    # accumulation branch: look further out.
                    other_condition = True
                    child = a
                    continue
                other = a.body if in_else else a.orelse
                if any(
                    isinstance(n, ast.Call) and accum.is_optimizer_step(ctx, n)
                    for s in other
                    for n in tree_walk.bfs(s)
                ):
                    return _UNCONDITIONAL
                return _Plan(step, a.test, a, in_else, False)
            child = a
        if other_condition:
            return None  # the step depends on a condition we do not understand
        # `if (i + 1) % k != 0: continue` between the backward and the step.
        for stmt in self._stmt_chain(ctx, step, inner):
            block, idx = ctx.block_of(stmt)
            for earlier in block[:idx]:
                if (
                    isinstance(earlier, ast.If)
                    and not earlier.orelse
                    and earlier.body
                    and isinstance(earlier.body[-1], ast.Continue)
                    and patterns.before(backward, earlier)
                    and accum.accumulation_test(ctx, earlier.test, root)
                ):
                    return _Plan(step, earlier.test, earlier, True, False)
        return _UNCONDITIONAL

    @staticmethod
    def _stmt_chain(ctx: ChunkContext, node: ast.AST, stop: ast.AST) -> list[ast.stmt]:
        """Statements from the one holding ``node`` out to (not including) ``stop``."""
        out: list[ast.stmt] = []
        cur: ast.AST | None = ctx.statement(node)
        while cur is not None and cur is not stop:
            if isinstance(cur, ast.stmt):
                out.append(cur)
            if isinstance(cur, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Lambda):
                return []
            cur = ctx.parent(cur)
        return out if cur is stop else []

    # -- the fix -------------------------------------------------------------------------------

    def _fix(
        self,
        ctx: ChunkContext,
        plan: _Plan,
        inner: ast.For | ast.AsyncFor | ast.While,
        models: list[ast.expr],
        backward: ast.Call,
        root: ast.AST,
        model: str,
    ) -> Fix | None:
        if any(isinstance(n, ast.Name) and n.id == _FLAG for n in tree_walk.bfs(root)):
            return None
        first_forward = min(models, key=patterns.order)
        # Every backward of this loop iteration goes under the context, not only the first
        # (`if use_amp: scaler.scale(loss).backward() else: loss.backward()`).
        backwards = [
            n
            for n in patterns.walk_scope(inner)
            if isinstance(n, ast.Call)
            and accum.is_plain_backward(n) is not None
            and ctx.enclosing_loops(n)[0] is inner
        ]
        region = self._region(ctx, inner, [first_forward, backward, *backwards])
        if region is None:
            return None
        block, i, j = region
        start, end = block[i], block[j]
        if any(self._inside(ctx, plan.step, s) for s in block[i : j + 1]):
            return None
        if plan.cond_stmt is not None and not patterns.before(backward, plan.cond_stmt):
            # The step runs at the top of the next iteration: the sync would have to happen one
            # micro-step earlier than the condition says; no fix rather than a wrong one.
            return None
        if plan.cond_stmt is not None and any(
            self._inside(ctx, plan.cond_stmt, s) for s in block[i : j + 1]
        ):
            return None
        if not patterns.starts_own_line(ctx, start) or not self._ends_own_line(ctx, end):
            return None
        extra_edits: list[Edit] = []
        if plan.micro_loop:
            flag = self._micro_flag(ctx, inner, start, root, extra_edits)
        else:
            flag = self._cond_flag(ctx, plan, inner, start)
        if flag is None:
            return None
        nullctx, imports = spelling.spell(ctx.facts, "contextlib.nullcontext")
        when = _FLAG
        if not launch_rules.kind_on_every_launch(ctx, models[0], backward):
            # DDP on some launches only (`if args.distributed: model = DDP(model)`, or another
            # caller passes a plain module): a plain module has no no_sync(), so keep the
            # single-GPU launch working.
            when = f'{_FLAG} and hasattr({model}, "no_sync")'
        unit = chunktext.indent_unit(ctx.chunk, ctx.ancestors, start)
        header = text_edits.insert_before(
            ctx, start, f"{_FLAG} = {flag}\nwith {model}.no_sync() if {when} else {nullctx}():"
        )
        edits = [replace(header, text=header.text + unit)]
        first, _ = chunktext.stmt_lines(ctx.chunk, start)
        _, last = chunktext.stmt_lines(ctx.chunk, end)
        skip: set[int] = {first}
        for s in block[i : j + 1]:
            skip |= text_edits.string_lines(ctx, s)
        edits.extend(text_edits.reindent(ctx, first, last, unit, skip))
        edits.extend(extra_edits)
        return Fix(
            title=f"Wrap forward and backward in `{model}.no_sync()` on accumulation steps",
            edits=tuple(edits),
            safe=True,
            preferred=True,
            imports=imports,
        )

    def _region(
        self, ctx: ChunkContext, inner: ast.AST, nodes: list[ast.AST]
    ) -> tuple[list[ast.stmt], int, int] | None:
        """The innermost statement list inside the loop whose statements hold all ``nodes``
        (the first forward, every backward), and the first and last index among them."""
        first = nodes[0]
        for stmt in self._stmt_chain(ctx, first, inner):
            block, i = ctx.block_of(stmt)
            indices = []
            for n in nodes:
                k = next((k for k, s in enumerate(block) if self._inside(ctx, n, s)), None)
                if k is None:
                    break
                indices.append(k)
            else:
                if indices[0] != min(indices):
                    return None  # a backward before the forward: not a shape we rewrite
                return block, indices[0], max(indices)
        return None

    @staticmethod
    def _ends_own_line(ctx: ChunkContext, stmt: ast.stmt) -> bool:
        sp = chunktext.span(ctx.chunk, stmt)
        rest = ctx.chunk.lines[sp.end.line][sp.end.col :].strip()
        return not rest or rest.startswith("#")

    def _stores_between(self, inner: ast.AST, start: ast.AST, stop: ast.AST) -> set[str]:
        out: set[str] = set()
        for n in tree_walk.bfs(inner):
            if (
                isinstance(n, ast.stmt)
                and not patterns.before(n, start)
                and patterns.before(n, stop)
            ):
                if isinstance(
                    n,
                    ast.If
                    | ast.For
                    | ast.AsyncFor
                    | ast.While
                    | ast.With
                    | ast.AsyncWith
                    | ast.Try,
                ):
                    # Compound statements: only their own header stores; their bodies are
                    # visited on their own.
                    if isinstance(n, ast.For | ast.AsyncFor):
                        out |= accum.target_paths(n.target)
                    elif isinstance(n, ast.With | ast.AsyncWith):
                        for item in n.items:
                            if item.optional_vars is not None:
                                out |= accum.target_paths(item.optional_vars)
                    continue
                out |= accum.stored_paths(n)
        return out

    def _cond_flag(
        self, ctx: ChunkContext, plan: _Plan, inner: ast.AST, start: ast.stmt
    ) -> str | None:
        assert plan.cond is not None and plan.cond_stmt is not None
        cond: ast.expr = plan.cond
        at: ast.AST = plan.cond_stmt
        negated = False
        if accum.hoistable(cond) and not (
            accum.loaded_paths(cond) & self._stores_between(inner, start, at)
        ):
            return accum.truth_text(ctx, cond, negate=not plan.accumulating_when)
        # A flag assigned after the forward: use the expression it is assigned.
        name = cond
        if isinstance(name, ast.UnaryOp) and isinstance(name.op, ast.Not):
            name, negated = name.operand, True
        if not isinstance(name, ast.Name):
            return None
        assigns = [
            n
            for n in tree_walk.bfs(inner)
            if isinstance(n, ast.Assign)
            and len(n.targets) == 1
            and isinstance(n.targets[0], ast.Name)
            and n.targets[0].id == name.id
        ]
        if len(assigns) != 1 or not patterns.before(assigns[0], at):
            return None
        value = assigns[0].value
        if not accum.hoistable(value) or accum.loaded_paths(value) & self._stores_between(
            inner, start, assigns[0]
        ):
            return None
        return accum.truth_text(ctx, value, negate=(not plan.accumulating_when) != negated)

    def _micro_flag(
        self,
        ctx: ChunkContext,
        inner: ast.For | ast.AsyncFor | ast.While,
        start: ast.stmt,
        root: ast.AST,
        extra: list[Edit],
    ) -> str | None:
        """``micro_step < steps - 1`` for ``for micro_step in range(steps)`` (or enumerate of a
        sized sequence); None when the loop's last iteration cannot be told in advance."""
        if not isinstance(inner, ast.For | ast.AsyncFor) or inner.orelse:
            return None
        for n in patterns.walk_scope(inner):
            if isinstance(n, ast.Break | ast.Return) and not any(
                isinstance(a, ast.For | ast.AsyncFor | ast.While)
                for a in self._loops_between(ctx, n, inner)
            ):
                return None
        it = inner.iter
        if not isinstance(it, ast.Call) or not isinstance(it.func, ast.Name) or it.keywords:
            return None
        target = inner.target
        if it.func.id == "range" and 1 <= len(it.args) <= 2 and isinstance(target, ast.Name):
            index = target
            count = it.args[-1]
            last = self._minus_one(ctx, count)
        elif (
            it.func.id == "enumerate"
            and len(it.args) == 1
            and isinstance(target, ast.Tuple)
            and len(target.elts) == 2
            and isinstance(target.elts[0], ast.Name)
            and self._sized(ctx, it.args[0], root)
        ):
            index = target.elts[0]
            count = it.args[0]
            text = accum.one_line(ctx, count)
            last = None if text is None else f"len({text}) - 1"
        else:
            return None
        if last is None or not accum.hoistable(count):
            return None
        stored = accum.stored_paths(ast.Module(body=inner.body, type_ignores=[]))
        if accum.loaded_paths(count) & stored or index.id in stored:
            return None
        name = index.id
        if name == "_":
            if any(
                isinstance(n, ast.Name) and n.id == "_" and isinstance(n.ctx, ast.Load)
                for n in patterns.walk_scope(inner)
            ):
                return None
            if any(isinstance(n, ast.Name) and n.id == "micro_step" for n in tree_walk.bfs(root)):
                return None
            name = "micro_step"
            extra.append(text_edits.replace_node(ctx, index, name))
        return f"{name} < {last}"

    def _loops_between(self, ctx: ChunkContext, node: ast.AST, stop: ast.AST) -> list[ast.AST]:
        out = []
        for a in ctx.ancestors(node):
            if a is stop:
                break
            out.append(a)
        return out

    @staticmethod
    def _minus_one(ctx: ChunkContext, count: ast.expr) -> str | None:
        if isinstance(count, ast.Constant) and type(count.value) is int:
            return str(count.value - 1)
        text = accum.one_line(ctx, count)
        if text is None:
            return None
        if isinstance(count, ast.Name | ast.Attribute | ast.Call | ast.Subscript):
            return f"{text} - 1"
        return f"({text}) - 1"

    @staticmethod
    def _sized(ctx: ChunkContext, seq: ast.expr, root: ast.AST) -> bool:
        """A sequence whose ``len()`` is its number of iterations: a DataLoader, or a name
        assigned a list / tuple / ``tensor.chunk(...)`` / ``split(...)`` in this function."""
        if ctx.kind(seq) == "loader":
            return True
        if not isinstance(seq, ast.Name):
            return False
        values = [
            n.value
            for n in patterns.walk_scope(root)
            if isinstance(n, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == seq.id for t in n.targets)
        ]
        if len(values) != 1:
            return False
        v = values[0]
        if isinstance(v, ast.List | ast.Tuple | ast.ListComp):
            return True
        if isinstance(v, ast.Call):
            f = v.func
            name = (
                f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
            )
            return name in ("chunk", "split", "tensor_split", "unbind", "list", "tuple", "sorted")
        return False


_HEAD = """\
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

"""

_MAIN = """

def main(local_rank, loader, accum_steps):
    dist.init_process_group("nccl")
    model = DDP(build_model().cuda(local_rank), device_ids=[local_rank])
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
    train(model, loader, optimizer, accum_steps)
"""

AccumulationWithoutNoSync.cases = (
    Invalid(
        _HEAD
        + """\
def main(args, loader):
    model = torch.nn.Linear(4, 4)
    if args.distributed:
        dist.init_process_group("nccl")
        model = DDP(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for i, (x, y) in enumerate(loader):
        loss = (model(x) - y).pow(2).mean() / 4
        «loss.backward()»
        if (i + 1) % 4 == 0:
            optimizer.step()
            optimizer.zero_grad()
""",
        fixed="import contextlib\n\n"
        + _HEAD
        + """\
def main(args, loader):
    model = torch.nn.Linear(4, 4)
    if args.distributed:
        dist.init_process_group("nccl")
        model = DDP(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for i, (x, y) in enumerate(loader):
        is_accumulating = (i + 1) % 4 != 0
        with model.no_sync() if is_accumulating and hasattr(model, "no_sync") else contextlib.nullcontext():
            loss = (model(x) - y).pow(2).mean() / 4
            loss.backward()
        if (i + 1) % 4 == 0:
            optimizer.step()
            optimizer.zero_grad()
""",
        note="DDP on distributed launches only: the single-GPU model has no no_sync()",
    ),
    Invalid(
        _HEAD
        + """\
def train(model, loader, optimizer):
    for i, (x, y) in enumerate(loader):
        loss = (model(x) - y).pow(2).mean() / 4
        «loss.backward()»
        if (i + 1) % 4 == 0:
            optimizer.step()
            optimizer.zero_grad()


def main(args, loader):
    model = torch.nn.Linear(4, 4)
    if args.distributed:
        model = DDP(model)
    train(model, loader, torch.optim.SGD(model.parameters(), lr=0.1))
""",
        fixed="import contextlib\n\n"
        + _HEAD
        + """\
def train(model, loader, optimizer):
    for i, (x, y) in enumerate(loader):
        is_accumulating = (i + 1) % 4 != 0
        with model.no_sync() if is_accumulating and hasattr(model, "no_sync") else contextlib.nullcontext():
            loss = (model(x) - y).pow(2).mean() / 4
            loss.backward()
        if (i + 1) % 4 == 0:
            optimizer.step()
            optimizer.zero_grad()


def main(args, loader):
    model = torch.nn.Linear(4, 4)
    if args.distributed:
        model = DDP(model)
    train(model, loader, torch.optim.SGD(model.parameters(), lr=0.1))
""",
        note="a helper given a model its caller wraps on distributed launches only",
    ),
    Invalid(
        _HEAD
        + """\
class Trainer:
    def __init__(self, args, net):
        self.model = net
        if args.distributed:
            self.model = DDP(self.model)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.1)

    def fit(self, loader):
        for i, (x, y) in enumerate(loader):
            loss = (self.model(x) - y).pow(2).mean() / 4
            «loss.backward()»
            if (i + 1) % 4 == 0:
                self.optimizer.step()
                self.optimizer.zero_grad()
""",
        fixed="import contextlib\n\n"
        + _HEAD
        + """\
class Trainer:
    def __init__(self, args, net):
        self.model = net
        if args.distributed:
            self.model = DDP(self.model)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.1)

    def fit(self, loader):
        for i, (x, y) in enumerate(loader):
            is_accumulating = (i + 1) % 4 != 0
            with self.model.no_sync() if is_accumulating and hasattr(self.model, "no_sync") else contextlib.nullcontext():
                loss = (self.model(x) - y).pow(2).mean() / 4
                loss.backward()
            if (i + 1) % 4 == 0:
                self.optimizer.step()
                self.optimizer.zero_grad()
""",
        note="a trainer that wraps its model on distributed launches only",
    ),
    Valid(
        _HEAD
        + """\
def train(model, loader, optimizer, criterion, accum_steps):
    for i, (x, y) in enumerate(loader):
        if (i + 1) % accum_steps != 0:
            with model.no_sync():
                loss = criterion(model(x), y) / accum_steps
                loss.backward()
        else:
            loss = criterion(model(x), y) / accum_steps
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
"""
        + _MAIN,
        note="with model.no_sync(): on accumulation steps, the plain form",
    ),
    Valid(
        _HEAD
        + """\
import contextlib

def train(model, loader, optimizer, criterion, accum_steps):
    for i, (x, y) in enumerate(loader):
        is_accumulating = (i + 1) % accum_steps != 0
        with model.no_sync() if is_accumulating else contextlib.nullcontext():
            loss = criterion(model(x), y) / accum_steps
            loss.backward()
        if not is_accumulating:
            optimizer.step()
            optimizer.zero_grad()
"""
        + _MAIN,
        note="no_sync() if cond else contextlib.nullcontext()",
    ),
    Valid(
        _HEAD
        + """\
from contextlib import ExitStack

def train(model, loader, optimizer, criterion, accum_steps):
    for i, (x, y) in enumerate(loader):
        with ExitStack() as stack:
            if (i + 1) % accum_steps:
                stack.enter_context(model.no_sync())
            loss = criterion(model(x), y)
            loss.backward()
        if (i + 1) % accum_steps == 0:
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
"""
        + _MAIN,
        note="no_sync entered through an ExitStack",
    ),
    Valid(
        _HEAD
        + """\
def train(model, get_batch, optimizer, scaler, ctx, gradient_accumulation_steps, max_iters):
    X, Y = get_batch("train")
    for iter_num in range(max_iters):
        for micro_step in range(gradient_accumulation_steps):
            model.require_backward_grad_sync = (micro_step == gradient_accumulation_steps - 1)
            with ctx:
                logits, loss = model(X, Y)
                loss = loss / gradient_accumulation_steps
            X, Y = get_batch("train")
            scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)

def main(ddp_local_rank, get_batch, optimizer, scaler, ctx):
    model = DDP(build_model(), device_ids=[ddp_local_rank])
    train(model, get_batch, optimizer, scaler, ctx, 40, 600000)
""",
        note="nanoGPT: require_backward_grad_sync set on every micro-step",
    ),
    Valid(
        _HEAD
        + """\
from accelerate import Accelerator

def train(model, loader, optimizer, criterion):
    accelerator = Accelerator(gradient_accumulation_steps=4)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    for x, y in loader:
        with accelerator.accumulate(model):
            loss = criterion(model(x), y)
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
""",
        note="accelerator.accumulate(model) handles the sync itself",
    ),
    Valid(
        _HEAD
        + """\
def train(model, loader, optimizer, criterion, accelerator, accum_steps):
    model = DDP(model)
    for i, (x, y) in enumerate(loader):
        if (i + 1) % accum_steps != 0:
            with accelerator.no_sync(model):
                loss = criterion(model(x), y)
                loss.backward()
        else:
            loss = criterion(model(x), y)
            loss.backward()
        if (i + 1) % accum_steps == 0:
            optimizer.step()
            optimizer.zero_grad()
""",
        note="accelerator.no_sync(model)",
    ),
    Valid(
        _HEAD
        + """\
def train(model, loader, optimizer, criterion, accum_steps):
    for i, (x, y) in enumerate(loader):
        loss = criterion(model(x), y) / accum_steps
        loss.backward()
        if (i + 1) % accum_steps == 0:
            optimizer.step()
            optimizer.zero_grad()

def main(loader, criterion):
    dist.init_process_group("nccl")
    model = build_model().cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    train(model, loader, optimizer, criterion, 8)
""",
        note="the model is not DDP-wrapped: backward does not communicate",
    ),
    Valid(
        _HEAD
        + """\
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

def train(loader, criterion, accum_steps):
    model = FSDP(build_model())
    optimizer = torch.optim.AdamW(model.parameters())
    for i, (x, y) in enumerate(loader):
        loss = criterion(model(x), y) / accum_steps
        loss.backward()
        if (i + 1) % accum_steps == 0:
            optimizer.step()
            optimizer.zero_grad()
""",
        note="FSDP: its own no_sync trades memory for communication; not this rule",
    ),
    Valid(
        _HEAD
        + """\
def train(loader, criterion, local_rank):
    model = DDP(build_model().cuda(local_rank), device_ids=[local_rank])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cuda")
    for x, y in loader:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = criterion(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
""",
        note="torchvision references: the optimizer steps every iteration",
    ),
    Valid(
        _HEAD
        + """\
def train(loader, criterion, scaler, use_amp):
    model = DDP(build_model())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in loader:
        loss = criterion(model(x), y)
        loss.backward()
        if use_amp:
            scaler.step(optimizer)
            scaler.update()
        else:
            optimizer.step()
        optimizer.zero_grad()
""",
        note="both branches step: every iteration",
    ),
    Valid(
        _HEAD
        + """\
import math

def train(loader, criterion):
    model = DDP(build_model())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in loader:
        loss = criterion(model(x), y)
        loss.backward()
        if math.isfinite(loss.item()):
            optimizer.step()
        optimizer.zero_grad()
""",
        note="a step skipped on non-finite loss is not accumulation",
    ),
    Valid(
        _HEAD
        + """\
import contextlib

def maybe_no_sync(model, sync):
    return contextlib.nullcontext() if sync else model.no_sync()

def train(loader, criterion, accum_steps):
    model = DDP(build_model())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for i, (x, y) in enumerate(loader):
        sync = (i + 1) % accum_steps == 0
        with maybe_no_sync(model, sync):
            loss = criterion(model(x), y)
            loss.backward()
        if sync:
            optimizer.step()
            optimizer.zero_grad()
""",
        note="no_sync through a helper of the same file",
    ),
    Valid(
        _HEAD
        + """\
def train(loader, fabric, accum_steps):
    model = DDP(build_model())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for i, batch in enumerate(loader):
        is_accumulating = (i + 1) % accum_steps != 0
        with fabric.no_sync(model, enabled=is_accumulating):
            loss = model(batch).sum()
            loss.backward()
        if not is_accumulating:
            optimizer.step()
            optimizer.zero_grad()
""",
        note="Lightning Fabric's no_sync",
    ),
    Valid(
        _HEAD
        + """\
import deepspeed

def train(loader, args):
    model_engine, optimizer, _, _ = deepspeed.initialize(args=args, model=build_model())
    for step, batch in enumerate(loader):
        loss = model_engine(batch)
        model_engine.backward(loss)
        model_engine.step()
""",
        note="DeepSpeed's engine accumulates by itself",
    ),
    Valid(
        _HEAD
        + """\
def train(loader, criterion, rank, accum_steps):
    model = DDP(build_model())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for i, (x, y) in enumerate(loader):
        loss = criterion(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        if (i + 1) % accum_steps == 0 and rank == 0:
            print(loss.item())
""",
        note="the modulo guards logging, not the step",
    ),
    Valid(
        _HEAD
        + """\
def train(loader, criterion, distributed, accum_steps):
    model = build_model()
    model = DDP(model) if distributed else model
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for i, (x, y) in enumerate(loader):
        loss = criterion(model(x), y)
        loss.backward()
        if (i + 1) % accum_steps == 0:
            optimizer.step()
            optimizer.zero_grad()
""",
        note="a conditional wrap is not tracked (documented false negative)",
    ),
    Invalid(
        _HEAD
        + """\
def train(model, loader, optimizer, criterion, scaler, accum_steps):
    for i, (x, y) in enumerate(loader):
        x = x.cuda(non_blocking=True)
        # forward in bf16
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = model(x)
            loss = criterion(out, y) / accum_steps  # average over micro-steps

        «scaler.scale(loss).backward()»
        if (i + 1) % accum_steps == 0:
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad(set_to_none=True)
"""
        + _MAIN,
        fixed="import contextlib\n\n"
        + _HEAD
        + """\
def train(model, loader, optimizer, criterion, scaler, accum_steps):
    for i, (x, y) in enumerate(loader):
        x = x.cuda(non_blocking=True)
        # forward in bf16
        is_accumulating = (i + 1) % accum_steps != 0
        with model.no_sync() if is_accumulating else contextlib.nullcontext():
            with torch.autocast("cuda", dtype=torch.bfloat16):
                out = model(x)
                loss = criterion(out, y) / accum_steps  # average over micro-steps

            scaler.scale(loss).backward()
        if (i + 1) % accum_steps == 0:
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad(set_to_none=True)
"""
        + _MAIN,
        note="the classic modulo step, DDP known through main's call; comments kept",
    ),
    Invalid(
        _HEAD
        + """\
from contextlib import nullcontext

def train(loader, args):
    model = DDP(build_model())
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    for step, batch in enumerate(loader):
        outputs = model(**batch)
        loss = outputs.loss / args.gradient_accumulation_steps
        «loss.backward()»
        if step % args.gradient_accumulation_steps == 0 or step == len(loader) - 1:
            optimizer.step()
            optimizer.zero_grad()
""",
        fixed=_HEAD
        + """\
from contextlib import nullcontext

def train(loader, args):
    model = DDP(build_model())
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    for step, batch in enumerate(loader):
        is_accumulating = not (step % args.gradient_accumulation_steps == 0 or step == len(loader) - 1)
        with model.no_sync() if is_accumulating else nullcontext():
            outputs = model(**batch)
            loss = outputs.loss / args.gradient_accumulation_steps
            loss.backward()
        if step % args.gradient_accumulation_steps == 0 or step == len(loader) - 1:
            optimizer.step()
            optimizer.zero_grad()
""",
        note="HF no_trainer style condition; nullcontext already imported by name",
    ),
    Invalid(
        _HEAD
        + """\
def train(loader, gradient_accumulation_steps, log):
    model = DDP(build_model())
    optimizer = torch.optim.AdamW(model.parameters())
    for batch in loader:
        for micro_step in range(gradient_accumulation_steps):
            loss = model(batch[micro_step], note=\"\"\"micro
  step\"\"\")
            «loss.backward()»
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
""",
        fixed="import contextlib\n\n"
        + _HEAD
        + """\
def train(loader, gradient_accumulation_steps, log):
    model = DDP(build_model())
    optimizer = torch.optim.AdamW(model.parameters())
    for batch in loader:
        for micro_step in range(gradient_accumulation_steps):
            is_accumulating = micro_step < gradient_accumulation_steps - 1
            with model.no_sync() if is_accumulating else contextlib.nullcontext():
                loss = model(batch[micro_step], note=\"\"\"micro
  step\"\"\")
                loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
""",
        note="inner micro-step loop; a multi-line string keeps its content",
    ),
    Invalid(
        _HEAD
        + """\
def train_step(model, optimizer, batch):
    micro_batches = batch.chunk(4)
    for i, mb in enumerate(micro_batches):
        «model(mb).mean().backward()»
    optimizer.step()

def main(batches):
    model = DDP(build_model())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for batch in batches:
        train_step(model, optimizer, batch)
""",
        fixed="import contextlib\n\n"
        + _HEAD
        + """\
def train_step(model, optimizer, batch):
    micro_batches = batch.chunk(4)
    for i, mb in enumerate(micro_batches):
        is_accumulating = i < len(micro_batches) - 1
        with model.no_sync() if is_accumulating else contextlib.nullcontext():
            model(mb).mean().backward()
    optimizer.step()

def main(batches):
    model = DDP(build_model())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for batch in batches:
        train_step(model, optimizer, batch)
""",
        note="micro-batches of one batch, step after the loop",
    ),
    Invalid(
        _HEAD
        + """\
def train(loader, criterion, accum):
    model = DDP(build_model())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for it, (x, y) in enumerate(loader):
        loss = criterion(model(x), y)
        «loss.backward()»
        if (it + 1) % accum:
            continue
        optimizer.step()
        optimizer.zero_grad()
""",
        fixed="import contextlib\n\n"
        + _HEAD
        + """\
def train(loader, criterion, accum):
    model = DDP(build_model())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for it, (x, y) in enumerate(loader):
        is_accumulating = (it + 1) % accum != 0
        with model.no_sync() if is_accumulating else contextlib.nullcontext():
            loss = criterion(model(x), y)
            loss.backward()
        if (it + 1) % accum:
            continue
        optimizer.step()
        optimizer.zero_grad()
""",
        note="`if ...: continue` skips the step on accumulation steps",
    ),
    Invalid(
        _HEAD
        + """\
class Trainer:
\tdef __init__(self, model, accum_steps):
\t\tself.model = DDP(model)
\t\tself.optimizer = torch.optim.AdamW(self.model.parameters())
\t\tself.accum_steps = accum_steps

\tdef fit(self, loader):
\t\tfor i, batch in enumerate(loader):
\t\t\tloss = self.model(batch).sum()
\t\t\t«loss.backward()»
\t\t\tdo_step = (i + 1) % self.accum_steps == 0
\t\t\tif do_step:
\t\t\t\tself.optimizer.step()
\t\t\t\tself.optimizer.zero_grad()
""",
        fixed="import contextlib\n\n"
        + _HEAD
        + """\
class Trainer:
\tdef __init__(self, model, accum_steps):
\t\tself.model = DDP(model)
\t\tself.optimizer = torch.optim.AdamW(self.model.parameters())
\t\tself.accum_steps = accum_steps

\tdef fit(self, loader):
\t\tfor i, batch in enumerate(loader):
\t\t\tis_accumulating = (i + 1) % self.accum_steps != 0
\t\t\twith self.model.no_sync() if is_accumulating else contextlib.nullcontext():
\t\t\t\tloss = self.model(batch).sum()
\t\t\t\tloss.backward()
\t\t\tdo_step = (i + 1) % self.accum_steps == 0
\t\t\tif do_step:
\t\t\t\tself.optimizer.step()
\t\t\t\tself.optimizer.zero_grad()
""",
        note="tab indentation; a flag computed after the backward is read from its assignment",
    ),
    Invalid(
        _HEAD
        + """\
def train(loader, criterion, scaler, accum_steps, clip):
    model = DDP(build_model())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for i, (x, y) in enumerate(loader):
        loss = criterion(model(x), y) / accum_steps
        if scaler is not None:
            «scaler.scale(loss).backward()»
        else:
            loss.backward()
        if (i + 1) % accum_steps == 0:
            if scaler is not None:
                scaler.step(optimizer)
                scaler.update()
            else:
                optimizer.step()
            optimizer.zero_grad()
""",
        fixed="import contextlib\n\n"
        + _HEAD
        + """\
def train(loader, criterion, scaler, accum_steps, clip):
    model = DDP(build_model())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for i, (x, y) in enumerate(loader):
        is_accumulating = (i + 1) % accum_steps != 0
        with model.no_sync() if is_accumulating else contextlib.nullcontext():
            loss = criterion(model(x), y) / accum_steps
            if scaler is not None:
                scaler.scale(loss).backward()
            else:
                loss.backward()
        if (i + 1) % accum_steps == 0:
            if scaler is not None:
                scaler.step(optimizer)
                scaler.update()
            else:
                optimizer.step()
            optimizer.zero_grad()
""",
        note="with or without a scaler: one finding per loop, the fix wraps both branches",
    ),
    Invalid(
        _HEAD
        + """\
def train(loader, scaler, use_amp, k):
    model = DDP(build_model())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for i, batch in enumerate(loader):
        if batch is None:
            continue
        if use_amp:
            with torch.autocast("cuda"):
                loss = model(batch)
            «scaler.scale(loss).backward()»
        else:
            loss = model(batch)
            loss.backward()  # plain
        if (i + 1) % k == 0:
            optimizer.step()
""",
        fixed="import contextlib\n\n"
        + _HEAD
        + """\
def train(loader, scaler, use_amp, k):
    model = DDP(build_model())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for i, batch in enumerate(loader):
        if batch is None:
            continue
        is_accumulating = (i + 1) % k != 0
        with model.no_sync() if is_accumulating else contextlib.nullcontext():
            if use_amp:
                with torch.autocast("cuda"):
                    loss = model(batch)
                scaler.scale(loss).backward()
            else:
                loss = model(batch)
                loss.backward()  # plain
        if (i + 1) % k == 0:
            optimizer.step()
""",
        note="forward and backward in both branches of an AMP switch: the fix covers both",
    ),
    Invalid(
        _HEAD
        + """\
def train(loader, criterion, should_step):
    model = DDP(build_model())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for i, (x, y) in enumerate(loader):
        «criterion(model(x), y).backward()»
        if should_step(i):
            optimizer.step()
            optimizer.zero_grad()
""",
        fixed=None,
        note="the step condition calls a function: no fix rather than evaluating it twice",
    ),
    Invalid(
        _HEAD
        + """\
def train(loader, criterion, accum_steps):
    model = DDP(build_model())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in loader:
        for chunk_x, chunk_y in zip(x.chunk(accum_steps), y.chunk(accum_steps)):
            «criterion(model(chunk_x), chunk_y).backward()»
        optimizer.step()
        optimizer.zero_grad()
""",
        fixed=None,
        note="micro-steps over zip(...): the last one cannot be told in advance, no fix",
    ),
    Invalid(
        _HEAD
        + """\
def train(loader, criterion, accum):
    model = DDP(build_model())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for i, (x, y) in enumerate(loader):
        if i > 0 and i % accum == 0:
            optimizer.step()
            optimizer.zero_grad()
        «criterion(model(x), y).backward()»
""",
        fixed=None,
        note="the step at the top of the next iteration: the condition is one step late, no fix",
    ),
    Invalid(
        _HEAD
        + """\
def train(loader, criterion, accum, max_steps):
    model = DDP(build_model())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    step = 0
    while step < max_steps:
        x, y = next(loader)
        «criterion(model(x), y).backward()»
        step += 1
        if step % accum == 0:
            optimizer.step()
            optimizer.zero_grad()
""",
        fixed=None,
        note="the counter changes after the backward: the condition cannot be hoisted, no fix",
    ),
    Invalid(
        """\
class Trainer:
    def __init__(self, accelerator, net, data, lr, accum_every):
        self.accelerator = accelerator
        self.opt = torch.optim.Adam(net.parameters(), lr=lr)
        self.net, self.opt = self.accelerator.prepare(net, self.opt)
        self.data = data
        self.accum_every = accum_every

    def train(self, steps):
        for _ in range(steps):
            for _ in range(self.accum_every):
                loss = self.net(next(self.data)) / self.accum_every
                «self.accelerator.backward(loss)»
            self.opt.step()
            self.opt.zero_grad()
""",
        note="accelerate: hand-written micro-step loop without accelerator.accumulate (M2)",
    ),
    Invalid(
        """\
def fit(fabric, model, optimizer, loader, accum):
    model, optimizer = fabric.setup(model, optimizer)
    for i, batch in enumerate(loader):
        loss = model(batch).mean() / accum
        «fabric.backward(loss)»
        if (i + 1) % accum == 0:
            optimizer.step()
            optimizer.zero_grad()
""",
        note="Lightning Fabric's backward with a modulo step and no fabric.no_sync",
    ),
    Valid(
        """\
from accelerate import Accelerator

def train(net, data, opt, accum_every, steps):
    accelerator = Accelerator()
    net, opt = accelerator.prepare(net, opt)
    for _ in range(steps):
        for i in range(accum_every):
            with accelerator.no_sync(net) if i < accum_every - 1 else contextlib.nullcontext():
                accelerator.backward(net(next(data)) / accum_every)
        opt.step()
        opt.zero_grad()
""",
        note="accelerate: the micro-steps skip the sync with accelerator.no_sync",
    ),
    Valid(
        """\
import deepspeed

def train(args, net, data, accum_every, steps):
    engine, opt, _, _ = deepspeed.initialize(args=args, model=net)
    for _ in range(steps):
        for _ in range(accum_every):
            loss = engine(next(data))
            engine.backward(loss)
        opt.step()
""",
        note="DeepSpeed's engine accumulates and skips the sync by itself: the rule is moot",
    ),
    Valid(
        """\
from accelerate import Accelerator

def train(net, data, opt, steps):
    accelerator = Accelerator()
    net, opt = accelerator.prepare(net, opt)
    for _ in range(steps):
        accelerator.backward(net(next(data)))
        opt.step()
        opt.zero_grad()
""",
        note="accelerate without accumulation: every backward is followed by a step",
    ),
    Invalid(
        _HEAD
        + """\
from timm.utils import NativeScaler

def train_epoch(model, loader, optimizer, accum):
    scaler_fn = NativeScaler()
    for it, (x, y) in enumerate(loader):
        with torch.autocast("cuda"):
            loss = torch.nn.functional.mse_loss(model(x), y) / accum
        «scaler_fn(loss, optimizer, parameters=model.parameters(), update_grad=(it + 1) % accum == 0)»
        if (it + 1) % accum == 0:
            optimizer.zero_grad()

def main(local_rank, loader):
    model = DDP(build_model().cuda(local_rank), device_ids=[local_rank])
    train_epoch(model, loader, torch.optim.AdamW(model.parameters()), 8)
""",
        note="timm's NativeScaler (the tables' scaler-wrapper) with update_grad=, file alone",
    ),
    Invalid(
        _HEAD
        + """\
class NativeScalerWithGradNormCount:
    def __init__(self):
        self._scaler = torch.amp.GradScaler("cuda")

    def __call__(self, loss, optimizer, parameters=None, update_grad=True):
        self._scaler.scale(loss).backward()
        if update_grad:
            self._scaler.unscale_(optimizer)
            self._scaler.step(optimizer)
            self._scaler.update()

def fit(model, batches, optimizer, k):
    amp = NativeScalerWithGradNormCount()
    for n, b in enumerate(batches):
        loss = model(b).sum() / k
        «amp(loss, optimizer, parameters=model.parameters(), update_grad=(n + 1) % k == 0)»

def main(local_rank, batches):
    model = DDP(build_model().cuda(local_rank), device_ids=[local_rank])
    fit(model, batches, torch.optim.SGD(model.parameters(), lr=0.1), 4)
""",
        note="the scaler wrapper copied into the project under its timm name",
    ),
    Valid(
        """\
def fit(fabric, model, optimizer, loader, accum):
    model, optimizer = fabric.setup(model, optimizer)
    for i, batch in enumerate(loader):
        accumulating = (i + 1) % accum != 0
        with fabric.no_backward_sync(model, enabled=accumulating):
            fabric.backward(model(batch).mean() / accum)
        if not accumulating:
            optimizer.step()
            optimizer.zero_grad()
""",
        note="Lightning Fabric's no_backward_sync (the table's skips-grad-sync)",
    ),
    Invalid(
        _HEAD
        + """\
class DiffusionTrainer:
    def __init__(self, model, opt, micro, local_rank):
        self.ddp_model = DDP(model.cuda(local_rank), device_ids=[local_rank])
        self.opt = opt
        self.micro = micro

    def run_step(self, batch):
        self.forward_backward(batch)
        self.opt.step()
        self.opt.zero_grad()

    def forward_backward(self, batch):
        for i in range(0, batch.shape[0], self.micro):
            loss = self.ddp_model(batch[i : i + self.micro]).mean()
            «loss.backward()»
""",
        fixed=None,
        note="M16: the micro-batch loop of one batch, the step in the calling method",
    ),
    Invalid(
        _HEAD
        + """\
import functools

class DiffusionTrainer:
    def __init__(self, model, mp_trainer, micro, local_rank):
        self.ddp_model = DDP(model.cuda(local_rank), device_ids=[local_rank])
        self.mp_trainer = mp_trainer
        self.micro = micro

    def forward_backward(self, batch, losses_of):
        for i in range(0, batch.shape[0], self.micro):
            micro = batch[i : i + self.micro]
            compute = functools.partial(losses_of, self.ddp_model, micro)
            loss = compute().mean()
            «self.mp_trainer.backward(loss)»
""",
        fixed=None,
        note="M16: a mixed-precision helper's backward (the tables' mp_trainer.backward), "
        "the forward bound with functools.partial",
    ),
    Valid(
        _HEAD
        + """\
class DiffusionTrainer:
    def __init__(self, model, mp_trainer, micro, local_rank):
        self.ddp_model = DDP(model.cuda(local_rank), device_ids=[local_rank])
        self.mp_trainer = mp_trainer
        self.micro = micro

    def forward_backward(self, batch):
        for i in range(0, batch.shape[0], self.micro):
            last = i + self.micro >= batch.shape[0]
            with self.ddp_model.no_sync() if not last else torch.enable_grad():
                loss = self.ddp_model(batch[i : i + self.micro]).mean()
            self.mp_trainer.backward(loss)
""",
        note="M16 with the sync skipped on all but the last micro-batch",
    ),
    Valid(
        _HEAD
        + """\
def grad_norms(model, loader):
    model = DDP(model)
    norms = []
    for x, y in loader:
        model(x).sum().backward()
        norms.append(sum(p.grad.norm() for p in model.parameters()))
        model.zero_grad()
    return norms
""",
        note="no step here and not a loop over one batch's micro-batches: not accumulation",
    ),
    Invalid(
        _HEAD
        + """\
def train(model, get_batch, optimizers, accum, steps, local_rank):
    model = DDP(model.cuda(local_rank), device_ids=[local_rank])
    for step in range(steps):
        for i in range(1, accum + 1):
            x, y = get_batch()
            loss = model(x, y)
            if i < accum:
                «loss.backward()»
            else:
                loss.backward()
        for opt in optimizers:
            opt.step()
        model.zero_grad(set_to_none=True)
""",
        fixed="import contextlib\n\n"
        + _HEAD
        + """\
def train(model, get_batch, optimizers, accum, steps, local_rank):
    model = DDP(model.cuda(local_rank), device_ids=[local_rank])
    for step in range(steps):
        for i in range(1, accum + 1):
            x, y = get_batch()
            is_accumulating = i < (accum + 1) - 1
            with model.no_sync() if is_accumulating else contextlib.nullcontext():
                loss = model(x, y)
                if i < accum:
                    loss.backward()
                else:
                    loss.backward()
        for opt in optimizers:
            opt.step()
        model.zero_grad(set_to_none=True)
""",
        note="the micro-step loop, then a loop over the optimizers (modded-nanogpt's records)",
    ),
    Invalid(
        _HEAD
        + """\
def fit(args, net, batches, opt, k):
    if args.distributed:
        net = DDP(net)
    can_skip_sync = hasattr(net, "no_sync")
    if not can_skip_sync:
        print("one process: every backward stays local")
    for n, (inputs, labels) in enumerate(batches):
        out = torch.nn.functional.mse_loss(net(inputs), labels) / k
        «out.backward()»
        if (n + 1) % k == 0:
            opt.step()
            opt.zero_grad()
""",
        fixed="import contextlib\n\n"
        + _HEAD
        + """\
def fit(args, net, batches, opt, k):
    if args.distributed:
        net = DDP(net)
    can_skip_sync = hasattr(net, "no_sync")
    if not can_skip_sync:
        print("one process: every backward stays local")
    for n, (inputs, labels) in enumerate(batches):
        is_accumulating = (n + 1) % k != 0
        with net.no_sync() if is_accumulating and hasattr(net, "no_sync") else contextlib.nullcontext():
            out = torch.nn.functional.mse_loss(net(inputs), labels) / k
            out.backward()
        if (n + 1) % k == 0:
            opt.step()
            opt.zero_grad()
""",
        note="M16: a capability check (`hasattr(net, 'no_sync')`, a flag named for it) is no "
        "use of no_sync",
    ),
    Invalid(
        _HEAD
        + """\
def epoch(net, batches, opt, k, packed):
    may_skip = hasattr(net, "no_sync")
    for n, (inputs, labels) in enumerate(batches):
        sync_now = (n + 1) % k == 0

        def run_forward():
            return torch.nn.functional.cross_entropy(net(inputs), labels) / k

        def run_backward(out):
            «out.backward()»
            if sync_now:
                opt.step()
                opt.zero_grad()

        if packed:
            out = run_forward() * inputs.shape[0]
            run_backward(out)
        elif may_skip and not sync_now:
            with net.no_sync():
                run_backward(run_forward())
        else:
            run_backward(run_forward())


def main(local_rank, batches, opt):
    net = DDP(torch.nn.Linear(8, 8).cuda(local_rank), device_ids=[local_rank])
    epoch(net, batches, opt, 4, packed=True)
""",
        fixed=None,
        note="M16: forward and backward in closures of the loop; one mode's forward runs "
        "outside the no_sync the other mode enters",
    ),
    Valid(
        _HEAD
        + """\
def epoch(net, batches, opt, k, packed):
    may_skip = hasattr(net, "no_sync")
    for n, (inputs, labels) in enumerate(batches):
        sync_now = (n + 1) % k == 0

        def run_forward():
            return torch.nn.functional.cross_entropy(net(inputs), labels) / k

        def run_backward(out):
            out.backward()
            if sync_now:
                opt.step()
                opt.zero_grad()

        if may_skip and not sync_now:
            with net.no_sync():
                out = run_forward() * (inputs.shape[0] if packed else 1)
                run_backward(out)
        else:
            out = run_forward() * (inputs.shape[0] if packed else 1)
            run_backward(out)


def main(local_rank, batches, opt):
    net = DDP(torch.nn.Linear(8, 8).cuda(local_rank), device_ids=[local_rank])
    epoch(net, batches, opt, 4, packed=True)
""",
        note="M16: an if on the accumulation condition chooses no_sync or the plain path (the "
        "flag-guarded form of `no_sync() if acc else nullcontext()`)",
    ),
    Invalid(
        _HEAD
        + """\
def train(model, next_batch, optimizer, micro_steps, local_rank):
    model = DDP(model.cuda(local_rank), device_ids=[local_rank])
    while True:
        for m in range(micro_steps):
            inputs, targets = next_batch()
            loss = torch.nn.functional.cross_entropy(model(inputs), targets)
            if m < micro_steps - 1:
                with model.no_sync():
                    «loss.backward()»
            else:
                loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
""",
        fixed=None,
        note="no_sync around the backward alone: DDP's forward, outside it, already prepared "
        "the all-reduce (the reducer's hooks fire in that backward whatever the flag says)",
    ),
    Invalid(
        _HEAD
        + """\
def all_forward_all_backward(stage, chunks, local_rank):
    stage = DDP(stage.cuda(local_rank), device_ids=[local_rank])
    pending = []
    for k in range(len(chunks)):
        pending.append(stage(chunks[k]).float().mean())
    for k in range(len(chunks)):
        out = pending[k]
        «out.backward()»
""",
        fixed=None,
        note="all forwards, then all backwards: each forward prepared an all-reduce",
    ),
    Valid(
        _HEAD
        + """\
def all_forward_all_backward(stage, chunks, local_rank):
    stage = DDP(stage.cuda(local_rank), device_ids=[local_rank])
    pending = []
    for k in range(len(chunks)):
        with stage.no_sync() if k < len(chunks) - 1 else torch.enable_grad():
            pending.append(stage(chunks[k]).float().mean())
    for out in pending:
        out.backward()
""",
        note="the forwards ran under no_sync (all but the last): their backwards, outside it, "
        "do not all-reduce",
    ),
    Invalid(
        _HEAD
        + """\
import contextlib

def train(model, get_batch, optimizer, micro, local_rank):
    model = DDP(model.cuda(local_rank), device_ids=[local_rank])
    for m in range(micro):
        x, y = get_batch()
        sync_ctx = model.no_sync() if m < micro - 1 else contextlib.nullcontext()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(x, y)
        «loss.backward()»
    optimizer.step()
    optimizer.zero_grad()
""",
        fixed=_HEAD
        + """\
import contextlib

def train(model, get_batch, optimizer, micro, local_rank):
    model = DDP(model.cuda(local_rank), device_ids=[local_rank])
    for m in range(micro):
        x, y = get_batch()
        sync_ctx = model.no_sync() if m < micro - 1 else contextlib.nullcontext()
        is_accumulating = m < micro - 1
        with model.no_sync() if is_accumulating else contextlib.nullcontext():
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = model(x, y)
            loss.backward()
    optimizer.step()
    optimizer.zero_grad()
""",
        note="a no_sync context made and never entered skips nothing",
    ),
    Valid(
        _HEAD
        + """\
import contextlib

def train(model, get_batch, optimizer, micro, local_rank):
    model = DDP(model.cuda(local_rank), device_ids=[local_rank])
    for m in range(micro):
        x, y = get_batch()
        sync_ctx = contextlib.nullcontext
        if m < micro - 1:
            sync_ctx = model.no_sync
        with sync_ctx():
            loss = model(x, y)
            loss.backward()
    optimizer.step()
    optimizer.zero_grad()
""",
        note="the context chosen by name, entered as `with sync_ctx():`",
    ),
    Invalid(
        _HEAD
        + """\
import contextlib
from accelerate import Accelerator


def train(net, opt, batches_of_steps):
    accelerator = Accelerator()
    net, opt, batches_of_steps = accelerator.prepare(net, opt, batches_of_steps)
    for micro_batches in batches_of_steps:
        for j, mb in enumerate(micro_batches):
            skip = net.no_sync if j + 1 < len(micro_batches) else contextlib.nullcontext
            with torch.autocast("cuda"):
                out = net(**mb).loss
                «accelerator.backward(out)»
        opt.step()
        opt.zero_grad()
""",
        fixed=None,
        note="a framework backward; the no_sync context chosen for the micro-step is never entered",
    ),
    Valid(
        _HEAD
        + """\
import contextlib
from accelerate import Accelerator


def train(net, opt, batches_of_steps):
    accelerator = Accelerator()
    net, opt, batches_of_steps = accelerator.prepare(net, opt, batches_of_steps)
    for micro_batches in batches_of_steps:
        for j, mb in enumerate(micro_batches):
            skip = net.no_sync if j + 1 < len(micro_batches) else contextlib.nullcontext
            with skip(), torch.autocast("cuda"):
                out = net(**mb).loss
                accelerator.backward(out)
        opt.step()
        opt.zero_grad()
""",
        note="a framework backward under the chosen context (`with skip(), autocast():`)",
    ),
    Valid(
        _HEAD
        + """\
import functools

class Denoiser:
    def __init__(self, net, micro, local_rank, distributed):
        self.ddp_net = DDP(net.cuda(local_rank), device_ids=[local_rank])
        self.micro = micro
        self.distributed = distributed

    def accumulate(self, images, objective):
        for s in range(0, images.shape[0], self.micro):
            chunk = images[s : s + self.micro]
            final = s + self.micro >= images.shape[0]
            run = functools.partial(objective, self.ddp_net, chunk)
            if final or not self.distributed:
                terms = run()
            else:
                with self.ddp_net.no_sync():
                    terms = run()
            terms.mean().backward()
""",
        note="the forward bound with functools.partial runs where it is called: under no_sync "
        "on all but the final chunk (an if on the boundary, with a mode flag)",
    ),
)
