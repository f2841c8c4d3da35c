"""Gradient-accumulation shapes for DDP101: optimizer steps, accumulation conditions, no_sync.

Pure helpers over ``ast`` and a :class:`ChunkContext`; no rule state.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass

from ddp_lsp.core import chunktext
from ddp_lsp.core import facts as fact_model
from ddp_lsp.core import frameworks as framework_tables
from ddp_lsp.core import names as known_names
from ddp_lsp.core import triggers as rule_triggers
from ddp_lsp.core import uniformity as rank_uniformity
from ddp_lsp.core import walk as tree_walk
from ddp_lsp.core.rule import ChunkContext
from ddp_lsp.rules import _patterns as patterns
from ddp_lsp.rules._graph import under_no_grad

# Identifiers that mean "gradient synchronisation is already being managed here": DDP's and
# Fabric's ``no_sync``, nanoGPT's ``require_backward_grad_sync``, helper names such as
# ``maybe_no_sync`` / ``sync_context`` from trainers that wrap it.
_SYNC_MANAGED = re.compile(
    r"no_?sync|require_backward_grad_sync|sync_context|maybe_sync|grad(ient)?s?_sync|sync_grad",
    re.IGNORECASE,
)
# Words that name an accumulation boundary in a condition or a flag.
_ACCUM_WORD = re.compile(
    r"accum|grad_acc|micro|boundary|sync|should_step|do_step|step_now|take_step|"
    r"optimizer_step|optim_step|do_update|should_update|update_step|is_last|last_step",
    re.IGNORECASE,
)
_OPTIMIZER_NAME = re.compile(r"^(opt|optim|optimi[sz]er)(_\w+)?$|_(opt|optim|optimi[sz]er)$")
# Calls that never run a forward pass although they take the model as an argument.
_NOT_FORWARD = frozenset(
    {
        "isinstance",
        "getattr",
        "hasattr",
        "setattr",
        "type",
        "id",
        "print",
        "len",
        "repr",
        "str",
        "vars",
        "dir",
        "callable",
    }
)
_NOT_FORWARD_WORDS = re.compile(
    r"unwrap|save|log|print|summary|count|param|state_dict|ema|update|step|sync|broadcast|"
    r"barrier|zero_grad|to_device|cuda",
    re.I,
)
# Receivers named like a training engine or trainer run their own backward (`engine.backward()`:
# the tables' `backward` receiver words); the tables name the known methods too
# (`accelerator.backward`, `fabric.backward`).
_ENGINE_RECEIVER = framework_tables.BUILTIN.receiver_pattern(framework_tables.Meaning.BACKWARD)
# Library calls that bind a callable to the model for a later call in the same iteration
# (`compute = functools.partial(losses, ddp_model, micro); compute()`: guided-diffusion).
_BINDERS = frozenset({"functools.partial"})
# Loops over the micro-batches of one batch: a strided `range(0, n, micro)`, a `.split()` /
# `.chunk()` of a tensor, or names that say so.
_MICRO_NAME = re.compile(r"micro|chunk|accum", re.I)
# Pure calls a condition may contain and still be evaluated earlier in the iteration.
_PURE_CALLS = frozenset({"len", "min", "max", "int", "bool", "abs"})


def identifiers(node: ast.AST) -> Iterator[str]:
    for n in tree_walk.bfs(node):
        if isinstance(n, ast.Name):
            yield n.id
        elif isinstance(n, ast.Attribute):
            yield n.attr
        elif isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef):
            yield n.name


def sync_managed(ctx: ChunkContext, roots: list[ast.AST]) -> bool:
    """Gradient sync is already handled somewhere in these scopes (any use of ``no_sync``,
    ``require_backward_grad_sync``, ``accelerator.accumulate`` / ``no_sync``, an ExitStack
    entering one, or a same-file helper that does). A capability check is not a use."""
    return bool(sync_mentions(ctx, roots))


def sync_mentions(ctx: ChunkContext, roots: list[ast.AST]) -> list[ast.AST]:
    """The nodes of these scopes that use a way of skipping the gradient sync: an attribute
    ``.no_sync`` / ``.require_backward_grad_sync``, a helper named for it (``maybe_no_sync``,
    ``sync_context``) called or entered, a call whose callee returns ``no_sync()`` (a same-file
    helper), a framework's skips-grad-sync method, ``setattr(model, "no_sync"...)``.

    A capability check is not a use (M16): ``hasattr(model, "no_sync")`` and a flag named for
    it (``has_no_sync``: bound, or read in a test) handle nothing; what handles accumulation is
    the context that flag selects."""
    out: list[ast.AST] = []
    # What the chunk's words (core/triggers.py: every name, attribute and what imported names
    # stand for) rule out, once per chunk: most chunks name no sync skipper at all.
    named, framework = ctx.memo(("sync words",), lambda: _sync_words(ctx))
    for root in roots:
        for node in patterns.walk_all(ctx, root):
            if isinstance(node, ast.Attribute):
                if named and _SYNC_MANAGED.search(node.attr):
                    out.append(node)
            elif isinstance(node, ast.Name):
                if named and _SYNC_MANAGED.search(node.id) and not _flag_use(ctx, node):
                    out.append(node)
            elif isinstance(node, ast.Call):
                if fact_model.NO_SYNC in ctx.callee_props(node):
                    out.append(node)
                elif (
                    framework
                    and patterns.framework_call(ctx, node, framework_tables.Meaning.SKIPS_GRAD_SYNC)
                    is not None
                ):
                    out.append(node)  # `accelerator.accumulate(model)`, `fabric.no_sync(model)`
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                if node.value in ("require_backward_grad_sync", "no_sync"):
                    parent = ctx.parent(node)
                    if not (
                        isinstance(parent, ast.Call)
                        and isinstance(parent.func, ast.Name)
                        and parent.func.id == "hasattr"
                    ):
                        out.append(node)  # setattr(model, "require_backward_grad_sync", ...)
    return out


def _sync_words(ctx: ChunkContext) -> tuple[bool, bool]:
    """(some word of the chunk matches ``_SYNC_MANAGED``, some word is one a framework's
    skips-grad-sync entry needs): when False, no name or attribute of the chunk matches, and
    no call of it is such an entry (the words a call needs to match, core/triggers.py)."""
    words = rule_triggers.words(ctx)
    named = any(_SYNC_MANAGED.search(w) for w in words)
    framework = not words.isdisjoint(
        rule_triggers.framework_words(
            ctx.ranks.frameworks, framework_tables.Meaning.SKIPS_GRAD_SYNC
        )
    )
    return named, framework


# Where a name is only a truth value: an operand of `and` / `or` / `not` / a comparison, or
# the test of an `if` / `while` / `assert` / conditional expression.
_TEST_PARENTS = (ast.BoolOp, ast.UnaryOp, ast.Compare)


def _flag_use(ctx: ChunkContext, node: ast.Name) -> bool:
    """``has_no_sync`` bound or read as a truth value (a capability flag), not a context."""
    if not isinstance(node.ctx, ast.Load):
        return True
    parent = ctx.parent(node)
    if isinstance(parent, _TEST_PARENTS):
        return not (isinstance(parent, ast.UnaryOp) and not isinstance(parent.op, ast.Not))
    return isinstance(parent, ast.If | ast.While | ast.Assert | ast.IfExp) and (
        getattr(parent, "test", None) is node
    )


@dataclass(frozen=True)
class SyncWiths:
    """How a scope skips the sync: ``with`` statements whose context skips it, and whether
    some use of ``no_sync`` lies elsewhere (nanoGPT's ``require_backward_grad_sync = ...``,
    an ExitStack entering it, a helper): then the scope is taken as handling it as a whole."""

    withs: tuple[ast.With | ast.AsyncWith, ...]
    loose: bool


def sync_withs(ctx: ChunkContext, roots: list[ast.AST], mentions: list[ast.AST]) -> SyncWiths:
    """The ``with`` statements of ``roots`` whose context is a use in ``mentions``: the use
    itself (``with model.no_sync():``, ``with model.no_sync() if acc else nullcontext():``)
    or a name bound from one (``ctx = model.no_sync if acc else nullcontext`` then
    ``with ctx():``)."""
    mention_ids = {id(m) for m in mentions}
    bound: dict[str, list[ast.AST]] = {}  # name -> the assigned values holding a use
    loaded = {
        n.id
        for root in roots
        for n in patterns.walk_all(ctx, root)
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)
    }
    accounted: set[int] = set()
    for root in roots:
        for node in patterns.walk_all(ctx, root):
            if isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None:
                inside = [n for n in tree_walk.bfs(node.value) if id(n) in mention_ids]
                if not inside:
                    continue
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                if all(isinstance(t, ast.Name) and t.id not in loaded for t in targets):
                    # `ctx = model.no_sync() if acc else nullcontext()` never entered: a
                    # context made and dropped skips nothing.
                    accounted.update(id(n) for n in inside)
                    continue
                for t in targets:
                    if isinstance(t, ast.Name):
                        bound.setdefault(t.id, []).append(node.value)
    withs: list[ast.With | ast.AsyncWith] = []
    for root in roots:
        for node in patterns.walk_all(ctx, root):
            if not isinstance(node, ast.With | ast.AsyncWith):
                continue
            hit = False
            for item in node.items:
                expr = item.context_expr
                inside = [n for n in tree_walk.bfs(expr) if id(n) in mention_ids]
                head = expr.func if isinstance(expr, ast.Call) else expr
                if inside:
                    hit = True
                    accounted.update(id(n) for n in inside)
                elif isinstance(head, ast.Name) and head.id in bound:
                    hit = True
                    for value in bound[head.id]:
                        accounted.update(id(n) for n in tree_walk.bfs(value))
            if hit:
                withs.append(node)
    loose = any(id(m) not in accounted for m in mentions)
    return SyncWiths(tuple(withs), loose)


def covered(ctx: ChunkContext, node: ast.AST, withs: tuple[ast.AST, ...], root: ast.AST) -> bool:
    """``node`` (a forward) runs under one of ``withs``, or in the arm of an ``if`` on the
    accumulation condition whose other arm holds one (``if has_no_sync and not need_update:
    with model.no_sync(): ... else: ...``: the conditional choice of context, like
    ``no_sync() if acc else nullcontext()``). An ``if`` on anything else (a mode flag) is no
    choice of context: each of its arms must skip the sync itself."""
    ids = {id(w) for w in withs}
    child: ast.AST = node
    for a in ctx.ancestors(node):
        if id(a) in ids and any(child is s for s in a.body):  # type: ignore[attr-defined]
            return True
        if isinstance(a, ast.If) and child is not a.test and _on_boundary(ctx, a.test, root):
            other = a.orelse if any(child is s for s in a.body) else a.body
            if any(id(n) in ids for s in other for n in tree_walk.bfs(s)):
                return True
        child = a
    return False


def is_plain_backward(call: ast.Call) -> patterns.Backward | None:
    """``loss.backward()`` / ``scaler.scale(loss).backward()``; not a framework's backward
    (``accelerator.backward(loss)``, ``model_engine.backward(loss)``: the tables' `backward`
    methods, which take the loss as an argument)."""
    b = patterns.backward_of(call)
    if b is None or call.args:
        return None
    name = known_names.dotted(b.target) or ""
    if _ENGINE_RECEIVER.search(name.rsplit(".", 1)[-1]):
        return None
    if framework_tables.BUILTIN.matches(
        framework_tables.Meaning.BACKWARD, f"{name}.backward", None
    ):
        return None
    return b


def sync_skippers(ctx: ChunkContext, receiver: str) -> list[str]:
    """How the framework object ``receiver`` skips gradient sync (``accumulate`` / ``no_sync``
    for an accelerator, ``no_sync`` for Fabric): the tables' `skips-grad-sync` methods."""
    last = receiver.rsplit(".", 1)[-1]
    out = []
    for name in sorted(ctx.ranks.frameworks.methods(framework_tables.Meaning.SKIPS_GRAD_SYNC)):
        head, _, method = name.partition(".")
        if head == last:
            out.append(method)
    return out


