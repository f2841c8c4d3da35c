"""Rank guards: conditions whose value depends on which process evaluates them.

RULES.md "Rank guards": comparisons or truth tests of ``rank``, ``local_rank``,
``dist.get_rank()``, ``int(os.environ["RANK"])``, ``is_main_process()``,
``accelerator.is_main_process``, ``trainer.is_global_zero`` and names the user configures.
``dist.is_initialized()`` and ``world_size > 1`` are *not* rank guards: every rank computes the
same value for them.

A guard has a polarity, which says which ranks take its true branch:

- ``ZERO``: only rank 0 (or the local rank 0 of each node), e.g. ``rank == 0``,
  ``args.local_rank in [-1, 0]``, ``is_main_process()``;
- ``NONZERO``: every rank but 0, e.g. ``rank != 0``, ``not is_main_process()``;
- ``SOME``: a rank-dependent subset we cannot name, e.g. ``rank == 1 or step == 0``.
"""

from __future__ import annotations

import ast
import enum
from collections.abc import Iterable
from dataclasses import dataclass

from ddp_lsp.core.frameworks import BUILTIN, FrameworkModel, Meaning
from ddp_lsp.core.names import RANK_ENV_VARS, dotted
from ddp_lsp.core.walk import walk

DEFAULT_RANK_NAMES = frozenset(
    {
        "rank",
        "global_rank",
        "local_rank",
        "world_rank",
        "RANK",
        "LOCAL_RANK",
        "GLOBAL_RANK",
        "process_index",
        "local_process_index",
        "rank_id",
        "gpu_rank",
        "ddp_rank",
        "ddp_local_rank",
        "dp_rank",
        "gpu_id",  # the PyTorch DDP tutorial's name for the rank
    }
)
# Rank-0 predicates and flags: the framework tables' `rank-zero` names (ddp_lsp.core.frameworks).
DEFAULT_PREDICATES = BUILTIN.functions(Meaning.RANK_ZERO)
# Calls that return this process's rank.
RANK_FUNCTIONS = BUILTIN.functions(Meaning.RANK)
# Same value on every rank; `not dist.is_initialized() or rank == 0` is still a rank-0 guard.
_SINGLE_PROCESS_CHECKS = frozenset(
    {"is_initialized", "is_available", "is_dist_avail_and_initialized"}
)


class Polarity(enum.Enum):
    ZERO = "zero"
    NONZERO = "nonzero"
    SOME = "some"

    def negated(self) -> Polarity:
        if self is Polarity.ZERO:
            return Polarity.NONZERO
        if self is Polarity.NONZERO:
            return Polarity.ZERO
        return Polarity.SOME

    def describe_true(self) -> str:
        return {
            Polarity.ZERO: "only rank 0",
            Polarity.NONZERO: "every rank but 0",
            Polarity.SOME: "only some ranks",
        }[self]


