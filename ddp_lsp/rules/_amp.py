"""GradScaler shapes shared by the DDP202-DDP205 rules (private to them).

Pure helpers over ``ast`` and a :class:`ChunkContext`: which expression is a GradScaler,
which loop is "one training iteration" for a ``scaler.step``, whether two statements can
run in the same pass, and line-level edit helpers that keep comments and indentation.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from typing import NamedTuple

from ddp_lsp.core import chunktext
from ddp_lsp.core import facts as fact_model
from ddp_lsp.core import names as known_names
from ddp_lsp.core import walk as tree_walk
from ddp_lsp.core.rule import LOOPS, ChunkContext
from ddp_lsp.rules import _patterns as patterns

Loop = ast.For | ast.AsyncFor | ast.While

# Names a senior engineer reads as "an optimizer" without seeing its construction.
_OPTIMIZER_NAME = re.compile(
    r"^(?:optimizer|optimiser|optim|opt)$"
    r"|^(?:optimizer|optimiser|optim|opt)_[a-z0-9]+$"
    r"|^[a-z0-9]+_(?:optimizer|optimiser|optim|opt)$"
)


# -- what is a scaler ------------------------------------------------------------------------


def is_scaler(ctx: ChunkContext, expr: ast.AST, root: ast.AST) -> bool:
    """A GradScaler: known from the facts, or used as one in this scope: ``expr.scale(x)``,
    ``expr.unscale_(opt)`` (no other object has it), or ``expr.step(opt)`` together with
    ``expr.update()`` on an optimizer (``fp16_scaler = model.fp16_scaler``: the scaler is made
    in another class, M5)."""
    kind = ctx.kind(expr)
    if kind == fact_model.SCALER:
        return True
    if kind is not None:
        return False
    for attr in ("scale", "unscale_"):
        for c in patterns.calls_in(root, attr):
            assert isinstance(c.func, ast.Attribute)
            if len(c.args) == 1 and not c.keywords and patterns.same_path(c.func.value, expr):
                return True
    updated = any(
        not c.args and not c.keywords and patterns.same_path(receiver(c), expr)
        for c in patterns.calls_in(root, "update")
    )
    if not updated:
        return False
    for c in patterns.calls_in(root, "step"):
        if (
            len(c.args) == 1
            and not c.keywords
            and patterns.same_path(receiver(c), expr)
            and _named_optimizer(ctx, c.args[0])
        ):
            return True
    return False


def _named_optimizer(ctx: ChunkContext, expr: ast.AST) -> bool:
    """An optimizer by its kind or its name (not through the scaler calls: no recursion)."""
    kind = ctx.kind(expr)
    if kind is not None:
        return kind == fact_model.OPTIMIZER
    last = expr.attr if isinstance(expr, ast.Attribute) else getattr(expr, "id", None)
    return isinstance(last, str) and bool(_OPTIMIZER_NAME.match(last.lower()))


def scaler_calls(
    ctx: ChunkContext, region: ast.AST, root: ast.AST, attr: str, scaler: ast.AST | None = None
) -> list[ast.Call]:
    """``S.<attr>(...)`` calls in ``region`` (its own frame) where S is a GradScaler (or
    the given one), in source order."""
    out = []
    for c in patterns.calls_in(region, attr):
        assert isinstance(c.func, ast.Attribute)
        recv = c.func.value
        if scaler is not None:
            if patterns.same_path(recv, scaler):
                out.append(c)
        elif is_scaler(ctx, recv, root):
            out.append(c)
    return out


def receiver(call: ast.Call) -> ast.expr:
    assert isinstance(call.func, ast.Attribute)
    return call.func.value


def is_optimizer(ctx: ChunkContext, expr: ast.AST, root: ast.AST) -> bool:
    """An optimizer: from the facts, handed to ``scaler.step``/``unscale_``, or clearly named."""
    kind = ctx.kind(expr)
    if kind == fact_model.OPTIMIZER:
        return True
    if kind is not None:
        return False
    for attr in ("step", "unscale_"):
        for c in scaler_calls(ctx, root, root, attr):
            if c.args and patterns.same_path(c.args[0], expr):
                return True
    last = expr.attr if isinstance(expr, ast.Attribute) else getattr(expr, "id", None)
    if not isinstance(last, str) or "sched" in last.lower():
        return False
    return bool(_OPTIMIZER_NAME.match(last.lower()))


# -- iterations -------------------------------------------------------------------------------


def _loop_over(loop: ast.AST, names: set[str]) -> bool:
    """``for opt in optimizers:`` whose target is one of ``names``."""
    if not isinstance(loop, (ast.For, ast.AsyncFor)):
        return False
    targets = [n.id for n in tree_walk.bfs(loop.target) if isinstance(n, ast.Name)]
    return any(t in names for t in targets)


def _has_backward(region: ast.AST) -> bool:
    # A `<x>.backward(...)` call in the region's frame: the frame's calls by method name are
    # tabled once per frame (core/walk.py), not searched node by node per question.
    return bool(tree_walk.method_calls(region, "backward"))


def iteration_loop(
    ctx: ChunkContext, call: ast.Call, optimizer: ast.AST | None = None
) -> Loop | None:
    """The loop one pass of which is one training iteration for ``call`` (``scaler.step(opt)``
    or ``opt.step()`` with ``optimizer`` given).

    Loops over the optimizers themselves (``for opt in optimizers: scaler.step(opt)``) are
    not iterations; among the others, the innermost one that runs a backward wins.
    """
    opt_exprs = list(call.args) if optimizer is None else [optimizer]
    arg_names = {n.id for a in opt_exprs for n in tree_walk.bfs(a) if isinstance(n, ast.Name)}
    loops = [lp for lp in ctx.enclosing_loops(call) if not _loop_over(lp, arg_names)]
    if not loops:
        return None
    for lp in loops:
        if _has_backward(lp):
            return lp
    return loops[0]


def innermost_loop(ctx: ChunkContext, node: ast.AST) -> Loop | None:
    loops = ctx.enclosing_loops(node)
    return loops[0] if loops else None


def inside(ctx: ChunkContext, node: ast.AST, region: ast.AST) -> bool:
    return any(a is region for a in ctx.ancestors(node))


def in_nested_frame(ctx: ChunkContext, node: ast.AST, root: ast.AST) -> bool:
    for a in ctx.ancestors(node):
        if a is root:
            return False
        if isinstance(a, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            return True
    return False


# -- paths ------------------------------------------------------------------------------------


class _Via(NamedTuple):
    """Where a path goes through an ancestor: the field holding the next node down (``body``,
    ``orelse``, ``handlers``, ``finalbody``, ``cases``, or ``""`` for any other), and for
    ``cases`` which case of the ``match``."""

    field: str
    case: int = -1


_NO_VIA = _Via("")
_BODY = _Via("body")
_ORELSE = _Via("orelse")


def _branch_path(ctx: ChunkContext, node: ast.AST) -> list[tuple[ast.AST, _Via]]:
    """(ancestor, where the path goes through it), innermost first, up to the frame. Only the
    branching ancestors' fields are read (:func:`exclusive` and :func:`_conditions` ask no
    other): an ``if``'s or conditional expression's ``body`` / ``orelse``, a ``match``'s
    ``cases``; any other ancestor's is ``""``."""
    out: list[tuple[ast.AST, _Via]] = []
    child: ast.AST = node
    for a in ctx.ancestors(node):
        via = _NO_VIA
        if isinstance(a, ast.If):
            if any(s is child for s in a.body):
                via = _BODY
            elif any(s is child for s in a.orelse):
                via = _ORELSE
        elif isinstance(a, ast.IfExp):
            via = _BODY if child is a.body else _ORELSE if child is a.orelse else _NO_VIA
        elif isinstance(a, ast.Match):
            for i, case in enumerate(a.cases):
                if case is child:
                    via = _Via("cases", i)
                    break
        out.append((a, via))
        if isinstance(a, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            break
        child = a
    return out


def _norm_test(test: ast.expr) -> tuple[str, bool]:
    """(condition, polarity) with ``not x`` and ``x is not None`` folded into x / x is None."""
    positive = True
    while isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        test = test.operand
        positive = not positive
    if (
        isinstance(test, ast.Compare)
        and len(test.ops) == 1
        and isinstance(test.ops[0], (ast.IsNot, ast.NotEq))
    ):
        op: ast.cmpop = ast.Is() if isinstance(test.ops[0], ast.IsNot) else ast.Eq()
        test = ast.Compare(test.left, [op], test.comparators)
        positive = not positive
    return ast.dump(test), positive


def _conditions(path: list[tuple[ast.AST, _Via]]) -> dict[str, bool]:
    out: dict[str, bool] = {}
    for a, via in path:
        if isinstance(a, (ast.If, ast.IfExp)) and via.field in ("body", "orelse"):
            cond, pos = _norm_test(a.test)
            out.setdefault(cond, pos if via.field == "body" else not pos)
    return out


class _PathInfo:
    """A node's :func:`_branch_path`, the path's fields by ancestor id, and (when first asked)
    its :func:`_conditions`: once per node and chunk analysis."""

    __slots__ = ("path", "fields", "_conditions")

    def __init__(self, ctx: ChunkContext, node: ast.AST) -> None:
        self.path = _branch_path(ctx, node)
        self.fields = {id(n): f for n, f in self.path}
        self._conditions: dict[str, bool] | None = None

    def conditions(self) -> dict[str, bool]:
        if self._conditions is None:
            self._conditions = _conditions(self.path)
        return self._conditions


def _path_info(ctx: ChunkContext, node: ast.AST) -> _PathInfo:
    return ctx.memo(("amp branch path", id(node)), lambda: _PathInfo(ctx, node))


def exclusive(ctx: ChunkContext, a: ast.AST, b: ast.AST) -> bool:
    """``a`` and ``b`` never run in the same pass: different branches of one ``if`` (or
    ``match``), or branches of two ``if``s on the same condition with opposite outcomes."""
    # Asked for many pairs of the same few calls (each step against each update, each clip
    # against each backward): each node's path and conditions once per chunk analysis.
    ia = _path_info(ctx, a)
    ib = _path_info(ctx, b)
    fields_b = ib.fields
    for n, fa in ia.path:
        fb = fields_b.get(id(n))
        if fb is None:
            continue
        if isinstance(n, (ast.If, ast.IfExp)) and {fa.field, fb.field} == {"body", "orelse"}:
            return True
        if isinstance(n, ast.Match) and fa.field == fb.field == "cases" and fa.case != fb.case:
            return True
        break  # the innermost common ancestor decides structurally
    ca = ia.conditions()
    cb = ib.conditions()
    return any(cond in cb and cb[cond] != pol for cond, pol in ca.items())


# -- escapes ----------------------------------------------------------------------------------


def scaler_escapes(
    ctx: ChunkContext,
    scaler: ast.AST,
    region: ast.AST,
    root: ast.AST,
    after: ast.AST | None = None,
) -> bool:
    """The scaler may be updated out of sight in ``region``: it is passed to a call, a
    closure that can reach it is called, or a same-file helper that can reach it (``self.scaler``,
    a module-level scaler) and updates a GradScaler is called. A helper that never calls
    ``.update()`` on a scaler (one that computes a learning rate) does not hide the update.

    ``after``: only calls that come after it count (the last ``scaler.step``: an update
    before the step of the same iteration raises, so a call there cannot hold the right one)."""
    is_attr = isinstance(scaler, ast.Attribute)
    local = isinstance(scaler, ast.Name) and _bound_in(root, scaler.id)
    # Closures that name the scaler's root (`scaler`, `self`): a nested `lr_at(epoch)` that
    # does not cannot update it.
    base: ast.AST = scaler
    while isinstance(base, ast.Attribute):
        base = base.value
    root_name = base.id if isinstance(base, ast.Name) else None
    nested = {
        n.name
        for n in tree_walk.bfs(root)
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
        and n is not root
        and (
            root_name is None
            or any(isinstance(m, ast.Name) and m.id == root_name for m in ast.walk(n))
        )
    }
    for node in patterns.walk_scope(region):
        if not isinstance(node, ast.Call) or after is not None and patterns.before(node, after):
            continue
        for arg in (*node.args, *(k.value for k in node.keywords)):
            if patterns.same_path(arg, scaler) and not _summarised_without_update(ctx, node):
                return True
        name = known_names.dotted(node.func)
        if name is None:
            continue
        if name in nested:  # a closure can reach the enclosing function's scaler
            return True
        updates = fact_model.UPDATES_SCALER in ctx.callee_props(node)
        if ctx.facts.func_params.get(name) is not None and not local and updates:
            return True
        if name.startswith("self.") and name.count(".") == 1 and is_attr and updates:
            _, cls = ctx.scope(node)
            if cls is not None and f"{cls}.{name[5:]}" in ctx.facts.func_params:
                return True
    return False


def _summarised_without_update(ctx: ChunkContext, call: ast.Call) -> bool:
    """``call`` reaches a function of the project whose summary says it never updates a
    GradScaler (SlowFast's ``contrastive_forward(..., scaler)`` scales a loss and runs its
    backward, nothing more): handing it the scaler does not hide the update."""
    name = known_names.dotted(call.func)
    if name is None:
        return False
    _, cls = ctx.scope(call)
    key = f"{cls}.{name[5:]}" if name.startswith("self.") and cls else name
    props = ctx.facts.func_props.get(key)
    if props is None:
        project = ctx.facts.project
        summary = project.callee_props.get(key) if project is not None else None
        if summary is None:
            return False
        props = summary.props
    return fact_model.UPDATES_SCALER not in props


def _bound_in(root: ast.AST, name: str) -> bool:
    if isinstance(root, (ast.FunctionDef, ast.AsyncFunctionDef)):
        args = root.args
        if any(a.arg == name for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)):
            return True
        return any(
            isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Store)
            for n in patterns.walk_scope(root)
        )
    return False