def is_optimizer_step(ctx: ChunkContext, call: ast.Call) -> bool:
    """``optimizer.step()``, ``self.opt.step()``, ``scaler.step(optimizer)``."""
    if "step" not in (known_names.last_name(call) or "").lower():
        return False  # (both forms below need it: most calls are neither)
    m = patterns.method_call(call, "step")
    if m is None:
        # A same-file or trainer helper named for it: `self.optimizer_step()`, `step_optimizer()`.
        last = (known_names.dotted(call.func) or "").rsplit(".", 1)[-1].lower()
        return "optim" in last and "step" in last
    assert isinstance(m.func, ast.Attribute)
    receiver = m.func.value
    kind = ctx.kind(receiver)
    if kind == fact_model.OPTIMIZER:
        return True
    if kind == fact_model.SCALER:
        return len(m.args) >= 1
    name = known_names.dotted(receiver)
    if name is None:
        return False
    last = name.rsplit(".", 1)[-1].lower()
    if "sched" in last:
        return False
    if "scaler" in last:
        return len(m.args) >= 1
    return bool(_OPTIMIZER_NAME.search(last))


def forward_models(
    ctx: ChunkContext, loop: ast.AST, before: ast.AST, at: ast.AST
) -> list[ast.expr]:
    """DDP-wrapped models whose forward runs in ``loop``'s body before ``before``: called
    directly (``model(x)``) or handed to a helper that runs it (``compute_loss(model, batch)``)."""
    return [m for m, _site in forward_sites(ctx, loop, before, at)]


