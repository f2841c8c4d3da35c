"""DDP201 clip-without-unscale.

## What it does
Finds `torch.nn.utils.clip_grad_norm_` / `clip_grad_value_` (or a clipping helper of the
framework tables, `clips-gradients`: DINO's `clip_gradients(model, clip)`, an FSDP module's
`clip_grad_norm_`) called on gradients produced by `scaler.scale(loss).backward()` without
`scaler.unscale_(optimizer)` before the clip on the same path. When the backward runs in
another function (`model.forward_backward(batch)`), a clip followed by `scaler.step(optimizer)`
of a GradScaler on the same path is checked too: the gradients that scaler steps are scaled.

## Why is this bad?
With a `GradScaler`, the gradients after `scaler.scale(loss).backward()` are multiplied by the
loss scale (65,536 at the start). Clipping them compares the *scaled* norm with your threshold,
so almost every step is clipped by a factor of thousands: the real update shrinks towards zero
and training stalls with a flat loss, without any error. The required order is
`scaler.scale(loss).backward()`, `scaler.unscale_(optimizer)`, clip, `scaler.step(optimizer)`,
`scaler.update()`.

## Example
```python
scaler.scale(loss).backward()
torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
scaler.step(optimizer)
scaler.update()
```

## Use instead
```python
scaler.scale(loss).backward()
scaler.unscale_(optimizer)
torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
scaler.step(optimizer)
scaler.update()
```

## Fix
Inserts `scaler.unscale_(optimizer)` on the line before the clip, with the scaler and optimizer
names taken from `scaler.step(optimizer)` in the same function, or from the only optimizer in
scope. When it cannot tell which optimizer, it offers no fix. When the scaled backward runs
under an `if` the clip is not under (`if scaler is not None: scaler.scale(loss).backward()
else: loss.backward()`), launches without AMP may have no scaler at the clip: the inserted
line goes under the same test (`if scaler is not None: scaler.unscale_(optimizer)`), or, when
the test cannot be repeated (a call, the `else` branch), the fix is marked unsafe.

## Known false positives
`GradScaler(enabled=False)` is reported too: the order is still wrong the day AMP is turned on.
Scaler wrappers that unscale themselves (timm's `NativeScaler` called with `clip_grad=`) are
not reported, and neither is `unscale_` called through a helper function of the same file.
Only the path of the clip counts: the clip of the plain branch of `if use_amp: ... else:
loss.backward()` is not reported, and an `unscale_` on the other branch does not cover it.

Any module: the bug is a bug in a single-process script too, so this rule runs in every
module (`RuleMeta.any_module`), also in one that is not distributed code at all (a single-GPU
script, a benchmark, a test), where no other rule runs, and in a project it reports in the
functions no distributed entry point reaches (a tokenizer, a plotting script, an export tool),
where the rules that need several ranks are silent.

## References
- https://pytorch.org/docs/stable/notes/amp_examples.html#gradient-clipping
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from ddp_lsp.core import chunktext
from ddp_lsp.core import edits as text_edits
from ddp_lsp.core import facts as fact_model
from ddp_lsp.core import frameworks as framework_tables
from ddp_lsp.core import names as known_names
from ddp_lsp.core import triggers as rule_triggers
from ddp_lsp.core import walk as tree_walk
from ddp_lsp.core.rule import ChunkContext, Invalid, Rule, Valid
from ddp_lsp.core.types import Finding, Fix, FixAvailability, Related, RuleMeta, Severity
from ddp_lsp.rules import _amp as amp
from ddp_lsp.rules import _launch as launch_rules
from ddp_lsp.rules import _patterns as patterns


class ClipWithoutUnscale(Rule):
    meta = RuleMeta(
        id="DDP201",
        name="clip-without-unscale",
        severity=Severity.ERROR,
        summary="Gradient clipping on scaled gradients: call scaler.unscale_(optimizer) first.",
        fix=FixAvailability.SOMETIMES,
        any_module=True,
    )

    def triggers(self, ctx: ChunkContext) -> frozenset[str]:
        # Every finding is at a clip: torch's, or a framework's (core/triggers.py).
        return rule_triggers.qual_words(known_names.CLIP_GRAD) | rule_triggers.framework_words(
            ctx.ranks.frameworks, framework_tables.Meaning.CLIPS_GRADIENTS
        )

    def check(self, ctx: ChunkContext) -> Iterator[Finding]:
        for call in ctx.calls():
            qual = ctx.call_qualname(call)
            if qual not in known_names.CLIP_GRAD and (
                patterns.framework_call(ctx, call, framework_tables.Meaning.CLIPS_GRADIENTS) is None
            ):
                continue
            root = patterns.scope_root(ctx, call)
            # The scaled backward on this clip's path (not the `else:` of `if use_amp:`, F19).
            scaled = [
                b
                for b in patterns.backwards_in(root)
                if b.scaler is not None
                and patterns.before(b.call, call)
                and not amp.exclusive(ctx, b.call, call)
            ]
            scaler: ast.expr | None = None
            if scaled:
                scaled_at, scaler = scaled[-1].call, scaled[-1].scaler
            else:
                # The backward runs elsewhere (`model.forward_backward(batch)`), but a
                # GradScaler steps these gradients after the clip: they are scaled (M5).
                step = self._scaler_step_after(ctx, root, call)
                if step is None:
                    continue
                scaled_at, scaler = step, amp.receiver(step)
            assert scaler is not None
            if self._unscaled_before(ctx, root, scaler, call):
                continue
            scaler_text = chunktext.segment(ctx.chunk, scaler)
            clip_name = (qual or known_names.dotted(call.func) or "clip").rsplit(".", 1)[-1]
            fixes = []
            optimizer = self._optimizer(ctx, root, scaler, call)
            stmt = ctx.statement(call)
            late = self._unscale_after(ctx, root, scaler, call)
            if late is not None and patterns.starts_own_line(ctx, stmt):
                # Moving it, not adding a second one: unscale_ twice before update() raises.
                first, last = chunktext.stmt_lines(ctx.chunk, late)
                fixes.append(
                    Fix(
                        title=f"Move {chunktext.segment(ctx.chunk, late).strip()} before {clip_name}",
                        edits=(
                            text_edits.insert_before(ctx, stmt, chunktext.segment(ctx.chunk, late)),
                            text_edits.delete_lines(first, last),
                        ),
                        safe=True,
                        preferred=True,
                    )
                )
            elif late is None and optimizer is not None and patterns.starts_own_line(ctx, stmt):
                line = f"{scaler_text}.unscale_({optimizer})"
                # `if scaler is not None: scaler.scale(loss).backward() else: loss.backward()`:
                # launches without AMP have no scaler at the clip; unscale under the same test.
                apart = launch_rules.branch_apart(ctx, scaled_at, call)
                safe = apart is None
                if apart is not None and launch_rules.in_body(apart, scaled_at):
                    test = chunktext.segment(ctx.chunk, apart.test)
                    if launch_rules.plain_test(apart.test) and "\n" not in test:
                        line = f"if {test}:\n{chunktext.indent_unit(ctx.chunk, ctx.ancestors, stmt)}{line}"
                        safe = True
                fixes.append(
                    Fix(
                        title=f"Insert {scaler_text}.unscale_({optimizer}) before {clip_name}",
                        edits=(text_edits.insert_before(ctx, stmt, line),),
                        safe=safe,
                        preferred=True,
                    )
                )
            opt_text = optimizer or "optimizer"
            yield ctx.finding(
                self,
                call,
                f"`{clip_name}` clips gradients still multiplied by the loss scale of "
                f"`{scaler_text}`: call `{scaler_text}.unscale_({opt_text})` before clipping, "
                "or the real gradients are crushed and training stalls",
                fixes=fixes,
                related=(
                    Related(
                        chunktext.span(ctx.chunk, scaled_at),
                        "gradients are scaled here"
                        if scaled
                        else "the scaler steps these (scaled) gradients here",
                    ),
                ),
                cite=(ctx.kind_source(scaler, call),),
            )

    @staticmethod
    def _scaler_step_after(ctx: ChunkContext, root: ast.AST, clip: ast.Call) -> ast.Call | None:
        """The first ``scaler.step(opt)`` of a GradScaler after ``clip`` on its path, when no
        plain ``loss.backward()`` runs before the clip on that path."""
        if any(
            b.scaler is None
            and patterns.before(b.call, clip)
            and not amp.exclusive(ctx, b.call, clip)
            for b in patterns.backwards_in(root)
        ):
            return None
        for c in patterns.calls_in(root, "step"):
            if (
                len(c.args) == 1
                and patterns.before(clip, c)
                and not amp.exclusive(ctx, clip, c)
                and amp.is_scaler(ctx, amp.receiver(c), root)
            ):
                return c
        return None

    @staticmethod
    def _unscaled_before(
        ctx: ChunkContext, root: ast.AST, scaler: ast.expr, clip: ast.Call
    ) -> bool:
        for c in patterns.calls_in(root, "unscale_"):
            assert isinstance(c.func, ast.Attribute)
            if (
                patterns.before(c, clip)
                and patterns.same_path(c.func.value, scaler)
                and not amp.exclusive(ctx, c, clip)  # the other branch's unscale_ (Swin)
            ):
                return True
        for node in patterns.walk_scope(root):
            if (
                isinstance(node, ast.Call)
                and patterns.before(node, clip)
                # (the helper asked before the paths: most calls unscale nothing)
                and fact_model.UNSCALES in ctx.callee_props(node)
                and not amp.exclusive(ctx, node, clip)
            ):
                return True
        return False

    @staticmethod
    def _unscale_after(
        ctx: ChunkContext, root: ast.AST, scaler: ast.expr, clip: ast.Call
    ) -> ast.stmt | None:
        """A later ``scaler.unscale_(opt)`` statement in the same block as the clip."""
        stmt = ctx.statement(clip)
        block, idx = ctx.block_of(stmt)
        for later in block[idx + 1 :]:
            if isinstance(later, ast.Expr):
                c = patterns.method_call(later.value, "unscale_")
                if c is not None and patterns.same_path(c.func.value, scaler):  # type: ignore[attr-defined]
                    return later
        return None

    @staticmethod
    def _optimizer(ctx: ChunkContext, root: ast.AST, scaler: ast.expr, at: ast.AST) -> str | None:
        opt = patterns.scaler_step_optimizer(root, scaler)
        if opt is not None:
            # `for name, o in optimizers.items(): scaler.step(o)` after the clip: `o` does not
            # exist yet where unscale_ would go, so naming it would raise at run time.
            head = opt
            while isinstance(head, ast.Attribute):
                head = head.value
            if isinstance(head, ast.Name) and not _bound_before(root, head.id, at):
                return None
            return chunktext.segment(ctx.chunk, opt)
        return patterns.only_optimizer(ctx, at)


def _bound_before(root: ast.AST, name: str, at: ast.AST) -> bool:
    """``name`` holds a value at ``at``: a parameter, bound earlier in the function, or not
    bound in the function at all (a global or closure variable)."""
    if isinstance(root, (ast.FunctionDef, ast.AsyncFunctionDef)):
        args = root.args
        if name in {a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)}:
            return True
    stores = [
        n
        for n in tree_walk.scope_nodes(root)
        if isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Store)
    ]
    return not stores or any(patterns.before(n, at) for n in stores)


_HEAD = """\
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

