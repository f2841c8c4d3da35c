"""Code shapes several rules look for (training loops, backward calls, GradScaler use).

Pure helpers over ``ast`` and a :class:`ChunkContext`; no rule state.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass

from ddp_lsp.core import chunktext
from ddp_lsp.core import facts as fact_model
from ddp_lsp.core import frameworks as framework_tables
from ddp_lsp.core import names as known_names
from ddp_lsp.core import walk as tree_walk
from ddp_lsp.core.facts import path_of
from ddp_lsp.core.names import last_name as last_name  # re-exported for the rules
from ddp_lsp.core.rule import LOOPS, ChunkContext


def framework_call(
    ctx: ChunkContext, call: ast.Call, meaning: framework_tables.Meaning
) -> framework_tables.Api | None:
    """The framework-table entry (built-in or the user's) giving ``call`` this meaning."""
    return ctx.ranks.frameworks.match_of(
        meaning, known_names.dotted(call.func), ctx.call_qualname(call)
    )


def order(node: ast.AST) -> tuple[int, int]:
    return (getattr(node, "lineno", 0), getattr(node, "col_offset", 0))


def before(a: ast.AST, b: ast.AST) -> bool:
    return order(a) < order(b)


def walk_scope(root: ast.AST) -> Iterator[ast.AST]:
    """Nodes under ``root`` that run in its own frame (not in nested defs, lambdas, classes).

    Computed once per root and shared by every rule (see ``core.walk.scope_nodes``)."""
    return iter(tree_walk.scope_nodes(root))


def walk_all(ctx: ChunkContext, root: ast.AST) -> list[ast.AST]:
    """Every node under ``root`` (``root`` included, nested scopes too), in ``ast.walk``'s
    breadth-first order: walked once per analysis, however many helpers ask."""
    return ctx.memo(("bfs", id(root)), lambda: list(tree_walk.bfs(root)))


def scope_root(ctx: ChunkContext, node: ast.AST) -> ast.AST:
    """The function holding ``node``, or the chunk's module body for module-level code."""
    fn = ctx.enclosing_function(node)
    if fn is not None:
        return fn
    return ctx.module_node


def method_call(node: ast.AST, attr: str) -> ast.Call | None:
    """``node`` if it is a call ``<receiver>.<attr>(...)``."""
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == attr
    ):
        return node
    return None


def calls_in(root: ast.AST, attr: str) -> list[ast.Call]:
    return list(tree_walk.method_calls(root, attr))


@dataclass(frozen=True)
class Backward:
    call: ast.Call  # the .backward() call
    target: ast.expr  # the tensor backward runs on (loss)
    scaler: ast.expr | None  # S in S.scale(loss).backward()


def backward_of(node: ast.AST) -> Backward | None:
    """``loss.backward()`` or ``scaler.scale(loss).backward()``."""
    call = method_call(node, "backward")
    if call is None:
        return None
    assert isinstance(call.func, ast.Attribute)
    receiver = call.func.value
    scale = method_call(receiver, "scale")
    if scale is not None and len(scale.args) == 1:
        assert isinstance(scale.func, ast.Attribute)
        return Backward(call, scale.args[0], scale.func.value)
    return Backward(call, receiver, None)


def backwards_in(root: ast.AST) -> list[Backward]:
    """Every ``.backward()`` of ``root``'s own frame, in source order: from the frame's
    calls by method name (tabled once per frame, core/walk.py; the same order)."""
    out: list[Backward] = []
    for call in tree_walk.method_calls(root, "backward"):
        b = backward_of(call)
        assert b is not None  # a `<x>.backward(...)` call is one
        out.append(b)
    return out


def same_path(a: ast.AST, b: ast.AST) -> bool:
    pa, pb = path_of(a), path_of(b)
    if pa is not None and pb is not None:
        return pa == pb
    return ast.dump(a) == ast.dump(b)


def is_scaler(ctx: ChunkContext, expr: ast.AST, root: ast.AST) -> bool:
    """A GradScaler: known from the facts, or used as ``expr.scale(loss).backward()``."""
    if ctx.kind(expr) == fact_model.SCALER:
        return True
    return any(b.scaler is not None and same_path(b.scaler, expr) for b in backwards_in(root))


def scaler_step_optimizer(root: ast.AST, scaler: ast.AST) -> ast.expr | None:
    """OPT in ``scaler.step(OPT)`` in this scope, when there is exactly one such OPT."""
    found: list[ast.expr] = []
    for c in calls_in(root, "step"):
        assert isinstance(c.func, ast.Attribute)
        if same_path(c.func.value, scaler) and len(c.args) >= 1:
            if not any(same_path(c.args[0], f) for f in found):
                found.append(c.args[0])
    return found[0] if len(found) == 1 else None


def only_optimizer(ctx: ChunkContext, at: ast.AST) -> str | None:
    names = ctx.names_of_kind(fact_model.OPTIMIZER, at)
    return names[0] if len(names) == 1 else None


def enclosing_loop_body_stmt(ctx: ChunkContext, node: ast.AST, loop: ast.AST) -> ast.stmt | None:
    """The statement directly in ``loop``'s body that contains ``node``."""
    cur: ast.AST = node
    for a in ctx.ancestors(node):
        if a is loop:
            return cur if isinstance(cur, ast.stmt) else None
        cur = a
    return None


def innermost_loop(ctx: ChunkContext, node: ast.AST) -> ast.AST | None:
    loops = ctx.enclosing_loops(node)
    return loops[0] if loops else None


def starts_own_line(ctx: ChunkContext, stmt: ast.stmt) -> bool:
    """The statement is the first thing on its line (so a line can be inserted above it)."""
    text = chunktext.line(ctx.chunk, stmt.lineno)
    indent = len(text) - len(text.lstrip(" \t"))
    return chunktext.pos(ctx.chunk, stmt.lineno, stmt.col_offset).col == indent


def is_loop(node: ast.AST) -> bool:
    return isinstance(node, LOOPS)


def block_path(ctx: ChunkContext, node: ast.AST) -> list[tuple[int, str]]:
    """The statement lists holding ``node`` inside its frame, outermost first (a compound
    statement's header belongs to the statement, not to its body)."""
    out: list[tuple[int, str]] = []
    child: ast.AST = node
    for a in ctx.ancestors(node):
        if isinstance(a, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            break
        for name in ("body", "orelse", "finalbody", "handlers", "cases"):
            seq = getattr(a, name, None)
            if isinstance(seq, list) and any(x is child for x in seq):
                out.append((id(a), name))
                break
        child = a
    out.reverse()
    return out


def dominates(ctx: ChunkContext, first: ast.AST, stmt: ast.AST) -> bool:
    """``first`` runs before ``stmt`` on every path through their frame (same block chain)."""
    if not before(first, stmt):
        return False
    a, b = block_path(ctx, first), block_path(ctx, stmt)
    return a == b[: len(a)]
