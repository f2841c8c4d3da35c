"""Rank sets and the one classifier of rank conditions.

The vocabulary of the rank-uniformity analysis (:mod:`ddp_lsp.core.uniformity`, whose
docstring holds the contract): :class:`Subset` and :class:`RankSet` (the ranks that run a
statement, or on which a condition holds, with ``unless``/``when`` uniform qualifiers), and
:func:`condition_ranks`, which classifies a condition against the rank model (names only for
the module facts; with a :data:`Resolver` for the per-chunk analysis, which follows flags and
objects through assignments). :func:`single_process_test` recognises conditions that no rank
of a distributed run takes (``not dist.is_initialized()``, ``world_size == 1``).
"""

from __future__ import annotations

import ast
import enum
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from ddp_lsp.core import frameworks as framework_tables
from ddp_lsp.core.names import last_name

if TYPE_CHECKING:
    from ddp_lsp.core.ranks import RankModel


# Rank-aware flags and methods beyond the rank model's predicates (Hugging Face Trainer's
# TrainingArguments.should_save / should_log, Trainer.is_world_process_zero, torch_xla).
# (the framework tables' `rank-zero` names: Hugging Face TrainingArguments.should_save /
# should_log, Trainer.is_world_process_zero, torch_xla)
EXTRA_PREDICATES = framework_tables.BUILTIN.functions(framework_tables.Meaning.RANK_ZERO)
# Decorators that make a function body run on rank 0 only (Lightning, mmcv/mmengine,
# accelerate, DeepSpeed-style helpers).
RANK_ZERO_DECORATORS = framework_tables.BUILTIN.functions(
    framework_tables.Meaning.RANK_ZERO_ONLY
)  # the tables' rank-zero-only
# Same on every rank, and true exactly when the run is not distributed.
SINGLE_PROCESS_CALLS = frozenset(
    {"is_initialized", "is_available", "is_dist_avail_and_initialized", "distributed"}
)
# A rank of some process group the rank model does not name (``node_rank``,
# ``mpu.get_data_parallel_rank()``), or the GPU index mp.spawn scripts use as the local rank.
_RANKISH = re.compile(r"(^|_)rank$|^get_\w*rank$|^(gpu|gpu_id|gpu_idx|device_id)$", re.IGNORECASE)


# -- rank sets ------------------------------------------------------------------------------------


class Subset(enum.Enum):
    ALL = "all"
    RANK0 = "rank0"  # global rank 0
    LOCAL0 = "local0"  # local rank 0 of each node
    NONZERO = "nonzero"  # every rank but global rank 0
    NONLOCAL0 = "nonlocal0"  # every rank but the local rank 0 of each node
    SOME = "some"  # a rank-dependent subset we cannot name


_NEGATED = {
    Subset.RANK0: Subset.NONZERO,
    Subset.NONZERO: Subset.RANK0,
    Subset.LOCAL0: Subset.NONLOCAL0,
    Subset.NONLOCAL0: Subset.LOCAL0,
}
ZERO_SIDE = frozenset({Subset.RANK0, Subset.LOCAL0})
NONZERO_SIDE = frozenset({Subset.NONZERO, Subset.NONLOCAL0})


