"""Which functions of a project are distributed code (issue 14: F16, "0 findings in
non-distributed modules").

A module that imports ``torch.distributed`` (or the project's utilities that do) is not yet
distributed code: an export tool, a tokenizer, a plotting script or a unit test of a
distributed project imports the same helpers and runs as one process. The unit is the
function, not the module: ``val.py`` holds both the function the training loop calls and the
``main`` its command line runs alone.

A function is distributed code when

- it does something distributed itself: calls ``torch.distributed`` (not only asks
  ``is_initialized()``/``is_available()``), wraps in DDP/FSDP, builds a
  ``DistributedSampler``, starts ranks (``mp.spawn``), uses accelerate/DeepSpeed, holds a rank
  variable, a DDP model or a sampler, performs a collective, selects a GPU per rank or asks
  a rank-0 predicate; or
- a distributed entry point reaches it on every rank: an entry point is a function that
  initialises a process group, directly or through what it calls or hands to a launcher
  (``mp.spawn(run, args=(cfg, train))``, ``launch(main_worker)``); from there the flow follows
  calls that are not under a rank-0 guard, functions handed as arguments, and the methods of
  the classes it instantiates. A call made on rank 0 only (``if rank == 0: evaluate(...)``)
  does not make its callee run on every rank.

Everything else in the project is single-process code. Rules that only apply to distributed
code (an unguarded save, unguarded logging, a hard-coded device, a loader without a
``DistributedSampler``, a seed not offset by rank, ``torch.load`` without ``map_location``)
stay silent there; rules whose bug is a bug in any process (a scaler misuse, a deprecated API,
a graph kept alive) do not ask. Without any distributed function in the project nothing is
decided here (the module-level "distributed" context applies as before).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, MutableMapping
from dataclasses import dataclass
from typing import cast

from ddp_lsp.core import facts as fact_model
from ddp_lsp.core import names as known_names
from ddp_lsp.core.crossfile import MAIN_BLOCK
from ddp_lsp.core.frameworks import BUILTIN, FrameworkModel, Meaning
from ddp_lsp.project.resolve import Resolver
from ddp_lsp.project.summary import ModuleSummary

#: Kinds that only distributed code holds.
DISTRIBUTED_KINDS = frozenset(
    {fact_model.DDP, fact_model.FSDP, fact_model.SAMPLER, fact_model.RANK}
)
#: The function's own (syntactic) properties that are distributed.
DISTRIBUTED_PROPS = frozenset(
    {
        fact_model.COLLECTIVE,
        fact_model.NO_SYNC,
        fact_model.RANK_PREDICATE,
        fact_model.GUARDS_ITSELF,
        fact_model.SETS_DEVICE,
        fact_model.INITS_PG,
        fact_model.DESTROYS_PG,
    }
)

#: Bases that call none of a subclass's methods by name except special ones (`forward`
#: through `__call__`, `__getitem__`): a subclass of anything else may have any method called.
PLAIN_BASES = frozenset(
    {
        "object",
        "torch.nn.Module",
        "torch.nn.modules.module.Module",
        "torch.utils.data.Dataset",
        "torch.utils.data.dataset.Dataset",
        "torch.utils.data.IterableDataset",
        "Exception",
        "ValueError",
        "RuntimeError",
    }
)

Key = tuple[str, str]  # (module, qualname); qualname "<module>" for the top level


@dataclass(frozen=True)
class ModuleEdges:
    """One module's share of :func:`single_process`'s call graph: the edges leaving its
    functions and the ones that do distributed things themselves. A function of the module's
    summary and of import resolution only; the tables are read, never changed, once built."""

    summary: ModuleSummary  # the summary they were built from (compared by identity)
    frameworks: FrameworkModel  # the tables they were read with (compared by identity)
    unguarded: Mapping[Key, set[Key]]
    guarded_only: Mapping[Key, set[Key]]
    seeds: frozenset[Key]
    nodes: tuple[str, ...]  # its functions' qualnames and the top level
    members: Mapping[Key, list[Key]]  # (module, class) -> its methods
    attrs: Mapping[Key, frozenset[str]]  # the attributes a function calls or hands


def is_distributed_call(qual: str, frameworks: FrameworkModel = BUILTIN) -> bool:
    """A call of ``qual`` is distributed code: under a distributed module, and not one the
    framework tables mark ``single-process`` (a probe such as ``dist.is_initialized()``,
    DeepSpeed's device abstraction, accelerate's big-model placement; the name or anything
    under it)."""
    if not known_names.is_distributed_import(qual):
        return False  # the built-in single-process names included
    return not known_names.is_single_process_name(qual, frameworks.calls(Meaning.SINGLE_PROCESS))


def _distributed_heads(aliases: Mapping[str, str]) -> frozenset[str]:
    """Names whose dotted uses may resolve under a distributed prefix (`dist`, `torch`, `DDP`,
    `accelerate`): the only heads worth resolving."""
    prefixes = known_names.DISTRIBUTED_MODULE_PREFIXES
    return frozenset(
        h
        for h, q in aliases.items()
        if q.startswith(prefixes) or any(p.startswith(q + ".") for p in prefixes)
    )


def _does_distributed(
    fi: fact_model.FunctionInfo,
    own: fact_model.ModuleFacts,
    scopes_with_kinds: Mapping[str, bool],
    heads: frozenset[str],
    frameworks: FrameworkModel,
) -> bool:
    if fi.props & DISTRIBUTED_PROPS or own.func_props.get(fi.qualname, frozenset()) & (
        DISTRIBUTED_PROPS
    ):
        return True
    if scopes_with_kinds.get(fi.qualname, False):
        return True
    for callee in fi.calls:
        if callee.partition(".")[0] not in heads:
            continue
        qual = known_names.resolve(callee, own.aliases)
        if qual is not None and is_distributed_call(qual, frameworks):
            return True
    return False


def single_process(
    res: Resolver,
    names: Iterable[str],
    summaries: Mapping[str, ModuleSummary],
    own: Mapping[str, fact_model.ModuleFacts],
    props: Mapping[Key, Mapping[str, object]],
    sites: Iterable[tuple[str, fact_model.CallSite, str, fact_model.FunctionInfo]],
    frameworks: FrameworkModel = BUILTIN,
    kept: MutableMapping[str, ModuleEdges] | None = None,
    edges_only: bool = False,
    details: MutableMapping[str, object] | None = None,
    only: Collection[str] | None = None,
) -> tuple[dict[str, frozenset[str]], set[str]]:
    """(module -> its functions that are not distributed code, modules an entry point
    reaches). Both empty when nothing in the project is distributed code. ``frameworks``:
    the settings' tables (its ``single-process`` calls do not make a function distributed).

    ``kept``: each module's edges and seeds from a computation with the same resolver (the
    server's indexer after an edit inside a function body), used while the module's summary
    and the tables are the ones they were built from, and filled with what this one built.
    ``edges_only``: fill ``kept`` and stop (project/flow.py compares a changed module's new
    edges with its old ones). ``details``: receives the walks' sets (``reached``,
    ``unknown``, ``referenced``, ``reached_modules``, ``touched``, ``entries``,
    ``from_entries``), left empty when nothing is distributed code. ``only`` (with
    ``edges_only``): build these modules' edges, read no other (project/flowstate.py)."""
    names = list(names)
    known = set(names)
    # -- edges: calls (unguarded / guarded), handed functions, instantiated classes ------------
    # Built for the modules without kept edges (all of them, but in the server's indexer).
    stale = set(names) if only is None else set(only)
    if kept is not None and only is None:
        stale = {
            m
            for m in names
            if m not in kept
            or kept[m].summary is not summaries[m]
            or kept[m].frameworks is not frameworks
        }
    site_guard: dict[tuple[Key, Key], bool] = {}  # every site from caller to callee guarded
    for m, cs, tm, tfi in sites:
        if m in stale:
            caller = (m, cs.caller or fact_model.MODULE)
            pair = (caller, (tm, tfi.qualname))
            site_guard[pair] = site_guard.get(pair, True) and cs.guarded

    def members(tm: str, cls: str) -> list[Key]:
        return member_table.get((tm, cls), [])

    local_heads: dict[str, set[str]] = {}  # built for the modules whose edges are built
    project_tops = {m.partition(".")[0] for m in names}
    memo: dict[tuple[str, str], list[Key]] = {}

    def targets(m: str, scope: str, spelled: str) -> list[Key]:
        if spelled.startswith("self.") and spelled.count(".") == 1:
            fi = res.functions(m).get(scope)
            if fi is None or fi.cls is None:
                return []
            spelled = f"{fi.cls}.{spelled[5:]}"
        key = (m, spelled)
        found = memo.get(key)
        if found is None:
            if not may_resolve(m, spelled):
                found = []
            elif spelled.rpartition(".")[2][:1].isupper():
                found = resolved(m, spelled)  # a class, exactly (not the base its __init__ is in)
            else:
                # A function: the flow resolved it already (memoised), `Cls.from_pretrained`
                # inherited included.
                r = res.function(m, spelled)
                found = [] if r is None or r[0] not in known else [(r[0], r[1].qualname)]
            memo[key] = found
        return found

    def may_resolve(m: str, spelled: str) -> bool:
        head = spelled.partition(".")[0]
        qual = res.aliases(m).get(head)
        if qual is None:
            heads = local_heads.get(m)
            if heads is None:
                heads = local_heads[m] = set(res.functions(m)) | set(res.classes(m))
            return head in heads  # not a local variable or a builtin (`x.sum()`)
        # Not the standard library, torch or a framework (unless the project is one).
        return known_names.may_be_project_module(qual) or qual.partition(".")[0] in project_tops

    def resolved(m: str, spelled: str) -> list[Key]:
        r = res.resolve(m, spelled)
        if r is None or not r[1] or r[0] not in known:
            return []
        tm, q = r
        if q in res.classes(tm):
            return [(tm, q)]  # the class: instantiated (or handed), see `live` below
        if q in res.functions(tm):
            return [(tm, q)]
        owner = q.rsplit(".", 1)[0] if "." in q else ""
        if owner in res.classes(tm):
            # `Model.from_pretrained(...)` inherited from a base: the class is in use, and the
            # name is called (see `flood`).
            return [(tm, owner)]
        return []

    def module_edges(m: str) -> ModuleEdges:
        s = summaries[m]
        quals = [fi.qualname for fi in s.facts.functions]
        if fact_model.MODULE not in quals:
            quals.append(fact_model.MODULE)
        m_members: dict[Key, list[Key]] = {}
        for q in quals:
            if "." in q:
                m_members.setdefault((m, q.split(".", 1)[0]), []).append((m, q))
        # The attributes each function calls or hands (`tok.encode(...)`): see `flood`.
        m_attrs: dict[Key, frozenset[str]] = {}
        for fi in s.facts.functions:  # two functions of one name: the last one's calls
            m_attrs[(m, fi.qualname)] = frozenset(c.rsplit(".", 1)[1] for c in fi.calls if "." in c)
        for scope, spelled in s.handed:
            if "." in spelled:
                got = m_attrs.get((m, scope), frozenset())
                m_attrs[(m, scope)] = got | {spelled.rsplit(".", 1)[1]}
        m_unguarded: dict[Key, set[Key]] = {}
        m_guarded: dict[Key, set[Key]] = {}
        for fi in s.facts.functions:
            src = (m, fi.qualname)
            for callee in sorted(fi.calls):
                for t in targets(m, fi.qualname, callee):
                    if site_guard.get((src, t), False):
                        m_guarded.setdefault(src, set()).add(t)
                    else:
                        m_unguarded.setdefault(src, set()).add(t)
        for scope, spelled in s.handed:
            for t in targets(m, scope, spelled):
                m_unguarded.setdefault((m, scope), set()).add(t)
        # -- seeds: functions that do distributed things themselves -----------------------------
        m_seeds: set[Key] = set()
        o = own[m]
        heads = _distributed_heads(o.aliases)
        with_kinds: dict[str, bool] = {}
        for (scope, _), kind in o.kinds.items():
            if kind in DISTRIBUTED_KINDS:
                with_kinds[scope or fact_model.MODULE] = True
        for fi in s.facts.functions:
            if _does_distributed(fi, o, with_kinds, heads, frameworks):
                m_seeds.add((m, fi.qualname))
        if s.facts.env_markers and not m_seeds:
            m_seeds.add((m, fact_model.MODULE))  # the rank read from the environment, place unknown
        return ModuleEdges(
            s,
            frameworks,
            m_unguarded,
            m_guarded,
            frozenset(m_seeds),
            tuple(quals),
            m_members,
            m_attrs,
        )

    nodes: dict[str, tuple[str, ...]] = {}
    member_table: dict[Key, list[Key]] = {}
    attrs: dict[Key, frozenset[str]] = {}
    unguarded: dict[Key, set[Key]] = {}
    guarded_only: dict[Key, set[Key]] = {}
    seeds: set[Key] = set()
    for m in names:
        if m in stale:
            edges = module_edges(m)
            if kept is not None:
                kept[m] = edges
        elif only is not None or edges_only:
            continue  # (kept, and nothing but the built shares is wanted)
        else:
            assert kept is not None
            edges = kept[m]
        # Each module's tables hold its own functions only: they do not overlap.
        nodes[m] = edges.nodes
        member_table.update(edges.members)
        attrs.update(edges.attrs)
        unguarded.update(edges.unguarded)
        guarded_only.update(edges.guarded_only)
        seeds |= edges.seeds
    if edges_only or not seeds:
        return {}, set()
    # -- entry points: what reaches a process-group initialisation (through calls and handed
    # functions, guarded or not: rank 0 alone does not initialise a group) -------------------
    callers: dict[Key, set[Key]] = {}
    for table in (unguarded, guarded_only):
        for src, ts in table.items():
            for t in ts:
                callers.setdefault(t, set()).add(src)
    entries = {k for k, p in props.items() if fact_model.INITS_PG in p}
    todo = sorted(entries)
    while todo:
        nxt = []
        for k in todo:
            for c in sorted(callers.get(k, ())):
                if c not in entries:
                    entries.add(c)
                    nxt.append(c)
        todo = nxt

    # -- reach: from entry points and self-distributed functions, along unguarded edges. A
    # class reached (built or handed) runs its constructor and special methods (`forward`
    # through `__call__`), and the methods reached code calls by name (`tok.encode(...)`).
    def is_class(k: Key) -> bool:
        return k[1] in res.classes(k[0])

    def bases(k: Key) -> tuple[list[Key], bool]:
        return _class_bases(res, own, k)

    graph = _Graph(unguarded.get, attrs.get, member_table.get, is_class, bases)

    def flood(start: Iterable[Key]) -> tuple[set[Key], set[str], list[Key]]:
        out: set[Key] = set()
        called: set[str] = set()
        live: list[Key] = []
        graph.flood(sorted(start), out, called, live)
        return out, called, live

    from_entries, fe_called, fe_live = flood(entries)
    reached, r_called, r_live = flood(seeds | entries)
    # Unknown is not single-process: a function or class nothing in the project refers to
    # (a loss class another training script may build, a library's public function) in a
    # module whose other code distributed code reaches keeps the module's context, and so
    # does the top level of a module that reached code runs or imports. Known callers that
    # are all single-process (a tool's `main`), or a module nothing distributed reaches (a
    # unit test, an export script), make it single-process.
    referenced: set[Key] = set()
    for table in (unguarded, guarded_only):
        for src, ts in table.items():
            for t in ts:
                # Not from its own code (`super(LegacyLoss, self).__init__()`, recursion).
                if src[0] != t[0] or (src[1] != t[1] and not src[1].startswith(t[1] + ".")):
                    referenced.add(t)
    reached_modules = {m for m, _ in reached}
    touched = set(reached_modules)
    for m in reached_modules:
        touched.update(res.imported_modules(m))
    orphans: set[Key] = set()
    for m in sorted(reached_modules):
        for q in nodes[m]:
            if q == fact_model.MODULE or (m, q) in reached:
                continue
            owner = (m, q.split(".", 1)[0])
            if (m, q) not in referenced and not (is_class(owner) and owner in referenced):
                orphans.add(owner if is_class(owner) else (m, q))
    # An unreferenced class's methods are all unknown (any of them may be its users' entry),
    # and so is what only they call (`self.build_targets(...)`).
    unknown, u_called, u_live = flood(
        orphans | {t for o in orphans if is_class(o) for t in members(*o)}
    )
    local: dict[str, frozenset[str]] = {}
    for m in names:
        rest = _module_local(m, nodes[m], reached, unknown, touched, res.classes(m))
        if rest:
            local[m] = rest
    if details is not None:
        details.update(
            reached=reached,
            unknown=unknown,
            referenced=referenced,
            reached_modules=reached_modules,
            touched=touched,
            entries=entries,
            from_entries=from_entries,
            # Each flood's called attribute names and live classes, and the orphans: what
            # extend_walks continues from (absent in a state restored from disk).
            floods={
                "from_entries": (fe_called, fe_live),
                "reached": (r_called, r_live),
                "unknown": (u_called, u_live),
            },
            orphans=orphans,
        )
    return local, {m for m, _ in from_entries}


