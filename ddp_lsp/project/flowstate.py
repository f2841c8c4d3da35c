"""The project facts' update state kept on disk: ``ddp-lsp check`` after another file's facts
changed updates the stored computation instead of computing the project again.

The server's indexer keeps its last computation in memory and updates it after an edit
(:func:`~ddp_lsp.project.flowupdate._update`). ``ddp-lsp check`` is a new process each time;
without this module it read every summary of the project and computed every stage again
(15 CPU s for a file of torch's own package, 2,285 files, after a call was added to a function
of another file). Here the stages' results are stored with the snapshot
(:mod:`ddp_lsp.project.snapshot`), module by module, as plain data (:class:`ModuleState`, one
JSON string per module that has any, decoded only when the update reads that module), and
:func:`update` runs the same ``_update`` over them:

- the summaries are read from the cache when resolution or the update asks for a module
  (:class:`_Summaries`: the changed modules, what their names resolve to, the modules whose
  facts are built again), not all of them;
- import resolution is a fresh :class:`~ddp_lsp.project.resolve.Resolver` over those; the
  changed modules must keep their interface (imports, functions and their parameters,
  bases: an edit inside function bodies), so every other module resolves as it did;
- each changed module's old parts, guard flags and call-graph share are built again from its
  old summary (read from the cache by the digest the state names); what only the whole
  computation knows (kinds, properties with provenance, guard counts, who calls whom by name,
  the gates, the call graph's walks, the facts of each module) is read from the state;
- what the update changed is written back for the modules it touched (the overlays of
  ``flowupdate._copy`` name them), the rest of the stored text is kept as it was;
- an edit that moved lines (a call added at the top of a function body) is updated too: the
  changed module's lines are paired old to new (:func:`_shift`) and every stored text is read
  through a per-file map of the lines it cites (:class:`_Moved`; :mod:`ddp_lsp.project.flowlines`);
- an edit that changes the kinds (a model wrapped in DDP, a DDP model passed to another
  module) replays the kinds' rounds for what it reaches, as the server's update does
  (``flowstages._replay_kinds``): the state keeps the round of each kind, each module's
  callers by call site (with the functions they call) and inheritors, and the modules that
  gained a kind in each round (:class:`~ddp_lsp.project.flowrestored.ReplayAids`), so the
  replay decodes only the modules it reaches.

Everything ``_update`` cannot show to be unchanged (the call graph's walks that change, an
interface that changes, a file added or removed, a function that lost its last reference)
returns None: the
caller computes from scratch and stores a fresh state. The result is exactly the update's,
which equals a computation from scratch: tests/project/test_flow_incremental.py chains updates
through stored states on random edit sequences, so a state that diverged would fail there.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

from ddp_lsp.core import facts as fact_model
from ddp_lsp.core.crossfile import ModuleProjectFacts, ParamKind, Provenance
from ddp_lsp.core.gates import Gating
from ddp_lsp.project.flowlines import (
    MAX_MOVED_FILES,
    Maps,
    _at,
    _facts_moved,
    _Keys,
    _kind_at,
    _Lines,
    _moved_after,
    _relabelled,
    _shift,
    _Shifted,
)
from ddp_lsp.project.flowrestored import (
    ReplayAids,
    Unavailable,
    _FromOut,
    _Index,
    _Keyed,
    _PerModule,
    _Summaries,
)
from ddp_lsp.project.flowstages import (
    ProjectFacts,
    _guard_flags,
    _module_parts,
    _ModuleParts,
    _Stages,
)
from ddp_lsp.project.flowupdate import _Overlay, _OwnView, _update
from ddp_lsp.project.index import ProjectIndex
from ddp_lsp.project.reach import ModuleEdges, single_process
from ddp_lsp.project.resolve import Resolver, interface
from ddp_lsp.project.summary import ModuleSummary

Key = tuple[str, str]
_T = TypeVar("_T")

# At most this many modules may differ from the state's summaries (each is summarised, read
# twice and resolved; more, and computing from scratch is as cheap).
MAX_CHANGED = 32


@dataclass(frozen=True)
class _KindAt:
    scope: str
    path: str
    kind: ParamKind


@dataclass(frozen=True)
class _Prop:
    name: str
    origin: Provenance


@dataclass(frozen=True)
class _PropsOf:
    qualname: str
    props: tuple[_Prop, ...]


@dataclass(frozen=True)
class _Count:
    qualname: str
    total: int
    guarded: int


@dataclass(frozen=True)
class _UsersOf:
    qualname: str
    modules: frozenset[str]


@dataclass(frozen=True)
class _GatingOf:
    qualname: str
    gating: Gating


@dataclass(frozen=True)
class _CallsInto:
    module: str  # a module with call sites into this one
    functions: frozenset[str]  # this module's functions they reach


@dataclass(frozen=True)
class ModuleState:
    """What the stages derived about one module's functions and names (``_Stages``'s entries
    whose key is this module); the facts themselves are the snapshot's."""

    kind_seeds: tuple[_KindAt, ...]
    kinds: tuple[_KindAt, ...]
    prop_seeds: tuple[_PropsOf, ...]
    props: tuple[_PropsOf, ...]
    counts: tuple[_Count, ...]  # guard counts of its functions as callees
    users: tuple[_UsersOf, ...]  # the modules that call each of its functions by a name
    gating: tuple[_GatingOf, ...]
    # Its functions in single_process's sets.
    reached: frozenset[str]
    unknown: frozenset[str]
    referenced: frozenset[str]
    entries: frozenset[str]
    from_entries: frozenset[str]
    # What the kinds' replay reads (flowstages._replay_kinds, ReplayAids): the round each of
    # ``kinds`` was first proposed in (0: a seed), in their order; the modules whose call
    # sites reach this one's functions, with those functions; the modules with a class whose
    # project base is here.
    rounds: tuple[int, ...] = ()
    into: tuple[_CallsInto, ...] = ()
    inheritors: frozenset[str] = frozenset()


