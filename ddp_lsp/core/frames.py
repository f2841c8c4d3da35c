"""One frame's names and values: the scope/value model the uniformity analysis and the rules
share.

A *frame* is a function body (or a chunk's module-level code, ``ctx.module_node``) without
the nested functions, lambdas and classes in it: the nodes that run when it runs
(:func:`ddp_lsp.core.walk.scope_nodes`). :class:`Frame` indexes them once per analysis by
what the analyses ask: the values assigned to each name (``x = v``, ``x: T = v``,
``(x := v)``) and where, the names bound by loops and comprehensions, and the uses of each
name. The uniformity analysis (:mod:`ddp_lsp.core.uniformity`) reads a name's last value
from it; the guard helpers (``rules/_guard.py``) read the same values and uses to find a rank
variable in scope.
"""

from __future__ import annotations

import ast
from functools import cached_property
from typing import TYPE_CHECKING

from ddp_lsp.core.walk import bfs, scope_nodes

if TYPE_CHECKING:
    from ddp_lsp.core.rule import ChunkContext


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

    @cached_property
    def names(self) -> dict[str, list[ast.Name]]:
        """Every ``Name`` node of the frame by identifier, in walk order."""
        out: dict[str, list[ast.Name]] = {}
        for node in self.nodes:
            if isinstance(node, ast.Name):
                out.setdefault(node.id, []).append(node)
        return out


def frame(ctx: ChunkContext, root: ast.AST) -> Frame:
    """``root``'s frame, built once per analysis of the chunk (``root``: a function of the
    chunk, or ``ctx.module_node``)."""
    return ctx.memo(("frame", id(root)), lambda: Frame(root))


def frame_at(ctx: ChunkContext, node: ast.AST) -> Frame:
    """The frame ``node`` runs in: its function's, or the chunk's module-level code."""
    return frame(ctx, ctx.enclosing_function(node) or ctx.module_node)