@dataclass(frozen=True)
class RankSet:
    """The ranks that run a statement, or on which a condition holds."""

    subset: Subset
    condition: str = ""  # for SOME: the condition's text ("args.rank % 2 == 0")
    unless: str = ""  # a uniform condition under which every rank runs it instead
    when: str = ""  # a uniform condition without which no rank does (`rank == 0 and save`)

    ALL: ClassVar[RankSet]  # every rank (set below)

    @property
    def is_all(self) -> bool:
        return self.subset is Subset.ALL

    @property
    def zero(self) -> bool:
        """Rank 0 (global, or the local rank 0 of each node) and no other rank."""
        return self.subset in ZERO_SIDE

    @property
    def nonzero(self) -> bool:
        return self.subset in NONZERO_SIDE

    @property
    def local(self) -> bool:
        return self.subset in (Subset.LOCAL0, Subset.NONLOCAL0)

    def negated(self) -> RankSet:
        if self.subset is Subset.ALL:
            return self
        if self.subset is Subset.SOME:
            return RankSet(Subset.SOME, f"not ({self.condition})" if self.condition else "")
        # not (R when u) is (not R) unless (not u); not (R unless u) is (not R) when (not u).
        return RankSet(
            _NEGATED[self.subset],
            unless=_not(self.when) if self.when else "",
            when=_not(self.unless) if self.unless else "",
        )

    def describe(self) -> str:
        text = {
            Subset.ALL: "all ranks",
            Subset.RANK0: "rank 0",
            Subset.LOCAL0: "local rank 0",
            Subset.NONZERO: "ranks ≠ 0",
            Subset.NONLOCAL0: "local ranks ≠ 0",
            Subset.SOME: f"ranks where {self.condition}" if self.condition else "some ranks",
        }[self.subset]
        if self.unless:
            text += f" (all ranks when {self.unless})"
        if self.when:
            text += f" (when {self.when})"
        return text

    def intersect(self, other: RankSet) -> RankSet:
        """The ranks in both (statement under two nested conditions)."""
        a, b = self.subset, other.subset
        if a is Subset.ALL:
            return other
        if b is Subset.ALL:
            return self
        unless = self.unless if self.unless == other.unless else ""
        when = " and ".join(dict.fromkeys(w for w in (self.when, other.when) if w))
        if a is b and a is not Subset.SOME:
            return RankSet(a, unless=unless, when=when)
        pair = {a, b}
        if pair == {Subset.RANK0, Subset.LOCAL0}:
            return RankSet(Subset.RANK0)  # global rank 0 is the local rank 0 of node 0
        if pair == {Subset.NONZERO, Subset.NONLOCAL0}:
            return RankSet(Subset.NONLOCAL0)
        if a in ZERO_SIDE and b is Subset.SOME:
            return RankSet(a)
        if b in ZERO_SIDE and a is Subset.SOME:
            return RankSet(b)
        conds = [c for c in (self._text(), other._text()) if c]
        return RankSet(Subset.SOME, " and ".join(dict.fromkeys(conds)))

    def _text(self) -> str:
        if self.subset is Subset.SOME:
            return self.condition
        return {
            Subset.RANK0: "rank == 0",
            Subset.LOCAL0: "local_rank == 0",
            Subset.NONZERO: "rank != 0",
            Subset.NONLOCAL0: "local_rank != 0",
        }.get(self.subset, "")


RankSet.ALL = RankSet(Subset.ALL)


def _not(text: str) -> str:
    if text.startswith("not (") and text.endswith(")"):
        return text[5:-1]
    return f"not ({text})" if " " in text else f"not {text}"


def _union(parts: Sequence[RankSet], test: ast.AST) -> RankSet:
    """The ranks of any of ``parts`` (the operands of ``test``); ``test``'s text is written
    only for a subset it cannot name (most unions are one side's)."""
    subsets = {p.subset for p in parts}
    if subsets <= {Subset.RANK0}:
        return RankSet(Subset.RANK0)
    if subsets <= ZERO_SIDE:
        return RankSet(Subset.LOCAL0)  # rank 0 is a local rank 0
    if subsets <= {Subset.NONLOCAL0}:
        return RankSet(Subset.NONLOCAL0)
    if subsets <= NONZERO_SIDE:
        return RankSet(Subset.NONZERO)
    return RankSet(Subset.SOME, _short(ast.unparse(test)))


# -- conditions -----------------------------------------------------------------------------------

# Resolves a name or attribute to the rank set of its truth value, or None (uniform/unknown).
Resolver = Callable[[ast.expr, int], "RankSet | None"]
_FLIPPED: dict[type, ast.cmpop] = {
    ast.Lt: ast.Gt(),
    ast.Gt: ast.Lt(),
    ast.LtE: ast.GtE(),
    ast.GtE: ast.LtE(),
}


def _local_name(e: ast.AST) -> bool:
    if isinstance(e, ast.Subscript):
        key = e.slice
        return isinstance(key, ast.Constant) and "LOCAL" in str(key.value).upper()
    if isinstance(e, ast.Call):
        name = last_name(e) or ""
        if name in ("int", "get", "getenv") and e.args:
            return _local_name(e.args[0]) or (
                isinstance(e.args[0], ast.Constant) and "LOCAL" in str(e.args[0].value).upper()
            )
        return "local" in name.lower()
    return "local" in (last_name(e) or "").lower()


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


