"""Whether an update leaves :func:`~ddp_lsp.project.reach.single_process`'s walks as they
were (:func:`~ddp_lsp.project.flowupdate._update`): a changed module's share of the call graph
compared, before and after (:func:`_same_edges`, :func:`_same_walks`), and the functions added
or removed that nothing refers to or reaches (:func:`_isolated_nodes`, :func:`_local_of`)."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from ddp_lsp.core import facts as fact_model
from ddp_lsp.core.crossfile import MAIN_BLOCK
from ddp_lsp.project.reach import ModuleEdges
from ddp_lsp.project.resolve import Resolver

Key = tuple[str, str]


def _floods(
    reach: Mapping[str, Any], called: Mapping[str, Collection[str]] | None
) -> list[tuple[Collection[Key], Collection[str]]] | None:
    """Each flood of single_process's walks with its called attribute names, when known."""
    if called is None or not reach:
        return None
    return [(reach[name], called.get(name, ())) for name in ("from_entries", "reached", "unknown")]


def _same_edges(
    a: ModuleEdges,
    b: ModuleEdges,
    floods: list[tuple[Collection[Key], Collection[str]]] | None = None,
) -> bool:
    """The same seeds, class members and called attributes (of functions that call any);
    the edges may differ (see _same_walks), and the functions (see _isolated_nodes).

    ``floods``: each flood's functions and the attribute names they call (a restored state).
    A flood reads a function's called attributes only when it holds the function (a name
    called makes the methods of that name of the live classes reached): a function that no
    flood holds may then call other attributes, and one that floods hold may call more
    names that each of them calls already. (_same_walks then shows that no flood gains or
    loses a function, so which floods hold it is what it was.)"""
    if not (a.frameworks is b.frameworks and a.seeds == b.seeds and a.members == b.members):
        return False
    was = {k: v for k, v in a.attrs.items() if v}
    now = {k: v for k, v in b.attrs.items() if v}
    if was == now:
        return True
    if floods is None:
        return False
    for k in was.keys() | now.keys():
        before, after = was.get(k, frozenset()), now.get(k, frozenset())
        if before == after:
            continue
        for members, called in floods:
            if k in members and not (before <= after and after - before <= set(called)):
                return False  # a name no longer called (or not called before) there
    return True


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
    edges: Mapping[str, ModuleEdges] | None,
) -> bool:
    """Whether single_process's walks give the same sets with a module's call edges changed
    from ``was`` to ``now`` (the other modules' edges in ``edges``; None: not known, and a
    function that lost a reference fails the test): each edge added or removed
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
        if edges is None:
            return False  # the other modules' edges are not at hand (a restored state)
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