_NONE: frozenset[str] = frozenset()
_EMPTY = ModuleState((), (), (), (), (), (), (), _NONE, _NONE, _NONE, _NONE, _NONE)
_REACH_SETS = ("reached", "unknown", "referenced", "entries", "from_entries")


@dataclass(frozen=True)
class _Source:
    module: str
    path: str
    digest: str  # the summary the state was computed from (ModuleSummary.digest)


@dataclass(frozen=True)
class _Moved:
    """The lines of one file that the stored texts cite, by key: each key (a line of the
    summary the texts were computed from, or a negative key given to a line an update added)
    -> its line in the summary the state names (``_Source.digest``); 0: a line gone since
    (a text that cites it does not decode: the update computes from scratch)."""

    path: str
    lines: tuple[tuple[int, int], ...]


@dataclass(frozen=True)
class _Gains:
    round: int
    modules: frozenset[str]  # the modules that gained a kind in this round of the kinds


@dataclass(frozen=True)
class _Called:
    flood: str  # from_entries, reached, unknown (single_process's walks)
    names: frozenset[str]  # the attribute names its functions call


@dataclass(frozen=True)
class StateHead:
    sources: tuple[_Source, ...]  # index.modules as computed
    entered: frozenset[str]
    walked: bool  # single_process's walks ran (something is distributed code)
    reached_modules: frozenset[str]
    touched: frozenset[str]
    # The files whose lines moved since the texts citing them were stored (see _Moved): the
    # texts of the modules (this state's and the snapshot's facts) are read through these
    # maps, and only those an update rewrites are stored again (with keys, not lines).
    moved: tuple[_Moved, ...] = ()
    # Each round (>= 1) of the kinds' propagation with the modules that gained a kind in it
    # (the replay stops where the computation from scratch stops: it reads every module's
    # gains without decoding every module).
    gains: tuple[_Gains, ...] = ()
    # Each flood's called attribute names (flowwalks._same_edges: a call of `x.name()`
    # added where no flood sees a new name leaves the walks as they were).
    called: tuple[_Called, ...] = ()


@dataclass(frozen=True)
class StoredState:
    head: StateHead
    modules: dict[str, str]  # module -> its ModuleState as JSON text (those with any)
    # path -> the facts the state's computation gave the module (as the snapshot stores them;
    # None: none), where the snapshot's facts were patched since (build._still_holds: a
    # function added that nothing calls). The snapshot's own facts are the state's elsewhere.
    originals: dict[str, str | None] = field(default_factory=dict)


