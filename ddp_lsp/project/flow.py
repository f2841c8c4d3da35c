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

from ddp_lsp.core import facts as F
from ddp_lsp.core import names as N
from ddp_lsp.core.crossfile import CalleeProps, ModuleProjectFacts, ParamKind, Provenance
from ddp_lsp.project.index import ProjectIndex
from ddp_lsp.project.resolve import Resolver
from ddp_lsp.project.summary import ModuleSummary

MAX_ROUNDS = 32

_KIND_TEXT = {
    F.DDP: "wrapped in DistributedDataParallel",
    F.FSDP: "wrapped in FullyShardedDataParallel",
    F.SCALER: "a GradScaler",
    F.OPTIMIZER: "an optimizer",
    F.SAMPLER: "a DistributedSampler",
    F.LOADER: "a DataLoader",
    F.RANK: "the rank",
    F.SCALER_WRAPPER: "a GradScaler wrapper that unscales itself",
}


_PROP_TEXT = {
    F.COLLECTIVE: "performs a collective",
    F.UNSCALES: "calls unscale_",
    F.NO_SYNC: "uses no_sync",
    F.RANK_PREDICATE: "is a rank-0 predicate",
    F.GUARDS_ITSELF: "runs only on rank 0 by itself",
    F.ONLY_CALLED_GUARDED: "is only called on rank 0",
    F.UPDATES_SCALER: "calls the GradScaler's update()",
    F.SETS_EPOCH: "calls set_epoch",
    F.SETS_DEVICE: "selects the GPU (torch.cuda.set_device)",
    F.INITS_PG: "initialises the process group",
    F.DESTROYS_PG: "destroys the process group",
    F.SAVES_CALLER_PATH: "saves to the path its caller passes, on every rank",
}


@dataclass(frozen=True)
class ProjectFacts:
    modules: Mapping[str, ModuleProjectFacts] = field(
        default_factory=dict, compare=False, hash=False
    )
    rounds: int = 0

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
    key = F.visible_key(kinds, path, scope, cls)
    return None if key is None else kinds[key]


def _line(fi: F.FunctionInfo | None) -> int:
    return 1 if fi is None or fi.qualname == F.MODULE else fi.line + 1


def _wraps_scaler(res: Resolver, own: Mapping[str, F.ModuleFacts], module: str, cls: str) -> bool:
    """A method of ``cls`` (or of a base, in any module) calls ``unscale_`` or a GradScaler's
    ``update()``: the class manages the scaler itself."""
    todo = [(module, cls)]
    seen: set[tuple[str, str]] = set()
    while todo and len(seen) < 16:
        mod, c = todo.pop()
        if (mod, c) in seen or mod not in own:
            continue
        seen.add((mod, c))
        prefix = f"{c}."
        for q, props in own[mod].func_props.items():
            if q.startswith(prefix) and (F.UNSCALES in props or F.UPDATES_SCALER in props):
                return True
        for base in res.classes(mod).get(c, ()):
            r = res.resolve(mod, base)
            if r is not None and r[1] in res.classes(r[0]):
                todo.append(r)
    return False