def _distributed_test(model: RankModel, test: ast.AST) -> bool:
    """``args.local_rank != -1``, ``local_rank >= 0``, ``int(os.environ.get("RANK", -1)) !=
    -1``: "is this a distributed run", the same answer on every rank (the launcher sets the
    rank on all of them or on none)."""
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1):
        return False
    left, op, right = test.left, test.ops[0], test.comparators[0]
    if model.is_rank_expr(right) and not model.is_rank_expr(left):
        left, right = right, left
        op = _FLIPPED.get(type(op), op)
    if not model.is_rank_expr(left):
        return False
    consts = _int_constants(right)
    if consts is None or len(consts) != 1:
        return False
    value = consts[0]
    if value < 0 and isinstance(op, (ast.Eq, ast.NotEq, ast.Is, ast.IsNot, ast.Gt, ast.LtE)):
        return True
    return value == 0 and isinstance(op, (ast.GtE, ast.Lt))


def single_process_test(model: RankModel, e: ast.AST) -> bool:
    """True on every rank or on none, and false in every distributed run:
    ``not dist.is_initialized()``, ``world_size == 1``, ``args.local_rank == -1``."""
    if isinstance(e, ast.Compare) and len(e.ops) == 1 and _distributed_test(model, e):
        consts = _int_constants(e.comparators[0]) or _int_constants(e.left) or [0]
        op = e.ops[0]
        if consts[0] < 0:
            return isinstance(op, (ast.Eq, ast.Is, ast.LtE))
        return isinstance(op, ast.Lt)
    if isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.Not):
        inner = e.operand.func if isinstance(e.operand, ast.Call) else e.operand
        return (last_name(inner) or "") in SINGLE_PROCESS_CALLS
    if isinstance(e, ast.Compare) and len(e.ops) == 1:
        return (last_name(e.left) or "").lower() == "world_size" and isinstance(
            e.ops[0], (ast.Eq, ast.LtE)
        )
    return False