def _class_bases(
    res: Resolver, own: Mapping[str, fact_model.ModuleFacts], k: Key
) -> tuple[list[Key], bool]:
    """The project bases of a class, and whether another base (not ``object``,
    ``nn.Module``, ``Dataset``) may call any of its methods (a framework's Checkpointer
    calling the `_load_file` the class overrides)."""
    project: list[Key] = []
    foreign = False
    for base in res.classes(k[0]).get(k[1], ()):
        r = res.resolve(k[0], base)
        if r is not None and r[1] and r[1] in res.classes(r[0]):
            project.append((r[0], r[1]))
            continue
        qual = known_names.resolve(base, own[k[0]].aliases) or base
        foreign = foreign or qual not in PLAIN_BASES
    return project, foreign


def _runs_when_built(q: str) -> bool:
    name = q.rsplit(".", 1)[1]
    return name == "forward" or (name.startswith("__") and name.endswith("__"))


class _Graph:
    """What the floods read of the call graph: each function's unguarded edges and the
    attributes it calls, each class's methods, whether a key is a class, a class's project
    bases (and whether another base may call any of its methods)."""

    def __init__(
        self,
        unguarded: Callable[[Key], Collection[Key] | None],
        attrs: Callable[[Key], frozenset[str] | None],
        members: Callable[[Key], list[Key] | None],
        is_class: Callable[[Key], bool],
        bases: Callable[[Key], tuple[list[Key], bool]],
    ) -> None:
        self.unguarded = unguarded
        self.attrs = attrs
        self.members = members
        self.is_class = is_class
        self.bases = bases

    def flood(
        self,
        todo: list[Key],
        out: set[Key],
        called: set[str],
        live: list[Key],
        fresh: set[str] | None = None,
    ) -> None:
        """Extend ``out`` (and the attribute names its functions call, ``called``, and the
        classes it holds, ``live``) with what ``todo`` reaches: from functions, their
        unguarded callees and handed functions; from a class (built or handed), its project
        bases, its constructor and special methods (`forward` through `__call__`), and the
        methods reached code calls by name (`tok.encode(...)`); every method of a class with
        a base that may call any of them. A least fixed point: the same sets whatever the
        order, and continuing a finished flood with more starts (or more edges from what it
        holds) gives the flood of the larger graph (extend_walks)."""
        members = self.members
        fresh = set() if fresh is None else fresh  # names called since `live` was scanned
        while True:
            while todo:
                k = todo.pop()
                if k in out:
                    continue
                out.add(k)
                if self.is_class(k):
                    live.append(k)
                    project_bases, foreign = self.bases(k)
                    todo.extend(project_bases)  # inherited methods run on the instance
                    todo.extend(
                        t
                        for t in members(k) or ()
                        if foreign or _runs_when_built(t[1]) or t[1].rsplit(".", 1)[1] in called
                    )
                    continue
                names = self.attrs(k)
                if names:
                    for a in names:
                        if a not in called:
                            called.add(a)
                            fresh.add(a)
                todo.extend(sorted(self.unguarded(k) or ()))
            if not fresh:
                break
            for c in live:
                todo.extend(
                    t for t in members(c) or () if t not in out and t[1].rsplit(".", 1)[1] in fresh
                )
            fresh = set()