_codecs: tuple[Any, Any] | None = None


def _codec() -> tuple[Any, Any]:
    global _codecs
    if _codecs is None:
        from ddp_lsp.project.codec import Codec

        _codecs = (Codec(StateHead), Codec(ModuleState))
    return _codecs


def fingerprint() -> str:
    head, module = _codec()
    return f"{head.fingerprint}.{module.fingerprint}"


def _text(state: ModuleState) -> str:
    return json.dumps(_codec()[1].encode(state), separators=(",", ":"), ensure_ascii=False)


def to_json(state: StoredState) -> dict[str, Any]:
    """The state as its file stores it (the ``originals`` live in the snapshot)."""
    return {"head": _codec()[0].encode(state.head), "modules": state.modules}


def from_json(value: Any, originals: Mapping[str, str | None]) -> StoredState:
    """Raises ValueError, TypeError or KeyError on anything unexpected."""
    if type(value) is not dict or len(value) != 2:
        raise ValueError("not a state")
    modules = value["modules"]
    if type(modules) is not dict or not all(type(t) is str for t in modules.values()):
        raise ValueError("not a state")
    return StoredState(_codec()[0].decode(value["head"], {}), modules, dict(originals))


# -- a computation's state, as stored ----------------------------------------------------------


def _kinds_at(kinds: Mapping[tuple[str, str], ParamKind]) -> tuple[_KindAt, ...]:
    return tuple(_KindAt(s, p, k) for (s, p), k in sorted(kinds.items()))


def _props_of(group: Mapping[str, Mapping[str, Provenance]]) -> tuple[_PropsOf, ...]:
    return tuple(
        _PropsOf(q, tuple(_Prop(p, o) for p, o in sorted(ps.items())))
        for q, ps in sorted(group.items())
        if ps
    )


def _module_state(
    kind_seeds: Mapping[tuple[str, str], ParamKind],
    kinds: Mapping[tuple[str, str], ParamKind],
    prop_seeds: Mapping[str, Mapping[str, Provenance]],
    props: Mapping[str, Mapping[str, Provenance]],
    counts: Mapping[str, tuple[int, int]],
    users: Mapping[str, frozenset[str]],
    gating: Mapping[str, Gating],
    reach: Mapping[str, Collection[str]],
    rounds: Mapping[tuple[str, str], int],
    into: Mapping[str, Collection[str]],
    inheritors: Collection[str],
) -> ModuleState:
    kinds_at = _kinds_at(kinds)
    return ModuleState(
        _kinds_at(kind_seeds),
        kinds_at,
        _props_of(prop_seeds),
        _props_of(props),
        tuple(_Count(q, n, g) for q, (n, g) in sorted(counts.items())),
        tuple(_UsersOf(q, ms) for q, ms in sorted(users.items())),
        tuple(_GatingOf(q, g) for q, g in sorted(gating.items())),
        frozenset(reach.get("reached", ())),
        frozenset(reach.get("unknown", ())),
        frozenset(reach.get("referenced", ())),
        frozenset(reach.get("entries", ())),
        frozenset(reach.get("from_entries", ())),
        tuple(rounds[(k.scope, k.path)] for k in kinds_at),
        tuple(_CallsInto(c, frozenset(fs)) for c, fs in sorted(into.items()) if fs),
        frozenset(inheritors),
    )


def _by_module(table: Mapping[Key, _T]) -> dict[str, dict[str, _T]]:
    out: dict[str, dict[str, _T]] = {}
    for (m, q), v in table.items():
        out.setdefault(m, {})[q] = v
    return out


