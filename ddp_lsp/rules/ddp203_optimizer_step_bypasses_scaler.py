"""DDP203 optimizer-step-bypasses-scaler.

## What it does
Finds `optimizer.step()` called on gradients that were produced by
`scaler.scale(loss).backward()`, i.e. the optimizer is stepped directly instead of through
`scaler.step(optimizer)`.

## Why is this bad?
After `scaler.scale(loss).backward()` every gradient is multiplied by the loss scale (65,536
at the start). `scaler.step(optimizer)` *replaces* `optimizer.step()`: it unscales the
gradients, checks them for inf/NaN and skips the step when they overflowed. Calling
`optimizer.step()` directly applies gradients thousands of times too large (Adam hides part of
it, SGD does not), and every overflow step writes inf/NaN into the weights. Calling it *in
addition* to `scaler.step(optimizer)` steps twice on the same gradients. (The seed article's
"`scaler.step` must come before `optimizer.step()`" is wrong: there should be no
`optimizer.step()` at all.)

## Example
```python
scaler.scale(loss).backward()
optimizer.step()
scheduler.step()
```

## Use instead
```python
scaler.scale(loss).backward()
scaler.step(optimizer)
scaler.update()
scheduler.step()
```

## Fix
Replaces `optimizer.step()` with `scaler.step(optimizer)`, names taken from the code, and
inserts `scaler.update()` after it when the iteration has none. No fix when the step takes a
closure, when `scaler.step(optimizer)` is already there (the direct step should simply go), or
when the call is not a statement of its own.

## Known false positives
Only objects known to be optimizers are considered: built from a `torch.optim` class (or a
known optimizer factory), handed to `scaler.step`/`scaler.unscale_`, or clearly named
(`optimizer`, `opt`, `opt_d`, `g_optimizer`); `scheduler.step()`, `lr_scheduler.step()`,
`prof.step()` and `ema.step()` are not. A step on a branch that never runs together with the
scaled backward (`if scaler is not None: ... else: loss.backward(); optimizer.step()`), or
after a later plain `loss.backward()` (a second model trained without AMP), is not reported,
nor the plain branch of `if use_amp: scaler.step(opt) else: opt.step()` after a shared scaled
backward; but a step on the same branch as its scaled backward is, whatever the other branch
does (`if accumulating: scaler.scale(loss).backward(); opt.step() else: ...`).

Any module: the bug is a bug in a single-process script too, so this rule runs in every
module (`RuleMeta.any_module`), also in one that is not distributed code at all (a single-GPU
script, a benchmark, a test), where no other rule runs, and in a project it reports in the
functions no distributed entry point reaches (a tokenizer, a plotting script, an export tool),
where the rules that need several ranks are silent.

## References
- https://pytorch.org/docs/stable/notes/amp_examples.html#typical-mixed-precision-training
- https://pytorch.org/docs/stable/amp.html#torch.amp.GradScaler.step
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

_TRIGGERS = frozenset({"step"})


class OptimizerStepBypassesScaler(Rule):
    meta = RuleMeta(
        id="DDP203",
        name="optimizer-step-bypasses-scaler",
        severity=Severity.ERROR,
        summary="optimizer.step() on scaled gradients: use scaler.step(optimizer).",
        fix=FixAvailability.SOMETIMES,
        any_module=True,
    )

    def triggers(self, ctx: ChunkContext) -> frozenset[str]:
        return _TRIGGERS  # every finding is at an `optimizer.step()` (core/triggers.py)

    def check(self, ctx: ChunkContext) -> Iterator[Finding]:
        candidates: list[tuple[ast.Call, ast.AST, ast.AST, patterns.Backward]] = []
        for call in ctx.calls():
            if patterns.method_call(call, "step") is None:
                continue
            root = patterns.scope_root(ctx, call)
            opt = amp.receiver(call)
            if amp.is_scaler(ctx, opt, root) or not amp.is_optimizer(ctx, opt, root):
                continue
            loop = amp.iteration_loop(ctx, call, opt)
            region: ast.AST = loop if loop is not None else root
            backs = [
                b
                for b in patterns.backwards_in(region)
                if patterns.before(b.call, call) and not amp.exclusive(ctx, b.call, call)
            ]
            if not backs:
                continue
            last = backs[-1]
            if last.scaler is None or not amp.is_scaler(ctx, last.scaler, root):
                continue
            if self._scaler_path_beside(ctx, call, last.scaler, root, last.call):
                continue
            candidates.append((call, region, root, last))
        for call, region, root, backward in candidates:
            later = [
                c
                for c, r, _, b in candidates
                # module-level code gets a fresh Module root per call: compare by kind there
                if (r is region or isinstance(r, ast.Module) and isinstance(region, ast.Module))
                and patterns.same_path(b.scaler, backward.scaler)  # type: ignore[arg-type]
                and patterns.before(call, c)
            ]
            yield self._finding(ctx, call, region, root, backward, is_last=not later)

    @staticmethod
    def _scaler_path_beside(
        ctx: ChunkContext, call: ast.Call, scaler: ast.expr, root: ast.AST, backward: ast.Call
    ) -> bool:
        """``call`` is on one branch of an ``if`` whose other branch steps through the scaler:
        it is the non-AMP path (``if use_amp: scaler.step(opt) else: opt.step()``). Not when
        the scaled backward itself is on ``call``'s branch (``if accumulating:
        scaler.scale(loss).backward(); opt.step() else: ...; scaler.step(opt)``)."""
        child: ast.AST = call
        for a in ctx.ancestors(call):
            if a is root:
                break
            if isinstance(a, ast.If) and child is not a.test:
                mine = a.body if any(s is child for s in a.body) else a.orelse
                if any(amp.inside(ctx, backward, s) or s is ctx.statement(backward) for s in mine):
                    child = a
                    continue
                other = a.orelse if any(s is child for s in a.body) else a.body
                for stmt in other:
                    for c in patterns.calls_in(stmt, "step"):
                        if patterns.same_path(amp.receiver(c), scaler):
                            return True
            child = a
        return False

    def _finding(
        self,
        ctx: ChunkContext,
        call: ast.Call,
        region: ast.AST,
        root: ast.AST,
        backward: patterns.Backward,
        is_last: bool,
    ) -> Finding:
        scaler = backward.scaler
        assert scaler is not None
        opt = amp.receiver(call)
        s, o = chunktext.segment(ctx.chunk, scaler), chunktext.segment(ctx.chunk, opt)
        stepped = [
            c
            for c in amp.scaler_calls(ctx, root, root, "step", scaler)
            if c.args and patterns.same_path(c.args[0], opt)
        ]
        fixes: list[Fix] = []
        stmt = amp.expr_stmt_of(ctx, call)
        if stmt is not None and not stepped and not call.args and not call.keywords:
            edits = [text_edits.replace_node(ctx, call, f"{s}.step({o})")]
            title = f"Replace with {s}.step({o})"
            own_pass = amp.innermost_loop(ctx, call) is (region if region is not root else None)
            if is_last and own_pass and not amp.scaler_calls(ctx, region, root, "update", scaler):
                edits.append(text_edits.insert_after(ctx, stmt, f"{s}.update()"))
                title += f" and {s}.update()"
            fixes.append(Fix(title=title, edits=tuple(edits), safe=True, preferred=True))
        if stepped:
            message = (
                f"`{o}.step()` steps the optimizer a second time, on gradients still scaled by "
                f"`{s}`: `{s}.step({o})` already steps it; remove this call"
            )
        else:
            message = (
                f"`{o}.step()` applies gradients still multiplied by the loss scale of `{s}` "
                f"and does not skip inf/NaN steps: use `{s}.step({o})` followed by "
                f"`{s}.update()`"
            )
        return ctx.finding(
            self,
            call,
            message,
            fixes=fixes,
            related=(
                Related(chunktext.span(ctx.chunk, backward.call), "gradients are scaled here"),
            ),
            cite=(ctx.kind_source(scaler, call), ctx.kind_source(opt, call)),
        )


_HEAD = """\
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

