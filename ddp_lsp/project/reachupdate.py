"""The incremental update of :func:`~ddp_lsp.project.reach.single_process`'s walks (the
server's indexer after an edit): :func:`extend_walks` continues the floods from what an edit
added and shows that what it removed takes nothing away (a path from a start of the new graph
to every function that lost a derivation), or returns None (the caller walks again)."""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from typing import cast

from ddp_lsp.core import facts as fact_model
from ddp_lsp.project.reach import (
    Key,
    ModuleEdges,
    _class_bases,
    _Graph,
    _module_local,
    _runs_when_built,
)
from ddp_lsp.project.resolve import Resolver


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