def condition_ranks(
    model: RankModel,
    test: ast.AST,
    resolve: Resolver | None = None,
    depth: int = 0,
    *,
    texts: bool = True,
) -> RankSet | None:
    """The ranks on which ``test`` holds; None when every rank computes the same value.

    The one classifier of rank conditions: the module facts call it without ``resolve``
    (names only), :class:`ChunkUniformity` with a resolver for flags and objects that carry
    rank dependence through assignments.

    ``texts=False`` (the facts extractor, which reads a result's subset and whether it has
    an ``unless`` only): the result's own texts are not written (``condition`` empty,
    ``when`` / ``unless`` a stand-in when not empty); its operands' are, as they decide it."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        inner = condition_ranks(model, test.operand, resolve, depth, texts=texts)
        return inner.negated() if inner is not None else None
    if isinstance(test, ast.NamedExpr):
        return condition_ranks(model, test.value, resolve, depth, texts=texts)
    if (
        isinstance(test, ast.Compare)
        and len(test.ops) == 1
        and isinstance(test.left, ast.NamedExpr)
    ):
        test = ast.Compare(test.left.value, test.ops, test.comparators)
    if isinstance(test, ast.BoolOp):
        return _boolop(model, test, resolve, depth, texts)
    if isinstance(test, ast.IfExp):
        # `self.is_local_main if local_fs else self.is_main`: a uniform choice between two
        # rank tests holds on the ranks of one of them (local rank 0 when either is local).
        body = condition_ranks(model, test.body, resolve, depth)
        orelse = condition_ranks(model, test.orelse, resolve, depth)
        if body is None or orelse is None or condition_ranks(model, test.test, resolve, depth):
            return None
        return _union((body, orelse), test)
    if model.is_predicate(test) or last_name(test) in EXTRA_PREDICATES:
        if isinstance(test, ast.Call) and isinstance(test.func, ast.Name) and test.args:
            pass  # `is_master(args)`: still the predicate
        return RankSet(Subset.LOCAL0 if _local_name(test) else Subset.RANK0)
    if model.is_rank_expr(test):
        return RankSet(Subset.NONLOCAL0 if _local_name(test) else Subset.NONZERO)
    if isinstance(test, ast.Compare):
        if len(test.ops) == 1:
            return _compare(model, test, resolve, depth, texts)
        return _some(test, texts) if model.mentions_rank(test) else None
    if resolve is not None and isinstance(test, (ast.Name, ast.Attribute)):
        return resolve(test, depth)
    return None


def _some(test: ast.AST, texts: bool = True) -> RankSet:
    return RankSet(Subset.SOME, _short(ast.unparse(test)) if texts else "")


_STAND_IN = "…"  # a text not written (texts=False): not empty, as the text would not be


def _short(text: str, limit: int = 60) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _boolop(
    model: RankModel, test: ast.BoolOp, resolve: Resolver | None, depth: int, texts: bool = True
) -> RankSet | None:
    parts = [condition_ranks(model, v, resolve, depth) for v in test.values]
    found = [p for p in parts if p is not None]
    if not found:
        return None
    if isinstance(test.op, ast.And):
        # The true branch runs only where every operand holds; uniform operands decide
        # whether it runs at all (the path analysis keeps them as path conditions).
        out = found[0]
        for p in found[1:]:
            out = out.intersect(p)
        if out.subset is Subset.SOME:
            return _some(test, texts)
        uniform = [v for p, v in zip(parts, test.values, strict=True) if p is None]
        if not texts:
            return RankSet(out.subset, when=_STAND_IN if uniform else "")
        when = " and ".join(_short(ast.unparse(v)) for v in uniform)
        return RankSet(out.subset, when=when)
    # `or`: the union. Single-process tests are false in every distributed run; another
    # uniform operand runs the branch on every rank when it holds (`unless`).
    uniform = [
        v
        for p, v in zip(parts, test.values, strict=True)
        if p is None and not single_process_test(model, v)
    ]
    out = _union(found, test)
    if out.subset is Subset.SOME:
        return _some(test, texts)
    if uniform:
        if not texts:
            return RankSet(out.subset, unless=_STAND_IN)
        return RankSet(out.subset, unless=" or ".join(_short(ast.unparse(v)) for v in uniform))
    return out


def _compare(
    model: RankModel, test: ast.Compare, resolve: Resolver | None, depth: int, texts: bool = True
) -> RankSet | None:
    if _distributed_test(model, test):
        return None
    left, op, right = test.left, test.ops[0], test.comparators[0]
    if model.is_rank_expr(right) and not model.is_rank_expr(left):
        left, right = right, left
        op = _FLIPPED.get(type(op), op)
    if not model.is_rank_expr(left):
        pred = model.is_predicate(left) or last_name(left) in EXTRA_PREDICATES
        if pred and isinstance(right, ast.Constant):
            base = RankSet(Subset.LOCAL0 if _local_name(left) else Subset.RANK0)
            truth = bool(right.value)
            if isinstance(op, (ast.Eq, ast.Is)):
                return base if truth else base.negated()
            if isinstance(op, (ast.NotEq, ast.IsNot)):
                return base.negated() if truth else base
        if (
            resolve is not None
            and isinstance(right, ast.Constant)
            and right.value is None
            and isinstance(op, (ast.Is, ast.IsNot, ast.Eq, ast.NotEq))
            and isinstance(left, (ast.Name, ast.Attribute))
        ):
            # `saver is not None` where `saver = Saver() if is_master else None`.
            made = resolve(left, depth)
            if made is not None:
                return made if isinstance(op, (ast.IsNot, ast.NotEq)) else made.negated()
            return None
        if pred or model.mentions_rank(left) or _RANKISH.search(last_name(left) or ""):
            return _some(test, texts)  # rank % 2 == 0, node_rank == 0
        if _RANKISH.search(last_name(right) or ""):
            return _some(test, texts)
        return None
    local = _local_name(left)
    zero = RankSet(Subset.LOCAL0 if local else Subset.RANK0)
    nonzero = zero.negated()
    consts = _int_constants(right)
    if consts is None:
        return _some(test, texts)
    if isinstance(op, (ast.In, ast.NotIn)):
        if all(c <= 0 for c in consts):
            return zero if isinstance(op, ast.In) else nonzero
        return _some(test, texts)
    if len(consts) != 1:
        return _some(test, texts)
    c = consts[0]
    if isinstance(op, (ast.Eq, ast.Is)) and c == 0:
        return zero
    if isinstance(op, (ast.NotEq, ast.IsNot, ast.Gt)) and c == 0:
        return nonzero
    if isinstance(op, ast.GtE) and c == 1:
        return nonzero
    if (isinstance(op, ast.Lt) and c == 1) or (isinstance(op, ast.LtE) and c == 0):
        return zero
    return _some(test, texts)
