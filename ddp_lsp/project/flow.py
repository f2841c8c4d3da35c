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

Decision, the shared engine: an engine called with a DDP model by ``main_ddp.py`` and with a
plain model by ``train_single.py`` gets the kind "ddp" for its parameter, with ``mixed`` set and
the DDP caller in its provenance. The engine's code runs under DDP in at least one launch, and
that is where a missing ``no_sync`` costs an all-reduce per micro-batch; the single-GPU launch
is unaffected by a finding the user can fix with a conditional context. Rules may use ``mixed``
to say "when called from main_ddp.py". The single-GPU entry point itself gains nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property

from ddp_lsp.core import facts as fact_model
from ddp_lsp.core import gates as gate_facts
from ddp_lsp.core import names as known_names
from ddp_lsp.core.crossfile import CalleeProps, ModuleProjectFacts, ParamKind, Provenance
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


_Site = tuple[str, fact_model.CallSite, str, fact_model.FunctionInfo]  # caller module, site, target module, fn


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


def compute(index: ProjectIndex, previous: ProjectFacts | None = None) -> ProjectFacts:
    """The project-wide facts of an index. ``previous``: the facts computed for the same
    index before its latest updates (the server's indexer after an edit); its import
    resolution is reused when no module was added or removed and the changed ones kept their
    imports, functions' signatures and classes (an edit inside a function body)."""
    res = previous.resolver if previous is not None else None
    kept: Mapping[str, _ModuleParts] = {}
    edges: dict[str, ModuleEdges] = {}
    if res is None or not res.reuse(index):
        res = Resolver(index)
    elif previous is not None:
        kept = previous.parts
        edges = dict(previous.edges)
    names = sorted(index.modules)
    summaries: dict[str, ModuleSummary] = {m: index.modules[m] for m in names}
    own = {m: index.own_facts(summaries[m]) for m in names}
    wraps_scaler = _ScalerWrappers(res, own)
    evaluations = 0  # what the propagation rounds looked at (linear in the project's size)

    # -- kinds ---------------------------------------------------------------------------------
    kinds: dict[str, dict[tuple[str, str], ParamKind]] = {m: {} for m in names}
    for m in names:
        s = summaries[m]
        lines = {(sc, p): ln for sc, p, ln in s.binding_lines}
        seeded = {
            (b.scope, b.path) for b in s.facts.bindings if b.source and b.source[0] != fact_model.SourceMarker.ALIAS
        }
        for key, kind in own[m].kinds.items():
            if key in seeded:
                fi = res.functions(m).get(key[0])
                line = lines.get(key, _line(fi))
                text = _KIND_TEXT.get(kind, kind)
                if kind == fact_model.SCALER_WRAPPER:  # a framework table's class: name it
                    cls = _class_named(s.facts, own[m].aliases, key)
                    text = f"`{cls}`, {text}" if cls else text
                kinds[m][key] = ParamKind(kind, Provenance(s.path, line, f"{key[1]} is {text}"))
        # `loss_scaler = NativeScaler()`: a project class that wraps a GradScaler and unscales
        # (or updates) it in its own methods.
        for b in s.facts.bindings:
            if not b.source or fact_model.is_marker(b.source[0]) or (b.scope, b.path) in kinds[m]:
                continue
            target = res.resolve(m, b.source[0])
            if target is None or not target[1] or target[1] not in res.classes(target[0]):
                continue
            if wraps_scaler(target[0], target[1]):
                fi = res.functions(m).get(b.scope)
                kinds[m][(b.scope, b.path)] = ParamKind(
                    fact_model.SCALER_WRAPPER,
                    Provenance(
                        s.path,
                        lines.get((b.scope, b.path), _line(fi)),
                        f"{b.path} is `{target[1]}`, a GradScaler wrapper that unscales itself",
                    ),
                )
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

    def params_of(site: fact_model.CallSite, fi: fact_model.FunctionInfo) -> list[tuple[str, str]]:
        out = []
        for pos, arg in site.args:
            if isinstance(pos, int):
                params = fi.params[1:] if fi.cls else fi.params
                if pos < len(params):
                    out.append((params[pos], arg))
            elif pos in fi.params:
                out.append((pos, arg))
        return out

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
                or fact_model.visible_key(own[m].kinds, arg, cs.caller, caller_cls) in own[m].sometimes
            ):
                kinds[tm][(tfi.qualname, param)] = ParamKind(pk.kind, pk.origin, pk.via, True)

    # -- function properties ---------------------------------------------------------------------
    props: dict[tuple[str, str], dict[str, Provenance]] = {}
    for m in names:
        at = {(q, p): line for q, p, line in summaries[m].prop_lines}
        for q, ps in own[m].func_props.items():
            fi = res.functions(m).get(q)
            props[(m, q)] = {
                p: Provenance(
                    summaries[m].path, at.get((q, p), _line(fi)), f"`{q}` {_PROP_TEXT.get(p, p)}"
                )
                for p in sorted(ps)
            }
    calls = {k: v for m in names for k, v in parts[m].calls.items()}
    carried = fact_model.TRANSITIVE_PROPS | {fact_model.INITS_PG}  # INITS_PG only for "reaches init" below
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

    # -- distributed ------------------------------------------------------------------------------
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
    local, entered = single_process(
        res, names, summaries, own, props, sites, index.ranks.frameworks, edges
    )
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

    # -- only called under a rank-0 guard, by callers in any file ---------------------------------
    guards: dict[tuple[str, str], list[bool]] = {}
    for m, cs, tm, tfi in sites:
        caller_props = own[m].func_props.get(cs.caller, frozenset())
        guards.setdefault((tm, tfi.qualname), []).append(
            cs.guarded or fact_model.GUARDS_ITSELF in caller_props or fact_model.ONLY_CALLED_GUARDED in caller_props
        )
    only_guarded: dict[str, set[str]] = {}
    for (tm, q), flags in guards.items():
        if flags and all(flags):
            only_guarded.setdefault(tm, set()).add(q)

    # -- per module --------------------------------------------------------------------------------
    root = str(index.root)
    out: dict[str, ModuleProjectFacts] = {}
    for m in names:
        s = summaries[m]
        extra = {key: pk for key, pk in sorted(kinds[m].items()) if key not in own[m].kinds}
        cprops: dict[str, CalleeProps] = {}
        for name, tq in parts[m].targets.items():
            found = props.get(tq, {})
            # INITS_PG stays the core's direct property; carried only to find entry points.
            direct = own[tq[0]].func_props.get(tq[1], frozenset())
            keep = {p: o for p, o in found.items() if p != fact_model.INITS_PG or p in direct}
            gate = gating.get(tq) or own[tq[0]].func_gates.get(tq[1])
            cprops[name] = CalleeProps(tq, frozenset(keep), dict(sorted(keep.items())), gate)
        out[m] = ModuleProjectFacts(
            m,
            s.path,
            extra,
            cprops,
            distributed.get(m),
            frozenset(only_guarded.get(m, ())),
            root,
            local.get(m, frozenset()),
        )
    return ProjectFacts(out, rounds, evaluations, res, parts, prepared, edges)


def moved(
    facts: ModuleProjectFacts, path: str, lines: Mapping[int, int]
) -> ModuleProjectFacts:
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


def _class_named(facts: fact_model.ChunkFacts, aliases: Mapping[str, str], key: tuple[str, str]) -> str:
    """The class a binding's value was made from, by its defining name (`NativeScaler` imported
    as another name gives its own), or ""."""
    for b in facts.bindings:
        if (b.scope, b.path) == key and b.source and not fact_model.is_marker(b.source[0]):
            qual = known_names.resolve(b.source[0], aliases) or b.source[0]
            return qual.rsplit(".", 1)[-1]
    return ""