"""

ClipWithoutUnscale.cases = (
    Invalid(
        _HEAD
        + """\
def train(args, model, loader, optimizer):
    scaler = torch.amp.GradScaler("cuda") if args.amp else None
    for x, y in loader:
        loss = model(x).sum()
        if scaler is not None:
            scaler.scale(loss).backward()
        else:
            loss.backward()
        «torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)»
        if scaler is not None:
            scaler.step(optimizer)
            scaler.update()
        else:
            optimizer.step()
""",
        fixed=_HEAD
        + """\
def train(args, model, loader, optimizer):
    scaler = torch.amp.GradScaler("cuda") if args.amp else None
    for x, y in loader:
        loss = model(x).sum()
        if scaler is not None:
            scaler.scale(loss).backward()
        else:
            loss.backward()
        if scaler is not None:
            scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        if scaler is not None:
            scaler.step(optimizer)
            scaler.update()
        else:
            optimizer.step()
""",
        note="no scaler on launches without AMP: unscale under the test the backward is under",
    ),
    Valid(
        _HEAD
        + """\
def train(model, loader, optimizer, scaler):
    for x, y in loader:
        loss = model(x).sum()
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(optimizer)
        scaler.update()
""",
        note="the documented order",
    ),
    Valid(
        _HEAD
        + """\
