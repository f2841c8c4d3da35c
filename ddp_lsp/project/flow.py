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
resolved parts and call-graph share, and, per stage, what it derived (:class:`_Stages`).
:func:`_update` shows, for the changed modules alone, that each stage would derive what it
derived (the same seeds and bindings; calls added or removed that carry no kind and reach no
function with a carried property; the same call graph but for functions nothing calls), by an
induction over the rounds rather than by comparing results, and then rebuilds only the facts
of the changed modules and of those whose callee properties or guards changed. Anything else
computes every stage again (with resolution and parts reused). Random edit sequences check
that both equal a computation from scratch (tests/project/test_flow_incremental.py).

Decision, the shared engine: an engine called with a DDP model by ``main_ddp.py`` and with a
plain model by ``train_single.py`` gets the kind "ddp" for its parameter, with ``mixed`` set and
the DDP caller in its provenance. The engine's code runs under DDP in at least one launch, and
that is where a missing ``no_sync`` costs an all-reduce per micro-batch; the single-GPU launch
is unaffected by a finding the user can fix with a conditional context. Rules may use ``mixed``
to say "when called from main_ddp.py". The single-GPU entry point itself gains nothing.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from ddp_lsp.core import facts as fact_model
from ddp_lsp.core import gates as gate_facts
from ddp_lsp.core import names as known_names
from ddp_lsp.core.crossfile import (
    MAIN_BLOCK,
    CalleeProps,
    ModuleProjectFacts,
    ParamKind,
    Provenance,
)
from ddp_lsp.project.index import ProjectIndex
from ddp_lsp.project.reach import ModuleEdges, single_process
from ddp_lsp.project.resolve import Resolver
from ddp_lsp.project.summary import ModuleSummary

MAX_ROUNDS = 32

_KIND_TEXT = {
    fact_model.DDP: "wrapped in DistributedDataParallel",
    fact_model.FSDP: "wrapped in FullyShardedDataParallel",
    fact_model.SCALER: "a GradScaler",
    fact_model.OPTIMIZER: "an optimizer",
    fact_model.SAMPLER: "a DistributedSampler",
    fact_model.LOADER: "a DataLoader",
    fact_model.RANK: "the rank",
    fact_model.SCALER_WRAPPER: "a GradScaler wrapper that unscales itself",
}


_PROP_TEXT = {
    fact_model.COLLECTIVE: "performs a collective",
    fact_model.UNSCALES: "calls unscale_",
    fact_model.NO_SYNC: "uses no_sync",
    fact_model.RANK_PREDICATE: "is a rank-0 predicate",
    fact_model.GUARDS_ITSELF: "runs only on rank 0 by itself",
    fact_model.ONLY_CALLED_GUARDED: "is only called on rank 0",
    fact_model.UPDATES_SCALER: "calls the GradScaler's update()",
    fact_model.SETS_EPOCH: "calls set_epoch",
    fact_model.MAKES_DIST_SAMPLER: "builds a shuffling DistributedSampler",
    fact_model.SETS_DEVICE: "selects the GPU (torch.cuda.set_device)",
    fact_model.INITS_PG: "initialises the process group",
    fact_model.DESTROYS_PG: "destroys the process group",
    fact_model.SAVES_CALLER_PATH: "saves to the path its caller passes, on every rank",
}


@dataclass(frozen=True)
class ProjectFacts:
    modules: Mapping[str, ModuleProjectFacts] = field(
        default_factory=dict, compare=False, hash=False
    )
    rounds: int = 0
    # Items the propagation rounds looked at (a site, a binding, a call edge each time):
    # linear in the project's size (tests/project check it on long chains of calls).
    evaluations: int = 0
    # The resolver of this computation and each module's resolved parts, for the next one
    # (see compute's ``previous``); how many modules' parts this one had to resolve.
    resolver: Resolver | None = field(default=None, compare=False, hash=False, repr=False)
    parts: Mapping[str, _ModuleParts] = field(
        default_factory=dict, compare=False, hash=False, repr=False
    )
    prepared: int = 0
    # Each module's share of reach.single_process's call graph, kept like ``parts``.
    edges: Mapping[str, ModuleEdges] = field(
        default_factory=dict, compare=False, hash=False, repr=False
    )
    # What each stage derived, for the next computation (see _update).
    stages: _Stages | None = field(default=None, compare=False, hash=False, repr=False)
    updated: bool = False  # computed from ``previous`` and the changed modules (see _update)

    @cached_property
    def by_path(self) -> Mapping[str, ModuleProjectFacts]:
        """Each module's facts by its path relative to the root."""
        return {m.path: m for m in self.modules.values()}

    def for_path(self, path: str) -> ModuleProjectFacts | None:
        return self.by_path.get(path)