def _module_local(
    m: str,
    nodes: Iterable[str],
    reached: Collection[Key],
    unknown: Collection[Key],
    touched: Collection[str],
    classes: Mapping[str, object],
) -> frozenset[str]:
    """A module's functions that are not distributed code (single_process's last step)."""
    rest = set()
    for q in nodes:
        if (m, q) in reached or _enclosing_reached(m, q, reached, classes):
            continue
        if q == fact_model.MODULE:
            rest.add(MAIN_BLOCK)  # the top level itself is not a distributed entry point
            if m not in touched:
                rest.add(q)
            continue
        if (m, q) not in unknown and not _enclosing_reached(m, q, unknown, classes):
            rest.add(q)
    return frozenset(rest)


def _enclosing_reached(
    m: str, q: str, reached: Collection[Key], classes: Mapping[str, object]
) -> bool:
    """A nested function (``main.worker``) runs where the function around it runs."""
    while "." in q:
        q = q.rsplit(".", 1)[0]
        if q in classes:
            return False  # a method: reached on its own (see `flood`)
        if (m, q) in reached:
            return True
    return False


def _pairs(e: ModuleEdges, unguarded_only: bool) -> set[tuple[Key, Key]]:
    out = {(s, t) for s, ts in e.unguarded.items() for t in ts}
    if not unguarded_only:
        out |= {(s, t) for s, ts in e.guarded_only.items() for t in ts}
    return out