def state_of(facts: ProjectFacts, index: ProjectIndex) -> StoredState | None:
    """The state of a computation from scratch (``flow.compute``), to store; None when it has
    none (an empty project)."""
    st = facts.stages
    if st is None:
        return None
    props, counts = _by_module(st.props), _by_module(st.guard_counts)
    users, gating = _by_module(st.users), _by_module(st.gating)
    reach: dict[str, dict[str, set[str]]] = {}
    for name in _REACH_SETS:
        for m, q in st.reach.get(name, ()):
            reach.setdefault(m, {}).setdefault(name, set()).add(q)
    kind_round = st.kind_round or {}
    calls_into: dict[str, dict[str, set[str]]] = {}
    inheritors: dict[str, set[str]] = {}
    for part in facts.parts.values():
        for s, _, tm, tfi in part.sites:
            calls_into.setdefault(tm, {}).setdefault(s, set()).add(tfi.qualname)
        for m, _, bm, _ in part.inherits:
            inheritors.setdefault(bm, set()).add(m)
    gains: dict[int, set[str]] = {}
    for m, rounds in kind_round.items():
        for r in rounds.values():
            if r:
                gains.setdefault(r, set()).add(m)
    modules: dict[str, str] = {}
    for m in sorted(index.modules):
        state = _module_state(
            st.kind_seeds.get(m, {}),
            st.kinds.get(m, {}),
            {q: ps for (_, q), ps in st.prop_seeds.get(m, {}).items()},
            props.get(m, {}),
            counts.get(m, {}),
            users.get(m, {}),
            gating.get(m, {}),
            reach.get(m, {}),
            kind_round.get(m, {}),
            calls_into.get(m, {}),
            inheritors.get(m, ()),
        )
        if state != _EMPTY:
            modules[m] = _text(state)
    walked = bool(st.reach)
    head = StateHead(
        tuple(_Source(m, s.path, s.digest) for m, s in sorted(index.modules.items())),
        frozenset(st.entered),
        walked,
        frozenset(st.reach["reached_modules"]) if walked else frozenset(),
        frozenset(st.reach["touched"]) if walked else frozenset(),
        (),
        _gains(gains),
        tuple(
            _Called(name, frozenset(called))
            for name, (called, _) in sorted(st.reach.get("floods", {}).items())
        ),
    )
    return StoredState(head, modules)


def _gains(gains: Mapping[int, Collection[str]]) -> tuple[_Gains, ...]:
    return tuple(_Gains(r, frozenset(ms)) for r, ms in sorted(gains.items()) if ms)


# -- lines moved (see flowlines.py) ------------------------------------------------------------


def _state_moved(s: ModuleState, maps: Maps) -> ModuleState:
    """``s`` with every provenance in a file of ``maps`` read through its map."""
    if not maps:
        return s
    import dataclasses

    def kinds(group: tuple[_KindAt, ...]) -> tuple[_KindAt, ...]:
        return tuple(_KindAt(k.scope, k.path, _kind_at(k.kind, maps)) for k in group)

    def props(group: tuple[_PropsOf, ...]) -> tuple[_PropsOf, ...]:
        return tuple(
            _PropsOf(g.qualname, tuple(_Prop(p.name, _at(p.origin, maps)) for p in g.props))
            for g in group
        )

    return dataclasses.replace(
        s,
        kind_seeds=kinds(s.kind_seeds),
        kinds=kinds(s.kinds),
        prop_seeds=props(s.prop_seeds),
        props=props(s.props),
    )


# -- a stored state, read lazily ---------------------------------------------------------------


class _Decoded:
    """Each module's :class:`ModuleState`, decoded when first read."""

    def __init__(self, modules: Mapping[str, str], maps: Maps | None = None) -> None:
        self.modules = modules
        self.maps: Maps = maps or {}  # the moved files' lines (see _Lines)
        self.memo: dict[str, ModuleState] = {}

    def __call__(self, m: str) -> ModuleState:
        got = self.memo.get(m)
        if got is None:
            text = self.modules.get(m)
            got = (
                _EMPTY
                if text is None
                else _state_moved(_codec()[1].decode(json.loads(text), {}), self.maps)
            )
            self.memo[m] = got
        return got


class _KeySet(Collection[Key]):
    """One of single_process's sets, read from the state by module."""

    def __init__(self, read: _Decoded, name: str) -> None:
        self.read = read
        self.name = name

    def __contains__(self, key: object) -> bool:
        m, q = cast(Key, key)
        return q in getattr(self.read(m), self.name)

    def __iter__(self) -> Iterator[Key]:
        raise NotImplementedError("a stored set is only asked what it holds")

    def __len__(self) -> int:
        raise NotImplementedError("a stored set is only asked what it holds")