def forward_sites(
    ctx: ChunkContext, loop: ast.AST, before: ast.AST, at: ast.AST
) -> list[tuple[ast.expr, ast.AST]]:
    """``forward_models`` with where each forward runs in ``loop``: the call itself, or the
    call of a closure defined in the loop that runs it (``def _forward(): return
    model(x)`` then ``loss = _forward()``, timm's legacy train script)."""
    out: list[tuple[ast.expr, ast.AST]] = []
    closures = {n.name: n for n in patterns.walk_scope(loop) if isinstance(n, ast.FunctionDef)}
    for node in patterns.walk_scope(loop):
        if not isinstance(node, ast.Call) or patterns.order(node) >= _end(before):
            continue
        if under_no_grad(ctx, node):
            continue  # DDP does not prepare its reducer for a forward without autograd
        if isinstance(node.func, ast.Name) and node.func.id in closures:
            for inner in patterns.walk_scope(closures[node.func.id]):
                if isinstance(inner, ast.Call) and _is_ddp(ctx, inner.func, inner):
                    out.append((inner.func, node))
            continue
        models = _forward_models_of(ctx, node, at)
        if models and ctx.call_qualname(node) in _BINDERS:
            # `compute = functools.partial(losses, ddp_model, micro)`: the forward runs where
            # `compute()` is called (under no_sync on some micro-steps), not where it is bound.
            sites = _bound_calls(ctx, node, loop) or [node]
            out.extend((m, site) for m in models for site in sites)
            continue
        out.extend((m, node) for m in models)
    return out


