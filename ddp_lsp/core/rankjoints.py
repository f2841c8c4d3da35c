"""Joint paths, what the rank-path walk (:mod:`ddp_lsp.core.rankpaths`) carries through a function.

The ranks are split into two classes, rank 0 (``Z``) and the others (``NZ``). A *joint path*
(:class:`Joint`) holds each class's :class:`Lane` (the events it made, the exit it took) and
the rank-independent conditions decided on it. This module holds those records and the
operations on sets of joint paths that do not depend on the walk's state: deciding a
condition (:func:`_decide`), dropping repeated paths (:func:`_dedupe`), the conditions a loop
tests (:func:`_tested_keys`), whether a block may leave (:func:`_may_leave`), which class a
rank set sends (:func:`_takers`) and whether a decided condition switches an event off
(:func:`_switched_off`).
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ddp_lsp.core import walk as tree_walk
from ddp_lsp.core.rankevents import Event, _key
from ddp_lsp.core.uniformity import RankSet

Z, NZ = 0, 1  # rank 0, the other ranks
BOTH = frozenset({Z, NZ})
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)
_MAX_ALTS = 64  # joint paths kept per block; beyond it the walk drops paths (fewer findings)


@dataclass(frozen=True)
class Exit:
    kind: str  # "return", "raise", "break", "continue", "exit", "decorator", "caller", "frozen"
    node: ast.AST


_FROZEN = Exit("frozen", ast.Pass())


# A lane's calls, exit and skips by node identity (:meth:`Lane.ident`).
LaneIdent = tuple[tuple[int, ...], int | None, tuple[int, ...]]


@dataclass(frozen=True)
class Lane:
    """One rank class along one joint path."""

    events: tuple[Event, ...] = ()
    exit: Exit | None = None
    skips: tuple[Exit, ...] = ()  # continue/break taken in loop iterations already left

    def ident(self) -> LaneIdent:
        """What :func:`_dedupe` tells lanes apart by: the calls, exit and skips by node
        identity. A lane is shared by the joint paths built from it, and :func:`_dedupe`
        asks for every path of every block: computed once per lane (kept in the instance's
        dictionary, which the frozen dataclass's fields, equality and hash do not see)."""
        d = self.__dict__
        found: LaneIdent | None = d.get("_ident")
        if found is None:
            found = d["_ident"] = (
                tuple(id(e.node) for e in self.events),
                id(self.exit.node) if self.exit else None,
                tuple(id(x.node) for x in self.skips),
            )
        return found


Decisions = frozenset[tuple[str, bool]]


@dataclass(frozen=True)
class Joint:
    """One joint path: each class's lane, and the rank-independent conditions decided on it
    (the same test decides the same way again: ``if args.distributed:`` twice)."""

    z: Lane
    n: Lane
    decided: Decisions = frozenset()

    def __getitem__(self, c: int) -> Lane:
        return self.z if c == Z else self.n

    def lanes(self) -> list[Lane]:
        return [self.z, self.n]

    def with_lanes(self, lanes: Sequence[Lane]) -> Joint:
        return Joint(lanes[Z], lanes[NZ], self.decided)


def _decide(joints: list[Joint], parts: Sequence[ast.AST], value: bool) -> list[Joint]:
    """The joint paths on which all ``parts`` hold (``value``) or not all of them do, with
    what that decides recorded; paths that decided otherwise before are dropped. Correlating
    equal tests only ever removes paths, so it can remove findings but never add one."""
    keys = [_key(p) for p in parts]
    out: list[Joint] = []
    for j in joints:
        decided = dict(j.decided)
        if value:
            if any(decided.get(k, t) != t for k, t in keys):
                continue
            out.append(Joint(j.z, j.n, j.decided | frozenset(keys)))
        elif len(keys) == 1:
            k, t = keys[0]
            if decided.get(k, not t) == t:
                continue
            out.append(Joint(j.z, j.n, j.decided | {(k, not t)}))
        else:
            if all(decided.get(k) == t for k, t in keys):
                continue
            out.append(j)
    return out


def _tested_keys(loop: ast.AST) -> frozenset[str]:
    """The identities (:func:`_key`) of the conditions ``loop`` tests, and of their parts."""
    cached: frozenset[str] | None = getattr(loop, "_ddp_tested_keys", None)
    if cached is not None:
        return cached
    out: set[str] = set()
    for n in tree_walk.bfs(loop):
        if isinstance(n, (ast.If, ast.While, ast.IfExp)):
            parts = [n.test]
            while parts:
                t = parts.pop()
                out.add(_key(t)[0])
                if isinstance(t, ast.BoolOp):
                    parts.extend(t.values)
                elif isinstance(t, ast.UnaryOp) and isinstance(t.op, ast.Not):
                    parts.append(t.operand)
    frozen = frozenset(out)
    loop._ddp_tested_keys = frozen  # type: ignore[attr-defined]
    return frozen


def _may_leave(stmts: Sequence[ast.stmt]) -> bool:
    """Some path of ``stmts`` leaves the block: a ``continue``/``break``/``return`` among
    them or in their branches (not in a nested loop, function or class)."""
    stack: list[ast.AST] = list(stmts)
    while stack:
        n = stack.pop()
        if isinstance(n, (ast.Continue, ast.Break, ast.Return)):
            return True
        if isinstance(n, (*_SCOPES, ast.For, ast.AsyncFor, ast.While)):
            continue
        if isinstance(n, ast.stmt):
            stack.extend(c for c in ast.iter_child_nodes(n) if isinstance(c, ast.stmt))
            if isinstance(n, ast.Try):
                stack.extend(n.handlers)
        elif isinstance(n, ast.ExceptHandler):
            stack.extend(n.body)
    return False


def _dedupe(joints: Iterable[Joint]) -> list[Joint]:
    """Drop repeated joint paths and keep at most ``_MAX_ALTS``: one per distinct pair of
    lanes first (those are what the comparison looks at), then variants that only differ in
    the conditions they decided. Dropping paths can only lose findings."""
    kept = Dedupe()
    for j in joints:
        kept.add(j)
    return kept.result()


class Dedupe:
    """:func:`_dedupe` one path at a time, able to say before a path is built whether it
    would be kept (:meth:`slot`): a loop joins every path before it with every path of one
    iteration, up to 64 x 64 of them, most dropped (:meth:`Flow.loop`)."""

    __slots__ = ("seen", "lane_keys", "firsts", "rest")

    SKIP, FIRST, REST = 0, 1, 2

    def __init__(self) -> None:
        self.seen: set[tuple[object, ...]] = set()
        self.lane_keys: set[tuple[object, ...]] = set()
        self.firsts: list[Joint] = []
        self.rest: list[Joint] = []

    def slot(self, lanes: tuple[object, ...], decided: Decisions) -> int:
        """Where a path with these lane identities (:meth:`Lane.ident`) and decisions goes:
        SKIP when :func:`_dedupe` would drop it (a repeat, or past the cut whatever comes
        later), else FIRST or REST; the caller then builds it and :meth:`put` s it."""
        key = (lanes, decided)
        if key in self.seen:
            return self.SKIP
        self.seen.add(key)
        if lanes in self.lane_keys:
            # Behind every first: past the cut already if the firsts and rests fill it.
            if len(self.firsts) + len(self.rest) >= _MAX_ALTS:
                return self.SKIP
            return self.REST
        self.lane_keys.add(lanes)
        return self.SKIP if len(self.firsts) >= _MAX_ALTS else self.FIRST

    def put(self, where: int, j: Joint) -> None:
        (self.firsts if where == self.FIRST else self.rest).append(j)

    def add(self, j: Joint) -> None:
        where = self.slot((j.z.ident(), j.n.ident()), j.decided)
        if where != self.SKIP:
            self.put(where, j)

    def result(self) -> list[Joint]:
        return (self.firsts + self.rest)[:_MAX_ALTS]


def _switched_off(ev: Event, decided: Decisions) -> bool:
    return any((k, not t) in decided for k, t in ev.off_when)


def _takers(r: RankSet) -> frozenset[int] | None:
    if r.zero:
        return frozenset({Z})
    if r.nonzero:
        return frozenset({NZ})
    return None