"""

OptimizerStepBypassesScaler.cases = (
    Valid(
        _HEAD
        + """\
def train(model, loader, optimizer, scheduler, scaler):
    for x, y in loader:
        with torch.autocast("cuda"):
            loss = model(x).sum()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        scheduler.step()
        optimizer.zero_grad()
""",
        note="scheduler.step() after scaler.step() is not an optimizer step",
    ),
    Valid(
        _HEAD
        + """\
def train(model, loader, optimizer, scaler):
    lr_scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, 0.1, total_steps=100)
    with torch.profiler.profile() as prof:
        for x, y in loader:
            scaler.scale(model(x).sum()).backward()
            scaler.step(optimizer)
            scaler.update()
            lr_scheduler.step()
            prof.step()
""",
        note="lr_scheduler and profiler steps",
    ),
    Valid(
        _HEAD
        + """\
def train_one_epoch(model, criterion, optimizer, data_loader, scaler=None):
    for image, target in data_loader:
        with torch.autocast("cuda", enabled=scaler is not None):
            loss = criterion(model(image), target)
        optimizer.zero_grad()
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        else:
            loss.backward()
            optimizer.step()
""",
        note="torchvision references: the plain step is on the branch without a scaler",
    ),
    Valid(
        _HEAD
        + """\