def _bound_calls(ctx: ChunkContext, binder: ast.Call, loop: ast.AST) -> list[ast.AST]:
    """The calls in ``loop`` of the name ``binder``'s result is assigned to."""
    parent = ctx.parent(binder)
    if not (
        isinstance(parent, ast.Assign)
        and len(parent.targets) == 1
        and isinstance(parent.targets[0], ast.Name)
    ):
        return []
    name = parent.targets[0].id
    return [
        n
        for n in patterns.walk_scope(loop)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == name
    ]


def _on_boundary(ctx: ChunkContext, test: ast.expr, root: ast.AST) -> bool:
    """The accumulation condition, alone or with a mode flag (``last_batch or not use_ddp``,
    ``has_no_sync and not need_update``)."""
    if accumulation_test(ctx, test, root):
        return True
    if isinstance(test, ast.BoolOp):
        return any(
            accumulation_test(ctx, v, root)
            and not (rank_uniformity.uniformity(ctx).test(test) is not None)
            for v in test.values
        )
    return False


def stored_forward_sites(
    ctx: ChunkContext, loop: ast.AST, target: ast.expr, root: ast.AST
) -> list[tuple[ast.expr, ast.AST]]:
    """The forwards of an earlier loop whose losses this loop backwards: all forwards first,
    then all backwards (``losses.append(model(x).sum())`` in one loop, ``loss = losses[i]``
    or ``for loss in losses:`` then ``loss.backward()`` in the next, a pipeline's
    all-forward-all-backward schedule). ``target`` is what the backward is called on."""
    if not isinstance(target, ast.Name):
        return []
    containers: set[str] = set()
    if (
        isinstance(loop, ast.For | ast.AsyncFor)
        and isinstance(loop.target, ast.Name)
        and loop.target.id == target.id
        and isinstance(loop.iter, ast.Name)
    ):
        containers.add(loop.iter.id)
    for node in patterns.walk_scope(loop):
        if (
            isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == target.id for t in node.targets)
            and isinstance(node.value, ast.Subscript)
            and isinstance(node.value.value, ast.Name)
        ):
            containers.add(node.value.value.id)
    out: list[tuple[ast.expr, ast.AST]] = []
    for node in patterns.walk_scope(root):
        if not (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "append"
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id in containers
            and patterns.before(node, loop)
        ):
            continue
        earlier = ctx.enclosing_loops(node)
        if earlier and not any(lp is loop for lp in earlier):
            out.extend(forward_sites(ctx, earlier[0], node, node))
    return out