# -- text and edits -----------------------------------------------------------------------------


def owns_lines(ctx: ChunkContext, stmt: ast.stmt) -> bool:
    """Nothing but the statement (and a trailing comment) on its lines."""
    if not patterns.starts_own_line(ctx, stmt):
        return False
    end_line = stmt.end_lineno or stmt.lineno
    text = chunktext.line(ctx.chunk, end_line).rstrip("\r\n")
    col = chunktext.pos(ctx.chunk, end_line, stmt.end_col_offset or 0).col
    rest = text[col:].strip()
    return rest == "" or rest.startswith("#")


def expr_stmt_of(ctx: ChunkContext, call: ast.Call) -> ast.Expr | None:
    """The statement when ``call`` is a whole expression statement on its own lines."""
    stmt = ctx.statement(call)
    if isinstance(stmt, ast.Expr) and stmt.value is call and owns_lines(ctx, stmt):
        return stmt
    return None


def stmt_source(ctx: ChunkContext, stmt: ast.stmt) -> str:
    """The statement's full lines (trailing comment included), without its own indent."""
    first, last = chunktext.stmt_lines(ctx.chunk, stmt)
    indent = chunktext.indent_of(ctx.chunk, stmt)
    out = []
    for rel in range(first, last + 1):
        line = ctx.chunk.lines[rel].rstrip("\r\n")
        out.append(line[len(indent) :] if line.startswith(indent) else line.lstrip(" \t"))
    return "\n".join(out)


def can_delete(ctx: ChunkContext, stmt: ast.stmt) -> bool:
    """Deleting ``stmt`` leaves its block non-empty."""
    block, _ = ctx.block_of(stmt)
    return len(block) > 1


def same_block(ctx: ChunkContext, stmts: list[ast.stmt]) -> bool:
    blocks = {id(ctx.block_of(s)[0]) for s in stmts}
    return len(blocks) == 1


def walk_region(region: ast.AST) -> Iterator[ast.AST]:
    yield from patterns.walk_scope(region)


def is_loop(node: ast.AST) -> bool:
    return isinstance(node, LOOPS)