def _lookup(
    kinds: Mapping[tuple[str, str], ParamKind], path: str, scope: str, cls: str | None
) -> ParamKind | None:
    # The core's ModuleFacts.kind, over kinds with provenance.
    key = fact_model.visible_key(kinds, path, scope, cls)
    return None if key is None else kinds[key]


def _line(fi: fact_model.FunctionInfo | None) -> int:
    return 1 if fi is None or fi.qualname == fact_model.MODULE else fi.line + 1


class _ScalerWrappers:
    """Whether a class manages a GradScaler itself: a method of it (or of a base, in any
    module) calls ``unscale_`` or a GradScaler's ``update()``. Answers are kept per class (a
    project builds the same wrapper class in many files)."""

    def __init__(self, res: Resolver, own: Mapping[str, fact_model.ModuleFacts]) -> None:
        self.res = res
        self.own = own
        self._owners: dict[str, frozenset[str]] = {}
        self._memo: dict[tuple[str, str], bool] = {}

    def _classes_with_scaler_methods(self, module: str) -> frozenset[str]:
        found = self._owners.get(module)
        if found is None:
            names: set[str] = set()
            for q, props in self.own[module].func_props.items():
                if fact_model.UNSCALES in props or fact_model.UPDATES_SCALER in props:
                    parts = q.split(".")
                    names.update(".".join(parts[:i]) for i in range(1, len(parts)))
            found = self._owners[module] = frozenset(names)
        return found

    def __call__(self, module: str, cls: str) -> bool:
        key = (module, cls)
        hit = self._memo.get(key)
        if hit is None:
            hit = self._memo[key] = self._search(module, cls)
        return hit

    def _search(self, module: str, cls: str) -> bool:
        res = self.res
        todo = [(module, cls)]
        seen: set[tuple[str, str]] = set()
        while todo and len(seen) < 16:
            mod, c = todo.pop()
            if (mod, c) in seen or mod not in self.own:
                continue
            seen.add((mod, c))
            if c in self._classes_with_scaler_methods(mod):
                return True
            for base in res.classes(mod).get(c, ()):
                r = res.resolve(mod, base)
                if r is not None and r[1] in res.classes(r[0]):
                    todo.append(r)
        return False


_Site = tuple[
    str, fact_model.CallSite, str, fact_model.FunctionInfo
]  # caller module, site, target module, fn


@dataclass
class _ModuleParts:
    """What a module contributes that depends only on its summary and on import resolution:
    kept between computations while both stay (see compute's ``previous``)."""

    summary: ModuleSummary
    sites: list[_Site]  # its call sites that reach a project function
    site_line: dict[tuple[str, fact_model.CallSite], int]
    inherits: list[tuple[str, str, str, str]]  # (module, class, base module, base class)
    calls: dict[tuple[str, str], list[tuple[str, str]]]  # (module, fn) -> functions it calls
    targets: dict[str, tuple[str, str]]  # a callee it spells -> a function of another module
    unwrapped: frozenset[tuple[str, str]]  # fact_model.unwrapped_names of its bindings


def _module_parts(res: Resolver, m: str, s: ModuleSummary) -> _ModuleParts:
    # Call sites resolved once: (caller module, site, target module, target function).
    sites: list[_Site] = []
    site_line: dict[tuple[str, fact_model.CallSite], int] = {}
    all_sites = (*s.facts.call_sites, *s.dotted_sites)
    lines_known = len(s.site_lines) == len(all_sites)
    for i, cs in enumerate(all_sites):
        t = res.function(m, cs.callee)
        if t is not None:
            sites.append((m, cs, t[0], t[1]))
            if lines_known:
                # Equal sites in one function (two identical calls): the first line.
                site_line.setdefault((m, cs), s.site_lines[i])
    # Classes and their project bases: `self.model` set in BaseTrainer.__init__ (base.py) is
    # the same attribute in DDPTrainer.fit (ddp_trainer.py).
    inherits: list[tuple[str, str, str, str]] = []
    for cls_name, bases in sorted(res.classes(m).items()):
        for base in bases:
            r = res.resolve(m, base)
            if r is not None and r[1] and r[1] in res.classes(r[0]):
                inherits.append((m, cls_name, r[0], r[1]))
    calls: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for fi in s.facts.functions:
        reached = []
        for callee in sorted(fi.calls):
            reached_fn = res.function(m, callee)
            if reached_fn is not None:
                reached.append((reached_fn[0], reached_fn[1].qualname))
        calls[(m, fi.qualname)] = reached
    spelled: set[str] = {cs.callee for cs in s.facts.call_sites}
    for fi in s.facts.functions:
        spelled |= fi.calls
    targets: dict[str, tuple[str, str]] = {}
    for name in sorted(spelled):
        t = res.function(m, name)
        if t is not None and t[0] != m:
            targets[name] = (t[0], t[1].qualname)
    unwrapped = fact_model.unwrapped_names([s.facts])
    return _ModuleParts(s, sites, site_line, inherits, calls, targets, unwrapped)


