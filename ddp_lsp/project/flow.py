"""Facts that flow across files: parameter kinds, callee properties, "this program is distributed".

Each module's own facts come from the core (``facts.merge`` of its summary). This module adds
what only the whole project knows, with where each fact came from:

- a parameter's kind from its callers in other modules (``main.py`` passes a DDP-wrapped model
  to ``engine.train_one_epoch``), also through ``y = x`` and further calls;
- the properties of a function defined in another module, keyed by the spelling the importing
  module uses (``du.save_on_master`` guards itself, ``utils.all_reduce_mean`` is collective),
  transitive properties (collective, no_sync...) following calls across modules;
- ``distributed`` for every module reachable through imports from a module that initialises a
  process group (directly or through a helper such as ``utils.init_distributed_mode``).

Both propagations are monotone and run in rounds that read the previous round's state only
(Jacobi, not Gauss-Seidel), with ties broken by sorting: the result does not depend on the
order files were read in. Rounds are bounded; cycles (``a`` calls ``b`` calls ``a``) converge.

Incremental: ``compute(index, previous)`` (the server's indexer after an edit) keeps the
previous computation's import resolution (each memoised answer records the modules it read:
an edit drops only the answers that read a module whose interface changed), each module's
resolved parts and call-graph share, and, per stage, what it derived (:class:`~ddp_lsp.project.flowstages._Stages`).
:func:`~ddp_lsp.project.flowupdate._update` shows, for the changed modules alone, that each stage would derive what it
derived (the same seeds and bindings; calls added or removed that carry no kind and reach no
function with a carried property; the same call graph but for functions nothing calls), by an
induction over the rounds rather than by comparing results, and then rebuilds only the facts
of the changed modules and of those whose callee properties or guards changed. Where the
kinds, the call graph's walks or the imports do change, it re-derives them for what the change
reaches (:func:`~ddp_lsp.project.flowstages._replay_kinds`: the kinds' rounds replayed from
the round each kind was gained in; :func:`~ddp_lsp.project.reachupdate.extend_walks`). Anything else
computes every stage again (with resolution and parts reused). Random edit sequences check
that both equal a computation from scratch (tests/project/test_flow_incremental.py).

Decision, the shared engine: an engine called with a DDP model by ``main_ddp.py`` and with a
plain model by ``train_single.py`` gets the kind "ddp" for its parameter, with ``mixed`` set and
the DDP caller in its provenance. The engine's code runs under DDP in at least one launch, and
that is where a missing ``no_sync`` costs an all-reduce per micro-batch; the single-GPU launch
is unaffected by a finding the user can fix with a conditional context. Rules may use ``mixed``
to say "when called from main_ddp.py". The single-GPU entry point itself gains nothing.

Layout: this module holds the public API (:class:`ProjectFacts`, :func:`compute`,
:func:`moved`) and the computation from scratch (:func:`_compute`);
:mod:`ddp_lsp.project.flowstages` the building blocks it shares with the update (module parts,
stages, seeds, gates, the ``distributed`` flood, per-module facts);
:mod:`ddp_lsp.project.flowupdate` the incremental update and the checks only it makes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ddp_lsp.core import facts as fact_model
from ddp_lsp.core.crossfile import (
    ModuleProjectFacts,
    ParamKind,
    Provenance,
)
from ddp_lsp.project.flowlines import moved as moved  # (re-exported: flow.moved)
from ddp_lsp.project.flowstages import (
    _CARRIED,
    MAX_ROUNDS,
    ProjectFacts,
    _distributed,
    _guard_flags,
    _line,
    _lookup,
    _module_out,
    _module_parts,
    _ModuleParts,
    _only_guarded,
    _prop_seeds,
    _resolve_gates,
    _ScalerWrappers,
    _seed_kinds,
    _silenced,
    _site_into,
    _Stages,
    _users,
)
from ddp_lsp.project.flowupdate import _update
from ddp_lsp.project.index import ProjectIndex
from ddp_lsp.project.reach import ModuleEdges, single_process
from ddp_lsp.project.resolve import Resolver
from ddp_lsp.project.summary import ModuleSummary

__all__ = ["ProjectFacts", "compute", "moved"]


def compute(
    index: ProjectIndex, previous: ProjectFacts | None = None, updatable: bool = False
) -> ProjectFacts:
    """The project-wide facts of an index. ``previous``: the facts computed for the same
    index before its latest updates (the server's indexer after an edit); its import
    resolution is reused when no module was added or removed and the changed ones kept their
    imports, functions' signatures and classes (an edit inside a function body), and so is
    every stage of the computation the changed modules cannot have changed
    (``flowupdate._update``: the result equals a computation from scratch). ``updatable``: the result will be passed
    as ``previous`` (the server's indexer): its import resolution records what each answer
    read, so that a later interface change drops only what it touches."""
    res = previous.resolver if previous is not None else None
    kept: Mapping[str, _ModuleParts] = {}
    edges: dict[str, ModuleEdges] = {}
    if res is None or not res.reuse(index):
        res = Resolver(index, track=updatable or previous is not None)
    elif previous is not None:
        # Less the modules whose resolution read a module whose interface changed.
        kept = {m: p for m, p in previous.parts.items() if m not in res.stale}
        edges = {m: e for m, e in previous.edges.items() if m not in res.stale}
        if previous.stages is not None:
            got = _update(index, previous, res, edges)
            if got is not None:
                return got
    return _compute(index, res, kept, edges, previous)


def _scaler_props(own: fact_model.ModuleFacts) -> dict[str, frozenset[str]]:
    wanted = {fact_model.UNSCALES, fact_model.UPDATES_SCALER}
    return {q: ps & wanted for q, ps in own.func_props.items() if ps & wanted}


def _compute(
    index: ProjectIndex,
    res: Resolver,
    kept: Mapping[str, _ModuleParts],
    edges: dict[str, ModuleEdges],
    previous: ProjectFacts | None = None,
) -> ProjectFacts:
    names = sorted(index.modules)
    summaries: dict[str, ModuleSummary] = {m: index.modules[m] for m in names}
    own = {m: index.own_facts(summaries[m]) for m in names}
    wraps_scaler = _ScalerWrappers(res, own)
    evaluations = 0  # what the propagation rounds looked at (linear in the project's size)

    parts: dict[str, _ModuleParts] = {}
    prepared = 0
    # Modules whose parts are kept (the same summary, its resolution kept): their seeds and
    # guard flags are the previous computation's (each a function of the module's summary
    # and resolution; a kind seed also of the project's GradScaler wrapper classes, the same
    # when no changed module changed its bases or its methods that unscale or update).
    same: set[str] = set()
    for m in names:
        part = kept.get(m)
        if part is None or part.summary is not summaries[m]:
            part = _module_parts(res, m, summaries[m])
            prepared += 1
        else:
            same.add(m)
        parts[m] = part
    st = previous.stages if previous is not None else None
    same_seeds = same if st is not None else set()
    if st is not None and previous is not None:
        for m in names:
            was = previous.parts.get(m)
            if m in same or was is None:
                continue
            if was.summary.bases != summaries[m].bases or _scaler_props(
                index.own_facts(was.summary)
            ) != _scaler_props(own[m]):
                same_seeds = set()
                break

    # -- kinds ---------------------------------------------------------------------------------
    kind_seeds = {
        m: st.kind_seeds[m]
        if st is not None and m in same_seeds
        else _seed_kinds(res, m, summaries[m], own[m], wraps_scaler)
        for m in names
    }
    kinds: dict[str, dict[tuple[str, str], ParamKind]] = {m: dict(kind_seeds[m]) for m in names}
    # The round each kind was gained in (0: a seed), for flowstages._replay_kinds.
    kind_round: dict[str, dict[tuple[str, str], int]] = {
        m: dict.fromkeys(kind_seeds[m], 0) for m in names if kind_seeds[m]
    }
    sites = [site for m in names for site in parts[m].sites]
    site_line = {k: v for m in names for k, v in parts[m].site_line.items()}
    inherits = [item for m in names for item in parts[m].inherits]

    unwrapped = {m: parts[m].unwrapped for m in names}
    # What each round reads, by the module whose kinds it reads: a round after the first looks
    # only at what reads a module that gained a kind in the round before (semi-naive
    # evaluation: anything else proposed nothing then and would propose nothing now, since
    # kinds only grow), so the rounds together cost the project's size, not its size times
    # the longest chain of calls.
    inherits_from: dict[str, list[tuple[str, str, str, str]]] = {}
    for item in inherits:
        inherits_from.setdefault(item[2], []).append(item)
    alias_bindings: dict[str, list[fact_model.Binding]] = {}
    for m in names:
        for b in summaries[m].facts.bindings:
            if b.source and b.source[0] == fact_model.SourceMarker.ALIAS:
                alias_bindings.setdefault(m, []).append(b)
    changed: list[str] = names
    rounds = 0
    while rounds < MAX_ROUNDS:
        rounds += 1
        proposals: dict[tuple[str, str, str], list[ParamKind]] = {}
        for bm in changed:
            for m, cls_name, _, bc in inherits_from.get(bm, ()):
                for (sc, p), base_kind in kinds[bm].items():
                    evaluations += 1
                    if sc == bc and p.startswith("self.") and (cls_name, p) not in kinds[m]:
                        proposals.setdefault((m, cls_name, p), []).append(base_kind)
        for m in changed:
            if not kinds[m]:
                continue  # an alias proposes the kind of a name of this module
            fns = res.functions(m)
            for b in alias_bindings.get(m, ()):
                evaluations += 1
                if (b.scope, b.path) in kinds[m]:
                    continue
                if (b.scope, b.path) in unwrapped[m]:
                    continue  # `model_without_ddp = model.module` elsewhere in the scope
                src_scope = b.source[2] if len(b.source) > 2 else b.scope
                fi = fns.get(src_scope)
                k = _lookup(kinds[m], b.source[1], src_scope, fi.cls if fi else None)
                if k is not None:
                    proposals.setdefault((m, b.scope, b.path), []).append(k)
        for m0 in changed:
            if not kinds[m0]:
                continue  # its sites read its kinds: none, and nothing is proposed
            part0 = parts[m0]
            for (m, cs, tm, tfi), pairs in zip(part0.sites, part0.site_params, strict=True):
                evaluations += 1
                caller = res.functions(m).get(cs.caller)
                for param, arg in pairs:
                    if (tfi.qualname, param) in kinds[tm]:
                        continue
                    k = _lookup(kinds[m], arg, cs.caller, caller.cls if caller else None)
                    if k is None:
                        continue
                    hop = Provenance(
                        summaries[m].path,
                        site_line.get((m, cs), _line(caller)),
                        f"{cs.caller if cs.caller else fact_model.MODULE} calls {cs.callee}({param}={arg})",
                    )
                    proposals.setdefault((tm, tfi.qualname, param), []).append(
                        ParamKind(k.kind, k.origin, (*k.via, hop))
                    )
        if not proposals:
            break
        gained: set[str] = set()
        for (m, scope, path), cands in proposals.items():
            if (scope, path) not in kinds[m]:
                kinds[m][(scope, path)] = min(cands)
                kind_round.setdefault(m, {})[(scope, path)] = rounds
                gained.add(m)
        changed = sorted(gained)
    # Mixed: a caller passes a value of no known kind where another passes a known one.
    for (m, cs, tm, tfi), pairs in (
        item for mm in names for item in zip(parts[mm].sites, parts[mm].site_params, strict=True)
    ):
        target_kinds = kinds[tm]
        if not target_kinds:
            continue  # (most functions' parameters have no kind)
        for param, arg in pairs:
            pk = target_kinds.get((tfi.qualname, param))
            if pk is None or pk.mixed:
                continue
            caller = res.functions(m).get(cs.caller)
            caller_cls = caller.cls if caller else None
            # ... or one that holds the kind on some launches only (`if args.distributed:
            # model = DDP(model)` in the caller).
            if (
                _lookup(kinds[m], arg, cs.caller, caller_cls) is None
                or fact_model.visible_key(own[m].kinds, arg, cs.caller, caller_cls)
                in own[m].sometimes
            ):
                kinds[tm][(tfi.qualname, param)] = ParamKind(pk.kind, pk.origin, pk.via, True)

    # -- function properties ---------------------------------------------------------------------
    prop_seeds = {
        m: st.prop_seeds[m]
        if st is not None and m in same
        else _prop_seeds(res, m, summaries[m], own[m])
        for m in names
    }
    props: dict[tuple[str, str], dict[str, Provenance]] = {}
    for m in names:
        for key, ps in prop_seeds[m].items():
            props[key] = dict(ps)
    calls = {k: v for m in names for k, v in parts[m].calls.items()}
    carried = _CARRIED
    # Semi-naive, as the kinds above: a round after the first looks only at the callers of a
    # function that gained a property in the round before.
    callers: dict[tuple[str, str], set[tuple[str, str]]] = {}
    for key, targets in calls.items():
        for callee_key in targets:
            callers.setdefault(callee_key, set()).add(key)
    todo = sorted(calls)
    for _ in range(MAX_ROUNDS):
        updates: dict[tuple[str, str], dict[str, Provenance]] = {}
        for key in todo:
            mine = props.get(key, {})
            for callee_key in calls[key]:
                evaluations += 1
                for p, origin in props.get(callee_key, {}).items():
                    if p in carried and p not in mine:
                        pending = updates.setdefault(key, {})
                        if p not in pending or origin < pending[p]:
                            pending[p] = origin
        if not updates:
            break
        for key, new in updates.items():
            props.setdefault(key, {}).update(new)
        todo = sorted({c for key in updates for c in callers.get(key, ())})

    # -- parameters that switch collectives off, through helpers of other files -----------------
    gating = _resolve_gates(props, res, own, summaries)

    # -- which functions are distributed code; distributed ----------------------------------------
    reach: dict[str, Any] = {}
    local, entered = single_process(
        res, names, summaries, own, props, sites, index.ranks.frameworks, edges, details=reach
    )
    distributed = _distributed(res, props, entered)
    silenced = _silenced(res, props)

    # -- only called under a rank-0 guard, by callers in any file ---------------------------------
    guard_flags = {
        m: st.guard_flags[m] if st is not None and m in same else _guard_flags(parts[m], own[m])
        for m in names
    }
    counts: dict[tuple[str, str], list[int]] = {}
    for m in names:
        for target, flag in guard_flags[m]:
            c = counts.setdefault(target, [0, 0])
            c[0] += 1
            c[1] += flag
    guard_counts = {t: (c[0], c[1]) for t, c in counts.items()}
    only_guarded = _only_guarded(guard_counts)

    # -- per module --------------------------------------------------------------------------------
    root = str(index.root)
    out: dict[str, ModuleProjectFacts] = {}
    for m in names:
        out[m] = _module_out(
            m,
            summaries[m],
            root,
            kinds[m],
            own.__getitem__,
            parts[m],
            props,
            distributed.get(m),
            only_guarded.get(m, frozenset()),
            local.get(m, frozenset()),
            gating,
            silenced.get(m, frozenset()),
        )
    stages = _Stages(
        kind_seeds,
        kinds,
        prop_seeds,
        props,
        guard_flags,
        guard_counts,
        distributed,
        local,
        entered,
        out,
        _users(parts),
        reach,
        gating,
        kind_round,
        _site_into(parts),
    )
    return ProjectFacts(out, rounds, evaluations, res, parts, prepared, edges, stages)