def unscale_all(scaler, optimizer):
    scaler.unscale_(optimizer)

def train(model, loader, optimizer, scaler):
    for x, y in loader:
        scaler.scale(model(x).sum()).backward()
        unscale_all(scaler, optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(optimizer)
        scaler.update()
""",
        note="unscale_ through a helper in the same file",
    ),
    Valid(
        _HEAD
        + """\
from timm.utils import NativeScaler

loss_scaler = NativeScaler()

def train(model, loader, optimizer):
    for x, y in loader:
        loss = model(x).sum()
        loss_scaler(loss, optimizer, clip_grad=1.0, parameters=model.parameters())
""",
        note="timm's NativeScaler unscales before clipping itself",
    ),
    Valid(
        _HEAD
        + """\
def train(model, loader, optimizer):
    for x, y in loader:
        loss = model(x).sum()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
""",
        note="no GradScaler: nothing is scaled",
    ),
    Valid(
        _HEAD
        + """\
def train(model, loader, optimizer, scaler, accelerator):
    for x, y in loader:
        accelerator.backward(model(x).sum())
        accelerator.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
""",
        note="accelerate's clip_grad_norm_ unscales first",
    ),
    Invalid(
        _HEAD
        + """\
def train(model, loader, optimizer, scaler):
    for x, y in loader:
        with torch.autocast("cuda"):
            loss = model(x).sum()
        scaler.scale(loss).backward()
        # keep the update stable
        «torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)»
        scaler.step(optimizer)
        scaler.update()