@dataclass
class _Stages:
    """What a computation derived, by stage, kept for the next one (see :func:`_update`).
    Never changed once built: an update copies what it changes."""

    kind_seeds: dict[str, dict[tuple[str, str], ParamKind]]  # each module's kinds before the rounds
    kinds: dict[str, dict[tuple[str, str], ParamKind]]  # after the rounds and `mixed`
    prop_seeds: dict[str, dict[tuple[str, str], dict[str, Provenance]]]  # each module's own
    props: dict[tuple[str, str], dict[str, Provenance]]  # after the rounds and the gates
    guard_flags: dict[str, tuple[tuple[tuple[str, str], bool], ...]]  # each module's sites
    guard_counts: dict[tuple[str, str], tuple[int, int]]  # callee -> (sites, guarded sites)
    distributed: dict[str, Provenance]
    local: dict[str, frozenset[str]]
    entered: set[str]
    out: dict[str, ModuleProjectFacts]
    # (module, function) -> the modules that call it by a name of theirs (its properties are
    # part of their facts: ModuleProjectFacts.callee_props).
    users: dict[tuple[str, str], frozenset[str]]
    # single_process's sets (reached, unknown, referenced, reached_modules, touched); empty
    # when nothing is distributed code.
    reach: Mapping[str, Any]
    # The gating resolved across files (core/gates.py), by function: see _resolve_gates.
    gating: dict[tuple[str, str], gate_facts.Gating]


def compute(
    index: ProjectIndex, previous: ProjectFacts | None = None, updatable: bool = False
) -> ProjectFacts:
    """The project-wide facts of an index. ``previous``: the facts computed for the same
    index before its latest updates (the server's indexer after an edit); its import
    resolution is reused when no module was added or removed and the changed ones kept their
    imports, functions' signatures and classes (an edit inside a function body), and so is
    every stage of the computation the changed modules cannot have changed (:func:`_update`:
    the result equals a computation from scratch). ``updatable``: the result will be passed
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
    return _compute(index, res, kept, edges)


def _seed_kinds(
    res: Resolver,
    m: str,
    s: ModuleSummary,
    own_m: fact_model.ModuleFacts,
    wraps_scaler: _ScalerWrappers,
) -> dict[tuple[str, str], ParamKind]:
    """A module's kinds before the rounds: its own, with provenance, and the instances of the
    project's GradScaler wrapper classes it builds."""
    out: dict[tuple[str, str], ParamKind] = {}
    lines = {(sc, p): ln for sc, p, ln in s.binding_lines}
    seeded = {
        (b.scope, b.path)
        for b in s.facts.bindings
        if b.source and b.source[0] != fact_model.SourceMarker.ALIAS
    }
    for key, kind in own_m.kinds.items():
        if key in seeded:
            fi = res.functions(m).get(key[0])
            line = lines.get(key, _line(fi))
            text = _KIND_TEXT.get(kind, kind)
            if kind == fact_model.SCALER_WRAPPER:  # a framework table's class: name it
                cls = _class_named(s.facts, own_m.aliases, key)
                text = f"`{cls}`, {text}" if cls else text
            out[key] = ParamKind(kind, Provenance(s.path, line, f"{key[1]} is {text}"))
    # `loss_scaler = NativeScaler()`: a project class that wraps a GradScaler and unscales
    # (or updates) it in its own methods.
    for b in s.facts.bindings:
        if not b.source or fact_model.is_marker(b.source[0]) or (b.scope, b.path) in out:
            continue
        target = res.resolve(m, b.source[0])
        if target is None or not target[1] or target[1] not in res.classes(target[0]):
            continue
        if wraps_scaler(target[0], target[1]):
            fi = res.functions(m).get(b.scope)
            out[(b.scope, b.path)] = ParamKind(
                fact_model.SCALER_WRAPPER,
                Provenance(
                    s.path,
                    lines.get((b.scope, b.path), _line(fi)),
                    f"{b.path} is `{target[1]}`, a GradScaler wrapper that unscales itself",
                ),
            )
    return out


