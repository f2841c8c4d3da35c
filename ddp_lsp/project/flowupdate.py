"""The incremental update of the project facts (``flow.compute(index, previous)``).

:func:`_update` shows, for the changed modules alone, that each stage of the computation
(:mod:`ddp_lsp.project.flowstages`) would derive what it derived before, by an induction over
the propagation rounds, and then rebuilds only the facts of the changed modules and of those
whose callee properties or guards changed. A stage the changed modules do change is
re-derived for what they reach instead: the kinds (``flowstages._replay_kinds``, also over a
state restored from disk), and in the server's own state the call graph's walks
(``reachupdate.extend_walks``, or ``single_process`` over the kept shares) and
``distributed`` after imports added (:func:`_distributed_grown`). None when it cannot
(``flow._compute`` then runs every stage again). The helpers here serve only that proof: the
call sites that take part in the kinds' propagation (:func:`_relevant_sites`); the
comparisons of a module's share of ``reach.single_process``'s call graph are in
:mod:`ddp_lsp.project.flowwalks`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Collection, Iterator, Mapping, MutableMapping
from typing import Any, TypeVar, cast

from ddp_lsp.core import facts as fact_model
from ddp_lsp.core.crossfile import (
    ParamKind,
    Provenance,
)
from ddp_lsp.project.flowrestored import ReplayAids
from ddp_lsp.project.flowstages import (
    _CARRIED,
    ProjectFacts,
    _distributed,
    _guard_flags,
    _line,
    _lookup,
    _module_out,
    _module_parts,
    _ModuleParts,
    _prop_seeds,
    _replay_kinds,
    _ScalerWrappers,
    _seed_kinds,
    _silenced,
    _Stages,
)
from ddp_lsp.project.flowwalks import (
    _floods,
    _isolated_nodes,
    _local_of,
    _same_edges,
    _same_walks,
)
from ddp_lsp.project.index import ProjectIndex
from ddp_lsp.project.reach import ModuleEdges, single_process
from ddp_lsp.project.reachupdate import extend_walks
from ddp_lsp.project.resolve import Resolver, interface
from ddp_lsp.project.summary import ModuleSummary


def _relevant_sites(
    res: Resolver,
    part: _ModuleParts,
    kinds: Mapping[str, Mapping[tuple[str, str], ParamKind]],
) -> Counter[tuple[object, ...]]:
    """The call sites of a module that take part in the kinds' propagation under ``kinds``
    (a computation's result): an argument of a known kind, or a parameter that has one; each
    with what the propagation reads of it. A site outside this set proposes nothing in any
    round (the kinds of every round are a subset of the result, and a lookup that finds
    nothing in a table finds nothing in a part of it) and marks nothing ``mixed``."""
    out: Counter[tuple[object, ...]] = Counter()
    functions = {fi.qualname: fi for fi in part.summary.facts.functions}
    for (m, cs, tm, tfi), pairs in zip(part.sites, part.site_params, strict=True):
        caller = functions.get(cs.caller)
        cls = caller.cls if caller else None
        for param, arg in pairs:
            if (tfi.qualname, param) in kinds.get(tm, {}) or (
                _lookup(kinds.get(m, {}), arg, cs.caller, cls) is not None
            ):
                out[
                    (
                        cs,
                        tm,
                        tfi.qualname,
                        tfi.params,
                        tfi.cls,
                        cls,
                        part.site_line.get((m, cs), _line(caller)),
                    )
                ] += 1
                break
    return out


def _update(
    index: ProjectIndex,
    previous: ProjectFacts,
    res: Resolver,
    edges: dict[str, ModuleEdges],
    changed: list[str] | None = None,
    aids: ReplayAids | None = None,
    called: Mapping[str, Collection[str]] | None = None,
) -> ProjectFacts | None:
    """The facts after an update that kept import resolution (``res.reuse``), from
    ``previous`` and the changed modules alone, when every stage can be shown to give what it
    gave (an edit inside a function body that adds or removes calls the propagations do not
    carry anything through, the usual case); None when not (then ``flow._compute`` runs).

    Each stage is a least fixed point of monotone rounds whose result also depends on the
    round a fact is first proposed in (its provenance); a change is shown not to matter by
    the induction over rounds the docstrings below give (every round of the new computation
    equals the old one's), never by comparing results, so the outcome is exactly that of a
    computation from scratch. tests/project/test_flow_incremental.py checks it on random edit
    sequences.

    ``changed``: the modules whose summaries differ from those ``previous`` was computed from,
    when the caller knows them (a state restored from disk, :mod:`ddp_lsp.project.flowstate`:
    ``previous``'s stages and parts are then read lazily, module by module, its ``edges``
    hold the changed modules' old shares only, and copies are overlays, not dicts); their
    interfaces must be unchanged (``res`` is a fresh resolver over the index as it is now).
    ``aids``: what such a state keeps for the kinds' replay (``flowrestored.ReplayAids``; with
    ``previous.stages``'s rounds and callers); without them an edit that changes the kinds
    there returns None. ``called``: each of single_process's floods' called attribute names
    (such a state keeps them): a function's called attributes may then change where no
    flood sees it (``flowwalks._same_edges``)."""
    st = previous.stages
    assert st is not None
    old_parts = previous.parts
    names = sorted(index.modules)
    summaries = index.modules
    restored = changed is not None
    # The kinds and the walks re-derived for what the changed modules reach, where a check
    # below fails (flowstages._replay_kinds, reachupdate.extend_walks): the kinds wherever
    # the state records their rounds and each module's callers (a restored state with its
    # aids too), the walks in the server's own state (which holds every module's share).
    kinds_replayable = (
        st.kind_round is not None and st.into is not None and (not restored or aids is not None)
    )
    replayable = kinds_replayable and not restored
    imports_changed = False
    if changed is None:
        if len(names) != len(old_parts) or any(m not in old_parts for m in names):
            return None
        # The edited modules, and those whose import resolution read one whose interface
        # changed (Resolver.stale: their resolved parts and edges are built again, and
        # compared).
        changed = [m for m in names if old_parts[m].summary is not summaries[m] or m in res.stale]
        # Which project modules a module imports: the `distributed` flood and
        # single_process's `touched` read them.
        for m, before_imports in res.old_imports.items():
            if res.imported_modules(m) != before_imports:
                if not replayable:
                    return None
                imports_changed = True
    own_cache: dict[str, fact_model.ModuleFacts] = {}

    def own(m: str) -> fact_model.ModuleFacts:
        got = own_cache.get(m)
        if got is None:
            got = own_cache[m] = index.own_facts(summaries[m])
        return got

    parts = _copy(old_parts)
    for m in changed:
        parts[m] = _module_parts(res, m, summaries[m])
    kinds = st.kinds
    old_own = {m: index.own_facts(old_parts[m].summary) for m in changed}
    scaler_props = {fact_model.UNSCALES, fact_model.UPDATES_SCALER}

    # -- kinds: the same seeds, bindings and relevant call sites --------------------------------
    # Every round reads the seeds, the alias bindings (and the names unwrapped), the classes'
    # project bases and the call sites; a site that is not relevant (_relevant_sites) proposes
    # nothing in any round of either computation. When all of these are equal, each round
    # proposes what it proposed, and the result, `mixed` included, is the previous one.
    wraps = _ScalerWrappers(res, _OwnView(own))
    kind_seeds = _copy(st.kind_seeds)
    kinds_dirty = False
    for m in changed:
        o, n = old_own[m], own(m)
        same = o.kinds == n.kinds and o.sometimes == n.sometimes
        if not same and not kinds_replayable:
            return None
        if o.aliases != n.aliases and (summaries[m].bases or old_parts[m].summary.bases):
            return None  # single_process reads a class's other bases through them
        if {q: ps & scaler_props for q, ps in o.func_props.items() if ps & scaler_props} != {
            q: ps & scaler_props for q, ps in n.func_props.items() if ps & scaler_props
        }:
            return None  # a GradScaler wrapper class: other modules' seeds
        seeds = _seed_kinds(res, m, summaries[m], n, wraps)
        kind_seeds[m] = seeds
        if kinds_dirty:
            continue
        op, np_ = old_parts[m], parts[m]
        if not (
            same
            and seeds == st.kind_seeds[m]
            and op.inherits == np_.inherits
            and op.unwrapped == np_.unwrapped
            and _alias_bindings(op.summary) == _alias_bindings(np_.summary)
            and _relevant_sites(res, op, kinds) == _relevant_sites(res, np_, kinds)
        ):
            if not kinds_replayable:
                return None
            kinds_dirty = True
    # Each module's callers by call site (the replay's reverse index), for the next update.
    into = st.into
    if kinds_replayable and into is not None:
        into = _copy(into)
        for m in changed:
            was_targets = {site[2] for site in old_parts[m].sites}
            now_targets = {site[2] for site in parts[m].sites}
            for tm in was_targets - now_targets:
                into[tm] = into[tm] - {m}
            for tm in now_targets - was_targets:
                into[tm] = into.get(tm, frozenset()) | {m}
    kinds_changed: set[str] = set()
    kind_round = st.kind_round
    if kinds_dirty:
        assert into is not None and kind_round is not None
        new_kinds, new_rounds = _replay_kinds(
            res,
            parts,
            summaries,
            kind_seeds,
            st.kinds,
            kind_round,
            into,
            changed,
            {m: {site[2] for site in old_parts[m].sites} for m in changed},
            own,
            aids,
        )
        kinds = _copy(kinds)
        for m, kinds_m in new_kinds.items():
            if kinds_m != st.kinds.get(m, {}):
                kinds[m] = kinds_m
                kinds_changed.add(m)
        kind_round = _copy(kind_round)
        for m, rounds_m in new_rounds.items():
            if rounds_m:
                kind_round[m] = rounds_m
            else:
                kind_round.pop(m, None)

    # -- properties: the same carried seeds, and no call added or removed to a function that
    # has a carried property. A call edge to a function without one proposes nothing in any
    # round (by induction, that function has none in any round of either computation), and
    # the rounds read only carried properties: each function keeps what the rounds gave it,
    # with its own other properties as they are now. The gates read a function's gate sites
    # (FunctionInfo.gates) only where it performs a collective, and its module's own gating:
    # such a function with gate sites, or a module whose own gating changed, computes
    # everything again.
    changed_props: MutableMapping[tuple[str, str], dict[str, Provenance]] | None = None
    prop_seeds = _copy(st.prop_seeds)
    props_changed: set[tuple[str, str]] = set()
    for m in changed:
        seeds_p = _prop_seeds(res, m, summaries[m], own(m))
        old_seeds = st.prop_seeds[m]
        prop_seeds[m] = seeds_p
        old_calls, new_calls = old_parts[m].calls, parts[m].calls
        for key in old_calls.keys() | new_calls.keys():
            before, after = set(old_calls.get(key, ())), set(new_calls.get(key, ()))
            for callee in before ^ after:
                if any(p in _CARRIED for p in st.props.get(callee, ())):
                    return None
        # The gates resolve the names the gated functions call, in their module, and read
        # the gating of the functions they call (a module's own: ModuleFacts.func_gates).
        if old_own[m].func_gates != own(m).func_gates:
            return None
        gated = {
            fi.qualname
            for s in (old_parts[m].summary, summaries[m])
            for fi in s.facts.functions
            if fi.gates.sites
        }
        for q in gated:
            if fact_model.COLLECTIVE in st.props.get((m, q), {}) and not _same_gate_inputs(
                res,
                m,
                q,
                old_parts[m].summary,
                summaries[m],
                old_own[m],
                own(m),
                st.props,
                res.stale,
            ):
                return None
        if seeds_p == old_seeds:
            continue
        for key in seeds_p.keys() | old_seeds.keys():
            a, b = old_seeds.get(key, {}), seeds_p.get(key, {})
            if a == b:
                continue
            if {p: o for p, o in a.items() if p in _CARRIED} != {
                p: o for p, o in b.items() if p in _CARRIED
            }:
                return None
            if fact_model.COLLECTIVE in st.props.get(key, ()):
                return None
            if changed_props is None:
                changed_props = _copy(st.props)
            derived = {p: o for p, o in st.props.get(key, {}).items() if p not in a}
            if b or derived:
                changed_props[key] = {**b, **derived}
            else:
                changed_props.pop(key, None)
            props_changed.add(key)
    props = st.props if changed_props is None else changed_props

    # -- single_process: the same call graph, seeds and classes -----------------------------------
    before_edges = {m: previous.edges.get(m) for m in changed}
    for m in changed:
        edges.pop(m, None)
    frameworks = index.ranks.frameworks
    # (The modules whose edges are kept are not read: `summaries` need only hold the rest.)
    single_process(
        res,
        names,
        summaries,
        _OwnView(own),
        props,
        [s for m in changed for s in parts[m].sites],
        frameworks,
        edges,
        edges_only=True,
        only=changed if restored else None,
    )
    local: Mapping[str, frozenset[str]] = st.local
    changed_local: MutableMapping[str, frozenset[str]] | None = None
    walks_dirty = imports_changed
    for m in changed:
        if walks_dirty:
            break
        was, now = before_edges[m], edges[m]
        if (
            was is None
            or not _same_edges(was, now, _floods(st.reach, called))
            or not _same_walks(was, now, st.reach, None if restored else edges)
        ):
            if not replayable:
                return None
            walks_dirty = True
            break
        if was.nodes != now.nodes:
            # Functions added or removed that call, hand and are called by nothing (their
            # edges are equal): the walks are the same, and only this module's answer is
            # derived again from their sets (reach.single_process's last loop).
            if not _isolated_nodes(res, m, was, now, st.reach):
                if not replayable:
                    return None
                walks_dirty = True
                break
            if changed_local is None:
                local = changed_local = _copy(st.local)
            got = _local_of(res, m, now.nodes, st.reach)
            if got:
                changed_local[m] = got
            else:
                changed_local.pop(m, None)
    reach: Mapping[str, Any] = st.reach
    entered: Collection[str] = st.entered
    distributed: Mapping[str, Provenance] = st.distributed
    local_changed: set[str] = set()
    extended = None
    if walks_dirty:
        # The walks again: continued from the last ones where the changed modules' shares
        # only grew (reachupdate.extend_walks), computed over the kept shares otherwise.
        if all(before_edges[m] is not None for m in changed):
            extended = extend_walks(
                res,
                edges,
                cast(Mapping[str, ModuleEdges], before_edges),
                st.reach,
                _OwnView(own),
                imports_changed,
                res.stale,
            )
        if extended is not None:
            new_local, reach = extended
            local = changed_local = _copy(st.local)
            for m, local_m in new_local.items():
                if local_m:
                    changed_local[m] = local_m
                else:
                    changed_local.pop(m, None)
            local_changed = {m for m in new_local if local.get(m) != st.local.get(m)}
        else:
            reach = {}
            local, _ = single_process(
                res,
                names,
                summaries,
                _OwnView(own),
                props,
                [s for m in names for s in parts[m].sites],
                frameworks,
                edges,
                details=reach,
            )
            local_changed = {
                m for m in set(local) | set(st.local) if local.get(m) != st.local.get(m)
            }
        if reach.get("from_entries") is not st.reach.get("from_entries"):
            entered = {m for m, _ in cast(set[Key], reach.get("from_entries", set()))}
        if entered is not st.entered and set(entered) != set(st.entered):
            distributed = _distributed(res, props, set(entered))
        elif imports_changed:
            grown = _distributed_grown(res, st.distributed, res.old_imports)
            distributed = grown if grown is not None else _distributed(res, props, set(entered))
        if distributed is not st.distributed:
            local_changed |= {
                m
                for m in set(distributed) | set(st.distributed)
                if distributed.get(m) != st.distributed.get(m)
            }

    # -- only called guarded: each module's sites counted ------------------------------------------
    guard_flags = _copy(st.guard_flags)
    counts = _copy(st.guard_counts)
    touched_targets: set[tuple[str, str]] = set()
    for m in changed:
        flags = _guard_flags(parts[m], own(m))
        for sign, fl in ((-1, st.guard_flags[m]), (1, flags)):
            for target, flag in fl:
                total, guarded = counts.get(target, (0, 0))
                counts[target] = (total + sign, guarded + sign * flag)
                touched_targets.add(target)
        guard_flags[m] = flags
    for t in touched_targets:
        if counts.get(t) == (0, 0):
            del counts[t]
    only_of: dict[str, frozenset[str]] = {}
    for tm in {t[0] for t in touched_targets}:
        before_only = st.out[tm].only_called_guarded if tm in st.out else frozenset()
        keep = {q for q in before_only if (tm, q) not in touched_targets}
        keep |= {
            q
            for (mm, q) in touched_targets
            if mm == tm and (c := counts.get((mm, q))) and c[0] == c[1]
        }
        only_of[tm] = frozenset(keep)

    # -- per module: the changed ones, the callees whose guards changed and the callers of a
    # function whose properties changed ------------------------------------------------------------
    users: Mapping[tuple[str, str], frozenset[str]] = st.users
    if changed:
        users = _copy(users)
        for m in changed:
            before_t = set(old_parts[m].targets.values())
            after_t = set(parts[m].targets.values())
            for tq in before_t - after_t:
                users[tq] = users[tq] - {m}
            for tq in after_t - before_t:
                users[tq] = users.get(tq, frozenset()) | {m}
    again = set(changed) | set(only_of) | kinds_changed | local_changed
    for key in props_changed:
        again |= users.get(key, frozenset())
    # Which output an entry point silences follows the carried properties and the imports.
    # The carried properties are the previous ones here (a change of them returned None
    # above); the imports of project modules may have changed (an import added): then a
    # flood over the import graph, recomputed, and every module whose answer moved is built
    # again. Otherwise each module's previous answer (recomputing it reads every function's
    # properties: every module's stored state, 11 of 14 profiled CPU s of an update at
    # 2,040 files).
    silenced: Mapping[str, frozenset[str]] | None = None
    if imports_changed:
        silenced = _silenced(res, props)
        again |= {m for m in names if silenced.get(m, frozenset()) != st.out[m].silenced}
    out = _copy(st.out)
    root = str(index.root)
    for m in sorted(again):
        out[m] = _module_out(
            m,
            summaries[m],
            root,
            kinds[m],
            own,
            parts[m],
            props,
            distributed.get(m),
            only_of.get(m, st.out[m].only_called_guarded),
            local.get(m, frozenset()),
            st.gating,
            st.out[m].silenced if silenced is None else silenced.get(m, frozenset()),
        )
        if out[m] == st.out[m]:
            out[m] = st.out[m]
    stages = _Stages(
        kind_seeds,
        kinds,
        prop_seeds,
        props,
        guard_flags,
        counts,
        distributed,
        local,
        entered,
        out,
        users,
        reach,
        st.gating,
        kind_round,
        into,
    )
    rederived = {"kinds"} if kinds_dirty else set()
    if walks_dirty:
        rederived.add("walks" if extended is not None else "walks-computed")
    return ProjectFacts(
        out, 0, 0, res, parts, len(changed), edges, stages, True, frozenset(rederived)
    )


def _distributed_grown(
    res: Resolver, before: Mapping[str, Provenance], old_imports: Mapping[str, list[str]]
) -> Mapping[str, Provenance] | None:
    """``flowstages._distributed`` after modules' imports of project modules changed by
    additions only (the same starts): each module holds the earliest start that reaches it
    through imports, so an import added from a module the flood holds passes that module's
    start on, as far as it lowers what the modules it reaches hold. None when an import of
    a module the flood holds was removed (what it held may need another start)."""
    todo: list[tuple[Provenance, str]] = []
    for m, was in old_imports.items():
        now = res.imported_modules(m)
        origin = before.get(m)
        if origin is None:
            continue  # not reached: its imports carry nothing
        if not set(was) <= set(now):
            return None
        todo.extend((origin, t) for t in now if t not in was)
    if not todo:
        return before
    out = dict(before)
    while todo:
        origin, m = todo.pop()
        if m in out and out[m] <= origin:
            continue
        out[m] = origin
        todo.extend((origin, t) for t in res.imported_modules(m))
    return out


class _OwnView(Mapping[str, fact_model.ModuleFacts]):
    """Each module's own facts, merged when first asked for."""

    def __init__(self, get: Callable[[str], fact_model.ModuleFacts]) -> None:
        self._get = get

    def __getitem__(self, m: str) -> fact_model.ModuleFacts:
        return self._get(m)

    def __contains__(self, m: object) -> bool:
        try:
            self._get(m)  # type: ignore[arg-type]
        except KeyError:
            return False
        return True

    def __iter__(self) -> Iterator[str]:
        raise NotImplementedError

    def __len__(self) -> int:
        raise NotImplementedError


def _alias_bindings(s: ModuleSummary) -> tuple[fact_model.Binding, ...]:
    return tuple(
        b for b in s.facts.bindings if b.source and b.source[0] == fact_model.SourceMarker.ALIAS
    )


Key = tuple[str, str]
_K = TypeVar("_K")
_V = TypeVar("_V")


def _copy(m: Mapping[_K, _V]) -> MutableMapping[_K, _V]:
    """A copy to change: a dict of a dict (the server's state, kept between updates, must not
    chain), an overlay of anything else (a state restored from disk, read lazily)."""
    return dict(m) if type(m) is dict else _Overlay(m)


class _Overlay(MutableMapping[_K, _V]):
    """``base`` with some keys set or deleted, ``base`` itself never changed or copied
    (:func:`_copy`); :mod:`ddp_lsp.project.flowstate` reads ``changes`` and ``deleted`` to
    store what an update changed."""

    def __init__(self, base: Mapping[_K, _V]) -> None:
        self.base = base
        self.changes: dict[_K, _V] = {}
        self.deleted: set[_K] = set()

    def __getitem__(self, key: _K) -> _V:
        if key in self.changes:
            return self.changes[key]
        if key in self.deleted:
            raise KeyError(key)
        return self.base[key]

    def __setitem__(self, key: _K, value: _V) -> None:
        self.changes[key] = value
        self.deleted.discard(key)

    def __delitem__(self, key: _K) -> None:
        if key not in self:
            raise KeyError(key)
        self.changes.pop(key, None)
        self.deleted.add(key)

    def __iter__(self) -> Iterator[_K]:
        for key in self.base:
            if key not in self.changes and key not in self.deleted:
                yield key
        yield from self.changes

    def __len__(self) -> int:
        return sum(1 for _ in self)


def _same_gate_inputs(
    res: Resolver,
    m: str,
    q: str,
    old: ModuleSummary,
    new: ModuleSummary,
    old_own: fact_model.ModuleFacts,
    new_own: fact_model.ModuleFacts,
    props: Mapping[tuple[str, str], Mapping[str, Provenance]],
    stale: Collection[str],
) -> bool:
    """Whether a function that performs a collective and has gate sites reads, in the gates'
    resolution (``flowstages._resolve_gates``), what it read: the same parameters and
    defaults, and the same call sites that reach a collective (``gate_facts.resolve`` skips
    every other site). Asked only where the module's names resolve as they did (the same
    interface, not stale), so both lists are read with one resolution; the callees'
    collectives are the previous ones (a carried property changed computes everything)."""
    if m in stale or interface(old) != interface(new) or old_own.aliases != new_own.aliases:
        return False

    def reads(s: ModuleSummary, own_m: fact_model.ModuleFacts) -> tuple[object, ...] | None:
        fi = next((f for f in s.facts.functions if f.qualname == q), None)  # the first
        if fi is None:
            return None
        reaching = []
        for site in fi.gates.sites:
            name = site.callee
            hit = fact_model.is_collective_call(name, own_m.aliases)
            if not hit and not name.startswith("self."):
                t = res.function(m, name)
                hit = t is not None and fact_model.COLLECTIVE in props.get(
                    (t[0], t[1].qualname), {}
                )
            if hit:
                reaching.append(site)
        return (fi.params, fi.gates.defaults, tuple(reaching))

    before = reads(old, old_own)
    return before is not None and before == reads(new, new_own)
