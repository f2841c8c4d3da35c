"""DDP204 scaler-update-before-step.

## What it does
Finds `scaler.update()` called before a `scaler.step(optimizer)` of the same iteration: at the
top of the loop body, between the backward and the step, or between the steps of two
optimizers.

## Why is this bad?
`scaler.update()` reads the inf/NaN checks that `scaler.step` records and then picks the next
loss scale. Called before any step of the iteration, it has nothing to read and raises
`AssertionError: No inf checks were recorded prior to update.` on the first iteration (and
with the scaler disabled the mistake waits for the day AMP is turned on). Called between the
steps of two optimizers, it can change the scale after the second optimizer's gradients were
scaled with the old one: that optimizer then unscales them with the wrong factor, and the
scale chosen for the next iteration ignores whether its gradients overflowed. The order is `scaler.step(opt_1)`, ..., `scaler.step(opt_n)`, then one
`scaler.update()`.

## Example
```python
scaler.scale(loss).backward()
scaler.update()
scaler.step(optimizer)
```

## Use instead
```python
scaler.scale(loss).backward()
scaler.step(optimizer)
scaler.update()
```

## Fix
Moves the `scaler.update()` line (with its trailing comment) to just after the last
`scaler.step(...)` of the iteration; when an update already follows the last step, the early
one is removed instead. No fix when the steps sit in different blocks.

## Known false positives
An update under a condition of its own before the step (`if i > 0: scaler.update()`, a
deliberately deferred update for the previous iteration) is not reported, and neither is an
update in a different loop than the step.

Any module: the bug is a bug in a single-process script too, so this rule runs in every
module (`RuleMeta.any_module`), also in one that is not distributed code at all (a single-GPU
script, a benchmark, a test), where no other rule runs, and in a project it reports in the
functions no distributed entry point reaches (a tokenizer, a plotting script, an export tool),
where the rules that need several ranks are silent.

## References
- https://pytorch.org/docs/stable/notes/amp_examples.html#working-with-multiple-models-losses-and-optimizers
- https://pytorch.org/docs/stable/amp.html#torch.amp.GradScaler.update
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from ddp_lsp.core import chunktext
from ddp_lsp.core import edits as text_edits
from ddp_lsp.core.rule import ChunkContext, Invalid, Rule, Valid
from ddp_lsp.core.types import Finding, Fix, FixAvailability, Related, RuleMeta, Severity
from ddp_lsp.rules import _amp as amp
from ddp_lsp.rules import _patterns as patterns

_TRIGGERS = frozenset({"update"})


class ScalerUpdateBeforeStep(Rule):
    meta = RuleMeta(
        id="DDP204",
        name="scaler-update-before-step",
        severity=Severity.WARNING,
        summary="scaler.update() before scaler.step(): update goes after the last step.",
        fix=FixAvailability.SOMETIMES,
        any_module=True,
    )

    def triggers(self, ctx: ChunkContext) -> frozenset[str]:
        return _TRIGGERS  # every finding is at a `scaler.update()` (core/triggers.py)

    def check(self, ctx: ChunkContext) -> Iterator[Finding]:
        for call in ctx.calls():
            if patterns.method_call(call, "update") is None:
                continue
            root = patterns.scope_root(ctx, call)
            scaler = amp.receiver(call)
            if not amp.is_scaler(ctx, scaler, root):
                continue
            loop = amp.innermost_loop(ctx, call)
            region: ast.AST = loop if loop is not None else root
            steps = [
                c
                for c in amp.scaler_calls(ctx, region, root, "step", scaler)
                if c.args and amp.iteration_loop(ctx, c) is loop
            ]
            later = [
                c
                for c in steps
                if patterns.before(call, c)
                and not amp.exclusive(ctx, call, c)
                and self._reaches(ctx, call, c)
            ]
            if not later:
                continue
            yield self._finding(ctx, call, scaler, region, root, steps, later[0])

    @staticmethod
    def _reaches(ctx: ChunkContext, update: ast.Call, step: ast.Call) -> bool:
        """The update's block also holds the step (or a statement around it): the update is
        not under a condition of its own."""
        block, _ = ctx.block_of(ctx.statement(update))
        stmt = ctx.statement(step)
        chain = [stmt, *(a for a in ctx.ancestors(stmt) if isinstance(a, ast.stmt))]
        return any(any(s is c for s in block) for c in chain)

    def _finding(
        self,
        ctx: ChunkContext,
        update: ast.Call,
        scaler: ast.expr,
        region: ast.AST,
        root: ast.AST,
        steps: list[ast.Call],
        step: ast.Call,
    ) -> Finding:
        s = chunktext.segment(ctx.chunk, scaler)
        last = steps[-1]
        fixes: list[Fix] = []
        moved = amp.expr_stmt_of(ctx, update)
        last_stmt = amp.expr_stmt_of(ctx, last)
        step_stmts = [ctx.statement(c) for c in steps if patterns.before(update, c)]
        if (
            moved is not None
            and last_stmt is not None
            and amp.can_delete(ctx, moved)
            and amp.same_block(ctx, step_stmts)
        ):
            after = [
                u
                for u in amp.scaler_calls(ctx, region, root, "update", scaler)
                if patterns.before(last, u) and not amp.exclusive(ctx, last, u)
            ]
            if after:
                fixes.append(
                    Fix(
                        title=f"Remove the early {s}.update() (one already follows the step)",
                        edits=(text_edits.delete_stmt(ctx, moved),),
                        safe=True,
                        preferred=True,
                    )
                )
            else:
                fixes.append(
                    Fix(
                        title=f"Move {s}.update() after {s}.step(...)",
                        edits=(
                            text_edits.insert_after(ctx, last_stmt, amp.stmt_source(ctx, moved)),
                            text_edits.delete_stmt(ctx, moved),
                        ),
                        safe=True,
                        preferred=True,
                    )
                )
        return ctx.finding(
            self,
            update,
            f"`{s}.update()` runs before `{chunktext.segment(ctx.chunk, step)}` of the same iteration: the "
            f"update reads the inf/NaN checks that `{s}.step` records, so it belongs after the "
            "last step (before any step it raises; between two steps it rescales gradients "
            "mid-iteration)",
            fixes=fixes,
            related=(Related(chunktext.span(ctx.chunk, step), "the step it should follow"),),
        )


_HEAD = """\
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