def _prop_seeds(
    res: Resolver, m: str, s: ModuleSummary, own_m: fact_model.ModuleFacts
) -> dict[tuple[str, str], dict[str, Provenance]]:
    """A module's functions' own properties, with provenance."""
    at = {(q, p): line for q, p, line in s.prop_lines}
    out: dict[tuple[str, str], dict[str, Provenance]] = {}
    for q, ps in own_m.func_props.items():
        fi = res.functions(m).get(q)
        out[(m, q)] = {
            p: Provenance(s.path, at.get((q, p), _line(fi)), f"`{q}` {_PROP_TEXT.get(p, p)}")
            for p in sorted(ps)
        }
    return out


def _guard_flags(
    part: _ModuleParts, own_m: fact_model.ModuleFacts
) -> tuple[tuple[tuple[str, str], bool], ...]:
    """Whether each call site of a module into a project function runs on rank 0 only."""
    out = []
    for _, cs, tm, tfi in part.sites:
        caller_props = own_m.func_props.get(cs.caller, frozenset())
        out.append(
            (
                (tm, tfi.qualname),
                cs.guarded
                or fact_model.GUARDS_ITSELF in caller_props
                or fact_model.ONLY_CALLED_GUARDED in caller_props,
            )
        )
    return tuple(out)


def _params_of(site: fact_model.CallSite, fi: fact_model.FunctionInfo) -> list[tuple[str, str]]:
    out = []
    for pos, arg in site.args:
        if isinstance(pos, int):
            params = fi.params[1:] if fi.cls else fi.params
            if pos < len(params):
                out.append((params[pos], arg))
        elif pos in fi.params:
            out.append((pos, arg))
    return out


def _module_out(
    m: str,
    s: ModuleSummary,
    root: str,
    kinds_m: Mapping[tuple[str, str], ParamKind],
    own: Callable[[str], fact_model.ModuleFacts],
    part: _ModuleParts,
    props: Mapping[tuple[str, str], Mapping[str, Provenance]],
    distributed: Provenance | None,
    only_guarded: frozenset[str],
    local: frozenset[str],
    gating: Mapping[tuple[str, str], gate_facts.Gating],
) -> ModuleProjectFacts:
    own_kinds = own(m).kinds
    extra = {key: pk for key, pk in sorted(kinds_m.items()) if key not in own_kinds}
    cprops: dict[str, CalleeProps] = {}
    for name, tq in part.targets.items():
        found = props.get(tq, {})
        # INITS_PG stays the core's direct property; carried only to find entry points.
        direct = own(tq[0]).func_props.get(tq[1], frozenset())
        keep = {p: o for p, o in found.items() if p != fact_model.INITS_PG or p in direct}
        gate = gating.get(tq) or own(tq[0]).func_gates.get(tq[1])
        cprops[name] = CalleeProps(tq, frozenset(keep), dict(sorted(keep.items())), gate)
    return ModuleProjectFacts(m, s.path, extra, cprops, distributed, only_guarded, root, local)


def _compute(
    index: ProjectIndex,
    res: Resolver,
    kept: Mapping[str, _ModuleParts],
    edges: dict[str, ModuleEdges],
) -> ProjectFacts:
    names = sorted(index.modules)
    summaries: dict[str, ModuleSummary] = {m: index.modules[m] for m in names}
    own = {m: index.own_facts(summaries[m]) for m in names}
    wraps_scaler = _ScalerWrappers(res, own)
    evaluations = 0  # what the propagation rounds looked at (linear in the project's size)

    # -- kinds ---------------------------------------------------------------------------------
    kind_seeds = {m: _seed_kinds(res, m, summaries[m], own[m], wraps_scaler) for m in names}
    kinds: dict[str, dict[tuple[str, str], ParamKind]] = {m: dict(kind_seeds[m]) for m in names}
    parts: dict[str, _ModuleParts] = {}
    prepared = 0
    for m in names:
        part = kept.get(m)
        if part is None or part.summary is not summaries[m]:
            part = _module_parts(res, m, summaries[m])
            prepared += 1
        parts[m] = part
    sites = [site for m in names for site in parts[m].sites]
    site_line = {k: v for m in names for k, v in parts[m].site_line.items()}
    params_of = _params_of
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
    sites_from: dict[str, list[_Site]] = {}
    for site in sites:
        sites_from.setdefault(site[0], []).append(site)
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
            for m, cs, tm, tfi in sites_from.get(m0, ()):
                evaluations += 1
                caller = res.functions(m).get(cs.caller)
                for param, arg in params_of(cs, tfi):
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
                gained.add(m)
        changed = sorted(gained)
    # Mixed: a caller passes a value of no known kind where another passes a known one.
    for m, cs, tm, tfi in sites:
        caller = res.functions(m).get(cs.caller)
        for param, arg in params_of(cs, tfi):
            pk = kinds[tm].get((tfi.qualname, param))
            if pk is None or pk.mixed:
                continue
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
    prop_seeds = {m: _prop_seeds(res, m, summaries[m], own[m]) for m in names}
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

    # -- only called under a rank-0 guard, by callers in any file ---------------------------------
    guard_flags = {m: _guard_flags(parts[m], own[m]) for m in names}
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
    )
    return ProjectFacts(out, rounds, evaluations, res, parts, prepared, edges, stages)


