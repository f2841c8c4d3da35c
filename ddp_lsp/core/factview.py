"""What a chunk's rules read of the module facts: :class:`FactsView` records each entry read,
and :func:`changed_entries` lists the entries that differ between two :class:`ModuleFacts`.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator, Mapping
from collections.abc import Set as AbstractSet
from typing import Any, Final

from ddp_lsp.core import names as known_names
from ddp_lsp.core.crossfile import (
    CalleeProps,
    ModuleProjectFacts,
    ParamKind,
    Provenance,
    is_test_path,
)
from ddp_lsp.core.factmerge import ModuleFacts, _callee_key, visible_key, visible_scopes
from ddp_lsp.core.gates import Gating
from ddp_lsp.core.ranks import RankModel

# -- what a chunk's rules read of the module facts ------------------------------------------------
#
# Salsa-style red-green invalidation (as in rust-analyzer): a chunk's findings record which
# entries of the module facts its rules read; when the facts change, the engine compares only
# those entries between the facts the findings were computed with and the new ones, and re-runs
# the chunk's rules only when one of them differs. An entry is a tuple: a table tag and a key
# (an alias name, a (scope, path) kind key, a function's qualified name...), or the table tag
# and WHOLE for a read that depends on the whole table (iterating it, its length).

WHOLE = "\x00*"  # no name, path or qualified name can be this
VALUES = "\x00values"  # the set of a table's distinct values
EVERYTHING = ("\x00everything",)  # a read the view cannot narrow down (the facts' key itself)
DIST = ("dist",)
PROJECT = ("proj",)  # the project facts as a whole (a rule holding the object)
HAS_PROJECT = ("proj?",)  # whether the module is analysed inside a project
TEST_CODE = ("proj-test",)  # whether the project's path of the module is test code
SINGLE_PROCESS = ("proj-sp",)  # the project's single-process functions of the module
BARRIER_IFS = ("bifs",)  # how many top-level ifs call a barrier
Entry = tuple[object, ...]


class EntryTag:
    """The table tag of a recorded entry (``(EntryTag.KINDS, (scope, path))``): what
    :class:`FactsView` records and :func:`changed_entries` compares name each table once here,
    so the two cannot drift apart. Short strings: a chunk keeps its entries between analyses."""

    ALIASES: Final = "a"  # an alias name (its qualified name)
    KINDS: Final = "k"  # a (scope, path) kind key
    KINDS_IN_SCOPE: Final = "ks"  # every kind bound in one scope (names_of_kind)
    SOMETIMES: Final = "sm"  # a kind key that holds on some launches only
    FUNC_PROPS: Final = "p"  # a function's properties
    FUNC_PARAMS: Final = "fp"  # a function's parameters
    FUNC_GATES: Final = "fg"  # the parameter values that switch a function's collectives off
    CALLEE_PROPS: Final = "pc"  # a callee not defined in the module (project, by name)
    PROJECT_KINDS: Final = "pk"  # a kind another file gave
    RANK_PREDICATES: Final = "rp"
    RANK_VARS: Final = "rv"
    NAMES_USED: Final = "n"  # an imported name used in the module
    KIND_SET: Final = "kset"  # which kinds the module holds
    PROP_SET: Final = "pset"  # which properties its functions have


class _RecMap(Mapping[Any, Any]):
    """A read-only mapping that records each key it is asked for (and whole-table reads)."""

    __slots__ = ("_d", "_tag", "_reads")

    def __init__(self, d: Mapping[Any, Any], tag: str, reads: set[Entry]) -> None:
        self._d = d
        self._tag = tag
        self._reads = reads

    def __getitem__(self, k: Any) -> Any:
        self._reads.add((self._tag, k))
        return self._d[k]

    def get(self, k: Any, default: Any = None) -> Any:
        self._reads.add((self._tag, k))
        return self._d.get(k, default)

    def __contains__(self, k: object) -> bool:
        self._reads.add((self._tag, k))
        return k in self._d

    def __iter__(self) -> Iterator[Any]:
        self._reads.add((self._tag, WHOLE))
        return iter(self._d)

    def __len__(self) -> int:
        self._reads.add((self._tag, WHOLE))
        return len(self._d)

    def keys(self) -> Any:
        self._reads.add((self._tag, WHOLE))
        return self._d.keys()

    def values(self) -> Any:
        # Rules ask whether some value is there (`"logging" in aliases.values()`, `any(...)`),
        # so this read rests on the set of distinct values: a new alias of a module already
        # imported (`import torch.distributed as d` while typing `dist`) leaves it unchanged.
        self._reads.add((self._tag, VALUES))
        return self._d.values()

    def items(self) -> Any:
        self._reads.add((self._tag, WHOLE))
        return self._d.items()

    def __eq__(self, other: object) -> bool:
        self._reads.add((self._tag, WHOLE))
        return self._d == (other._d if isinstance(other, _RecMap) else other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"_RecMap({self._tag}, {self._d!r})"


class _RecSet(AbstractSet[Any]):
    """A read-only set that records each membership test (and whole-set reads)."""

    __slots__ = ("_s", "_tag", "_reads")

    def __init__(self, s: AbstractSet[Any], tag: str, reads: set[Entry]) -> None:
        self._s = s
        self._tag = tag
        self._reads = reads

    @classmethod
    def _from_iterable(cls, it: Iterable[Any]) -> frozenset[Any]:
        return frozenset(it)

    def __contains__(self, x: object) -> bool:
        self._reads.add((self._tag, x))
        return x in self._s

    def __iter__(self) -> Iterator[Any]:
        self._reads.add((self._tag, WHOLE))
        return iter(self._s)

    def __len__(self) -> int:
        self._reads.add((self._tag, WHOLE))
        return len(self._s)

    def __bool__(self) -> bool:
        self._reads.add((self._tag, WHOLE))
        return bool(self._s)

    def __eq__(self, other: object) -> bool:
        self._reads.add((self._tag, WHOLE))
        return self._s == (other._s if isinstance(other, _RecSet) else other)

    def __hash__(self) -> int:
        self._reads.add((self._tag, WHOLE))
        return hash(self._s)

    def __repr__(self) -> str:
        return f"_RecSet({self._tag}, {self._s!r})"


class _RecProject:
    """The project facts, recording any use beyond "there are some" as a read of all of it."""

    __slots__ = ("_p", "_reads")

    def __init__(self, p: ModuleProjectFacts, reads: set[Entry]) -> None:
        self._p = p
        self._reads = reads

    def __bool__(self) -> bool:
        return True

    def __getattr__(self, name: str) -> Any:
        # Every distributed-only rule asks for the single-process functions: a read of its
        # own, so a change elsewhere in the project facts does not re-run them all.
        self._reads.add(SINGLE_PROCESS if name == "single_process" else PROJECT)
        return getattr(self._p, name)

    def __eq__(self, other: object) -> bool:
        self._reads.add(PROJECT)
        return self._p == (other._p if isinstance(other, _RecProject) else other)

    def __hash__(self) -> int:
        self._reads.add(PROJECT)
        return hash(self._p)


class FactsView:
    """The module facts as one chunk's rules see them: the same questions as
    :class:`ModuleFacts`, each answer recorded in ``reads`` as the entries it rests on."""

    def __init__(self, facts: ModuleFacts) -> None:
        self.base = facts
        reads: set[Entry] = set()
        self.reads = reads
        self.aliases: Mapping[str, str] = _RecMap(facts.aliases, EntryTag.ALIASES, reads)
        self.kinds: Mapping[tuple[str, str], str] = _RecMap(facts.kinds, EntryTag.KINDS, reads)
        self.func_props: Mapping[str, frozenset[str]] = _RecMap(
            facts.func_props, EntryTag.FUNC_PROPS, reads
        )
        self.func_params: Mapping[str, tuple[str, ...]] = _RecMap(
            facts.func_params, EntryTag.FUNC_PARAMS, reads
        )
        self.func_gates: Mapping[str, Gating] = _RecMap(
            facts.func_gates, EntryTag.FUNC_GATES, reads
        )
        self.rank_predicates: AbstractSet[str] = _RecSet(
            facts.rank_predicates, EntryTag.RANK_PREDICATES, reads
        )
        self.rank_vars: AbstractSet[str] = _RecSet(facts.rank_vars, EntryTag.RANK_VARS, reads)
        self.names_used: AbstractSet[str] = _RecSet(facts.names_used, EntryTag.NAMES_USED, reads)
        self.kind_set: AbstractSet[str] = _RecSet(facts.kind_set, EntryTag.KIND_SET, reads)
        self.prop_set: AbstractSet[str] = _RecSet(facts.prop_set, EntryTag.PROP_SET, reads)

    @property
    def distributed(self) -> bool:
        self.reads.add(DIST)
        return self.base.distributed

    @property
    def barrier_ifs(self) -> int:
        self.reads.add(BARRIER_IFS)
        return self.base.barrier_ifs

    @property
    def project(self) -> ModuleProjectFacts | None:
        # `if ctx.facts.project` / `is None` rests only on there being one; what is read of
        # it rests on all of it.
        self.reads.add(HAS_PROJECT)
        if self.base.project is None:
            return None
        return _RecProject(self.base.project, self.reads)  # type: ignore[return-value]

    @property
    def key(self) -> tuple[object, ...]:
        self.reads.add(EVERYTHING)
        return self.base.key

    def has_project(self) -> bool:
        self.reads.add(HAS_PROJECT)
        return self.base.project is not None

    def is_test_module(self) -> bool:
        self.reads.add(TEST_CODE)
        return self.base.is_test_module()

    def single_process_functions(self) -> frozenset[str]:
        # The engine asks it for every chunk of a distributed-only rule: it must rest on this
        # set alone, not on there being a project (the project's first facts arriving would
        # otherwise re-run every chunk of an open document).
        self.reads.add(SINGLE_PROCESS)
        return self.base.single_process_functions()

    def resolve(self, dotted_name: str) -> str | None:
        return known_names.resolve(dotted_name, self.aliases)

    def qualname(self, expr: ast.AST) -> str | None:
        return known_names.qualname(expr, self.aliases)

    def kind(self, path: str, scope: str, cls: str | None) -> str | None:
        key = visible_key(self.kinds, path, scope, cls)
        return None if key is None else self.kinds[key]

    def kind_on_every_launch(self, path: str, scope: str, cls: str | None) -> bool:
        key = visible_key(self.kinds, path, scope, cls)
        if key is None:
            return False
        self.reads.add((EntryTag.SOMETIMES, key))
        return key not in self.base.sometimes

    def names_of_kind(self, kind: str, scope: str, cls: str | None) -> list[str]:
        # Depends on every kind bound in the visible scopes: one entry per scope.
        for s in visible_scopes(scope, cls):
            self.reads.add((EntryTag.KINDS_IN_SCOPE, s))
        return self.base.names_of_kind(kind, scope, cls)

    def props(self, qualname: str) -> frozenset[str]:
        found = self.func_props.get(qualname)
        return found if found is not None else frozenset()

    def callee_props(self, callee: str, cls: str | None) -> frozenset[str]:
        key = _callee_key(callee, cls)
        own = self.func_props.get(key)
        if own is not None:
            return own
        self.reads.add((EntryTag.CALLEE_PROPS, key))
        return self.base.callee_props(callee, cls)

    def callee_gating(self, callee: str, cls: str | None) -> Gating | None:
        key = _callee_key(callee, cls)
        if key in self.func_props:
            return self.func_gates.get(key)
        self.reads.add((EntryTag.CALLEE_PROPS, key))
        return self.base.callee_gating(callee, cls)

    # The two origins rest on one entry each, not on there being a project: without one the
    # answer is None, as with a project that says nothing of that key (changed_entries reads
    # a missing project as empty tables), so the project's first facts re-run only the
    # chunks whose answer they change.
    def kind_origin(self, path: str, scope: str, cls: str | None) -> ParamKind | None:
        key = visible_key(self.kinds, path, scope, cls)
        if key is None:
            return None
        self.reads.add((EntryTag.PROJECT_KINDS, key))
        project = self.base.project
        return None if project is None else project.extra_kinds.get(key)

    def callee_origin(self, callee: str, cls: str | None, prop: str) -> Provenance | None:
        key = _callee_key(callee, cls)
        if key in self.func_props:
            return None
        self.reads.add((EntryTag.CALLEE_PROPS, key))
        return self.base.callee_origin(callee, cls, prop)


def recording_ranks(model: RankModel, reads: set[Entry]) -> RankModel:
    """``model`` (the module's rank model: configured names and predicates with the module's
    rank variables and predicate functions) recording each name it is asked about. Configured
    names never change under an analysis key, so a name's entry is the module's own one."""
    return RankModel(
        _RecSet(model.names, EntryTag.RANK_VARS, reads),  # type: ignore[arg-type]
        _RecSet(model.predicates, EntryTag.RANK_PREDICATES, reads),  # type: ignore[arg-type]
        model.frameworks,
    )


_MISSING = object()


def _diff_map(out: set[Entry], tag: str, old: Mapping[Any, Any], new: Mapping[Any, Any]) -> None:
    if old is new or old == new:
        return
    for k in old.keys() | new.keys():
        if old.get(k, _MISSING) != new.get(k, _MISSING):
            out.add((tag, k))
            if tag == EntryTag.KINDS:
                out.add((EntryTag.KINDS_IN_SCOPE, k[0]))
    out.add((tag, WHOLE))
    try:
        if set(old.values()) != set(new.values()):
            out.add((tag, VALUES))
    except TypeError:  # unhashable values
        out.add((tag, VALUES))


def _diff_set(out: set[Entry], tag: str, old: AbstractSet[Any], new: AbstractSet[Any]) -> None:
    if old is new or old == new:
        return
    for x in old ^ new:
        out.add((tag, x))
    out.add((tag, WHOLE))


def _callee_entries(cp: Mapping[str, CalleeProps]) -> dict[str, object]:
    return {k: (v, tuple(sorted(v.origins.items()))) for k, v in cp.items()}


def changed_entries(old: ModuleFacts, new: ModuleFacts) -> frozenset[Entry]:
    """The entries (see :class:`FactsView`) whose value differs between two module facts;
    findings that read none of them are the same under both."""
    if old is new or old == new:
        return frozenset()
    out: set[Entry] = {EVERYTHING}
    _diff_map(out, EntryTag.ALIASES, old.aliases, new.aliases)
    _diff_map(out, EntryTag.KINDS, old.kinds, new.kinds)
    _diff_map(out, EntryTag.FUNC_PROPS, old.func_props, new.func_props)
    _diff_map(out, EntryTag.FUNC_PARAMS, old.func_params, new.func_params)
    _diff_map(out, EntryTag.FUNC_GATES, old.func_gates, new.func_gates)
    _diff_set(out, EntryTag.RANK_PREDICATES, old.rank_predicates, new.rank_predicates)
    _diff_set(out, EntryTag.RANK_VARS, old.rank_vars, new.rank_vars)
    _diff_set(out, EntryTag.NAMES_USED, old.names_used, new.names_used)
    _diff_set(out, EntryTag.KIND_SET, old.kind_set, new.kind_set)
    _diff_set(out, EntryTag.PROP_SET, old.prop_set, new.prop_set)
    _diff_set(out, EntryTag.SOMETIMES, old.sometimes, new.sometimes)
    if old.distributed != new.distributed:
        out.add(DIST)
    if old.barrier_ifs != new.barrier_ifs:
        out.add(BARRIER_IFS)
    if old.project != new.project:
        out.add(PROJECT)
        op, np_ = old.project, new.project
        if (op is None) != (np_ is None):
            out.add(HAS_PROJECT)
        if (op is not None and is_test_path(op.path)) != (
            np_ is not None and is_test_path(np_.path)
        ):
            out.add(TEST_CODE)
        # No project reads as "no single-process functions" (single_process_functions).
        if (op.single_process if op else frozenset()) != (
            np_.single_process if np_ else frozenset()
        ):
            out.add(SINGLE_PROCESS)
        _diff_map(
            out,
            EntryTag.PROJECT_KINDS,
            op.extra_kinds if op else {},
            np_.extra_kinds if np_ else {},
        )
        _diff_map(
            out,
            EntryTag.CALLEE_PROPS,
            _callee_entries(op.callee_props) if op else {},
            _callee_entries(np_.callee_props) if np_ else {},
        )
    return frozenset(out)