def train(model, loader, optimizer, scaler, use_amp):
    for x, y in loader:
        loss = model(x).sum()
        if use_amp:
            scaler.scale(loss).backward()
        else:
            loss.backward()
        if not use_amp:
            optimizer.step()
        else:
            scaler.step(optimizer)
            scaler.update()
""",
        note="two ifs on the same condition with opposite outcomes",
    ),
    Valid(
        _HEAD
        + """\
def train(gen, disc, loader, opt_g, opt_d, scaler):
    for x, y in loader:
        scaler.scale(gen(x).sum()).backward()
        scaler.step(opt_g)
        scaler.update()
        loss_d = disc(x).sum()
        loss_d.backward()
        opt_d.step()
""",
        note="the second optimizer's gradients come from a plain backward",
    ),
    Valid(
        _HEAD
        + """\
from apex import amp

def train(model, loader, optimizer):
    for x, y in loader:
        loss = model(x).sum()
        with amp.scale_loss(loss, optimizer) as scaled_loss:
            scaled_loss.backward()
        optimizer.step()
""",
        note="apex amp: optimizer.step() is the right call",
    ),
    Valid(
        _HEAD
        + """\
def train(model, loader, optimizer, accelerator):
    for x, y in loader:
        accelerator.backward(model(x).sum())
        optimizer.step()
        optimizer.zero_grad()
""",
        note="accelerate: its prepared optimizer steps through the scaler itself",
    ),
    Valid(
        _HEAD
        + """\
from timm.utils import NativeScaler

def train(model, loader, optimizer):
    loss_scaler = NativeScaler()
    for x, y in loader:
        loss = model(x).sum()
        loss_scaler(loss, optimizer, clip_grad=1.0, parameters=model.parameters())
        torch.cuda.synchronize()
""",
        note="timm's NativeScaler steps the optimizer itself",
    ),
    Valid(
        _HEAD
        + """\
def train(model, loader, optimizer, scaler, ema):
    for x, y in loader:
        scaler.scale(model(x).sum()).backward()
        scaler.step(optimizer)
        scaler.update()
        ema.step()
""",
        note="an EMA helper's step is not an optimizer step",
    ),
    Valid(
        _HEAD
        + """\
from apex import amp

class Trainer:
    def training_step(self, loss):
        if self.use_amp:
            self.scaler.scale(loss).backward()
        elif self.use_apex:
            with amp.scale_loss(loss, self.optimizer) as scaled_loss:
                scaled_loss.backward()
        else:
            loss.backward()

    def optimizer_step(self, loss):
        if self.args.fp16 and self.scaler is not None:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()

    def step(self, loss, use_amp):
        if use_amp:
            self.scaler.scale(loss).backward()
        else:
            loss.backward()
        if self.args.fp16:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()
""",
        note="HF Trainer style: the plain step is the branch beside the scaler's",
    ),
    Invalid(
        _HEAD
        + """\