def _users(parts: Mapping[str, _ModuleParts]) -> dict[tuple[str, str], frozenset[str]]:
    found: dict[tuple[str, str], set[str]] = {}
    for m, part in parts.items():
        for tq in part.targets.values():
            found.setdefault(tq, set()).add(m)
    return {tq: frozenset(ms) for tq, ms in found.items()}


_CARRIED = fact_model.TRANSITIVE_PROPS | {fact_model.INITS_PG}  # INITS_PG only for "reaches init"


def _only_guarded(counts: Mapping[tuple[str, str], tuple[int, int]]) -> dict[str, frozenset[str]]:
    found: dict[str, set[str]] = {}
    for (tm, q), (n, guarded) in counts.items():
        if n and n == guarded:
            found.setdefault(tm, set()).add(q)
    return {tm: frozenset(qs) for tm, qs in found.items()}


def _distributed(
    res: Resolver, props: Mapping[tuple[str, str], Mapping[str, Provenance]], entered: set[str]
) -> dict[str, Provenance]:
    """Each module a process group's start reaches through imports, with the earliest start."""
    distributed: dict[str, Provenance] = {}
    inits: dict[str, list[Provenance]] = {}
    for (mm, _), fn_props in props.items():
        if fact_model.INITS_PG in fn_props:
            inits.setdefault(mm, []).append(fn_props[fact_model.INITS_PG])
    starts = []
    for m in sorted(inits):
        o = min(inits[m])
        starts.append((Provenance(o.path, o.line, "a process group is initialised"), m))
    # Functions an entry point reaches through calls and handed functions (`mp.spawn(run,
    # args=(cfg, train))`, `launch(main_worker)`) run in the ranks: their modules are
    # distributed code even when no import leads there from the initialising module.
    if starts:
        first = min(o for o, _ in starts)
        starts.extend((first, m) for m in sorted(entered) if m not in inits)
    # Earliest origin first: a module reached once keeps it (each module is visited once per
    # origin that is smaller than what it holds, so once in all).
    for origin, m in sorted(starts):
        frontier = [m]
        while frontier:
            nxt = []
            for reached in frontier:
                if reached in distributed and distributed[reached] <= origin:
                    continue
                distributed[reached] = origin
                nxt.extend(res.imported_modules(reached))
            frontier = nxt
    return distributed


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
    for m, cs, tm, tfi in part.sites:
        caller = functions.get(cs.caller)
        cls = caller.cls if caller else None
        for param, arg in _params_of(cs, tfi):
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
) -> ProjectFacts | None:
    """The facts after an update that kept import resolution (``res.reuse``), from
    ``previous`` and the changed modules alone, when every stage can be shown to give what it
    gave (an edit inside a function body that adds or removes calls the propagations do not
    carry anything through, the usual case); None when not (then :func:`_compute` runs).

    Each stage is a least fixed point of monotone rounds whose result also depends on the
    round a fact is first proposed in (its provenance); a change is shown not to matter by
    the induction over rounds the docstrings below give (every round of the new computation
    equals the old one's), never by comparing results, so the outcome is exactly that of a
    computation from scratch. tests/project/test_flow_incremental.py checks it on random edit
    sequences."""
    st = previous.stages
    assert st is not None
    old_parts = previous.parts
    names = sorted(index.modules)
    if len(names) != len(old_parts) or any(m not in old_parts for m in names):
        return None
    summaries = index.modules
    # The edited modules, and those whose import resolution read one whose interface changed
    # (Resolver.stale: their resolved parts and edges are built again, and compared).
    changed = [m for m in names if old_parts[m].summary is not summaries[m] or m in res.stale]
    # Which project modules a module imports: the `distributed` flood and single_process's
    # `touched` read them.
    for m, before_imports in res.old_imports.items():
        if res.imported_modules(m) != before_imports:
            return None
    own_cache: dict[str, fact_model.ModuleFacts] = {}

    def own(m: str) -> fact_model.ModuleFacts:
        got = own_cache.get(m)
        if got is None:
            got = own_cache[m] = index.own_facts(summaries[m])
        return got

    parts = dict(old_parts)
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
    kind_seeds = dict(st.kind_seeds)
    for m in changed:
        o, n = old_own[m], own(m)
        if o.kinds != n.kinds or o.sometimes != n.sometimes:
            return None
        if o.aliases != n.aliases and (summaries[m].bases or old_parts[m].summary.bases):
            return None  # single_process reads a class's other bases through them
        if {q: ps & scaler_props for q, ps in o.func_props.items() if ps & scaler_props} != {
            q: ps & scaler_props for q, ps in n.func_props.items() if ps & scaler_props
        }:
            return None  # a GradScaler wrapper class: other modules' seeds
        seeds = _seed_kinds(res, m, summaries[m], n, wraps)
        if seeds != st.kind_seeds[m]:
            return None
        kind_seeds[m] = seeds
        op, np_ = old_parts[m], parts[m]
        if op.inherits != np_.inherits or op.unwrapped != np_.unwrapped:
            return None
        if _alias_bindings(op.summary) != _alias_bindings(np_.summary):
            return None
        if _relevant_sites(res, op, kinds) != _relevant_sites(res, np_, kinds):
            return None

    # -- properties: the same carried seeds, and no call added or removed to a function that
    # has a carried property. A call edge to a function without one proposes nothing in any
    # round (by induction, that function has none in any round of either computation), and
    # the rounds read only carried properties: each function keeps what the rounds gave it,
    # with its own other properties as they are now. The gates read a function's gate sites
    # (FunctionInfo.gates) only where it performs a collective, and its module's own gating:
    # such a function with gate sites, or a module whose own gating changed, computes
    # everything again.
    props: dict[tuple[str, str], dict[str, Provenance]] | None = None
    prop_seeds = dict(st.prop_seeds)
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
            if fact_model.COLLECTIVE in st.props.get((m, q), {}):
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
            if props is None:
                props = dict(st.props)
            derived = {p: o for p, o in st.props.get(key, {}).items() if p not in a}
            if b or derived:
                props[key] = {**b, **derived}
            else:
                props.pop(key, None)
            props_changed.add(key)
    if props is None:
        props = st.props

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
    )
    local = st.local
    for m in changed:
        was, now = before_edges[m], edges[m]
        if was is None or not _same_edges(was, now):
            return None
        if not _same_walks(was, now, st.reach, edges):
            return None
        if was.nodes != now.nodes:
            # Functions added or removed that call, hand and are called by nothing (their
            # edges are equal): the walks are the same, and only this module's answer is
            # derived again from their sets (reach.single_process's last loop).
            if not _isolated_nodes(res, m, was, now, st.reach):
                return None
            if local is st.local:
                local = dict(local)
            got = _local_of(res, m, now.nodes, st.reach)
            if got:
                local[m] = got
            else:
                local.pop(m, None)

    # -- only called guarded: each module's sites counted ------------------------------------------
    guard_flags = dict(st.guard_flags)
    counts = dict(st.guard_counts)
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
    users = st.users
    if changed:
        users = dict(users)
        for m in changed:
            before_t = set(old_parts[m].targets.values())
            after_t = set(parts[m].targets.values())
            for tq in before_t - after_t:
                users[tq] = users[tq] - {m}
            for tq in after_t - before_t:
                users[tq] = users.get(tq, frozenset()) | {m}
    again = set(changed) | set(only_of)
    for key in props_changed:
        again |= users.get(key, frozenset())
    out = dict(st.out)
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
            st.distributed.get(m),
            only_of.get(m, st.out[m].only_called_guarded),
            local.get(m, frozenset()),
            st.gating,
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
        st.distributed,
        local,
        st.entered,
        out,
        users,
        st.reach,
        st.gating,
    )
    return ProjectFacts(out, 0, 0, res, parts, len(changed), edges, stages, True)


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