def _is_reference(src: Key, t: Key) -> bool:
    # As single_process's `referenced`: not from the target's own code.
    return src[0] != t[0] or (src[1] != t[1] and not src[1].startswith(t[1] + "."))


def extend_walks(
    res: Resolver,
    edges: Mapping[str, ModuleEdges],
    before: Mapping[str, ModuleEdges],
    reach: Mapping[str, object],
    own: Mapping[str, fact_model.ModuleFacts],
    imports_changed: bool,
    stale: Collection[str] = (),
) -> tuple[dict[str, frozenset[str]], dict[str, object]] | None:
    """:func:`single_process`'s walks after some modules' shares changed from ``before`` to
    ``edges`` (every module's share, as it is now), from the last walks (``reach``: a
    computation's ``details``, with ``floods`` and ``orphans``; not a restored state's).

    Every flood is a least fixed point of monotone rules. What was added (seeds, functions,
    call edges, called attributes, class methods) continues the old flood: that gives the
    flood of the larger graph. What was removed (call edges, seeds, functions, orphans) can
    only take away what it derived: each function or class that lost a derivation must be
    shown to keep one, by a path of unguarded calls (and constructors and special methods of
    classes) from a start of the new graph, found backwards through the new callers (each
    step of such a path needs nothing but the step before, so the path derives it on its
    own); when one cannot be shown (or an attribute call or a method that a flood holds was
    removed, or the entry points or the classes change) this returns None and the caller
    walks everything again. Orphans (functions nothing refers to, in a module reached code
    runs in) are derived again for every function whose standing may have changed.

    Returns each module whose single-process functions may have changed, with its new set
    (empty: none), and the new ``details`` (the old sets are never changed: copied where
    they change). ``imports_changed``: some module's imported project modules changed
    (``touched``); ``stale``: the modules whose import resolution read a changed interface
    (their classes' bases may resolve elsewhere now)."""
    if any(res.classes(m) for m in stale):
        return None
    floods = reach.get("floods")
    old_orphans = reach.get("orphans")
    if not isinstance(floods, dict) or not isinstance(old_orphans, set):
        return None
    entries = cast(set[Key], reach["entries"])
    old_sets = {
        name: cast(set[Key], reach[name]) for name in ("from_entries", "reached", "unknown")
    }
    seeds_added: set[Key] = set()
    seeds_lost: set[Key] = set()
    u_added: set[tuple[Key, Key]] = set()
    u_lost: set[tuple[Key, Key]] = set()
    all_added: set[tuple[Key, Key]] = set()
    all_lost: set[tuple[Key, Key]] = set()
    attrs_added: set[tuple[Key, str]] = set()
    members_added: set[tuple[Key, Key]] = set()
    gone: set[Key] = set()  # functions removed
    nodes_changed: dict[str, set[str]] = {}

    def held(k: Key) -> bool:
        return any(k in flood for flood in old_sets.values())

    for m, was in before.items():
        now = edges.get(m)
        if now is None or now.frameworks is not was.frameworks:
            return None
        if was.summary.bases != now.summary.bases:
            return None  # classes or their bases: is_class and _class_bases read them
        seeds_added |= now.seeds - was.seeds
        seeds_lost |= was.seeds - now.seeds
        gone.update((m, q) for q in set(was.nodes) - set(now.nodes))
        u_was, u_now = _pairs(was, True), _pairs(now, True)
        a_was, a_now = _pairs(was, False), _pairs(now, False)
        u_added |= u_now - u_was
        u_lost |= u_was - u_now
        all_added |= a_now - a_was
        all_lost |= a_was - a_now
        for k, names in was.attrs.items():
            if held(k) and not names <= now.attrs.get(k, frozenset()):
                return None  # a name a flood calls may be called no more
        for k, names in now.attrs.items():
            attrs_added.update((k, a) for a in names - was.attrs.get(k, frozenset()))
        for k, ms in was.members.items():
            if any(held(t) for t in set(ms) - set(now.members.get(k, ()))):
                return None
        for k, ms in now.members.items():
            members_added.update((k, t) for t in set(ms) - set(was.members.get(k, ())))
        nodes_changed[m] = set(now.nodes) | set(was.nodes)
    if gone & entries:
        return None
    for s, t in all_added:
        if t in entries and s not in entries:
            return None  # a new caller of an entry point: entries grow through callers
    for s, t in all_lost:
        if t in entries and s in entries:
            return None  # entries may shrink

    def unguarded(k: Key) -> Collection[Key] | None:
        e = edges.get(k[0])
        return None if e is None else e.unguarded.get(k)

    def attrs(k: Key) -> frozenset[str] | None:
        e = edges.get(k[0])
        return None if e is None else e.attrs.get(k)

    def members(k: Key) -> list[Key] | None:
        e = edges.get(k[0])
        return None if e is None else e.members.get(k)

    def is_class(k: Key) -> bool:
        return k[1] in res.classes(k[0])

    graph = _Graph(unguarded, attrs, members, is_class, lambda k: _class_bases(res, own, k))
    callers: dict[Key, set[Key]] | None = None  # the new graph's unguarded callers

    def callers_of(k: Key) -> set[Key]:
        nonlocal callers
        if callers is None:
            callers = {}
            for e in edges.values():
                for src, ts in e.unguarded.items():
                    for t in ts:
                        callers.setdefault(t, set()).add(src)
        return callers.get(k, set())

    def kept(
        name: str, starts: Callable[[Key], bool], lost_starts: Collection[Key]
    ) -> set[Key] | None:
        """The old flood less the functions removed, when every member that lost a
        derivation keeps one in the new graph (None when one cannot be shown)."""
        old = old_sets[name]
        doubt = {k for k in lost_starts if k in old}
        doubt |= {t for s, t in u_lost if s in old and not is_class(s) and t in old}
        if not doubt and not (gone & old):
            return old
        out = old - gone
        proven: set[Key] = set()
        for t in sorted(doubt - gone):
            if not _derivable(t, out, starts, proven, callers_of, is_class, own, res):
                return None
        return out

    def extend(
        name: str, out: set[Key], starts: Iterable[Key]
    ) -> tuple[set[Key], tuple[set[str], list[Key]]]:
        old = old_sets[name]
        called0, live0 = cast(tuple[set[str], list[Key]], floods[name])
        live0 = [c for c in live0 if c not in gone] if out is not old else live0
        todo = [k for k in starts if k not in out]
        todo += [t for s, t in u_added if s in out and not is_class(s) and t not in out]
        fresh = {a for s, a in attrs_added if s in out and not is_class(s) and a not in called0}
        for c, t in members_added:
            if c in out and t not in out and is_class(c):
                foreign = _class_bases(res, own, c)[1]
                if foreign or _runs_when_built(t[1]) or t[1].rsplit(".", 1)[1] in called0:
                    todo.append(t)
        if not todo and not fresh:
            return out, (called0, live0)
        grown, called, live = set(out), called0 | fresh, list(live0)
        graph.flood(sorted(todo), grown, called, live, fresh)
        return grown, (called, live)

    def reached_start(k: Key) -> bool:
        e = edges.get(k[0])
        return k in entries or (e is not None and k in e.seeds)

    fe_kept = kept("from_entries", entries.__contains__, ())
    r_kept = kept("reached", reached_start, {k for k in seeds_lost if not reached_start(k)})
    if fe_kept is None or r_kept is None:
        return None
    from_entries, fe = extend("from_entries", fe_kept, ())
    reached, r_fl = extend("reached", r_kept, seeds_added)
    old_reached = old_sets["reached"]
    old_referenced = cast(set[Key], reach["referenced"])
    referenced = old_referenced
    new_refs = {t for s, t in all_added if _is_reference(s, t) and t not in old_referenced}
    lost_refs = {t for s, t in all_lost if _is_reference(s, t) and t in old_referenced}
    if lost_refs or gone & old_referenced:
        every: dict[Key, set[Key]] = {}
        for e in edges.values():
            for table in (e.unguarded, e.guarded_only):
                for src, ts in table.items():
                    for t in ts:
                        if t in lost_refs:
                            every.setdefault(t, set()).add(src)
        lost_refs = {t for t in lost_refs if not any(_is_reference(s, t) for s in every.get(t, ()))}
        lost_refs |= gone & old_referenced
    if new_refs or lost_refs:
        referenced = (old_referenced | new_refs) - lost_refs
    old_modules = cast(set[str], reach["reached_modules"])
    reached_modules = old_modules
    if reached is not old_reached:
        entering = {m for m, _ in reached - old_reached} - old_modules
        leaving = set()
        for m in {m for m, _ in old_reached - reached}:
            share = edges.get(m)
            if share is None or not any((m, q) in reached for q in share.nodes):
                leaving.add(m)
        if entering or leaving:
            reached_modules = (old_modules | entering) - leaving
    old_touched = cast(set[str], reach["touched"])
    touched = old_touched
    if imports_changed or reached_modules is not old_modules:
        touched = set(reached_modules)
        for m in reached_modules:
            touched.update(res.imported_modules(m))

    # -- orphans: derived again for every function whose standing may have changed ---------
    def orphan(
        m: str, q: str, modules: Collection[str], rch: Collection[Key], refs: Collection[Key]
    ) -> Key | None:
        if m not in modules or q == fact_model.MODULE or (m, q) in rch:
            return None
        owner = (m, q.split(".", 1)[0])
        if (m, q) in refs or (is_class(owner) and owner in refs):
            return None
        return owner if is_class(owner) else (m, q)

    candidates: set[Key] = set()
    for m in reached_modules ^ old_modules:
        share = edges.get(m)
        candidates.update((m, q) for q in (share.nodes if share is not None else ()))
        if m in before:
            candidates.update((m, q) for q in before[m].nodes)
    for m, qs in nodes_changed.items():
        candidates.update((m, q) for q in qs)
    candidates |= reached ^ old_reached if reached is not old_reached else set()
    for t in new_refs | lost_refs:
        candidates.add(t)
        if is_class(t):
            candidates.update(members(t) or ())
    lost: set[Key] = set()
    gained: set[Key] = set()
    for m, q in candidates:
        was_nodes = before[m].nodes if m in before else None
        was_o = (
            None
            if was_nodes is not None and q not in was_nodes
            else orphan(m, q, old_modules, old_reached, old_referenced)
        )
        now_nodes = edges[m].nodes if m in edges else ()
        now_o = orphan(m, q, reached_modules, reached, referenced) if q in now_nodes else None
        if was_o is not None and was_o != now_o:
            lost.add(was_o)
        if now_o is not None:
            gained.add(now_o)
    lost -= gained
    for k in list(lost):  # another function of its module may still make it an orphan
        share = edges.get(k[0])
        if share is not None and any(
            orphan(k[0], q, reached_modules, reached, referenced) == k for q in share.nodes
        ):
            lost.discard(k)
    orphans = old_orphans
    if lost or gained - old_orphans:
        orphans = (old_orphans - lost) | gained

    # The unknown flood's starts: the orphans and the methods of the orphan classes.
    def old_members(k: Key) -> Collection[Key]:
        e: ModuleEdges | None = before[k[0]] if k[0] in before else edges.get(k[0])
        return () if e is None else e.members.get(k, ())

    def u_start(k: Key) -> bool:
        if k in orphans:
            return True
        if "." not in k[1]:
            return False
        owner = (k[0], k[1].split(".", 1)[0])
        return owner in orphans and is_class(owner) and k in (members(owner) or ())

    def old_u_start(k: Key) -> bool:
        if k in old_orphans:
            return True
        if "." not in k[1]:
            return False
        owner = (k[0], k[1].split(".", 1)[0])
        return owner in old_orphans and is_class(owner) and k in old_members(owner)

    maybe: set[Key] = set(lost) | (gained - old_orphans)
    for o in list(maybe):
        if is_class(o):
            maybe.update(old_members(o))
            maybe.update(members(o) or ())
    for m in before:  # methods of an orphan class added or removed
        for k in set(before[m].members) | set(edges[m].members):
            if k in orphans or k in old_orphans:
                maybe.update(old_members(k))
                maybe.update(members(k) or ())
    u_kept = kept("unknown", u_start, {k for k in maybe if old_u_start(k) and not u_start(k)})
    if u_kept is None:
        return None
    unknown, u_fl = extend(
        "unknown", u_kept, [k for k in maybe if u_start(k) and not old_u_start(k)]
    )
    old_unknown = old_sets["unknown"]

    # -- each module whose functions' standing may have changed ------------------------------
    again = set(nodes_changed)
    again.update(m for m, _ in reached ^ old_reached)
    again.update(m for m, _ in unknown ^ old_unknown)
    again |= touched ^ old_touched
    local = {
        m: _module_local(m, edges[m].nodes, reached, unknown, touched, res.classes(m))
        for m in sorted(again)
        if m in edges
    }
    details: dict[str, object] = dict(reach)
    details.update(
        reached=reached,
        unknown=unknown,
        referenced=referenced,
        reached_modules=reached_modules,
        touched=touched,
        from_entries=from_entries,
        floods={"from_entries": fe, "reached": r_fl, "unknown": u_fl},
        orphans=orphans,
    )
    return local, details