def train(model, loader, optimizer, scheduler, scaler):
    for x, y in loader:
        with torch.autocast("cuda"):
            loss = model(x).sum()
        scaler.scale(loss).backward()
        «optimizer.step()»  # update weights
        scheduler.step()
""",
        fixed=_HEAD
        + """\
def train(model, loader, optimizer, scheduler, scaler):
    for x, y in loader:
        with torch.autocast("cuda"):
            loss = model(x).sum()
        scaler.scale(loss).backward()
        scaler.step(optimizer)  # update weights
        scaler.update()
        scheduler.step()
""",
        note="the seed's bug; the scheduler is left alone",
    ),
    Invalid(
        _HEAD
        + """\
class Trainer:
    def __init__(self, model, params):
        self.model = DDP(model)
        self.optimizer = torch.optim.AdamW(params, lr=1e-3)
        self.scaler = torch.amp.GradScaler("cuda")

    def fit(self, loader, accum):
        for i, x in enumerate(loader):
            self.scaler.scale(self.model(x).sum()).backward()
            if (i + 1) % accum == 0:
                «self.optimizer.step()»
                self.scaler.update()
""",
        fixed=_HEAD
        + """\
class Trainer:
    def __init__(self, model, params):
        self.model = DDP(model)
        self.optimizer = torch.optim.AdamW(params, lr=1e-3)
        self.scaler = torch.amp.GradScaler("cuda")

    def fit(self, loader, accum):
        for i, x in enumerate(loader):
            self.scaler.scale(self.model(x).sum()).backward()
            if (i + 1) % accum == 0:
                self.scaler.step(self.optimizer)
                self.scaler.update()
""",
        note="update already there: only the step is replaced",
    ),
    Invalid(
        _HEAD
        + """\
def train(model, loader, optimizer, scaler, accum):
    for it in range(100):
        for micro in range(accum):
            scaler.scale(model(next(loader)).sum()).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        «optimizer.step()»
""",
        fixed=_HEAD
        + """\
def train(model, loader, optimizer, scaler, accum):
    for it in range(100):
        for micro in range(accum):
            scaler.scale(model(next(loader)).sum()).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(optimizer)
        scaler.update()
""",
        note="backward in an inner micro-step loop",
    ),
    Invalid(
        _HEAD
        + """\
def train(model, loader, optimizers, scaler):
    for x, y in loader:
        scaler.scale(model(x).sum()).backward()
        for opt in optimizers:
            «opt.step()»
""",
        fixed=_HEAD
        + """\
def train(model, loader, optimizers, scaler):
    for x, y in loader:
        scaler.scale(model(x).sum()).backward()
        for opt in optimizers:
            scaler.step(opt)
""",
        note="a loop over optimizers: the update must not go inside it (DDP202 adds it after)",
    ),
    Invalid(
        _HEAD
        + """\
def train(model, loader, optimizer, scaler):
    for x, y in loader:
        scaler.scale(model(x).sum()).backward()
        scaler.step(optimizer)
        scaler.update()
        «optimizer.step()»
""",
        fixed=None,
        note="a second, direct step on top of scaler.step: reported, no rewrite",
    ),
    Invalid(
        _HEAD
        + """\
def train(model, loader, optimizer, scaler, closure):
    for x, y in loader:
        scaler.scale(model(x).sum()).backward()
        «optimizer.step(closure)»
""",
        fixed=None,
        note="closure: scaler.step does not support closures; no fix",
    ),
    Invalid(
        _HEAD
        + """\
def train(model, loader, optimizer, scaler, accum):
    for i, (x, y) in enumerate(loader):
        if accum > 1:
            scaler.scale(model(x).sum() / accum).backward()
            if (i + 1) % accum == 0:
                «optimizer.step()»
                scaler.update()
        else:
            scaler.scale(model(x).sum()).backward()
            scaler.step(optimizer)
            scaler.update()
""",
        fixed=None,
        note="the scaled backward is on this branch: the other branch's scaler.step is no "
        "plain-path excuse",
    ),
)