def _forward_models_of(ctx: ChunkContext, node: ast.Call, at: ast.AST) -> list[ast.expr]:
    if _is_ddp(ctx, node.func, at):
        return [node.func]
    callee = known_names.dotted(node.func) or ""
    last = callee.rsplit(".", 1)[-1]
    if not callee or last in _NOT_FORWARD or _NOT_FORWARD_WORDS.search(last):
        return []
    if ctx.call_qualname(node) is not None and ctx.call_qualname(node) not in _BINDERS:
        return []  # torch / library functions: clip_grad_norm_(model...), DDP(...), ...
    return [arg for arg in (*node.args, *(k.value for k in node.keywords)) if _is_ddp(ctx, arg, at)]


def _end(node: ast.AST) -> tuple[int, int]:
    return (getattr(node, "end_lineno", 0) or 0, getattr(node, "end_col_offset", 0) or 0)


def _is_ddp(ctx: ChunkContext, expr: ast.AST, at: ast.AST) -> bool:
    return isinstance(expr, ast.Name | ast.Attribute) and ctx.kind(expr, at) == fact_model.DDP


def accumulation_test(ctx: ChunkContext, test: ast.expr, root: ast.AST, depth: int = 0) -> bool:
    """A condition that marks the accumulation boundary: ``(i + 1) % accum_steps == 0``, a flag
    such as ``do_step`` / ``is_last_micro_step``, or a name assigned from one. Never a rank guard
    (that would be a different bug)."""
    # The shape first, the ranks only of a test that has it: most conditions asked about
    # (`if scaler is not None`, `if step % log_every == 0` aside) have neither a modulo nor
    # an accumulation word, and the uniformity analysis costs more than the shape.
    for node in tree_walk.bfs(test):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod):
            return not _rank_test(ctx, test)
    if any(_ACCUM_WORD.search(i) for i in identifiers(test)):
        return not _rank_test(ctx, test)
    inner = test.operand if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not) else test
    if isinstance(inner, ast.Name) and depth < 2:
        for node in patterns.walk_scope(root):
            if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == inner.id for t in node.targets
            ):
                if accumulation_test(ctx, node.value, root, depth + 1):
                    return not _rank_test(ctx, test)
    return False


def _rank_test(ctx: ChunkContext, test: ast.expr) -> bool:
    """A rank guard: the test is rank-dependent or mentions the rank."""
    return rank_uniformity.uniformity(ctx).test(test) is not None or ctx.ranks.mentions_rank(test)


def hoistable(expr: ast.expr) -> bool:
    """The expression can be evaluated earlier in the iteration without side effects."""
    for node in tree_walk.bfs(expr):
        if isinstance(node, ast.Call):
            if not (isinstance(node.func, ast.Name) and node.func.id in _PURE_CALLS):
                return False
        elif isinstance(node, ast.NamedExpr | ast.Await | ast.Yield | ast.YieldFrom | ast.Lambda):
            return False
        elif isinstance(node, ast.Constant) and isinstance(node.value, str | bytes):
            if "\n" in node.value:
                return False
    return True


def loaded_paths(expr: ast.AST) -> set[str]:
    out: set[str] = set()
    for node in tree_walk.bfs(expr):
        if isinstance(node, ast.Name | ast.Attribute):
            d = known_names.dotted(node)
            if d:
                out.add(d)
    return out