class _Reach(Mapping[str, Any]):
    """single_process's sets (``_Stages.reach``), empty when the walks did not run."""

    def __init__(self, head: StateHead, read: _Decoded) -> None:
        self.table: dict[str, Any] = {}
        if head.walked:
            self.table = {name: _KeySet(read, name) for name in _REACH_SETS}
            self.table["reached_modules"] = head.reached_modules
            self.table["touched"] = head.touched

    def __getitem__(self, name: str) -> Any:
        return self.table[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.table)

    def __len__(self) -> int:
        return len(self.table)


@dataclass(frozen=True)
class Updated:
    facts: ProjectFacts  # read lazily: ask ``facts.modules`` for the modules wanted
    state: StoredState  # to store
    # path -> the module's facts as the snapshot stores them (None: it has none now), where
    # they are not the snapshot's any more.
    facts_text: dict[str, str | None]
    # path -> its stored map of lines (see _Moved): the snapshot's facts are read through it.
    moved: dict[str, dict[int, int]] = field(default_factory=dict)


def update(
    index: ProjectIndex,
    state: StoredState,
    stored_facts: Mapping[str, str],
    current: Mapping[str, ModuleSummary],
    summary_of: Callable[[str], ModuleSummary | None],
) -> Updated | None:
    """The facts after the modules of ``current`` (module -> its summary now; every other
    module is as ``state`` names it) changed, from ``state`` (the last computation's or
    update's). ``stored_facts``: path -> the facts of the module as the snapshot stores them
    (:attr:`StoredState.originals` say where the state's differ). ``summary_of(digest)``: a
    summary from the cache. None when the update cannot show that it equals a computation
    from scratch, or a summary is missing: compute from scratch then."""
    from ddp_lsp.project.build import says_something
    from ddp_lsp.project.snapshot import decode, encode

    root = index.root
    head = state.head
    stored_maps = {mv.path: dict(mv.lines) for mv in head.moved}
    maps: dict[str, _Lines] = {}  # each moved file's keys -> its lines now

    def facts_of(m: str, path: str) -> ModuleProjectFacts:
        text = state.originals[path] if path in state.originals else stored_facts.get(path)
        if text is None:
            return ModuleProjectFacts(m, path, root=str(root))
        return _facts_moved(decode(text, root), maps)

    paths = {s.module: s.path for s in head.sources}
    digests = {s.module: s.digest for s in head.sources}
    changed = sorted(m for m, s in current.items() if digests.get(m) != s.digest)
    if any(m not in digests or current[m].path != paths[m] for m in current):
        return None  # another file holds the module now
    if not changed or len(changed) > MAX_CHANGED:
        return None
    summaries = _Summaries(digests, current, summary_of)
    try:
        old = {m: summaries.summary_of(digests[m]) for m in changed}
        old_summaries = {m: s for m, s in old.items() if s is not None}
        if len(old_summaries) != len(old):
            return None
        shifts: dict[str, dict[int, int]] = {}
        for m in changed:
            before, now = old_summaries[m], current[m]
            if interface(before) != interface(now):
                return None  # names resolve differently: resolution is not reused here
            if any(
                fact_model.RANK_PREDICATE in fi.props
                for s in (before, now)
                for fi in s.facts.functions
            ):
                return None  # other files are summarised knowing the project's predicates
            # Its lines moved: the old summary and the stored computation as if they had
            # moved with them (see "lines moved" above).
            shift = _shift(before, now)
            if shift is not None:
                shifts[paths[m]] = shift
                old_summaries[m] = _relabelled(before, _Shifted(shift))
        for path in {*stored_maps, *shifts}:
            got = shifts.get(path)
            maps[path] = _Lines(stored_maps.get(path), None if got is None else _Shifted(got))
        if len(maps) > MAX_MOVED_FILES:
            return None
        return _update_from(
            index,
            state,
            facts_of,
            summaries,
            changed,
            old_summaries,
            paths,
            says_something,
            encode,
            maps,
            _moved_after(stored_maps, shifts),
        )
    except (Unavailable, ValueError, TypeError, KeyError, RecursionError):
        return None  # a summary no longer cached, a stored entry that does not decode