""",
        fixed=_HEAD
        + """\
def train(model, loader, optimizer, scaler):
    for x, y in loader:
        with torch.autocast("cuda"):
            loss = model(x).sum()
        scaler.scale(loss).backward()
        # keep the update stable
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
        scaler.step(optimizer)
        scaler.update()
""",
    ),
    Invalid(
        _HEAD
        + """\
from torch.nn.utils import clip_grad_value_

class Trainer:
    def __init__(self, model, opt):
        self.model = DDP(model)
        self.opt = opt
        self.scaler = torch.cuda.amp.GradScaler(enabled=False)

    def step(self, batch, accum):
        self.scaler.scale(self.model(batch).sum()).backward()
        if accum:
            «clip_grad_value_(self.model.parameters(), 0.5)»
            self.scaler.step(self.opt)
            self.scaler.update()
""",
        fixed=_HEAD
        + """\
from torch.nn.utils import clip_grad_value_

class Trainer:
    def __init__(self, model, opt):
        self.model = DDP(model)
        self.opt = opt
        self.scaler = torch.cuda.amp.GradScaler(enabled=False)

    def step(self, batch, accum):
        self.scaler.scale(self.model(batch).sum()).backward()
        if accum:
            self.scaler.unscale_(self.opt)
            clip_grad_value_(self.model.parameters(), 0.5)
            self.scaler.step(self.opt)
            self.scaler.update()
""",
        note="attribute scaler, disabled scaler still reported, clip under a condition",
    ),
    Invalid(
        _HEAD
        + """\
def train(model, loader, opt_a, opt_b, scaler):
    for x, y in loader:
        scaler.scale(model(x).sum()).backward()
        «torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)»
        scaler.step(opt_a)
        scaler.step(opt_b)
        scaler.update()
""",
        fixed=None,
        note="two optimizers: no fix rather than a guess",
    ),
    Invalid(
        _HEAD
        + """\