def _same_edges(a: ModuleEdges, b: ModuleEdges) -> bool:
    """The same seeds, class members and called attributes (of functions that call any);
    the edges may differ (see _same_walks), and the functions (see _isolated_nodes)."""
    return (
        a.frameworks is b.frameworks
        and a.seeds == b.seeds
        and a.members == b.members
        and {k: v for k, v in a.attrs.items() if v} == {k: v for k, v in b.attrs.items() if v}
    )


def moved(facts: ModuleProjectFacts, path: str, lines: Mapping[int, int]) -> ModuleProjectFacts:
    """``facts`` with every provenance in ``path`` at its line after ``lines``
    (:func:`~ddp_lsp.project.summary.line_map`); the same object when none is there. A line
    the map does not know raises KeyError (the facts were not computed from that file)."""

    def at(p: Provenance) -> Provenance:
        return p if p.path != path else Provenance(p.path, lines[p.line], p.message)

    def kind(k: ParamKind) -> ParamKind:
        return ParamKind(k.kind, at(k.origin), tuple(at(v) for v in k.via), k.mixed)

    def cites(k: ParamKind) -> bool:
        return k.origin.path == path or any(v.path == path for v in k.via)

    touched = (
        any(cites(k) for k in facts.extra_kinds.values())
        or any(o.path == path for cp in facts.callee_props.values() for o in cp.origins.values())
        or (facts.distributed is not None and facts.distributed.path == path)
    )
    if not touched:
        return facts
    return ModuleProjectFacts(
        facts.module,
        facts.path,
        {key: kind(k) for key, k in facts.extra_kinds.items()},
        {
            name: CalleeProps(
                cp.target, cp.props, {p: at(o) for p, o in cp.origins.items()}, cp.gating
            )
            for name, cp in facts.callee_props.items()
        },
        None if facts.distributed is None else at(facts.distributed),
        facts.only_called_guarded,
        facts.root,
        facts.single_process,
    )


