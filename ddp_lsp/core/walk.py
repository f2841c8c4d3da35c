"""Fast tree walking over ``ast`` nodes (about twice as fast as ``ast.iter_child_nodes``).

Rules walk the same function bodies many times; :func:`scope_nodes` computes a function's own
nodes once and keeps them on the node (the trees are cached per chunk text and never mutated
otherwise), so every later rule gets them for free.
"""

from __future__ import annotations

import ast
from collections import deque
from collections.abc import Iterator

_SCOPE_ATTR = "_ddp_scope_nodes"
_CALLS_ATTR = "_ddp_calls_by_attr"
_NEW_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)


_FIELDS: dict[type, tuple[str, ...]] = {}


def _fields(cls: type) -> tuple[str, ...]:
    # `ctx` (Load/Store/Del) is read as an attribute where it matters, never walked to: leaving
    # it out makes every walk visit a fifth fewer nodes.
    names = tuple(f for f in cls._fields if f != "ctx")  # type: ignore[attr-defined]
    _FIELDS[cls] = names
    return names


def children(node: ast.AST) -> list[ast.AST]:
    """The direct child nodes of ``node``, in field order (as ``ast.iter_child_nodes``, without
    the ``ctx`` markers of names, attributes and subscripts)."""
    out: list[ast.AST] = []
    cls = type(node)
    for name in _FIELDS.get(cls) or _fields(cls):
        value = getattr(node, name, None)
        if isinstance(value, ast.AST):
            out.append(value)
        elif isinstance(value, list):
            for item in value:
                if isinstance(item, ast.AST):
                    out.append(item)
    return out


def walk(node: ast.AST) -> Iterator[ast.AST]:
    """Every node under ``node`` (itself included), like ``ast.walk``."""
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        stack.extend(children(current))


def bfs(node: ast.AST) -> Iterator[ast.AST]:
    """``ast.walk`` (breadth first, the same order) on the faster child iteration (so without
    the ``ctx`` marker nodes)."""
    todo = deque([node])
    while todo:
        current = todo.popleft()
        todo.extend(children(current))
        yield current


def scope_nodes(root: ast.AST) -> list[ast.AST]:
    """Nodes under ``root`` that run in its own frame: not inside nested defs, lambdas or
    classes (those nodes themselves are included). Computed once per root."""
    cached: list[ast.AST] | None = getattr(root, _SCOPE_ATTR, None)
    if cached is not None:
        return cached
    out: list[ast.AST] = []
    stack = children(root)
    while stack:
        node = stack.pop()
        out.append(node)
        if isinstance(node, _NEW_SCOPES):
            continue
        stack.extend(children(node))
    setattr(root, _SCOPE_ATTR, out)
    return out


def method_calls(root: ast.AST, attr: str) -> list[ast.Call]:
    """Calls ``<receiver>.<attr>(...)`` in ``root``'s own frame, in source order."""
    table: dict[str, list[ast.Call]] | None = getattr(root, _CALLS_ATTR, None)
    if table is None:
        table = {}
        for node in scope_nodes(root):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                table.setdefault(node.func.attr, []).append(node)
        for calls in table.values():
            calls.sort(key=lambda c: (c.lineno, c.col_offset))
        setattr(root, _CALLS_ATTR, table)
    return table.get(attr, [])