def _update_from(
    index: ProjectIndex,
    state: StoredState,
    facts_of: Callable[[str, str], ModuleProjectFacts],
    summaries: _Summaries,
    changed: list[str],
    old_summaries: Mapping[str, ModuleSummary],
    paths: Mapping[str, str],
    says_something: Callable[[ModuleProjectFacts], bool],
    encode: Callable[[ModuleProjectFacts], str],
    maps: Maps,
    moved: dict[str, dict[int, int]],
) -> Updated | None:
    view = _Index(index, summaries)
    idx = cast(ProjectIndex, view)
    res = Resolver(idx, track=False)
    names = frozenset(paths)
    read = _Decoded(state.modules, maps)

    def kinds_of(field: str) -> Callable[[str], dict[tuple[str, str], ParamKind]]:
        return lambda m: {(k.scope, k.path): k.kind for k in getattr(read(m), field)}

    def props_of(field: str, m: str) -> dict[str, dict[str, Provenance]]:
        return {g.qualname: {p.name: p.origin for p in g.props} for g in getattr(read(m), field)}

    old_parts = {m: _module_parts(res, m, old_summaries[m]) for m in changed}
    old_own = {m: index.own_facts(old_summaries[m]) for m in changed}

    def parts_of(m: str) -> _ModuleParts:
        got = old_parts.get(m)
        return got if got is not None else _module_parts(res, m, summaries[m])

    out: _PerModule[ModuleProjectFacts] = _PerModule(names, lambda m: facts_of(m, paths[m]))

    def rounds_of(m: str) -> dict[tuple[str, str], int]:
        got = read(m)
        return {(k.scope, k.path): r for k, r in zip(got.kinds, got.rounds, strict=True)}

    def calls_into(tm: str, s: str) -> Collection[str] | None:
        if s in old_parts:
            return None  # a changed module: its sites as they are now (not stored)
        return next((c.functions for c in read(tm).into if c.module == s), frozenset())

    aids = ReplayAids(
        {g.round: g.modules for g in state.head.gains},
        _PerModule(names, lambda m: read(m).inheritors),
        calls_into,
    )
    stages = _Stages(
        cast(Any, _PerModule(names, kinds_of("kind_seeds"))),
        cast(Any, _PerModule(names, kinds_of("kinds"))),
        cast(
            Any,
            _PerModule(
                names, lambda m: {(m, q): ps for q, ps in props_of("prop_seeds", m).items()}
            ),
        ),
        cast(Any, _Keyed(names, lambda m: props_of("props", m))),
        cast(Any, _PerModule(names, lambda m: _guard_flags(parts_of(m), old_own[m]))),
        cast(
            Any, _Keyed(names, lambda m: {c.qualname: (c.total, c.guarded) for c in read(m).counts})
        ),
        cast(Any, _FromOut(out, "distributed")),
        cast(Any, _FromOut(out, "single_process")),
        set(state.head.entered),
        cast(Any, out),
        cast(Any, _Keyed(names, lambda m: {u.qualname: u.modules for u in read(m).users})),
        _Reach(state.head, read),
        cast(Any, _Keyed(names, lambda m: {g.qualname: g.gating for g in read(m).gating})),
        cast(Any, _PerModule(names, rounds_of)),
        cast(Any, _PerModule(names, lambda m: frozenset(c.module for c in read(m).into))),
    )
    # The changed modules' old call-graph shares, from their old summaries.
    old_edges: dict[str, ModuleEdges] = {}
    single_process(
        res,
        names,
        old_summaries,
        _OwnView(old_own.__getitem__),
        {},
        [site for m in changed for site in old_parts[m].sites],
        index.ranks.frameworks,
        old_edges,
        edges_only=True,
        only=changed,
    )
    previous = ProjectFacts(
        cast(Any, out),
        resolver=res,
        parts=cast(Any, _PerModule(names, parts_of, dict(old_parts))),
        edges=old_edges,
        stages=stages,
    )
    called = {c.flood: c.names for c in state.head.called} if state.head.called else None
    got = _update(idx, previous, res, {}, changed, aids, called)
    if got is None or got.stages is None:
        return None
    return _stored(
        got, state, changed, old_parts, summaries, paths, read, says_something, encode, moved
    )


def _touched(mapping: object) -> set[str]:
    """The modules whose entries an update changed in one of its overlays."""
    if not isinstance(mapping, _Overlay):
        return set()
    keys = [*mapping.changes, *mapping.deleted]
    return {k if isinstance(k, str) else k[0] for k in keys}