"""

ScalerUpdateBeforeStep.cases = (
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
""",
        note="the documented order",
    ),
    Valid(
        _HEAD
        + """\
def train(model, loader, opt_a, opt_b, scaler):
    for x, y in loader:
        scaler.scale(model(x).sum()).backward()
        scaler.step(opt_a)
        scaler.step(opt_b)
        scaler.update()
""",
        note="two optimizers, one update after both steps",
    ),
    Valid(
        _HEAD
        + """\
def train(model_g, model_d, loader, opt_g, opt_d, scaler_g, scaler_d):
    for x, y in loader:
        scaler_d.scale(model_d(x).sum()).backward()
        scaler_d.step(opt_d)
        scaler_d.update()
        scaler_g.scale(model_g(x).sum()).backward()
        scaler_g.step(opt_g)
        scaler_g.update()
""",
        note="one scaler per model: each update follows its own step",
    ),
    Valid(
        _HEAD
        + """\
def train(model, loader, optimizer, scaler):
    for i, (x, y) in enumerate(loader):
        if i > 0:
            scaler.update()
        scaler.scale(model(x).sum()).backward()
        scaler.step(optimizer)
""",
        note="a deliberately deferred update under its own condition",
    ),
    Valid(
        _HEAD
        + """\
def train(model, loader, optimizer, scaler, accum):
    for i, (x, y) in enumerate(loader):
        scaler.scale(model(x).sum()).backward()
        if (i + 1) % accum == 0:
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad()
""",
        note="accumulation: update right after the step in the same branch",
    ),
    Valid(
        _HEAD
        + """\
def train(model, loader, optimizer, scaler, use_amp):
    for x, y in loader:
        if use_amp:
            scaler.update()
        else:
            scaler.scale(model(x).sum()).backward()
            scaler.step(optimizer)
""",
        note="different branches never run together",
    ),
    Invalid(
        _HEAD
        + """\
def train(model, loader, optimizer, scaler):
    for x, y in loader:
        with torch.autocast("cuda"):
            loss = model(x).sum()
        scaler.scale(loss).backward()
        «scaler.update()»  # new scale
        scaler.step(optimizer)
        optimizer.zero_grad()
""",
        fixed=_HEAD
        + """\
def train(model, loader, optimizer, scaler):
    for x, y in loader:
        with torch.autocast("cuda"):
            loss = model(x).sum()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()  # new scale
        optimizer.zero_grad()
""",
        note="the update moves with its comment",
    ),
    Invalid(
        _HEAD
        + """\
class Trainer:
    def __init__(self, model, opt_g, opt_d):
        self.model = DDP(model)
        self.opt_g, self.opt_d = opt_g, opt_d
        self.scaler = torch.amp.GradScaler("cuda")

    def fit(self, loader):
        for x in loader:
            self.scaler.scale(self.model(x).sum()).backward()
            self.scaler.step(self.opt_g)
            «self.scaler.update()»
            self.scaler.step(self.opt_d)
""",
        fixed=_HEAD
        + """\
class Trainer:
    def __init__(self, model, opt_g, opt_d):
        self.model = DDP(model)
        self.opt_g, self.opt_d = opt_g, opt_d
        self.scaler = torch.amp.GradScaler("cuda")

    def fit(self, loader):
        for x in loader:
            self.scaler.scale(self.model(x).sum()).backward()
            self.scaler.step(self.opt_g)
            self.scaler.step(self.opt_d)
            self.scaler.update()
""",
        note="update between two optimizers' steps",
    ),
    Invalid(
        _HEAD
        + """\
def train(model, loader, optimizer, scaler):
    for x, y in loader:
        «scaler.update()»
        scaler.scale(model(x).sum()).backward()
        scaler.step(optimizer)
        scaler.update()
""",
        fixed=_HEAD
        + """\
def train(model, loader, optimizer, scaler):
    for x, y in loader:
        scaler.scale(model(x).sum()).backward()
        scaler.step(optimizer)
        scaler.update()
""",
        note="an extra update at the top of the loop: removed",
    ),
    Invalid(
        _HEAD
        + """\
def train(model, loader, optimizer, scaler, accum):
    for i, (x, y) in enumerate(loader):
        scaler.scale(model(x).sum()).backward()
        «scaler.update()»
        if (i + 1) % accum == 0:
            scaler.step(optimizer)
""",
        fixed=_HEAD
        + """\
def train(model, loader, optimizer, scaler, accum):
    for i, (x, y) in enumerate(loader):
        scaler.scale(model(x).sum()).backward()
        if (i + 1) % accum == 0:
            scaler.step(optimizer)
            scaler.update()
""",
        note="the update moves into the accumulation branch, after the step",
    ),
    Invalid(
        _HEAD
        + """\
def train(model, loader, optimizer, scaler, max_norm):
    for x, y in loader:
        scaler.scale(model(x).sum()).backward()
        «scaler.update()»
        if max_norm:
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
            scaler.step(optimizer)
        else:
            scaler.step(optimizer)
""",
        note="no fix: the steps sit in other blocks than the update",
    ),
)