def _resolve_gates(
    props: dict[tuple[str, str], dict[str, Provenance]],
    res: Resolver,
    own: Mapping[str, fact_model.ModuleFacts],
    summaries: Mapping[str, ModuleSummary],
) -> dict[tuple[str, str], gate_facts.Gating]:
    """Parameter values that switch collectives off across files (core/gates.py):
    ``create_dataloader(rank=-1)`` in one module reaching a zero-first helper of another with
    that rank. The functions whose gating this resolution changed or started from, by key;
    any other function's is its module's own (``ModuleFacts.func_gates``)."""
    first: dict[str, dict[str, fact_model.FunctionInfo]] = {}

    def function_info(m: str, q: str) -> fact_model.FunctionInfo | None:
        table = first.get(m)
        if table is None:
            table = first[m] = {}
            for fi in summaries[m].facts.functions:  # the first of a name, as the merge keeps
                table.setdefault(fi.qualname, fi)
        return table.get(q)

    candidates: dict[tuple[str, str], dict[str, Provenance]] = {}
    for key, ps in props.items():
        if fact_model.COLLECTIVE in ps:
            fi = function_info(*key)
            if fi is not None and fi.gates.sites:
                candidates[key] = ps
    if not candidates:
        return {}
    gating: dict[tuple[str, str], gate_facts.Gating] = {}
    for key in candidates:
        g = own[key[0]].func_gates.get(key[1])
        if g is not None:
            gating[key] = g

    def target(key: tuple[str, str], name: str) -> tuple[str, str] | None:
        if name.startswith("self."):
            return None
        t = res.function(key[0], name)
        return None if t is None else (t[0], t[1].qualname)

    def gating_of(key: tuple[str, str], name: str) -> gate_facts.Gating | None:
        tkey = target(key, name)
        if tkey is None:
            return None
        if tkey in candidates:
            return gating.get(tkey)
        facts = own.get(tkey[0])
        return None if facts is None else facts.func_gates.get(tkey[1])

    def reaches(key: tuple[str, str], name: str) -> bool:
        facts = own.get(key[0])
        if facts is not None and fact_model.is_collective_call(name, facts.aliases):
            return True
        tkey = target(key, name)
        return tkey is not None and fact_model.COLLECTIVE in props.get(tkey, {})

    def gates_of(key: tuple[str, str]) -> tuple[gate_facts.GateFacts, tuple[str, ...]]:
        fi = function_info(*key)
        assert fi is not None  # a candidate
        return fi.gates, gate_facts.gate_params(fi.params)

    gate_facts.resolve(candidates, gating_of, reaches, gates_of, gating)
    return gating


def _class_named(
    facts: fact_model.ChunkFacts, aliases: Mapping[str, str], key: tuple[str, str]
) -> str:
    """The class a binding's value was made from, by its defining name (`NativeScaler` imported
    as another name gives its own), or ""."""
    for b in facts.bindings:
        if (b.scope, b.path) == key and b.source and not fact_model.is_marker(b.source[0]):
            qual = known_names.resolve(b.source[0], aliases) or b.source[0]
            return qual.rsplit(".", 1)[-1]
    return ""