def compute(index: ProjectIndex) -> ProjectFacts:
    """The project-wide facts of an index."""
    res = Resolver(index)
    names = sorted(index.modules)
    summaries: dict[str, ModuleSummary] = {m: index.modules[m] for m in names}
    own = {m: index.own_facts(summaries[m]) for m in names}

    # -- kinds ---------------------------------------------------------------------------------
    kinds: dict[str, dict[tuple[str, str], ParamKind]] = {m: {} for m in names}
    for m in names:
        s = summaries[m]
        lines = {(sc, p): ln for sc, p, ln in s.binding_lines}
        seeded = {
            (b.scope, b.path) for b in s.facts.bindings if b.source and b.source[0] != "=alias"
        }
        for key, kind in own[m].kinds.items():
            if key in seeded:
                fi = res.functions(m).get(key[0])
                line = lines.get(key, _line(fi))
                text = _KIND_TEXT.get(kind, kind)
                if kind == F.SCALER_WRAPPER:  # a framework table's class: name it
                    cls = _class_named(s.facts, own[m].aliases, key)
                    text = f"`{cls}`, {text}" if cls else text
                kinds[m][key] = ParamKind(kind, Provenance(s.path, line, f"{key[1]} is {text}"))
        # `loss_scaler = NativeScaler()`: a project class that wraps a GradScaler and unscales
        # (or updates) it in its own methods.
        for b in s.facts.bindings:
            if not b.source or b.source[0].startswith("=") or (b.scope, b.path) in kinds[m]:
                continue
            target = res.resolve(m, b.source[0])
            if target is None or not target[1] or target[1] not in res.classes(target[0]):
                continue
            if _wraps_scaler(res, own, target[0], target[1]):
                fi = res.functions(m).get(b.scope)
                kinds[m][(b.scope, b.path)] = ParamKind(
                    F.SCALER_WRAPPER,
                    Provenance(
                        s.path,
                        lines.get((b.scope, b.path), _line(fi)),
                        f"{b.path} is `{target[1]}`, a GradScaler wrapper that unscales itself",
                    ),
                )
    # Call sites resolved once: (caller module, site, target module, target function).
    sites: list[tuple[str, F.CallSite, str, F.FunctionInfo]] = []
    site_line: dict[tuple[str, F.CallSite], int] = {}
    for m in names:
        s = summaries[m]
        all_sites = (*s.facts.call_sites, *s.dotted_sites)
        lines_known = len(s.site_lines) == len(all_sites)
        for i, cs in enumerate(all_sites):
            t = res.function(m, cs.callee)
            if t is not None:
                sites.append((m, cs, t[0], t[1]))
                if lines_known:
                    # Equal sites in one function (two identical calls): the first line.
                    site_line.setdefault((m, cs), s.site_lines[i])

    def params_of(site: F.CallSite, fi: F.FunctionInfo) -> list[tuple[str, str]]:
        out = []
        for pos, arg in site.args:
            if isinstance(pos, int):
                params = fi.params[1:] if fi.cls else fi.params
                if pos < len(params):
                    out.append((params[pos], arg))
            elif pos in fi.params:
                out.append((pos, arg))
        return out

    # Classes and their project bases: `self.model` set in BaseTrainer.__init__ (base.py) is the
    # same attribute in DDPTrainer.fit (ddp_trainer.py).
    inherits: list[tuple[str, str, str, str]] = []  # (module, class, base module, base class)
    for m in names:
        for cls_name, bases in sorted(res.classes(m).items()):
            for base in bases:
                r = res.resolve(m, base)
                if r is not None and r[1] and r[1] in res.classes(r[0]):
                    inherits.append((m, cls_name, r[0], r[1]))

    unwrapped = {m: F.unwrapped_names([summaries[m].facts]) for m in names}
    rounds = 0
    while rounds < MAX_ROUNDS:
        rounds += 1
        proposals: dict[tuple[str, str, str], list[ParamKind]] = {}
        for m, cls_name, bm, bc in inherits:
            for (sc, p), base_kind in kinds[bm].items():
                if sc == bc and p.startswith("self.") and (cls_name, p) not in kinds[m]:
                    proposals.setdefault((m, cls_name, p), []).append(base_kind)
        for m in names:
            fns = res.functions(m)
            for b in summaries[m].facts.bindings:
                if not b.source or b.source[0] != "=alias" or (b.scope, b.path) in kinds[m]:
                    continue
                if (b.scope, b.path) in unwrapped[m]:
                    continue  # `model_without_ddp = model.module` elsewhere in the scope
                src_scope = b.source[2] if len(b.source) > 2 else b.scope
                fi = fns.get(src_scope)
                k = _lookup(kinds[m], b.source[1], src_scope, fi.cls if fi else None)
                if k is not None:
                    proposals.setdefault((m, b.scope, b.path), []).append(k)
        for m, cs, tm, tfi in sites:
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
                    f"{cs.caller if cs.caller else F.MODULE} calls {cs.callee}({param}={arg})",
                )
                proposals.setdefault((tm, tfi.qualname, param), []).append(
                    ParamKind(k.kind, k.origin, (*k.via, hop))
                )
        if not proposals:
            break
        for (m, scope, path), cands in proposals.items():
            kinds[m].setdefault((scope, path), min(cands))
    # Mixed: a caller passes a value of no known kind where another passes a known one.
    for m, cs, tm, tfi in sites:
        caller = res.functions(m).get(cs.caller)
        for param, arg in params_of(cs, tfi):
            pk = kinds[tm].get((tfi.qualname, param))
            if pk is None or pk.mixed:
                continue
            if _lookup(kinds[m], arg, cs.caller, caller.cls if caller else None) is None:
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
    calls: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for m in names:
        for fi in summaries[m].facts.functions:
            targets = []
            for callee in sorted(fi.calls):
                reached_fn = res.function(m, callee)
                if reached_fn is not None:
                    targets.append((reached_fn[0], reached_fn[1].qualname))
            calls[(m, fi.qualname)] = targets
    carried = F.TRANSITIVE_PROPS | {F.INITS_PG}  # INITS_PG only for "reaches init" below
    for _ in range(MAX_ROUNDS):
        updates: dict[tuple[str, str], dict[str, Provenance]] = {}
        for key in sorted(calls):
            mine = props.get(key, {})
            for callee_key in calls[key]:
                for p, origin in props.get(callee_key, {}).items():
                    if p in carried and p not in mine:
                        pending = updates.setdefault(key, {})
                        if p not in pending or origin < pending[p]:
                            pending[p] = origin
        if not updates:
            break
        for key, new in updates.items():
            props.setdefault(key, {}).update(new)

    # -- distributed ------------------------------------------------------------------------------
    distributed: dict[str, Provenance] = {}
    inits: dict[str, list[Provenance]] = {}
    for (mm, _), fn_props in props.items():
        if F.INITS_PG in fn_props:
            inits.setdefault(mm, []).append(fn_props[F.INITS_PG])
    starts = []
    for m in sorted(inits):
        o = min(inits[m])
        starts.append((m, Provenance(o.path, o.line, "a process group is initialised")))
    for m, origin in starts:
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
            cs.guarded or F.GUARDS_ITSELF in caller_props or F.ONLY_CALLED_GUARDED in caller_props
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
        spelled: set[str] = {cs.callee for cs in s.facts.call_sites}
        for fi in s.facts.functions:
            spelled |= fi.calls
        cprops: dict[str, CalleeProps] = {}
        for name in sorted(spelled):
            t = res.function(m, name)
            if t is None or t[0] == m:
                continue
            tq = (t[0], t[1].qualname)
            found = props.get(tq, {})
            # INITS_PG stays the core's direct property; carried only to find entry points.
            direct = own[t[0]].func_props.get(t[1].qualname, frozenset())
            keep = {p: o for p, o in found.items() if p != F.INITS_PG or p in direct}
            cprops[name] = CalleeProps(tq, frozenset(keep), dict(sorted(keep.items())))
        out[m] = ModuleProjectFacts(
            m,
            s.path,
            extra,
            cprops,
            distributed.get(m),
            frozenset(only_guarded.get(m, ())),
            root,
        )
    return ProjectFacts(out, rounds)


def _class_named(facts: F.ChunkFacts, aliases: Mapping[str, str], key: tuple[str, str]) -> str:
    """The class a binding's value was made from, by its defining name (`NativeScaler` imported
    as another name gives its own), or ""."""
    for b in facts.bindings:
        if (b.scope, b.path) == key and b.source and not b.source[0].startswith("="):
            qual = N.resolve(b.source[0], aliases) or b.source[0]
            return qual.rsplit(".", 1)[-1]
    return ""