def _group(mapping: object, m: str) -> dict[str, Any]:
    """A (module, qualname)-keyed table's entries of module ``m``, as the update left it."""
    if isinstance(mapping, _Overlay):
        got = _group(mapping.base, m)
        for k in mapping.deleted:
            if k[0] == m:
                got.pop(k[1], None)
        for k, v in mapping.changes.items():
            if k[0] == m:
                got[k[1]] = v
        return got
    if isinstance(mapping, _Keyed):
        return dict(mapping.group(m))
    assert isinstance(mapping, Mapping)
    return {q: v for (mm, q), v in mapping.items() if mm == m}


def _stored(
    got: ProjectFacts,
    state: StoredState,
    changed: list[str],
    old_parts: Mapping[str, _ModuleParts],
    summaries: _Summaries,
    paths: Mapping[str, str],
    read: _Decoded,
    says_something: Callable[[ModuleProjectFacts], bool],
    encode: Callable[[ModuleProjectFacts], str],
    moved: dict[str, dict[int, int]],
) -> Updated:
    st = got.stages
    assert st is not None
    touched = set(changed)
    for table in (
        st.kind_seeds,
        st.kinds,
        st.kind_round,
        st.prop_seeds,
        st.props,
        st.guard_counts,
        st.users,
    ):
        touched |= _touched(table)
    # The functions each changed module's call sites reach, by module, before and now: the
    # callers' index (ModuleState.into) of every module reached then or now is written again.
    calls_now: dict[str, dict[str, set[str]]] = {}
    for c in changed:
        for part in (old_parts[c], got.parts[c]):
            for _, _, tm, _ in part.sites:
                touched.add(tm)
        for _, _, tm, tfi in got.parts[c].sites:
            calls_now.setdefault(c, {}).setdefault(tm, set()).add(tfi.qualname)
    kind_round = st.kind_round
    assert kind_round is not None
    gains = {g.round: set(g.modules) for g in state.head.gains}
    modules = dict(state.modules)
    # What is written again cites each moved file's lines by key (the stored maps, new keys
    # added for new lines), as every text kept as it was does.
    keys: dict[str, _Keys] = {path: _Keys(lines) for path, lines in moved.items()}
    for m in sorted(touched):
        before = read(m)
        rounds = kind_round.get(m, {})
        was_rounds = set(before.rounds)
        if was_rounds != set(rounds.values()):
            for r in was_rounds - {0}:
                gains[r].discard(m)
            for r in set(rounds.values()) - {0}:
                gains.setdefault(r, set()).add(m)
        into = {c.module: c.functions for c in before.into if c.module not in calls_now}
        for c, targets in calls_now.items():
            if m in targets:
                into[c] = frozenset(targets[m])
        s = _module_state(
            st.kind_seeds[m],
            st.kinds[m],
            {q: ps for (_, q), ps in st.prop_seeds[m].items()},
            _group(st.props, m),
            _group(st.guard_counts, m),
            _group(st.users, m),
            {g.qualname: g.gating for g in before.gating},
            {name: getattr(before, name) for name in _REACH_SETS},
            rounds,
            into,
            before.inheritors,
        )
        if s == _EMPTY:
            modules.pop(m, None)
        else:
            modules[m] = _text(_state_moved(s, keys))
    # The snapshot's facts to replace: the modules whose facts were built again and differ,
    # and those the snapshot patched since the state was computed (the state's facts hold
    # there unless built again).
    facts_text: dict[str, str | None] = dict(state.originals)
    out = got.modules
    assert isinstance(out, _Overlay)
    for m in sorted(_touched(out)):
        f = out[m]
        if f is not out.base[m]:
            facts_text[paths[m]] = encode(_facts_moved(f, keys)) if says_something(f) else None
    head = state.head
    digests = {m: summaries[m].digest for m in changed}
    head = StateHead(
        tuple(_Source(s.module, s.path, digests.get(s.module, s.digest)) for s in head.sources),
        head.entered,
        head.walked,
        head.reached_modules,
        head.touched,
        tuple(_Moved(path, tuple(sorted(lines.items()))) for path, lines in sorted(moved.items())),
        _gains(gains),
        head.called,
    )
    return Updated(got, StoredState(head, modules), facts_text, moved)