def _derivable(
    t: Key,
    flood: set[Key],
    starts: Callable[[Key], bool],
    proven: set[Key],
    callers_of: Callable[[Key], set[Key]],
    is_class: Callable[[Key], bool],
    own: Mapping[str, fact_model.ModuleFacts],
    res: Resolver,
    limit: int = 20000,
) -> bool:
    """Whether a path of the new graph leads from a start to ``t`` through ``flood``: unguarded
    calls from functions, and a class to its constructor and special methods (or to any
    method where another base may call it). Each step needs only the one before, so such a
    path derives ``t`` by itself; what it passes through is proven too."""
    if starts(t) or t in proven:
        proven.add(t)
        return True
    parent: dict[Key, Key] = {t: t}
    todo = [t]
    while todo:
        k = todo.pop()
        preds = [p for p in callers_of(k) if p in flood and not is_class(p)]
        if "." in k[1]:
            owner = (k[0], k[1].split(".", 1)[0])
            if (
                owner in flood
                and is_class(owner)
                and (_runs_when_built(k[1]) or _class_bases(res, own, owner)[1])
            ):
                preds.append(owner)
        for p in preds:
            if p in parent:
                continue
            parent[p] = k
            if starts(p) or p in proven:
                while p != t:  # the path from p to t: each derived from the one before
                    proven.add(p)
                    p = parent[p]
                proven.add(t)
                return True
            if len(parent) > limit:
                return False
            todo.append(p)
    return False