def target_paths(target: ast.AST) -> set[str]:
    """Names and dotted attributes an assignment target binds."""
    out: set[str] = set()
    for sub in tree_walk.bfs(target):
        if isinstance(sub, ast.Name | ast.Attribute) and isinstance(
            getattr(sub, "ctx", None), ast.Store
        ):
            d = known_names.dotted(sub)
            if d:
                out.add(d)
    return out


def stored_paths(node: ast.AST) -> set[str]:
    """Names and dotted attributes a statement (or expression) assigns."""
    out: set[str] = set()
    for n in tree_walk.bfs(node):
        targets: list[ast.AST] = []
        if isinstance(n, ast.Assign):
            targets = list(n.targets)
        elif isinstance(n, ast.AugAssign | ast.AnnAssign):
            targets = [n.target]
        elif isinstance(n, ast.NamedExpr):
            targets = [n.target]
        elif isinstance(n, ast.For | ast.AsyncFor):
            targets = [n.target]
        elif isinstance(n, ast.With | ast.AsyncWith):
            targets = [i.optional_vars for i in n.items if i.optional_vars is not None]
        for t in targets:
            out |= target_paths(t)
    return out


def one_line(ctx: ChunkContext, expr: ast.expr) -> str | None:
    """The expression's source on one line (None when it holds a comment or a string that
    spans lines, where joining would be wrong)."""
    text = chunktext.segment(ctx.chunk, expr)
    if "\n" not in text and "\r" not in text:
        return text
    if "#" in text or "\\" in text:
        return None
    parts = [p.strip() for p in text.splitlines()]
    joined = " ".join(p for p in parts if p)
    joined = re.sub(r"([(\[{]) ", r"\1", joined)
    joined = re.sub(r" ([)\]}])", r"\1", joined)
    return joined


_NEGATED_OPS: dict[type, str] = {
    ast.Eq: "!=",
    ast.NotEq: "==",
    ast.Lt: ">=",
    ast.LtE: ">",
    ast.Gt: "<=",
    ast.GtE: "<",
    ast.Is: "is not",
    ast.IsNot: "is",
    ast.In: "not in",
    ast.NotIn: "in",
}
_ATOMS = (ast.Name, ast.Attribute, ast.Call, ast.Subscript, ast.Constant)


def truth_text(ctx: ChunkContext, expr: ast.expr, negate: bool) -> str | None:
    """Source for ``bool(expr)`` (or its negation) that reads naturally."""
    if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, ast.Not):
        return truth_text(ctx, expr.operand, not negate)
    text = one_line(ctx, expr)
    if text is None:
        return None
    if isinstance(expr, ast.Compare) and len(expr.ops) == 1:
        if not negate:
            return text
        op = _NEGATED_OPS.get(type(expr.ops[0]))
        left = one_line(ctx, expr.left)
        right = one_line(ctx, expr.comparators[0])
        if op is None or left is None or right is None:
            return f"not ({text})"
        if isinstance(expr.left, ast.Compare):
            left = f"({left})"
        if isinstance(expr.comparators[0], ast.Compare):
            right = f"({right})"
        return f"{left} {op} {right}"
    if isinstance(expr, ast.BinOp):
        # `(i + 1) % k` as a truth value: non-zero.
        return f"{text} == 0" if negate else f"{text} != 0"
    if negate:
        return f"not {text}" if isinstance(expr, _ATOMS) else f"not ({text})"
    return text


def micro_batch_loop(loop: ast.AST) -> bool:
    """``loop`` walks the micro-batches of one batch (``for i in range(0, len(batch), micro)``,
    ``for mb in batch.split(micro)``, ``for micro_step in ...``): its iterations belong to one
    optimizer step, whatever the code after it does."""
    if not isinstance(loop, ast.For | ast.AsyncFor):
        return False
    it = loop.iter
    if isinstance(it, ast.Call):
        name = known_names.dotted(it.func) or ""
        if name == "range" and len(it.args) == 3:
            return True
        if name.rsplit(".", 1)[-1] in ("split", "chunk") and name != "split":
            return True
    names = [n.id for n in tree_walk.bfs(loop.target) if isinstance(n, ast.Name)]
    names.extend(n.id for n in tree_walk.bfs(it) if isinstance(n, ast.Name))
    names.extend(n.attr for n in tree_walk.bfs(it) if isinstance(n, ast.Attribute))
    return any(_MICRO_NAME.search(n) for n in names)