def _isolated_nodes(
    res: Resolver, m: str, was: ModuleEdges, now: ModuleEdges, reach: Mapping[str, Any]
) -> bool:
    """Whether the functions added to or removed from a module (equal edges otherwise) are
    top-level functions, not classes, with no edges, attributes or members, that nothing
    refers to or reaches: each is then its own orphan (or nothing) in single_process's walks,
    which stay the same."""
    referenced = reach.get("referenced", set())
    reached = reach.get("reached", set())
    for q in set(was.nodes) ^ set(now.nodes):
        if "." in q or q == fact_model.MODULE or q in res.classes(m):
            return False
        k = (m, q)
        if k in referenced or k in reached:
            return False
        if now.attrs.get(k) or was.attrs.get(k):
            return False
    return True


def _local_of(
    res: Resolver, m: str, nodes: tuple[str, ...], reach: Mapping[str, Any]
) -> frozenset[str]:
    """A module's single-process functions from single_process's sets (its last loop), for a
    module whose functions changed by isolated ones (_isolated_nodes): a new one is an orphan
    (unknown) where reached code runs in the module, and single-process elsewhere."""
    if not reach:
        return frozenset()
    reached, unknown = reach["reached"], reach["unknown"]
    in_reached_module = m in reach["reached_modules"]
    classes = res.classes(m)
    rest = set()
    for q in nodes:
        if (m, q) in reached or _enclosing(m, q, reached, classes):
            continue
        if q == fact_model.MODULE:
            rest.add(MAIN_BLOCK)
            if m not in reach["touched"]:
                rest.add(q)
            continue
        orphan = in_reached_module and (m, q) not in reach["referenced"] and "." not in q
        if (m, q) not in unknown and not orphan and not _enclosing(m, q, unknown, classes):
            rest.add(q)
    return frozenset(rest)


def _enclosing(
    m: str, q: str, reached: set[tuple[str, str]], classes: Mapping[str, object]
) -> bool:
    while "." in q:
        q = q.rsplit(".", 1)[0]
        if q in classes:
            return False
        if (m, q) in reached:
            return True
    return False


def _is_reference(src: tuple[str, str], t: tuple[str, str]) -> bool:
    # As reach.single_process's `referenced`: not from the target's own code.
    return src[0] != t[0] or (src[1] != t[1] and not src[1].startswith(t[1] + "."))


def _same_walks(
    was: ModuleEdges,
    now: ModuleEdges,
    reach: Mapping[str, Any],
    edges: Mapping[str, ModuleEdges],
) -> bool:
    """Whether single_process's walks give the same sets with a module's call edges changed
    from ``was`` to ``now`` (the other modules' edges in ``edges``): each edge added or removed
    must leave the entry points (callers of a process-group start, transitively), the three
    floods (from the entry points, from everything distributed, from the orphans) and the
    referenced functions as they were. An edge added from outside a flood, or to what it
    holds already, changes none of them; one removed from outside it neither."""
    if not reach:
        return True  # nothing is distributed code: no walk runs (the seeds are the same)

    def pairs(e: ModuleEdges) -> set[tuple[tuple[str, str], tuple[str, str], bool]]:
        out = {(s, t, True) for s, ts in e.unguarded.items() for t in ts}
        out |= {(s, t, False) for s, ts in e.guarded_only.items() for t in ts}
        return out

    before, after = pairs(was), pairs(now)
    added, removed = after - before, before - after
    if not added and not removed:
        return True
    entries = reach["entries"]
    floods = (reach["from_entries"], reach["reached"], reach["unknown"])
    referenced = reach["referenced"]
    for s, t, unguarded in added:
        if t in entries and s not in entries:
            return False
        if unguarded and any(s in f and t not in f for f in floods):
            return False
        if _is_reference(s, t) and t not in referenced:
            return False
    lost = set()
    for s, t, unguarded in removed:
        if t in entries and s in entries:
            return False
        if unguarded and any(s in f for f in floods):
            return False
        if _is_reference(s, t):
            lost.add(t)
    if lost:
        # Still referenced by another edge, in any module (this one's as it is now)?
        for e in edges.values():
            for table in (e.unguarded, e.guarded_only):
                for s, ts in table.items():
                    for t in ts & lost if isinstance(ts, set) else set(ts) & lost:
                        if _is_reference(s, t):
                            lost.discard(t)
            if not lost:
                break
        if lost:
            return False
    return True
