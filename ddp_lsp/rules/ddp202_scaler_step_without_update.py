"""DDP202 scaler-step-without-update.

## What it does
Finds a training loop that calls `scaler.step(optimizer)` on a `GradScaler` but never calls
`scaler.update()` in the same iteration (it is missing, or it runs only once after the loop),
and a second `scaler.update()` after the last step of an iteration.

## Why is this bad?
`scaler.update()` closes the iteration: it adjusts the loss scale (backing off after inf/NaN
gradients, growing it after a run of clean steps) and resets the per-optimizer state that
`scaler.step` records. Without it the second `scaler.step(optimizer)` raises
`RuntimeError: step() has already been called since the last update()`, and with the scaler
disabled (`enabled=False`) the bug waits silently for the day AMP is turned on. An update that
runs once per epoch instead of once per iteration has the same problem. Exactly one
`scaler.update()` belongs after the last `scaler.step(...)` of each iteration (after all
optimizers have stepped when there are several).

## Example
```python
for x, y in loader:
    with torch.autocast("cuda"):
        loss = model(x).sum()
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    optimizer.zero_grad()
```

## Use instead
```python
for x, y in loader:
    with torch.autocast("cuda"):
        loss = model(x).sum()
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad()
```

## Fix
Inserts `scaler.update()` on the line after the last `scaler.step(...)` of the iteration, with
the scaler's name as the code spells it. When the only `scaler.update()` sits after the loop,
the fix moves it there instead (a second update without a step in between raises). A second
update after the step is removed. When the steps sit in different branches, no fix is offered:
where the update belongs is a decision.

## Known false positives
Loops are checked, and a step on a path of the iteration that no update is on (the update
sits in the other branch of `if accumulating: ... else: ...`). A function without a loop may
leave the update to its caller (`train_step(model, batch, opt, scaler)`), so it is not
reported, except a method stepping the GradScaler its own object holds (`self._scaler`, the
timm `NativeScaler.__call__` shape) in a module where nothing updates a GradScaler: no caller
can close that iteration short of reaching into the object. The rule stays quiet when the
scaler is handed to a function after the step (or to one whose project summary does not say
it never updates a scaler), or when a helper that updates a GradScaler and can reach this one
(a method using `self.scaler`, a closure naming it) is called after the step; a helper that
never updates a scaler (a learning-rate schedule) hides nothing. An update before the step of
the same iteration raises, so calls there cannot hold the right one. With the project view, an instance of
a project class that wraps a GradScaler and unscales or updates it in its own methods (timm's
`NativeScaler`, `NativeScalerWithGradNormCount`) is not a GradScaler: its `step` is not
reported.

Any module: the bug is a bug in a single-process script too, so this rule runs in every
module (`RuleMeta.any_module`), also in one that is not distributed code at all (a single-GPU
script, a benchmark, a test), where no other rule runs, and in a project it reports in the
functions no distributed entry point reaches (a tokenizer, a plotting script, an export tool),
where the rules that need several ranks are silent.

## References
- https://pytorch.org/docs/stable/amp.html#torch.amp.GradScaler.update
- https://pytorch.org/docs/stable/notes/amp_examples.html
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from ddp_lsp.core import chunktext
from ddp_lsp.core import edits as text_edits
from ddp_lsp.core import facts as fact_model
from ddp_lsp.core.rule import ChunkContext, Invalid, Rule, Valid
from ddp_lsp.core.types import Finding, Fix, FixAvailability, Related, RuleMeta, Severity
from ddp_lsp.rules import _amp as amp
from ddp_lsp.rules import _patterns as patterns

_TRIGGERS = frozenset({"step"})


class ScalerStepWithoutUpdate(Rule):
    meta = RuleMeta(
        id="DDP202",
        name="scaler-step-without-update",
        severity=Severity.ERROR,
        summary="scaler.step() without scaler.update() in the same iteration.",
        fix=FixAvailability.SOMETIMES,
        any_module=True,
    )

    def triggers(self, ctx: ChunkContext) -> frozenset[str]:
        return _TRIGGERS  # every finding starts from a `scaler.step(...)` (core/triggers.py)

    def check(self, ctx: ChunkContext) -> Iterator[Finding]:
        seen: set[tuple[int, str]] = set()
        for call in ctx.calls():
            if patterns.method_call(call, "step") is None or not call.args:
                continue
            root = patterns.scope_root(ctx, call)
            scaler = amp.receiver(call)
            if not amp.is_scaler(ctx, scaler, root):
                continue
            loop = amp.iteration_loop(ctx, call)
            if loop is None:
                key = (id(root), ast.dump(scaler))
                if key not in seen:
                    seen.add(key)
                    finding = self._method_without_update(ctx, root, scaler, call)
                    if finding is not None:
                        yield finding
                continue
            key = (id(loop), ast.dump(scaler))
            if key in seen:
                continue
            seen.add(key)
            steps = amp.scaler_calls(ctx, loop, root, "step", scaler)
            updates = amp.scaler_calls(ctx, loop, root, "update", scaler)
            if updates:
                extra = self._extra_update(ctx, steps[-1], updates)
                if extra is not None:
                    yield self._duplicate(ctx, scaler, *extra)
                # A step on a path of the iteration that no update is on (the update sits
                # in the other branch of `if accumulating: ... else: ...`).
                steps = [s for s in steps if all(amp.exclusive(ctx, s, u) for u in updates)]
                if not steps:
                    continue
            last = steps[-1]
            if amp.scaler_escapes(ctx, scaler, loop, root, after=last):
                continue
            yield self._finding(ctx, root, loop, scaler, steps, last, updates)

    def _method_without_update(
        self, ctx: ChunkContext, root: ast.AST, scaler: ast.expr, call: ast.Call
    ) -> Finding | None:
        """A method without a loop that steps the GradScaler its object owns (``self.scaler``),
        called once per iteration by its caller (a timm-style ``NativeScaler.__call__``, a
        trainer's ``_run_batch``), in a module where nothing updates a GradScaler: no caller
        can close the iteration short of reaching into the object (``obj.scaler.update()``)."""
        if not (
            isinstance(root, (ast.FunctionDef, ast.AsyncFunctionDef))
            and isinstance(scaler, ast.Attribute)
            and isinstance(scaler.value, ast.Name)
            and scaler.value.id == "self"
            and ctx.scope(call)[1] is not None
        ):
            return None
        if amp.scaler_calls(ctx, root, root, "update", scaler):
            return None
        if fact_model.UPDATES_SCALER in ctx.facts.prop_set:
            return None  # a method or helper of this module updates a scaler: maybe this one
        steps = amp.scaler_calls(ctx, root, root, "step", scaler)
        if not steps or amp.scaler_escapes(ctx, scaler, root, root, after=steps[-1]):
            return None
        return self._finding(ctx, root, root, scaler, steps, steps[-1], [])

    @staticmethod
    def _extra_update(
        ctx: ChunkContext, last_step: ast.Call, updates: list[ast.Call]
    ) -> tuple[ast.Call, ast.Call] | None:
        """(first, second) when two updates follow the last step in one block."""
        after = [u for u in updates if patterns.before(last_step, u)]
        for first, second in zip(after, after[1:], strict=False):
            s1, s2 = ctx.statement(first), ctx.statement(second)
            if ctx.block_of(s1)[0] is ctx.block_of(s2)[0] and not amp.exclusive(ctx, first, second):
                return first, second
        return None

    def _duplicate(
        self, ctx: ChunkContext, scaler: ast.expr, first: ast.Call, second: ast.Call
    ) -> Finding:
        s = chunktext.segment(ctx.chunk, scaler)
        fixes = []
        stmt = amp.expr_stmt_of(ctx, second)
        if stmt is not None and amp.can_delete(ctx, stmt):
            fixes.append(
                Fix(
                    title=f"Remove the second {s}.update()",
                    edits=(text_edits.delete_stmt(ctx, stmt),),
                    safe=True,
                    preferred=True,
                )
            )
        return ctx.finding(
            self,
            second,
            f"`{s}.update()` is called a second time in the same iteration: it finds no "
            f"inf/NaN checks from `{s}.step(...)` and raises; keep exactly one update",
            fixes=fixes,
            related=(Related(chunktext.span(ctx.chunk, first), "the first update"),),
            cite=(ctx.kind_source(scaler, second),),
        )

    @staticmethod
    def _anchor(ctx: ChunkContext, step: ast.Call, loop: ast.AST) -> ast.stmt:
        """The statement after which the update goes: the step itself, or the outermost loop
        over optimizers around it inside the iteration (never inside that loop)."""
        anchor = ctx.statement(step)
        for a in ctx.ancestors(step):
            if a is loop:
                break
            if amp.is_loop(a):
                anchor = a  # type: ignore[assignment]
        return anchor

    def _finding(
        self,
        ctx: ChunkContext,
        root: ast.AST,
        loop: ast.AST,
        scaler: ast.expr,
        steps: list[ast.Call],
        last: ast.Call,
        other_paths: list[ast.Call],
    ) -> Finding:
        s = chunktext.segment(ctx.chunk, scaler)
        later = [
            u
            for u in amp.scaler_calls(ctx, root, root, "update", scaler)
            if patterns.before(loop, u) and not amp.inside(ctx, u, loop)
        ]
        fixes: list[Fix] = []
        stmts = [self._anchor(ctx, c, loop) for c in steps]
        last_stmt: ast.stmt | None = stmts[-1]
        if last_stmt is ctx.statement(last):
            last_stmt = amp.expr_stmt_of(ctx, last)
        elif last_stmt is not None and not amp.owns_lines(ctx, last_stmt):
            last_stmt = None
        related: list[Related] = []
        if last_stmt is not None and amp.same_block(ctx, stmts):
            if len(later) == 1:
                moved = amp.expr_stmt_of(ctx, later[0])
                related.append(
                    Related(chunktext.span(ctx.chunk, later[0]), "runs once after the loop")
                )
                if moved is not None and amp.can_delete(ctx, moved):
                    fixes.append(
                        Fix(
                            title=f"Move {s}.update() after {s}.step(...) into the loop",
                            edits=(
                                text_edits.insert_after(
                                    ctx, last_stmt, amp.stmt_source(ctx, moved)
                                ),
                                text_edits.delete_stmt(ctx, moved),
                            ),
                            safe=True,
                            preferred=True,
                        )
                    )
            elif not later:
                fixes.append(
                    Fix(
                        title=f"Insert {s}.update() after {s}.step(...)",
                        edits=(text_edits.insert_after(ctx, last_stmt, f"{s}.update()"),),
                        safe=True,
                        preferred=True,
                    )
                )
        where = "only after the loop" if later else "nowhere in the loop"
        if loop is root:
            where = "nowhere in this class or module"
        if other_paths:
            where = "only on another branch of the iteration"
            related.append(
                Related(chunktext.span(ctx.chunk, other_paths[0]), "the update of the other branch")
            )
        return ctx.finding(
            self,
            last,
            f"`{s}.step(...)` runs every iteration but `{s}.update()` is called {where}: "
            f"call `{s}.update()` once per iteration after the last `{s}.step(...)`, or the "
            "next step raises and the loss scale never adapts",
            fixes=fixes,
            related=related,
            cite=(ctx.kind_source(scaler, last),),
        )


_HEAD = """\
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

"""

ScalerStepWithoutUpdate.cases = (
    Valid(
        _HEAD
        + """\
def train(model, loader, optimizer, scaler):
    for x, y in loader:
        with torch.autocast("cuda"):
            loss = model(x).sum()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
""",
        note="the documented loop",
    ),
    Valid(
        _HEAD
        + """\
def train(model, loader, opt_g, opt_d, scaler):
    for x, y in loader:
        scaler.scale(model(x).sum()).backward()
        scaler.step(opt_g)
        scaler.step(opt_d)
        scaler.update()
""",
        note="several optimizers, one update after the last step (PyTorch AMP examples)",
    ),
    Valid(
        _HEAD
        + """\
def train(model, loader, optimizers, scaler):
    for x, y in loader:
        scaler.scale(model(x).sum()).backward()
        for opt in optimizers:
            scaler.step(opt)
        scaler.update()
""",
        note="a loop over the optimizers is not an iteration",
    ),
    Valid(
        _HEAD
        + """\
def train(model, loader, optimizer, scaler, accum_steps):
    for i, (x, y) in enumerate(loader):
        with torch.autocast("cuda"):
            loss = model(x).sum() / accum_steps
        scaler.scale(loss).backward()
        if (i + 1) % accum_steps == 0:
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad()
""",
        note="gradient accumulation: step and update together every k-th micro-batch",
    ),
    Valid(
        _HEAD
        + """\
def train(model, get_batch, optimizer, scaler, grad_accum, grad_clip):
    while True:
        for micro_step in range(grad_accum):
            model.require_backward_grad_sync = micro_step == grad_accum - 1
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = model(get_batch()).sum() / grad_accum
            scaler.scale(loss).backward()
        if grad_clip != 0.0:
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
""",
        note="nanoGPT's loop",
    ),
    Valid(
        _HEAD
        + """\
class Trainer:
    def __init__(self, model, optimizer):
        self.model = DDP(model)
        self.optimizer = optimizer
        self.scaler = torch.amp.GradScaler("cuda")

    def _finish_step(self):
        self.scaler.update()
        self.optimizer.zero_grad()

    def fit(self, loader):
        for x, y in loader:
            self.scaler.scale(self.model(x).sum()).backward()
            self.scaler.step(self.optimizer)
            self._finish_step()
""",
        note="the update happens in a same-class helper",
    ),
    Valid(
        _HEAD
        + """\
from mylib.amp import finish_amp_step

def train(model, loader, optimizer, scaler):
    for x, y in loader:
        scaler.scale(model(x).sum()).backward()
        scaler.step(optimizer)
        finish_amp_step(scaler)
""",
        note="the scaler is handed to another function that may update it",
    ),
    Valid(
        _HEAD
        + """\
def train_step(model, batch, optimizer, scaler):
    scaler.scale(model(batch).sum()).backward()
    scaler.step(optimizer)
""",
        note="no loop: the caller may update (not visible here)",
    ),
    Valid(
        _HEAD
        + """\
def train(model, loader, optimizer, scheduler, scaler):
    for x, y in loader:
        loss = model(x).sum()
        loss.backward()
        optimizer.step()
        scheduler.step()
""",
        note="no GradScaler at all: optimizer.step and scheduler.step are not scaler steps",
    ),
    Valid(
        _HEAD
        + """\
def train(model, loader, optimizer, scaler, use_amp):
    for x, y in loader:
        loss = model(x).sum()
        if use_amp:
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        else:
            loss.backward()
            optimizer.step()
""",
        note="torchvision references: scaler and plain paths side by side",
    ),
    Invalid(
        _HEAD
        + """\
def train(model, loader, optimizer, scaler):
    for x, y in loader:
        with torch.autocast("cuda"):
            loss = model(x).sum()
        scaler.scale(loss).backward()
        «scaler.step(optimizer)»  # apply the update
        optimizer.zero_grad()
""",
        fixed=_HEAD
        + """\
def train(model, loader, optimizer, scaler):
    for x, y in loader:
        with torch.autocast("cuda"):
            loss = model(x).sum()
        scaler.scale(loss).backward()
        scaler.step(optimizer)  # apply the update
        scaler.update()
        optimizer.zero_grad()
""",
        note="update missing; the trailing comment stays on its line",
    ),
    Invalid(
        _HEAD
        + """\
def train(model, loader, optimizer, scaler, epochs):
    for epoch in range(epochs):
        for x, y in loader:
            scaler.scale(model(x).sum()).backward()
            «scaler.step(optimizer)»
        # once per epoch
        scaler.update()
        print(epoch)
""",
        fixed=_HEAD
        + """\
def train(model, loader, optimizer, scaler, epochs):
    for epoch in range(epochs):
        for x, y in loader:
            scaler.scale(model(x).sum()).backward()
            scaler.step(optimizer)
            scaler.update()
        # once per epoch
        print(epoch)
""",
        note="update only after the loop: the fix moves it into the iteration",
    ),
    Invalid(
        _HEAD
        + """\
class Trainer:
    def __init__(self, model, opt_g, opt_d):
        self.model = DDP(model)
        self.opt_g, self.opt_d = opt_g, opt_d
        self.scaler = torch.cuda.amp.GradScaler()

    def fit(self, loader, accum):
        for i, batch in enumerate(loader):
            self.scaler.scale(self.model(batch).sum()).backward()
            if i % accum == 0:
                self.scaler.step(self.opt_g)
                «self.scaler.step(self.opt_d)»
""",
        fixed=_HEAD
        + """\
class Trainer:
    def __init__(self, model, opt_g, opt_d):
        self.model = DDP(model)
        self.opt_g, self.opt_d = opt_g, opt_d
        self.scaler = torch.cuda.amp.GradScaler()

    def fit(self, loader, accum):
        for i, batch in enumerate(loader):
            self.scaler.scale(self.model(batch).sum()).backward()
            if i % accum == 0:
                self.scaler.step(self.opt_g)
                self.scaler.step(self.opt_d)
                self.scaler.update()
""",
        note="attribute scaler, two optimizers: one update after the last step",
    ),
    Invalid(
        _HEAD
        + """\
def train(model, loader, optimizers, scaler):
    for x, y in loader:
        scaler.scale(model(x).sum()).backward()
        for opt in optimizers:
            «scaler.step(opt)»
        log(x)
""",
        fixed=_HEAD
        + """\
def train(model, loader, optimizers, scaler):
    for x, y in loader:
        scaler.scale(model(x).sum()).backward()
        for opt in optimizers:
            scaler.step(opt)
        scaler.update()
        log(x)
""",
        note="steps in a loop over optimizers: one update after that loop",
    ),
    Invalid(
        _HEAD
        + """\
def train(model, loader, optimizer, scaler):
    for x, y in loader:
        scaler.scale(model(x).sum()).backward()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
        «scaler.update()»  # keep the scale fresh
""",
        fixed=_HEAD
        + """\
def train(model, loader, optimizer, scaler):
    for x, y in loader:
        scaler.scale(model(x).sum()).backward()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
""",
        note="a second update in the same iteration raises: removed",
    ),
    Valid(
        _HEAD
        + """\
class AmpStep:
    def __init__(self):
        self._scaler = torch.amp.GradScaler("cuda")

    def __call__(self, loss, optimizer):
        self._scaler.scale(loss).backward()
        self._scaler.step(optimizer)

    def end_iteration(self):
        self._scaler.update()
""",
        note="a loss-scaler class whose iteration ends in another method: the caller calls it",
    ),
    Valid(
        _HEAD
        + """\
def train(model, loader, optimizer, scaler, accum):
    for i, (x, y) in enumerate(loader):
        scaler.scale(model(x).sum()).backward()
        if (i + 1) % accum == 0:
            scaler.step(optimizer)
        else:
            continue
        scaler.update()
""",
        note="the update after the branch runs on the path of the step",
    ),
    Invalid(
        _HEAD
        + """\
def lr_at(step, base):
    return base * min(1.0, step / 100)

def train(model, loader, optimizer, scaler, base_lr):
    for step, (x, y) in enumerate(loader):
        for group in optimizer.param_groups:
            group["lr"] = lr_at(step, base_lr)
        scaler.scale(model(x).sum()).backward()
        «scaler.step(optimizer)»
        optimizer.zero_grad()
""",
        fixed=_HEAD
        + """\
def lr_at(step, base):
    return base * min(1.0, step / 100)

def train(model, loader, optimizer, scaler, base_lr):
    for step, (x, y) in enumerate(loader):
        for group in optimizer.param_groups:
            group["lr"] = lr_at(step, base_lr)
        scaler.scale(model(x).sum()).backward()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
""",
        note="M3: a same-file helper that never touches a scaler does not hide the update",
    ),
    Invalid(
        _HEAD
        + """\
def train(model, loader, optimizer, epochs, warmup):
    scaler = torch.amp.GradScaler("cuda")

    def warm(epoch):
        return min(1.0, (epoch + 1) / warmup)

    for epoch in range(epochs):
        for x, y in loader:
            optimizer.param_groups[0]["lr"] = warm(epoch)
            scaler.scale(model(x).sum()).backward()
            «scaler.step(optimizer)»
""",
        fixed=_HEAD
        + """\
def train(model, loader, optimizer, epochs, warmup):
    scaler = torch.amp.GradScaler("cuda")

    def warm(epoch):
        return min(1.0, (epoch + 1) / warmup)

    for epoch in range(epochs):
        for x, y in loader:
            optimizer.param_groups[0]["lr"] = warm(epoch)
            scaler.scale(model(x).sum()).backward()
            scaler.step(optimizer)
            scaler.update()
""",
        note="a closure that does not name the scaler cannot update it",
    ),
    Invalid(
        _HEAD
        + """\
def views_loss(model, views, scaler):
    with torch.autocast("cuda", enabled=scaler.is_enabled()):
        return sum(model(v).sum() for v in views)

def train(model, loader, optimizer, scaler):
    for views in loader:
        scaler.scale(views_loss(model, views, scaler)).backward()
        «scaler.step(optimizer)»
        optimizer.zero_grad()
""",
        fixed=_HEAD
        + """\
def views_loss(model, views, scaler):
    with torch.autocast("cuda", enabled=scaler.is_enabled()):
        return sum(model(v).sum() for v in views)

def train(model, loader, optimizer, scaler):
    for views in loader:
        scaler.scale(views_loss(model, views, scaler)).backward()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
""",
        note="the scaler handed to a helper before the step: an update there would come "
        "before the step, and this helper updates nothing",
    ),
    Invalid(
        _HEAD
        + """\
def train(model, loader, optimizer, scaler, accum):
    for i, (x, y) in enumerate(loader):
        if accum > 1:
            scaler.scale(model(x).sum() / accum).backward()
            if (i + 1) % accum == 0:
                «scaler.step(optimizer)»
                optimizer.zero_grad()
        else:
            scaler.scale(model(x).sum()).backward()
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad()
""",
        fixed=_HEAD
        + """\
def train(model, loader, optimizer, scaler, accum):
    for i, (x, y) in enumerate(loader):
        if accum > 1:
            scaler.scale(model(x).sum() / accum).backward()
            if (i + 1) % accum == 0:
                scaler.step(optimizer)
                scaler.update()
                optimizer.zero_grad()
        else:
            scaler.scale(model(x).sum()).backward()
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad()
""",
        note="the only update is on the other branch of the iteration",
    ),
    Invalid(
        _HEAD
        + """\
class LossScaler:
    def __init__(self):
        self._scaler = torch.amp.GradScaler("cuda")

    def __call__(self, loss, optimizer, clip=None, params=None):
        self._scaler.scale(loss).backward()
        if clip is not None:
            self._scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(params, clip)
        «self._scaler.step(optimizer)»

    def state_dict(self):
        return self._scaler.state_dict()
""",
        fixed=_HEAD
        + """\
class LossScaler:
    def __init__(self):
        self._scaler = torch.amp.GradScaler("cuda")

    def __call__(self, loss, optimizer, clip=None, params=None):
        self._scaler.scale(loss).backward()
        if clip is not None:
            self._scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(params, clip)
        self._scaler.step(optimizer)
        self._scaler.update()

    def state_dict(self):
        return self._scaler.state_dict()
""",
        note="M4: a loss-scaler class (timm's NativeScaler shape) whose call steps and "
        "nothing in the module updates: every call is one iteration",
    ),
    Invalid(
        _HEAD
        + """\
def train(model, loader, opt_a, opt_b, scaler, which):
    for x, y in loader:
        scaler.scale(model(x).sum()).backward()
        if which:
            scaler.step(opt_a)
        else:
            «scaler.step(opt_b)»
""",
        fixed=None,
        note="steps in different branches: no fix rather than a guess",
    ),
)
