"""One frame's names and values: the scope/value model the uniformity analysis and the rules
share.

A *frame* is a function body (or a chunk's module-level code, ``ctx.module_node``) without
the nested functions, lambdas and classes in it: the nodes that run when it runs
(:func:`ddp_lsp.core.walk.scope_nodes`). :class:`Frame` indexes them once per analysis by
what the analyses ask: the values assigned to each name (``x = v``, ``x: T = v``,
``(x := v)``) and where, the names bound by loops and comprehensions, and the uses of each
name. :meth:`Frame.value_before` is the one answer to "the value last assigned to ``x``
before here" for the uniformity analysis (:mod:`ddp_lsp.core.uniformity`, aware of the
collectives that make a value the same on every rank) and the rules (``rules/_guard.py``);
the guard helpers also read the uses of each name to find a rank variable in scope.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Mapping, Sequence
from functools import cached_property
from typing import TYPE_CHECKING

from ddp_lsp.core.walk import bfs, scope_nodes

if TYPE_CHECKING:
    from ddp_lsp.core.rule import ChunkContext


_BINDERS = frozenset(
    {ast.Assign, ast.AnnAssign, ast.NamedExpr, ast.For, ast.AsyncFor, ast.comprehension}
)


class Frame:
    """Assignments by name, loop variables and name uses of one frame (``root``)."""

    def __init__(self, root: ast.AST) -> None:
        self.root = root
        self.nodes: list[ast.AST] = scope_nodes(root)
        # name -> (assigning node, value), in walk order.
        self.assigns: dict[str, list[tuple[ast.AST, ast.expr]]] = {}
        # Names bound by `for` targets and comprehensions of the frame.
        self.loop_vars: set[str] = set()
        for node in self.nodes:
            if node.__class__ not in _BINDERS:
                continue  # one set test for most nodes, none of the four tests below
            if isinstance(node, ast.Assign):
                for t in node.targets:
                    if isinstance(t, ast.Name):
                        self.assigns.setdefault(t.id, []).append((node, node.value))
            elif isinstance(node, ast.AnnAssign):
                if isinstance(node.target, ast.Name) and node.value is not None:
                    self.assigns.setdefault(node.target.id, []).append((node, node.value))
            elif isinstance(node, ast.NamedExpr):
                self.assigns.setdefault(node.target.id, []).append((node, node.value))
            elif isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)):
                self.loop_vars.update(n.id for n in bfs(node.target) if isinstance(n, ast.Name))

    def value_before(
        self,
        name: str,
        at: ast.AST,
        syncs: Mapping[str, Sequence[ast.AST]] | None = None,
        skip: Callable[[ast.expr], bool] | None = None,
    ) -> ast.expr | None:
        """The value of the last binding of ``name`` in this frame before ``at``; None when
        there is none. The one answer to "what was last assigned to x here" for the rules
        (``rules/_guard.assigned_value``) and the uniformity analysis.

        - *Before*: the binding statement starts before ``at`` (positions, not control flow:
          an assignment later in a loop body does not reach back, and the ``x`` inside
          ``x = f(x)`` sees ``f(x)``: a known approximation, kept because the rules that
          follow a value from its use ask at a later statement).
        - *Last*: of several, the one whose value ends last, which is where Python binds
          the name: in ``x = (x := 1) + 1`` the outer assignment binds last. (The guard
          helpers and the uniformity analysis used to differ here, one ordering by the value's
          start, the other by the binding statement's start; both picked the walrus.)
        - ``syncs``: for each name, the calls after which its value is the same on every rank
          (``dist.broadcast(x, 0)``). Given, a sync between the binding and ``at`` makes the
          answer None: the value assigned no longer says what ``x`` holds on each rank. The
          uniformity analysis passes them; the rules, which ask what expression was assigned
          (a path, a seed), do not.
        - ``skip``: bindings whose value it accepts are not candidates (a rule passing "this
          statement never runs", e.g. after a ``raise`` of its block)."""
        start = _start(at)
        best: tuple[ast.AST, ast.expr] | None = None
        for node, value in self.assigns.get(name, ()):
            if skip is not None and skip(value):
                continue
            if _start(node) < start and (best is None or _end(best[1]) < _end(value)):
                best = (node, value)
        if best is None:
            return None
        if syncs is not None:
            bound = _start(best[0])
            for sync in syncs.get(name, ()):
                if bound < _start(sync) < start:
                    return None
        return best[1]

    @cached_property
    def names(self) -> dict[str, list[ast.Name]]:
        """Every ``Name`` node of the frame by identifier, in walk order."""
        out: dict[str, list[ast.Name]] = {}
        for node in self.nodes:
            if isinstance(node, ast.Name):
                out.setdefault(node.id, []).append(node)
        return out


def _start(node: ast.AST) -> tuple[int, int]:
    return (getattr(node, "lineno", 0), getattr(node, "col_offset", 0))


def _end(node: ast.AST) -> tuple[int, int]:
    return (getattr(node, "end_lineno", 0) or 0, getattr(node, "end_col_offset", 0) or 0)


def frame(ctx: ChunkContext, root: ast.AST) -> Frame:
    """``root``'s frame, built once per analysis of the chunk (``root``: a function of the
    chunk, or ``ctx.module_node``)."""
    return ctx.memo(("frame", id(root)), lambda: Frame(root))


def frame_at(ctx: ChunkContext, node: ast.AST) -> Frame:
    """The frame ``node`` runs in: its function's, or the chunk's module-level code."""
    return frame(ctx, ctx.enclosing_function(node) or ctx.module_node)
