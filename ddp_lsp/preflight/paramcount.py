"""A static estimate of a model's parameter count from its source, for the feasibility probe.

We never import the user's code (the preflight runs our probe code only), so this reads the
AST: each ``nn.Linear``/``Conv*d``/``Embedding``/norm/``MultiheadAttention`` constructor whose
sizes are integer literals or module-level integer constants is counted once. Layers built in
loops or from config objects are not multiplied, so the result is a lower bound, labelled so.
Stdlib only.
"""

from __future__ import annotations

import ast
import math
from dataclasses import dataclass


@dataclass(frozen=True)
class ParamEstimate:
    params: int
    layers: int
    unresolved: int


def _const(node: ast.AST | None, names: dict[str, int]) -> int | None:
    if node is None:
        return None
    if (
        isinstance(node, ast.Constant)
        and isinstance(node.value, int)
        and not isinstance(node.value, bool)
    ):
        return node.value
    if isinstance(node, ast.Name):
        return names.get(node.id)
    if isinstance(node, ast.BinOp):
        a, b = _const(node.left, names), _const(node.right, names)
        if a is None or b is None:
            return None
        ops = {ast.Add: a + b, ast.Sub: a - b, ast.Mult: a * b}
        if isinstance(node.op, ast.FloorDiv) and b:
            return a // b
        return ops.get(type(node.op))
    return None


def _kernel(node: ast.AST | None, names: dict[str, int], dims: int) -> int | None:
    if isinstance(node, (ast.Tuple, ast.List)):
        vals = [_const(e, names) for e in node.elts]
        return (
            math.prod(v for v in vals if v is not None)
            if all(v is not None for v in vals)
            else None
        )
    k = _const(node, names)
    return None if k is None else k**dims


def _arg(call: ast.Call, index: int, name: str) -> ast.AST | None:
    if len(call.args) > index:
        return call.args[index]
    return next((kw.value for kw in call.keywords if kw.arg == name), None)


def _bias(call: ast.Call) -> bool:
    kw = next((k for k in call.keywords if k.arg == "bias"), None)
    return not (kw is not None and isinstance(kw.value, ast.Constant) and kw.value.value is False)


def _count(call: ast.Call, kind: str, names: dict[str, int]) -> int | None:
    if kind == "Linear":
        i, o = (
            _const(_arg(call, 0, "in_features"), names),
            _const(_arg(call, 1, "out_features"), names),
        )
        return None if i is None or o is None else i * o + (o if _bias(call) else 0)
    if kind in ("Conv1d", "Conv2d", "Conv3d"):
        dims = int(kind[4])
        i, o = (
            _const(_arg(call, 0, "in_channels"), names),
            _const(_arg(call, 1, "out_channels"), names),
        )
        k = _kernel(_arg(call, 2, "kernel_size"), names, dims)
        groups = (
            _const(next((kw.value for kw in call.keywords if kw.arg == "groups"), None), names) or 1
        )
        if i is None or o is None or k is None:
            return None
        return i // groups * o * k + (o if _bias(call) else 0)
    if kind == "Embedding":
        n, d = (
            _const(_arg(call, 0, "num_embeddings"), names),
            _const(_arg(call, 1, "embedding_dim"), names),
        )
        return None if n is None or d is None else n * d
    if kind in ("LayerNorm", "BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "GroupNorm", "RMSNorm"):
        d = _const(
            _arg(
                call,
                1 if kind == "GroupNorm" else 0,
                "num_channels" if kind == "GroupNorm" else "normalized_shape",
            ),
            names,
        )
        return None if d is None else 2 * d
    if kind == "MultiheadAttention":
        e = _const(_arg(call, 0, "embed_dim"), names)
        return None if e is None else 4 * e * e + 4 * e
    return None


KINDS = {
    "Linear",
    "Conv1d",
    "Conv2d",
    "Conv3d",
    "Embedding",
    "LayerNorm",
    "BatchNorm1d",
    "BatchNorm2d",
    "BatchNorm3d",
    "GroupNorm",
    "RMSNorm",
    "MultiheadAttention",
}


def estimate_params(source: str) -> ParamEstimate | None:
    """Lower-bound parameter count of the layers constructed in ``source``; None if none found."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return None
    names: dict[str, int] = {}
    for stmt in tree.body:
        if (
            isinstance(stmt, ast.Assign)
            and len(stmt.targets) == 1
            and isinstance(stmt.targets[0], ast.Name)
        ):
            value = _const(stmt.value, names)
            if value is not None:
                names[stmt.targets[0].id] = value
    total = layers = unresolved = 0
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        kind = (
            func.attr
            if isinstance(func, ast.Attribute)
            else func.id
            if isinstance(func, ast.Name)
            else None
        )
        if kind not in KINDS:
            continue
        count = _count(node, kind, names)
        if count is None:
            unresolved += 1
        else:
            total += count
            layers += 1
    return ParamEstimate(total, layers, unresolved) if layers else None
