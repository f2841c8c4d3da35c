"""The building blocks that the project facts' computation (:mod:`ddp_lsp.project.flow`) and its
incremental update (:mod:`ddp_lsp.project.flowupdate`) share.

- :class:`ProjectFacts`, the result, and :class:`_Stages`, what each stage derived (kept for
  the next update);
- each module's resolved parts (:class:`_ModuleParts`: call sites, project bases, call graph
  share, the callees it names in other modules), built once per summary;
- each stage's per-module seeds: parameter kinds (:func:`_seed_kinds`, with the project's
  GradScaler wrapper classes, :class:`_ScalerWrappers`), function properties
  (:func:`_prop_seeds`), rank-0 guards of call sites (:func:`_guard_flags`);
- the cross-file resolution of gating parameters (:func:`_resolve_gates`), the
  ``distributed`` flood through imports (:func:`_distributed`), and each module's facts from
  the stages' results (:func:`_module_out`).

The names keep their leading underscore: they are this package's internals, not an API.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any, cast

from ddp_lsp.core import facts as fact_model
from ddp_lsp.core import gates as gate_facts
from ddp_lsp.core import names as known_names
from ddp_lsp.core.crossfile import CalleeProps, ModuleProjectFacts, ParamKind, Provenance
from ddp_lsp.project.reach import ModuleEdges
from ddp_lsp.project.resolve import Resolver
from ddp_lsp.project.summary import ModuleSummary

if TYPE_CHECKING:
    from ddp_lsp.project.flowrestored import ReplayAids

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
    # What each stage derived, for the next computation (see flowupdate._update).
    stages: _Stages | None = field(default=None, compare=False, hash=False, repr=False)
    updated: bool = False  # computed from ``previous`` and the changed modules (flowupdate._update)
    # What the update derived again rather than reuse: "kinds" (flowstages._replay_kinds),
    # "walks" (reachupdate.extend_walks) or "walks-computed" (single_process over the kept shares).
    derived: frozenset[str] = frozenset()

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
    # Each site's (parameter, argument) pairs (_params_of), in the order of ``sites``: the
    # kinds' rounds and the `mixed` pass read them for every site of the project.
    site_params: list[list[tuple[str, str]]] = field(default_factory=list)


def _module_parts(res: Resolver, m: str, s: ModuleSummary) -> _ModuleParts:
    # Call sites resolved once: (caller module, site, target module, target function).
    sites: list[_Site] = []
    site_line: dict[tuple[str, fact_model.CallSite], int] = {}
    all_sites = (*s.facts.call_sites, *s.dotted_sites)
    lines_known = len(s.site_lines) == len(all_sites)
    # Each spelling resolved once (the sites, calls and spellings below repeat a few names).
    found: dict[str, tuple[str, fact_model.FunctionInfo] | None] = {}

    def target(n: str) -> tuple[str, fact_model.FunctionInfo] | None:
        return found[n] if n in found else found.setdefault(n, res.function(m, n))

    for i, cs in enumerate(all_sites):
        t = target(cs.callee)
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
        for c in sorted(fi.calls):
            f = target(c)
            if f is not None:
                reached.append((f[0], f[1].qualname))
        calls[(m, fi.qualname)] = reached
    spelled: set[str] = {cs.callee for cs in s.facts.call_sites}
    for fi in s.facts.functions:
        spelled |= fi.calls
    targets: dict[str, tuple[str, str]] = {}
    for name in sorted(spelled):
        t = target(name)
        if t is not None and t[0] != m:
            targets[name] = (t[0], t[1].qualname)
    unwrapped = fact_model.unwrapped_names([s.facts])
    site_params = [_params_of(cs, tfi) for _, cs, _, tfi in sites]
    return _ModuleParts(s, sites, site_line, inherits, calls, targets, unwrapped, site_params)


@dataclass
class _Stages:
    """What a computation derived, by stage, kept for the next one (see
    :func:`~ddp_lsp.project.flowupdate._update`).
    Never changed once built: an update copies what it changes (a restored state's tables
    are read lazily: :mod:`ddp_lsp.project.flowstate`)."""

    kind_seeds: Mapping[
        str, dict[tuple[str, str], ParamKind]
    ]  # each module's kinds before the rounds
    kinds: Mapping[str, dict[tuple[str, str], ParamKind]]  # after the rounds and `mixed`
    prop_seeds: Mapping[str, dict[tuple[str, str], dict[str, Provenance]]]  # each module's own
    props: Mapping[tuple[str, str], dict[str, Provenance]]  # after the rounds and the gates
    guard_flags: Mapping[str, tuple[tuple[tuple[str, str], bool], ...]]  # each module's sites
    guard_counts: Mapping[tuple[str, str], tuple[int, int]]  # callee -> (sites, guarded sites)
    distributed: Mapping[str, Provenance]
    local: Mapping[str, frozenset[str]]
    entered: Collection[str]
    out: Mapping[str, ModuleProjectFacts]
    # (module, function) -> the modules that call it by a name of theirs (its properties are
    # part of their facts: ModuleProjectFacts.callee_props).
    users: Mapping[tuple[str, str], frozenset[str]]
    # single_process's sets (reached, unknown, referenced, reached_modules, touched); empty
    # when nothing is distributed code.
    reach: Mapping[str, Any]
    # The gating resolved across files (core/gates.py), by function: see _resolve_gates.
    gating: Mapping[tuple[str, str], gate_facts.Gating]
    # The round of the kinds' propagation each module's kind was first proposed in (0: a
    # seed), and the modules whose call sites reach each module: what _replay_kinds reads to
    # re-derive the kinds of the modules an edit can reach. None in a state restored from
    # disk (project/flowstate.py): an update that changes the kinds computes them there.
    kind_round: Mapping[str, Mapping[tuple[str, str], int]] | None = None
    into: Mapping[str, frozenset[str]] | None = None


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
    silenced: frozenset[str] = frozenset(),
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
    return ModuleProjectFacts(
        m, s.path, extra, cprops, distributed, only_guarded, root, local, silenced
    )


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


_SILENCERS = (fact_model.SILENCES_PRINT, fact_model.SILENCES_LOGGING)


def _silenced(
    res: Resolver, props: Mapping[tuple[str, str], Mapping[str, Provenance]]
) -> dict[str, frozenset[str]]:
    """Each module whose print or logging output a distributed entry point silences on the
    other ranks: an entry (a function that starts the process group, directly or through
    what it calls) that also installs a silencer (``setup_for_distributed(is_master)``, a
    rank-0 logging filter, through any helper) runs the modules it imports, directly or not,
    with that output rank-0 only (OLMo's ``scripts/train.py`` installs the filter, its
    ``olmo/train.py`` only logs). Some entry is enough, as a file that calls the helper is
    silent for the rules whatever else runs it. A function of the carried properties and the
    imports only; an update recomputes it (one flood over the imports)."""
    starts: dict[str, set[str]] = {}
    for (m, _), fn_props in props.items():
        if fact_model.INITS_PG in fn_props:
            got = {p for p in _SILENCERS if p in fn_props}
            if got:
                starts.setdefault(m, set()).update(got)
    out: dict[str, set[str]] = {}
    for prop in _SILENCERS:
        frontier = sorted(m for m, ps in starts.items() if prop in ps)
        while frontier:
            nxt = []
            for m in frontier:
                if prop in out.get(m, ()):
                    continue
                out.setdefault(m, set()).add(prop)
                nxt.extend(res.imported_modules(m))
            frontier = nxt
    return {m: frozenset(ps) for m, ps in out.items()}


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


def _site_into(parts: Mapping[str, _ModuleParts]) -> dict[str, frozenset[str]]:
    """Each module -> the modules with a call site that reaches one of its functions."""
    found: dict[str, set[str]] = {}
    for m, part in parts.items():
        for site in part.sites:
            found.setdefault(site[2], set()).add(m)
    return {tm: frozenset(ms) for tm, ms in found.items()}


def _unmixed(k: ParamKind) -> ParamKind:
    return ParamKind(k.kind, k.origin, k.via) if k.mixed else k


def _mixed_of(
    res: Resolver,
    tm: str,
    base: Mapping[tuple[str, str], ParamKind],
    into: Mapping[str, Collection[str]],
    parts: Mapping[str, _ModuleParts],
    kinds_of: Callable[[str], Mapping[tuple[str, str], ParamKind]],
    own: Callable[[str], fact_model.ModuleFacts],
    calls_into: Callable[[str, str], Collection[str] | None] | None = None,
) -> dict[tuple[str, str], ParamKind]:
    """A module's kinds after the rounds (``base``) with ``mixed`` set as flow._compute's
    `mixed` pass sets it: a caller passes a value of no known kind where another passes a
    known one, or one that holds the kind on some launches only. ``kinds_of``: each caller
    module's kinds after the rounds. ``calls_into(tm, s)``: the functions of ``tm`` that
    module ``s`` calls, None where not known (a stored state: a caller that calls none of
    the functions whose parameters have a kind is not read)."""
    if not base:
        return {}
    flags: set[tuple[str, str]] = set()
    with_kinds = {q for q, _ in base}
    for s in sorted(into.get(tm, ())):
        called = None if calls_into is None else calls_into(tm, s)
        if called is not None and with_kinds.isdisjoint(called):
            continue  # none of its sites binds a parameter that has a kind
        ks = kinds_of(s)
        own_s = own(s)
        fns = res.functions(s)
        part = parts[s]
        for (_, cs, t, tfi), pairs in zip(part.sites, part.site_params, strict=True):
            if t != tm:
                continue
            caller = fns.get(cs.caller)
            cls = caller.cls if caller else None
            for param, arg in pairs:
                key = (tfi.qualname, param)
                if key not in base or key in flags:
                    continue
                if (
                    _lookup(ks, arg, cs.caller, cls) is None
                    or fact_model.visible_key(own_s.kinds, arg, cs.caller, cls) in own_s.sometimes
                ):
                    flags.add(key)
    return {
        k: ParamKind(v.kind, v.origin, v.via, True) if k in flags else v for k, v in base.items()
    }


def _replay_kinds(
    res: Resolver,
    parts: Mapping[str, _ModuleParts],
    summaries: Mapping[str, ModuleSummary],
    kind_seeds: Mapping[str, Mapping[tuple[str, str], ParamKind]],
    old_kinds: Mapping[str, Mapping[tuple[str, str], ParamKind]],
    old_round: Mapping[str, Mapping[tuple[str, str], int]],
    into: Mapping[str, Collection[str]],
    changed: Collection[str],
    old_targets: Mapping[str, Collection[str]],
    own: Callable[[str], fact_model.ModuleFacts],
    aids: ReplayAids | None = None,
) -> tuple[dict[str, dict[tuple[str, str], ParamKind]], dict[str, dict[tuple[str, str], int]]]:
    """The kinds after an edit changed what the ``changed`` modules feed the kinds'
    propagation (seeds, alias bindings, call sites, bases), re-derived round by round for the
    modules the change can reach only: flow._compute's rounds, exactly.

    The previous computation's history is its result with the round each kind was gained in
    (``old_round``): a module's kinds after round r are those gained by round r. In round r,
    a module can hold other kinds than before only when it changed, when a changed module
    has a call site into it (now or before), or when a module whose kinds after round r-1
    differ (``dirty``) proposes to it: by a call site, as a base class of its class, or itself
    (its aliases). Every other module proposes to it what it proposed before, so its kinds
    after round r are the old ones. The rounds here evaluate those modules alone (each
    proposal from its sources' kinds after the round before: the semi-naive evaluation of
    flow._compute gives the same rounds) and stop where flow._compute stops: at the first
    round in which nothing is gained anywhere (a module left out gains what it gained
    before), or after MAX_ROUNDS. Returns each module whose kinds or rounds may differ:
    its kinds (``mixed`` set again for those and for the modules they or the changed
    modules call: :func:`_mixed_of`) and their rounds. ``aids``: what a restored state keeps
    instead (flowrestored.ReplayAids); None: derived from ``old_round`` and ``parts``."""
    final = MAX_ROUNDS + 1
    memo: dict[tuple[str, int], dict[tuple[str, str], ParamKind]] = {}

    def old_at(m: str, r: int) -> dict[tuple[str, str], ParamKind]:
        got = memo.get((m, r))
        if got is None:
            rounds = old_round.get(m, {})
            got = memo[(m, r)] = {
                k: _unmixed(v) for k, v in old_kinds.get(m, {}).items() if rounds[k] <= r
            }
        return got

    gains_old: Mapping[int, Collection[str]]
    if aids is not None:
        gains_old = aids.gains
    else:
        gains_old = {}
        for m, rounds in old_round.items():
            for r in rounds.values():
                if r:
                    cast(dict[int, set[str]], gains_old).setdefault(r, set()).add(m)
    inheritors: Mapping[str, Collection[str]] | None = None if aids is None else aids.inheritors

    def out_of(m: str) -> set[str]:
        nonlocal inheritors
        if inheritors is None:
            found: dict[str, set[str]] = {}
            for mm, part in parts.items():
                for _, _, bm, _ in part.inherits:
                    found.setdefault(bm, set()).add(mm)
            inheritors = found
        return {site[2] for site in parts[m].sites} | set(inheritors.get(m, ()))

    aliases: dict[str, list[fact_model.Binding]] = {}

    def alias_bindings(m: str) -> list[fact_model.Binding]:
        got = aliases.get(m)
        if got is None:
            got = aliases[m] = [
                b
                for b in summaries[m].facts.bindings
                if b.source and b.source[0] == fact_model.SourceMarker.ALIAS
            ]
        return got

    base_x = set(changed)
    for c in changed:
        base_x |= out_of(c)
        base_x.update(old_targets.get(c, ()))
    prev: dict[str, dict[tuple[str, str], ParamKind]] = {c: dict(kind_seeds[c]) for c in changed}
    prev_rounds: dict[str, dict[tuple[str, str], int]] = {
        c: dict.fromkeys(kind_seeds[c], 0) for c in changed
    }
    dirty = set(changed)
    stop = MAX_ROUNDS
    for r in range(1, MAX_ROUNDS + 1):
        region = set(base_x)
        for d in dirty:
            region.add(d)
            region |= out_of(d)

        def before_of(
            s: str, r: int = r, state: Mapping[str, dict[tuple[str, str], ParamKind]] = prev
        ) -> dict[tuple[str, str], ParamKind]:
            got = state.get(s)  # its kinds after round r-1
            return got if got is not None else old_at(s, r - 1)

        gained = bool(set(gains_old.get(r, ())) - region)
        now_state: dict[str, dict[tuple[str, str], ParamKind]] = {}
        now_rounds: dict[str, dict[tuple[str, str], int]] = {}
        dirty = set()
        for m in sorted(region):
            before = before_of(m)
            proposals: dict[tuple[str, str], list[ParamKind]] = {}
            part = parts[m]
            for _, cls_name, bm, bc in part.inherits:
                for (sc, p), base_kind in before_of(bm).items():
                    if sc == bc and p.startswith("self.") and (cls_name, p) not in before:
                        proposals.setdefault((cls_name, p), []).append(base_kind)
            if before:
                fns = res.functions(m)
                for b in alias_bindings(m):
                    if (b.scope, b.path) in before or (b.scope, b.path) in part.unwrapped:
                        continue
                    src_scope = b.source[2] if len(b.source) > 2 else b.scope
                    fi = fns.get(src_scope)
                    k = _lookup(before, b.source[1], src_scope, fi.cls if fi else None)
                    if k is not None:
                        proposals.setdefault((b.scope, b.path), []).append(k)
            for s in sorted(into.get(m, ())):
                ks = before_of(s)
                if not ks:
                    continue  # its sites read its kinds: none, and nothing is proposed
                src = parts[s]
                fns_s = res.functions(s)
                for (_, cs, tm, tfi), pairs in zip(src.sites, src.site_params, strict=True):
                    if tm != m:
                        continue
                    caller = fns_s.get(cs.caller)
                    for param, arg in pairs:
                        if (tfi.qualname, param) in before:
                            continue
                        k = _lookup(ks, arg, cs.caller, caller.cls if caller else None)
                        if k is None:
                            continue
                        hop = Provenance(
                            summaries[s].path,
                            src.site_line.get((s, cs), _line(caller)),
                            f"{cs.caller if cs.caller else fact_model.MODULE} calls {cs.callee}({param}={arg})",
                        )
                        proposals.setdefault((tfi.qualname, param), []).append(
                            ParamKind(k.kind, k.origin, (*k.via, hop))
                        )
            rounds_m = prev_rounds.get(m)
            if rounds_m is None:
                rounds_m = {k: v for k, v in old_round.get(m, {}).items() if v <= r - 1}
            now = before
            if proposals:
                now, rounds_m = dict(before), dict(rounds_m)
                for key, cands in proposals.items():
                    now[key] = min(cands)
                    rounds_m[key] = r
                gained = True
            now_state[m] = now
            now_rounds[m] = rounds_m
            # Kinds or their rounds that differ: the rounds are the next update's history.
            if now != old_at(m, r) or rounds_m != {
                k: v for k, v in old_round.get(m, {}).items() if v <= r
            }:
                dirty.add(m)
        prev, prev_rounds = now_state, now_rounds
        if not gained:
            stop = r
            break
    # A module left out of the last round holds its kinds after that round, as before.
    later: set[str] = set()
    for r, ms in gains_old.items():
        if r > stop:
            later.update(ms)
    for m in later - set(prev):
        prev[m] = old_at(m, stop)
        prev_rounds[m] = {k: v for k, v in old_round[m].items() if v <= stop}
    grew = {m for m in prev if prev[m] != old_at(m, final)}

    def kinds_of(m: str) -> Mapping[tuple[str, str], ParamKind]:
        got = prev.get(m)
        return got if got is not None else old_at(m, final)

    again = set(grew) | set(changed)
    for m in grew | set(changed):
        again |= {site[2] for site in parts[m].sites}
    for c in changed:
        again.update(old_targets.get(c, ()))
    calls_into = None if aids is None else aids.calls_into
    kinds = {
        tm: _mixed_of(res, tm, kinds_of(tm), into, parts, kinds_of, own, calls_into) for tm in again
    }
    rounds_out = {m: prev_rounds[m] for m in prev if prev_rounds[m] != old_round.get(m, {})}
    return kinds, rounds_out