def train(model, loader, optimizers, scaler):
    for x, y in loader:
        scaler.scale(model(x).sum()).backward()
        «torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)»
        for name, opt in optimizers.items():
            scaler.step(opt)
        scaler.update()
""",
        fixed=None,
        note="the optimizer is a loop variable bound after the clip: no fix that would name it",
    ),
    Invalid(
        _HEAD
        + """\
def train(model, loader, optimizer, scaler):
    for x, y in loader:
        scaler.scale(model(x).sum()).backward()
        «torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)»
        scaler.unscale_(optimizer)
        scaler.step(optimizer)
        scaler.update()
""",
        fixed=_HEAD
        + """\
def train(model, loader, optimizer, scaler):
    for x, y in loader:
        scaler.scale(model(x).sum()).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(optimizer)
        scaler.update()
""",
        note="unscale_ after the clip is too late: the fix moves it",
    ),
    Valid(
        _HEAD
        + """\
def train(cfg, model, loader, optimizer, scaler):
    for x, y in loader:
        loss = model(x).sum()
        if cfg.use_amp:
            scaler.scale(loss).backward()
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            scaler.step(optimizer)
            scaler.update()
        else:
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
""",
        note="F19: the clip of the plain branch sees unscaled gradients",
    ),
    Valid(
        _HEAD
        + """\
def train(model, loader, optimizer, scaler, clip):
    for batch in loader:
        model.forward_backward(batch)
        scaler.unscale_(optimizer)
        model.clip_grad_norm_(clip)
        scaler.step(optimizer)
        scaler.update()
""",
        note="an FSDP module's clip after unscale_",
    ),
    Invalid(
        _HEAD
        + """\
def train(cfg, model, loader, optimizer, scaler):
    for x, y in loader:
        loss = model(x).sum()
        if cfg.use_amp:
            scaler.scale(loss).backward()
            «torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)»
            scaler.step(optimizer)
            scaler.update()
        else:
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
""",
        fixed=_HEAD
        + """\
def train(cfg, model, loader, optimizer, scaler):
    for x, y in loader:
        loss = model(x).sum()
        if cfg.use_amp:
            scaler.scale(loss).backward()
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            scaler.step(optimizer)
            scaler.update()
        else:
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
""",
        note="F19: only the AMP branch's clip is reported",
    ),
    Invalid(
        _HEAD
        + """\
def train(cfg, model, loader, optimizer, scaler, accum):
    for i, (x, y) in enumerate(loader):
        if accum > 1:
            scaler.scale(model(x).sum() / accum).backward()
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.clip)
        else:
            scaler.scale(model(x).sum()).backward()
            «torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.clip)»
        scaler.step(optimizer)
        scaler.update()
""",
        fixed=_HEAD
        + """\
def train(cfg, model, loader, optimizer, scaler, accum):
    for i, (x, y) in enumerate(loader):
        if accum > 1:
            scaler.scale(model(x).sum() / accum).backward()
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.clip)
        else:
            scaler.scale(model(x).sum()).backward()
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.clip)
        scaler.step(optimizer)
        scaler.update()
""",
        note="the unscale_ of the other branch does not unscale this one",
    ),
    Invalid(
        _HEAD
        + """\
from utils import clip_gradients

def train(args, model, loader, optimizer):
    amp_scaler = model.amp_scaler
    for batch in loader:
        model.forward_backward(batch)
        if args.clip:
            «clip_gradients(model, args.clip)»
        amp_scaler.step(optimizer)
        amp_scaler.update()
""",
        fixed=_HEAD
        + """\
from utils import clip_gradients

def train(args, model, loader, optimizer):
    amp_scaler = model.amp_scaler
    for batch in loader:
        model.forward_backward(batch)
        if args.clip:
            amp_scaler.unscale_(optimizer)
            clip_gradients(model, args.clip)
        amp_scaler.step(optimizer)
        amp_scaler.update()
""",
        note="M5/M6: a clipping helper (the tables' clips-gradients) before the step of a scaler "
        "made in another class, the backward in a model method",
    ),
)
