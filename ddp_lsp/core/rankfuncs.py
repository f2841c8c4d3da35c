"""What a function is, by the rank tests of its body: a rank predicate (``is_main_process()``,
``is_master_proc(num_gpus)``: every value it returns is a rank-0 test) or a function that
guards itself (``save_on_master``: its work runs on rank 0 only). Asked by the fact extractor
(core/factextract.py) for each function it meets."""

from __future__ import annotations

import ast
from typing import TypeVar

from ddp_lsp.core.ranks import RankModel
from ddp_lsp.core.uniformity import condition_ranks, single_process_test


def guards_itself(body: list[ast.stmt], ranks: RankModel) -> bool:
    """A body that does its work only on rank 0 (``save_on_master``)."""
    stmts = [s for s in body if not _is_docstring(s)]
    if not stmts:
        return False
    first = stmts[0]
    if isinstance(first, ast.If):
        pol = condition_ranks(ranks, first.test)
        if zero_only(pol) and len(stmts) == 1 and not first.orelse:
            return True
        if nonzero_only(pol) and first.body and isinstance(first.body[-1], (ast.Return, ast.Raise)):
            return True
    return False


def _is_docstring(s: ast.stmt) -> bool:
    return (
        isinstance(s, ast.Expr)
        and isinstance(s.value, ast.Constant)
        and isinstance(s.value.value, str)
    )


def is_rank_predicate(f: ast.FunctionDef | ast.AsyncFunctionDef, ranks: RankModel) -> bool:
    returns = _returns(f.body)
    if not returns:
        return False
    values = [r.value for r in returns if r.value is not None]  # (each has one)
    others = [v for v in values if not zero_only(condition_ranks(ranks, v))]
    if not others:
        return True
    # Only a first-rank test or a `return True` (which the single-process side may hold) can
    # be among them: any other value rules the function out, without the walk below.
    if any(not _is_true(v) and not _first_of_groups(v, ranks) for v in others):
        return False
    # `if dist.is_initialized(): return dist.get_rank() % num_gpus == 0` / `else: return True`
    # (SlowFast's `is_master_proc(num_gpus)`): a first-rank test (rank 0 of every group of
    # `num_gpus`, the job's rank 0 when called with the world size), and true in a
    # single-process run, where no rank of a distributed run goes.
    single = _single_process_returns(f.body, ranks)
    tests = [r.value for r in returns if r.value is not None and id(r) not in single]
    return bool(tests) and all(
        zero_only(condition_ranks(ranks, v)) or _first_of_groups(v, ranks) for v in tests
    )


def _first_of_groups(e: ast.expr, ranks: RankModel) -> bool:
    """``rank % n == 0``: the first rank of every group of ``n`` (rank 0 among them)."""
    return (
        isinstance(e, ast.Compare)
        and len(e.ops) == 1
        and isinstance(e.ops[0], ast.Eq)
        and isinstance(e.left, ast.BinOp)
        and isinstance(e.left.op, ast.Mod)
        and ranks.is_rank_expr(e.left.left)
        and isinstance(e.comparators[0], ast.Constant)
        and e.comparators[0].value == 0
    )


def _single_process_returns(body: list[ast.stmt], ranks: RankModel) -> set[int]:
    """The ``return True`` statements (ids) on the single-process side of an ``if``: the body
    of ``if not dist.is_initialized():`` / ``if world_size == 1:``, the ``else:`` of ``if
    dist.is_initialized():``."""
    out: set[int] = set()
    for node in _statements_of(body, ast.If):
        negated = ast.UnaryOp(ast.Not(), node.test)
        for side, test in ((node.body, node.test), (node.orelse, negated)):
            if not single_process_test(ranks, test):
                continue
            for s in side:
                if isinstance(s, ast.Return) and _is_true(s.value):
                    out.add(id(s))
    return out


def _is_true(e: ast.expr | None) -> bool:
    return isinstance(e, ast.Constant) and e.value is True


def _statements_of(body: list[ast.stmt], kind: type[_S]) -> list[_S]:
    """Every statement of class ``kind`` under ``body`` (nested functions and classes
    included): the ``ast.walk`` of the statements, less their expressions, which hold no
    statement (a lambda's body is an expression)."""
    out: list[_S] = []
    stack: list[ast.AST] = list(body)
    lists = _LISTS
    while stack:
        s = stack.pop()
        cls = s.__class__
        if cls is kind:
            out.append(s)  # type: ignore[arg-type]
        names = lists.get(cls)
        if names is None:
            names = lists[cls] = _list_fields(cls)
        for name in names:
            seq = getattr(s, name, None)
            if isinstance(seq, list):
                stack.extend(seq)
    return out


def _returns(body: list[ast.stmt]) -> list[ast.Return]:
    """Every ``return <value>`` under ``body``, nested functions and classes included."""
    return [r for r in _statements_of(body, ast.Return) if r.value is not None]


_LISTS: dict[type, tuple[str, ...]] = {}
_S = TypeVar("_S", bound=ast.stmt)


def _list_fields(cls: type) -> tuple[str, ...]:
    """The fields of ``cls`` that may hold statements (or handlers, cases), in this order."""
    return tuple(
        n
        for n in ("body", "orelse", "finalbody", "handlers", "cases")
        if n in getattr(cls, "_fields", ())
    )


def zero_only(found: object) -> bool:
    """Rank 0 only (global or local), with no uniform escape (the uniformity analysis)."""
    return getattr(found, "zero", False) and not getattr(found, "unless", "")


def nonzero_only(found: object) -> bool:
    return getattr(found, "nonzero", False) and not getattr(found, "unless", "")
