"""Gradient-accumulation shapes for DDP101: optimizer steps, accumulation conditions, no_sync.

Pure helpers over ``ast`` and a :class:`ChunkContext`; no rule state.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator

from ddp_lsp.core import chunktext
from ddp_lsp.core import facts as fact_model
from ddp_lsp.core import frameworks as framework_tables
from ddp_lsp.core import names as known_names
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
    """Gradient sync is already handled somewhere in these scopes (any form of ``no_sync``,
    ``require_backward_grad_sync``, ``accelerator.accumulate`` / ``no_sync``, an ExitStack
    entering one, or a same-file helper that does)."""
    for root in roots:
        for node in tree_walk.bfs(root):
            if isinstance(node, ast.Name | ast.Attribute):
                ident = node.id if isinstance(node, ast.Name) else node.attr
                if _SYNC_MANAGED.search(ident):
                    return True
            elif isinstance(node, ast.Call):
                if fact_model.NO_SYNC in ctx.callee_props(node):
                    return True
                if (
                    patterns.framework_call(ctx, node, framework_tables.Meaning.SKIPS_GRAD_SYNC)
                    is not None
                ):
                    return True  # `accelerator.accumulate(model)`, `fabric.no_sync(model)`
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                if node.value in ("require_backward_grad_sync", "no_sync"):
                    return True  # setattr(model, "require_backward_grad_sync", ...)
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
    out: list[ast.expr] = []
    for node in patterns.walk_scope(loop):
        if not isinstance(node, ast.Call) or patterns.order(node) >= _end(before):
            continue
        if under_no_grad(ctx, node):
            continue  # DDP does not prepare its reducer for a forward without autograd
        if _is_ddp(ctx, node.func, at):
            out.append(node.func)
            continue
        callee = known_names.dotted(node.func) or ""
        last = callee.rsplit(".", 1)[-1]
        if not callee or last in _NOT_FORWARD or _NOT_FORWARD_WORDS.search(last):
            continue
        if ctx.qualname(node.func) is not None and ctx.qualname(node.func) not in _BINDERS:
            continue  # torch / library functions: clip_grad_norm_(model...), DDP(...), ...
        for arg in (*node.args, *(k.value for k in node.keywords)):
            if _is_ddp(ctx, arg, at):
                out.append(arg)
    return out


def _end(node: ast.AST) -> tuple[int, int]:
    return (getattr(node, "end_lineno", 0) or 0, getattr(node, "end_col_offset", 0) or 0)


def _is_ddp(ctx: ChunkContext, expr: ast.AST, at: ast.AST) -> bool:
    return isinstance(expr, ast.Name | ast.Attribute) and ctx.kind(expr, at) == fact_model.DDP


def accumulation_test(ctx: ChunkContext, test: ast.expr, root: ast.AST, depth: int = 0) -> bool:
    """A condition that marks the accumulation boundary: ``(i + 1) % accum_steps == 0``, a flag
    such as ``do_step`` / ``is_last_micro_step``, or a name assigned from one. Never a rank guard
    (that would be a different bug)."""
    if rank_uniformity.uniformity(ctx).test(test) is not None or ctx.ranks.mentions_rank(test):
        return False
    for node in tree_walk.bfs(test):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod):
            return True
    if any(_ACCUM_WORD.search(i) for i in identifiers(test)):
        return True
    inner = test.operand if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not) else test
    if isinstance(inner, ast.Name) and depth < 2:
        for node in patterns.walk_scope(root):
            if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == inner.id for t in node.targets
            ):
                if accumulation_test(ctx, node.value, root, depth + 1):
                    return True
    return False


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
