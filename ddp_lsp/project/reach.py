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
    spelled: dict[str, bool] | None = None,
    quals: dict[str, bool] | None = None,
) -> bool:
    """``spelled``: whether a call so spelled is distributed code, kept for the other
    functions of the module (``own``'s aliases); ``quals``: whether a call of a qualified
    name is (:func:`is_distributed_call` with ``frameworks``), kept for the other modules.
    (The functions of a module call the same few names: `dist.get_rank`, `F.cross_entropy`.)"""
    if fi.props & DISTRIBUTED_PROPS or own.func_props.get(fi.qualname, frozenset()) & (
        DISTRIBUTED_PROPS
    ):
        return True
    if scopes_with_kinds.get(fi.qualname, False):
        return True
    if spelled is None:
        spelled = {}
    if quals is None:
        quals = {}
    for callee in fi.calls:
        if callee.partition(".")[0] not in heads:
            continue
        got = spelled.get(callee)
        if got is None:
            qual = known_names.resolve(callee, own.aliases)
            if qual is None:
                got = False
            else:
                got = quals.get(qual)
                if got is None:
                    got = quals[qual] = is_distributed_call(qual, frameworks)
            spelled[callee] = got
        if got:
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
    distributed_quals: dict[str, bool] = {}  # see _does_distributed

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
        found: dict[str, list[Key]] = {}  # a spelling's targets (not `self.`'s: per class)
        for fi in s.facts.functions:
            src = (m, fi.qualname)
            for callee in sorted(fi.calls):
                ts = found.get(callee)
                if ts is None:
                    ts = targets(m, fi.qualname, callee)
                    if not callee.startswith("self."):
                        found[callee] = ts
                for t in ts:
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
        distributed_spellings: dict[str, bool] = {}  # see _does_distributed
        for fi in s.facts.functions:
            if _does_distributed(
                fi, o, with_kinds, heads, frameworks, distributed_spellings, distributed_quals
            ):
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
            # reachupdate.extend_walks continues from (absent in a restored state).
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
        holds) gives the flood of the larger graph (reachupdate.extend_walks)."""
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