@dataclass(frozen=True)
class RankModel:
    """Recognises rank expressions and guards with the configured and discovered names."""

    names: frozenset[str] = DEFAULT_RANK_NAMES
    predicates: frozenset[str] = DEFAULT_PREDICATES
    # What framework APIs mean (built-in tables + the user's entries): travels with the rank
    # names because both come from the settings and both change the facts.
    frameworks: FrameworkModel = BUILTIN

    def with_extra(self, names: Iterable[str] = (), predicates: Iterable[str] = ()) -> RankModel:
        return RankModel(
            self.names | frozenset(names), self.predicates | frozenset(predicates), self.frameworks
        )

    # -- expressions -------------------------------------------------------------------------

    def is_rank_expr(self, e: ast.AST) -> bool:
        if isinstance(e, ast.Name):
            return e.id in self.names
        if isinstance(e, ast.Attribute):
            return e.attr in self.names
        if isinstance(e, ast.Call):
            func = e.func
            name = (
                func.attr
                if isinstance(func, ast.Attribute)
                else (func.id if isinstance(func, ast.Name) else None)
            )
            if name in RANK_FUNCTIONS:
                return True
            if name and name.startswith("get_") and name.endswith("_rank"):
                return True  # Megatron-style get_data_parallel_rank(), get_tensor_model_parallel_rank()
            if name == "int" and len(e.args) == 1:
                return self.is_rank_expr(e.args[0])
            if name in ("get", "getenv") and e.args:
                first = e.args[0]
                return isinstance(first, ast.Constant) and first.value in RANK_ENV_VARS
            return False
        if isinstance(e, ast.Subscript):
            key = e.slice
            return (
                isinstance(key, ast.Constant)
                and key.value in RANK_ENV_VARS
                and (dotted(e.value) or "").endswith("environ")
            )
        return False

    def is_predicate(self, e: ast.AST) -> bool:
        if isinstance(e, ast.Call):
            e = e.func
        if isinstance(e, ast.Name):
            return e.id in self.predicates
        if isinstance(e, ast.Attribute):
            return e.attr in self.predicates
        return False

    def mentions_rank(self, e: ast.AST) -> bool:
        """True when any part of ``e`` is a rank expression or predicate."""
        for node in walk(e):
            if self.is_rank_expr(node) or self.is_predicate(node):
                return True
        return False

    # -- guards --------------------------------------------------------------------------------

    def guard(self, test: ast.AST) -> Polarity | None:
        """The polarity of ``if test:``'s true branch, or None if it is not a rank guard."""
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            inner = self.guard(test.operand)
            return inner.negated() if inner is not None else None
        if self.is_predicate(test):
            return Polarity.ZERO
        if self.is_rank_expr(test):
            return Polarity.NONZERO  # `if rank:` is true on every rank but 0
        if isinstance(test, ast.Compare) and len(test.ops) == 1:
            return self._compare(test.left, test.ops[0], test.comparators[0])
        if isinstance(test, ast.BoolOp):
            parts = [self.guard(v) for v in test.values]
            if isinstance(test.op, ast.And):
                # The true branch runs only where every operand holds.
                found = [p for p in parts if p is not None]
                if not found:
                    return None
                if Polarity.ZERO in found:
                    return Polarity.ZERO
                if all(p is Polarity.NONZERO for p in found):
                    return Polarity.NONZERO
                return Polarity.SOME
            if all(p is None for p in parts):
                return None
            if all(
                p is Polarity.ZERO or (p is None and _single_process_check(v))
                for p, v in zip(parts, test.values, strict=True)
            ):
                return Polarity.ZERO
            return Polarity.SOME
        if isinstance(test, ast.NamedExpr):
            return self.guard(test.value)
        return None

    def _compare(self, left: ast.AST, op: ast.cmpop, right: ast.AST) -> Polarity | None:
        if self.is_rank_expr(right) and not self.is_rank_expr(left):
            left, right = right, left
            op = _FLIPPED.get(type(op), op)
        if not self.is_rank_expr(left):
            if self.is_predicate(left) and isinstance(right, ast.Constant):
                truth = bool(right.value)
                if isinstance(op, (ast.Eq, ast.Is)):
                    return Polarity.ZERO if truth else Polarity.NONZERO
                if isinstance(op, (ast.NotEq, ast.IsNot)):
                    return Polarity.NONZERO if truth else Polarity.ZERO
            if self.mentions_rank(left):
                return Polarity.SOME  # e.g. rank % 2 == 0
            return None
        consts = _int_constants(right)
        if consts is None:
            return Polarity.SOME
        if isinstance(op, (ast.In, ast.NotIn)):
            zero_like = all(c <= 0 for c in consts)
            pol = Polarity.ZERO if zero_like else Polarity.SOME
            return pol if isinstance(op, ast.In) else pol.negated()
        if len(consts) != 1:
            return Polarity.SOME
        c = consts[0]
        if isinstance(op, (ast.Eq, ast.Is)):
            return Polarity.ZERO if c == 0 else Polarity.SOME
        if isinstance(op, (ast.NotEq, ast.IsNot)):
            return Polarity.NONZERO if c == 0 else Polarity.SOME
        if isinstance(op, ast.Gt):
            return Polarity.NONZERO if c == 0 else Polarity.SOME
        if isinstance(op, ast.GtE):
            return Polarity.NONZERO if c == 1 else Polarity.SOME
        if isinstance(op, ast.Lt):
            return Polarity.ZERO if c == 1 else Polarity.SOME
        if isinstance(op, ast.LtE):
            return Polarity.ZERO if c == 0 else Polarity.SOME
        return Polarity.SOME


_FLIPPED: dict[type, ast.cmpop] = {
    ast.Lt: ast.Gt(),
    ast.Gt: ast.Lt(),
    ast.LtE: ast.GtE(),
    ast.GtE: ast.LtE(),
}


def _int_constants(e: ast.AST) -> list[int] | None:
    if isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.USub):
        inner = _int_constants(e.operand)
        return [-v for v in inner] if inner is not None and len(inner) == 1 else None
    if isinstance(e, ast.Constant) and isinstance(e.value, int) and not isinstance(e.value, bool):
        return [e.value]
    if isinstance(e, (ast.Tuple, ast.List, ast.Set)):
        out: list[int] = []
        for elt in e.elts:
            vals = _int_constants(elt)
            if vals is None or len(vals) != 1:
                return None
            out.extend(vals)
        return out
    return None


def _single_process_check(e: ast.AST) -> bool:
    """``not dist.is_initialized()``, ``world_size == 1``: true exactly when not distributed."""
    if isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.Not):
        inner = e.operand
        if isinstance(inner, ast.Call):
            inner = inner.func
        name = (
            inner.attr
            if isinstance(inner, ast.Attribute)
            else (inner.id if isinstance(inner, ast.Name) else "")
        )
        return name in _SINGLE_PROCESS_CHECKS
    if isinstance(e, ast.Compare) and len(e.ops) == 1:
        left = dotted(e.left) or ""
        return left.rsplit(".", 1)[-1] in ("world_size", "WORLD_SIZE") and isinstance(
            e.ops[0], (ast.Eq, ast.LtE)
        )
    return False
