"""Which ranks reach which communicating call: the path analysis behind DDP103 and DDP104.

A DDP job runs the same code on every rank, and a collective completes only when every rank
of its group calls it, in the same order. Ranks differ only where the code asks which rank it
is, so the analysis splits the ranks into two classes, rank 0 (``Z``) and the others (``N``),
and walks each function once for both classes together:

- which ranks take a condition is the uniformity analysis's answer
  (:func:`ddp_lsp.core.uniformity.ChunkUniformity.test`): a uniform condition
  (``if step % 100 == 0``, ``if world_size > 1``, ``if dist.is_initialized()``, a flag a
  collective made equal) is the same on every rank: both classes take the same branch,
  and the walk keeps one *joint path* per choice; a path remembers the conditions it decided,
  so ``if not args.deepspeed:`` tested twice goes the same way both times, and
  ``if rank == 0 and not evaluate:`` is walked as ``if not evaluate: if rank == 0:``;
- a rank guard (``if rank == 0``, ``if not is_main_process()``) sends each class into its own
  branch;
- ``if u or rank == 0:`` with a uniform ``u`` is walked as ``if u: <every rank> else:
  if rank == 0:``;
- ``return``, ``break``, ``continue``, ``raise`` and ``sys.exit()`` end a class's walk (or its
  loop iteration) where they are reached. An error exit (``raise``, ``sys.exit(1)``) is never
  the reason an event is unmatched: the launcher stops every worker when one fails, so the
  others do not wait (issue 14's error-path decision, docs/accuracy.md F7).

Along each joint path each class collects the communicating calls it makes (the *events*:
collectives for DDP103, DDP forwards for DDP104). At the end of the function the two
sequences are aligned; an event one class makes and the other has no partner for is a call
some ranks never reach. A partner is the same collective anywhere on the other class's path:
``if rank == 0: ... dist.barrier() else: dist.barrier()`` and the "zero first" idiom
(``if rank != 0: barrier()`` ... ``if rank == 0: barrier()``) are balanced. A loop that one
class leaves (``break``/``return`` under a rank guard) while the other keeps iterating makes
every event of the loop body unmatched. Each unmatched event gets the *reason* it is
unmatched: the rank guard around it, or the rank-guarded exit the other class took; events
without such a reason are not reported (precision first).

:func:`chunk_misses` runs the walk over every frame of a chunk; :func:`divergence_key`
groups the misses one divergence point strands (DDP103 reports each group once) and
:func:`divergence_of` describes that point in the uniformity API's terms.
The events themselves and the alignment of two sequences of them are in
:mod:`ddp_lsp.core.rankevents` (re-exported here); the joint paths (:class:`Joint`, its lanes
and exits) and the operations on sets of them in :mod:`ddp_lsp.core.rankjoints`.

Limits, each erring towards silence: conditions on values computed from the rank at run time
in another function are taken as rank-independent; a collective on an explicit
process group (``group=pg``) is reported only when global rank 0 alone makes it (else only the
group's members may have to call it); at module level a top-level ``if`` is its own chunk, so a
guarded barrier there may be half of a "zero first" pair in another chunk and is not reported
when another top-level ``if`` of the module calls a barrier too (``ModuleFacts.barrier_ifs``).
"""

from __future__ import annotations

import ast
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from ddp_lsp.core import chunktext
from ddp_lsp.core import facts as fact_model
from ddp_lsp.core import names as known_names
from ddp_lsp.core import walk as tree_walk
from ddp_lsp.core.names import last_name
from ddp_lsp.core.rankevents import _BARRIERS, _unmatched
from ddp_lsp.core.rankevents import PG_METHODS as PG_METHODS
from ddp_lsp.core.rankevents import Event as Event
from ddp_lsp.core.rankevents import Extractor as Extractor
from ddp_lsp.core.rankevents import collective_extractor as collective_extractor
from ddp_lsp.core.rankevents import memoised as memoised
from ddp_lsp.core.rankevents import process_groups as process_groups
from ddp_lsp.core.rankgroups import world_rank_test
from ddp_lsp.core.rankjoints import (
    _FROZEN,
    _SCOPES,
    BOTH,
    Decisions,
    Dedupe,
    Exit,
    Joint,
    Lane,
    _decide,
    _dedupe,
    _may_leave,
    _switched_off,
    _takers,
    _tested_keys,
)
from ddp_lsp.core.rankjoints import NZ as NZ
from ddp_lsp.core.rankjoints import Z as Z
from ddp_lsp.core.uniformity import (
    RANK_ZERO_DECORATORS,
    ChunkUniformity,
    Divergence,
    RankSet,
    Subset,
    exit_kind,
    fatal_exit,
    single_process_test,
    uniformity,
)

if TYPE_CHECKING:
    from ddp_lsp.core.rule import ChunkContext

FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef)

_PROCESS_EXITS = frozenset({"sys.exit", "os._exit", "exit", "quit"})


# -- the walk ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Reason:
    kind: str  # "guard" (node: If/IfExp/BoolOp), "exit", "decorator", "caller", "some"
    node: ast.AST
    in_else: bool = False
    guard: ast.AST | None = None  # for exits: the rank condition around them
    runner: int | None = None  # the class that makes the call (None: some ranks)
    loop: bool = False  # the other class left the loop the call is in


@dataclass
class Miss:
    event: Event
    reason: Reason


@dataclass
class Flow:
    """Walk one function (or the chunk's module code) for both rank classes."""

    ctx: ChunkContext
    root: ast.AST
    extract: Extractor
    callers_guarded: bool = False  # DDP104: a function only called under a rank-0 guard
    misses: dict[int, Miss] = field(default_factory=dict)
    _u: ChunkUniformity | None = None

    # -- public ------------------------------------------------------------------------------

    def run(self) -> list[Miss]:
        # Most frames hold no event at all: skip the two-lane walk for them (it is the
        # costliest part of the analysis on big files).
        if not any(
            isinstance(n, ast.Call) and self.extract(n) is not None
            for n in tree_walk.scope_nodes(self.root)
        ):
            return []
        body: list[ast.stmt]
        start: list[Lane] = [Lane(), Lane()]
        if isinstance(self.root, FUNCS):
            body = self.root.body
            deco = next(
                (d for d in self.root.decorator_list if last_name(d) in RANK_ZERO_DECORATORS),
                None,
            )
            if deco is not None:
                start[NZ] = Lane(exit=Exit("decorator", deco))
            elif self.callers_guarded:
                qual, _ = self.ctx.scope(self.root.body[0]) if self.root.body else ("", None)
                if fact_model.ONLY_CALLED_GUARDED in self.ctx.facts.props(qual):
                    start[NZ] = Lane(exit=Exit("caller", self.root))
        else:
            body = [s for s in self.ctx.body if not isinstance(s, (*FUNCS, ast.ClassDef))]
        if start[NZ].exit is None and not self._diverges():
            # Both classes start alike and no condition of the frame tells them apart: their
            # lanes stay equal along every joint path, so no event can be unmatched.
            return []
        joints = self.block(body, [Joint(start[Z], start[NZ])], BOTH)
        for j in joints:
            self.compare(j)
        return sorted(self.misses.values(), key=lambda m: _order(m.event.node))

    def _diverges(self) -> bool:
        """Some condition the walk may split the rank classes on is rank-dependent: an ``if``
        or conditional expression's test, or an operand of ``and``/``or`` (the only places
        :meth:`split` is asked), in this frame. False means both lanes of every joint path
        stay equal (every other step treats the classes alike), so :meth:`run` can skip the
        walk; the tests asked here are memoised for the walk by the uniformity analysis."""
        for n in tree_walk.scope_nodes(self.root):
            cls = n.__class__
            if cls is ast.If or cls is ast.IfExp:
                if self.ranks(n.test) is not None:  # type: ignore[attr-defined]
                    return True
            elif cls is ast.BoolOp:
                for v in n.values:  # type: ignore[attr-defined]
                    if self.ranks(v) is not None:
                        return True
        return False

    # -- conditions ----------------------------------------------------------------------------

    def ranks(self, test: ast.AST) -> RankSet | None:
        """The ranks on which ``test`` holds (the uniformity analysis); None: uniform."""
        if self._u is None:
            self._u = uniformity(self.ctx)
        return self._u.test(test)

    def nonrank_conjuncts(self, test: ast.AST) -> list[ast.expr]:
        """The rank-independent parts of ``rank == 0 and not evaluate``."""
        if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
            return [v for v in test.values if self.ranks(v) is None]
        return []

    def uniform_disjuncts(self, test: ast.AST) -> list[ast.expr]:
        """The uniform parts of ``load_on_all_ranks or rank == 0`` (every rank runs the
        branch when one holds); single-process tests are false in a distributed run."""
        if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.Or):
            return [
                v
                for v in test.values
                if self.ranks(v) is None and not single_process_test(self.ctx.ranks, v)
            ]
        return []

    def split(self, test: ast.AST) -> frozenset[int] | None:
        r = self.ranks(test)
        return None if r is None else _takers(r)

    # -- statements ----------------------------------------------------------------------------

    def block(
        self, stmts: Sequence[ast.stmt], joints: list[Joint], active: frozenset[int]
    ) -> list[Joint]:
        for s in stmts:
            if not active:
                break
            joints = self.stmt(s, joints, active)
        return joints

    def stmt(self, s: ast.stmt, joints: list[Joint], active: frozenset[int]) -> list[Joint]:
        if isinstance(s, (*FUNCS, ast.ClassDef)):
            return joints
        if isinstance(s, ast.If):
            joints = self.expr(s.test, joints, active)
            split = self.split(s.test)
            either = self.uniform_disjuncts(s.test) if split is not None else []
            if either and split is not None:
                # `if u or rank == 0:` is `if u: <every rank> else: if rank == 0:`.
                ok = _decide(joints, either, True) if len(either) == 1 else joints
                no = _decide(joints, either, False) if len(either) == 1 else joints
                yes = self.block(s.body, ok, active)
                no = self.block(s.body, no, active & split)
                no = self.block(s.orelse, no, active - split)
                return _dedupe(yes + no)
            if split is not None:
                extra = self.nonrank_conjuncts(s.test)
                if not extra:
                    joints = self.block(s.body, joints, active & split)
                    return self.block(s.orelse, joints, active - split)
                # `if rank == 0 and not evaluate:` is `if not evaluate: if rank == 0:`.
                yes = self.block(s.body, _decide(joints, extra, True), active & split)
                yes = self.block(s.orelse, yes, active - split)
                no = self.block(s.orelse, _decide(joints, extra, False), active)
                return _dedupe(yes + no)
            found = self.ranks(s.test)
            if found is not None and found.subset is Subset.SOME:
                self.some_check(s)
            return _dedupe(
                self.block(s.body, _decide(joints, [s.test], True), active)
                + self.block(s.orelse, _decide(joints, [s.test], False), active)
            )
        if isinstance(s, (ast.For, ast.AsyncFor)):
            joints = self.expr(s.iter, joints, active)
            return self.loop(s, None, joints, active)
        if isinstance(s, ast.While):
            return self.loop(s, s.test, joints, active)
        if isinstance(s, (ast.With, ast.AsyncWith)):
            for item in s.items:
                joints = self.expr(item.context_expr, joints, active)
            return self.block(s.body, joints, active)
        if isinstance(s, ast.Try) or type(s).__name__ == "TryStar":
            return self.try_(s, joints, active)  # type: ignore[arg-type]
        if isinstance(s, ast.Match):
            joints = self.expr(s.subject, joints, active)
            out: list[Joint] = []
            for case in s.cases:
                out += self.block(case.body, joints, active)
            return _dedupe(out)
        if isinstance(s, ast.Return):
            if s.value is not None:
                joints = self.expr(s.value, joints, active)
            return self.leave(joints, active, Exit("return", s))
        if isinstance(s, ast.Raise):
            if s.exc is not None:
                joints = self.expr(s.exc, joints, active)
            return self.leave(joints, active, Exit("raise", s))
        if isinstance(s, ast.Break):
            return self.leave(joints, active, Exit("break", s))
        if isinstance(s, ast.Continue):
            return self.leave(joints, active, Exit("continue", s))
        for child in tree_walk.children(s):
            if isinstance(child, ast.expr):
                joints = self.expr(child, joints, active)
        if isinstance(s, ast.Expr) and isinstance(s.value, ast.Call):
            name = known_names.dotted(s.value.func) or ""
            qual = self.ctx.call_qualname(s.value) or name
            if qual in _PROCESS_EXITS or name in ("exit", "quit"):
                return self.leave(joints, active, Exit("exit", s))
        return joints

    def leave(self, joints: list[Joint], active: frozenset[int], exit_: Exit) -> list[Joint]:
        out = []
        for j in joints:
            lanes = j.lanes()
            for c in active:
                if lanes[c].exit is None:
                    lanes[c] = replace(lanes[c], exit=exit_)
            out.append(j.with_lanes(lanes))
        return _dedupe(out)

    def try_(self, s: ast.Try, joints: list[Joint], active: frozenset[int]) -> list[Joint]:
        inside = {id(n) for b in s.body for n in tree_walk.bfs(b)}
        groups: dict[tuple[frozenset[int], frozenset[int]], list[Joint]] = {}
        for j in self.block(s.body, joints, active):
            raised = frozenset(
                c
                for c in active
                if (ex := j[c].exit) is not None and ex.kind == "raise" and id(ex.node) in inside
            )
            calm = frozenset(c for c in active if j[c].exit is None)
            groups.setdefault((raised, calm), []).append(j)
        out: list[Joint] = []
        for (raised, calm), group in groups.items():
            after = self.block(s.orelse, group, calm) if calm else group
            if raised and s.handlers:
                bases = []
                for a in after:
                    lanes = a.lanes()
                    for c in raised:
                        lanes[c] = replace(lanes[c], exit=None)
                    bases.append(a.with_lanes(lanes))
                caught: list[Joint] = []
                for h in s.handlers:
                    caught += self.block(h.body, bases, raised)
                after = caught
            out += after
        out = _dedupe(out)
        return self.finally_(s, out, active) if s.finalbody else out

    def finally_(self, s: ast.Try, joints: list[Joint], active: frozenset[int]) -> list[Joint]:
        """``finally`` runs on the way out too: a class that returned (or broke, raised) inside
        the ``try`` still makes its calls, then leaves as it was leaving."""
        inside = {
            id(n) for part in (s.body, s.handlers, s.orelse) for b in part for n in tree_walk.bfs(b)
        }
        out: list[Joint] = []
        for j in joints:
            pending: dict[int, Exit] = {}
            lanes = j.lanes()
            for c in active:
                ex = lanes[c].exit
                if ex is not None and id(ex.node) in inside:
                    pending[c] = ex
                    lanes[c] = replace(lanes[c], exit=None)
            for r in self.block(s.finalbody, [j.with_lanes(lanes)], active):
                done = r.lanes()
                for c, ex in pending.items():
                    if done[c].exit is None:
                        done[c] = replace(done[c], exit=ex)
                out.append(r.with_lanes(done))
        return _dedupe(out)

    def loop(
        self,
        s: ast.For | ast.AsyncFor | ast.While,
        test: ast.expr | None,
        joints: list[Joint],
        active: frozenset[int],
    ) -> list[Joint]:
        # The paths after the loop, deduplicated as they come (the same as _dedupe of all of
        # them in this order): a path it would drop is not built.
        kept = Dedupe()
        iterations: dict[tuple[frozenset[int], Decisions], list[Joint]] = {}
        tested: frozenset[str] | None = None  # asked only when a path decided something
        for j in joints:
            live = frozenset(c for c in active if j[c].exit is None)
            kept.add(j)  # no iteration (or no live class)
            if not live:
                continue
            # One iteration, walked once per set of live classes and per decision taken
            # before the loop on a condition the loop tests again (`if not fsdp and rank != 0:
            # return` ... `while True: if fsdp: broadcast()`); it does not depend on anything
            # else that happened before the loop.
            if j.decided and tested is None:
                tested = _tested_keys(s)  # every condition in the loop, dumped: not for nothing
            before = frozenset(d for d in j.decided if tested is not None and d[0] in tested)
            its = iterations.get((live, before))
            if its is None:
                fresh = [Lane() if c in live else Lane(exit=_FROZEN) for c in (Z, NZ)]
                its = [Joint(fresh[Z], fresh[NZ], before)]
                if test is not None:
                    its = self.expr(test, its, live)
                its = self.block(s.body, its, live)
                self.loop_check(its, live)
                iterations[(live, before)] = its
            before_ids = (j.z.ident(), j.n.ident())
            for it in its:
                # The identities of the joined lanes first (Lane.ident of what is built below).
                ids = list(before_ids)
                for c in live:
                    ex = it[c].exit
                    mine, theirs = before_ids[c], it[c].ident()
                    if ex is None or ex.kind in ("break", "continue"):
                        extra = (id(ex.node),) if ex is not None else ()
                        ids[c] = (mine[0] + theirs[0], None, mine[2] + theirs[2] + extra)
                    else:
                        ids[c] = (mine[0] + theirs[0], id(ex.node), mine[2] + theirs[2])
                where = kept.slot((ids[Z], ids[NZ]), j.decided)
                if where == Dedupe.SKIP:
                    continue
                lanes = j.lanes()
                for c in live:
                    ex = it[c].exit
                    ev = lanes[c].events + it[c].events
                    if ex is None or ex.kind in ("break", "continue"):
                        skips = lanes[c].skips + it[c].skips + ((ex,) if ex is not None else ())
                        lanes[c] = Lane(ev, None, skips)
                    else:
                        lanes[c] = Lane(ev, ex, lanes[c].skips + it[c].skips)
                kept.put(where, j.with_lanes(lanes))
        out = kept.result()
        if s.orelse:
            out = self.block(s.orelse, out, active)
        return out

    def loop_check(self, its: list[Joint], live: frozenset[int]) -> None:
        """One class leaves the loop (break/return/raise) while the other keeps iterating:
        every call of the loop body the staying class makes has no partner."""
        if len(live) < 2:
            return
        for it in its:
            z, n = it[Z].exit, it[NZ].exit
            z_stays = z is None or z.kind == "continue"
            n_stays = n is None or n.kind == "continue"
            if z_stays == n_stays:
                continue
            stayer, leaver = (Z, n) if z_stays else (NZ, z)
            assert leaver is not None
            if fatal_exit(leaver.node):
                continue  # an error exit: the launcher ends the job, nothing waits
            guard = self.guard_of_exit(leaver.node)
            if guard is None:
                continue
            for other in its:
                for ev in other[stayer].events:
                    self.miss(
                        ev, Reason("exit", leaver.node, guard=guard, runner=stayer, loop=True)
                    )

    # -- expressions ---------------------------------------------------------------------------

    def expr(self, e: ast.expr, joints: list[Joint], active: frozenset[int]) -> list[Joint]:
        per_class: dict[int, list[Event]] = {Z: [], NZ: []}
        self._visit(e, active, per_class)
        if not per_class[Z] and not per_class[NZ]:
            return joints
        out = []
        for j in joints:
            lanes = j.lanes()
            for c in active:
                if lanes[c].exit is None and per_class[c]:
                    made = tuple(e for e in per_class[c] if not _switched_off(e, j.decided))
                    lanes[c] = replace(lanes[c], events=lanes[c].events + made)
            out.append(j.with_lanes(lanes))
        return out

    def _visit(self, node: ast.AST, classes: frozenset[int], out: dict[int, list[Event]]) -> None:
        if not classes or isinstance(node, _SCOPES):
            return
        if isinstance(node, ast.IfExp):
            self._visit(node.test, classes, out)
            split = self.split(node.test)
            if split is not None:
                self._visit(node.body, classes & split, out)
                self._visit(node.orelse, classes - split, out)
            else:
                self._visit(node.body, classes, out)
                self._visit(node.orelse, classes, out)
            return
        if isinstance(node, ast.BoolOp):
            cur = classes
            for v in node.values:
                self._visit(v, cur, out)
                split = self.split(v)
                if split is not None:
                    cur = cur & split if isinstance(node.op, ast.And) else cur - split
            return
        for child in tree_walk.children(node):
            self._visit(child, classes, out)
        if isinstance(node, ast.Call):
            ev = self.extract(node)
            if ev is not None:
                for c in classes:
                    out[c].append(ev)

    # -- matching ------------------------------------------------------------------------------

    def compare(self, j: Joint) -> None:
        a, b = j[Z].events, j[NZ].events
        if len(a) == len(b):
            return  # balanced (or a different collective at the same point: not reported)
        runner, skipper = (Z, NZ) if len(a) > len(b) else (NZ, Z)
        longer, shorter = (a, b) if runner == Z else (b, a)
        for ev in _unmatched(longer, shorter):
            reason = self.reason(ev, runner, j[skipper])
            if reason is not None:
                self.miss(ev, reason)

    def reason(self, ev: Event, runner: int, skipper_lane: Lane) -> Reason | None:
        skipper = NZ if runner == Z else Z
        # 1. A rank condition around the call that the skipping class does not satisfy.
        child: ast.AST = ev.node
        for a in self.ctx.ancestors(ev.node):
            if a is self.root or isinstance(a, _SCOPES):
                break
            if isinstance(a, (ast.If, ast.IfExp)) and child is not a.test:
                split = self.split(a.test)
                if split is not None:
                    if isinstance(a, ast.IfExp):
                        in_else = child is a.orelse
                    else:
                        in_else = any(child is s for s in a.orelse)
                    runs = split if not in_else else BOTH - split
                    if skipper not in runs:
                        return Reason("guard", a, in_else=in_else, runner=runner)
            elif isinstance(a, ast.BoolOp):
                for v in a.values:
                    if v is child:
                        break
                    split = self.split(v)
                    if split is not None:
                        runs = split if isinstance(a.op, ast.And) else BOTH - split
                        if skipper not in runs:
                            return Reason("guard", a, runner=runner)
            child = a
        # 2. The skipping class left earlier (return/raise/...), or skipped part of a loop.
        ex = skipper_lane.exit
        if ex is not None and ex.kind in ("decorator", "caller"):
            return Reason(ex.kind, ex.node, runner=runner)
        candidates = [
            x
            for x in ((ex,) if ex is not None else ()) + skipper_lane.skips
            if x.kind != "frozen" and _order(x.node) < _order(ev.node) and not fatal_exit(x.node)
        ]
        for x in sorted(candidates, key=lambda x: _order(x.node), reverse=True):
            guard = self.guard_of_exit(x.node)
            if guard is not None:
                if x.kind in ("continue", "break") and not self._loop_holds(x.node, ev.node):
                    continue
                return Reason("exit", x.node, guard=guard, runner=runner)
        return None

    def _loop_holds(self, jump: ast.AST, node: ast.AST) -> bool:
        loops = self.ctx.enclosing_loops(jump)
        return bool(loops) and any(a is loops[0] for a in self.ctx.ancestors(node))

    def guard_of_exit(self, node: ast.AST) -> ast.AST | None:
        """The innermost rank condition that decides whether ``node`` (an exit) runs."""
        child: ast.AST = node
        for a in self.ctx.ancestors(node):
            if a is self.root or isinstance(a, _SCOPES):
                return None
            if isinstance(a, ast.If) and child is not a.test and self.split(a.test) is not None:
                return a
            child = a
        return None

    def some_check(self, s: ast.If) -> None:
        """``if rank % 2 == 0: dist.barrier()``: a rank-dependent branch we cannot name, with
        a call the other branch does not make."""

        def alts(stmts: list[ast.stmt]) -> list[tuple[Event, ...]]:
            start = Joint(Lane(), Lane(exit=_FROZEN))
            return [j[Z].events for j in self.block(stmts, [start], frozenset({Z}))]

        # A side that leaves the block (`continue`, `break`, `return`) is compared with the
        # other side followed by the rest of the block: `if base + rank < n: all_gather();
        # continue` then `all_gather()` after the branch is balanced.
        block, idx = self.ctx.block_of(s)
        rest = list(block[idx + 1 :]) if 0 <= idx < len(block) and block[idx] is s else []

        def leaves(side: list[ast.stmt]) -> bool:
            return bool(side) and exit_kind(self.ctx, side[-1]) in ("continue", "break", "return")

        body_stmts = s.body + (rest if leaves(s.orelse) and not leaves(s.body) else [])
        else_stmts = s.orelse + (rest if leaves(s.body) and not leaves(s.orelse) else [])
        inside: set[int] | None = None
        if not (leaves(s.body) or leaves(s.orelse)) and (
            _may_leave(s.body) or _may_leave(s.orelse)
        ):
            # The exit is nested in a uniform `if` of a side (`if fresh: init(); all_gather();
            # continue`): both sides run on into the rest, where the walk stops each path that
            # left; only calls of the branch itself are reported.
            body_stmts, else_stmts = s.body + rest, s.orelse + rest
            inside = {id(n) for n in tree_walk.bfs(s)}
        body, orelse = alts(body_stmts), alts(else_stmts)
        for mine, theirs, in_else in ((body, orelse, False), (orelse, body, True)):
            if len(theirs) != 1:
                continue
            for seq in mine:
                if len(seq) <= len(theirs[0]):
                    continue
                for ev in _unmatched(seq, theirs[0]):
                    if inside is None or id(ev.node) in inside:
                        self.miss(ev, Reason("some", s, in_else=in_else))

    def miss(self, ev: Event, reason: Reason) -> None:
        if id(ev.node) in self.misses:
            return
        if ev.subgroup and not self.world_rank0_only(reason):
            return
        if (
            reason.kind == "guard"
            and self.root is self.ctx.module_node
            and ev.label in _BARRIERS
            and any(reason.node is s for s in self.ctx.body)
            and self.ctx.facts.barrier_ifs > 1
        ):
            return  # maybe half of a "zero first" pair whose other half is another chunk
        self.misses[id(ev.node)] = Miss(ev, reason)

    def world_rank0_only(self, reason: Reason) -> bool:
        """Only *global* rank 0 makes the call (:mod:`ddp_lsp.core.rankgroups`): a collective
        on an explicit group is then stranded too; under any other subset only the group's
        members may be calling it."""
        if reason.runner != Z or reason.kind == "decorator":  # `@rank_zero_only`: global
            return reason.runner == Z
        node = (
            reason.node
            if reason.kind == "guard"
            else reason.guard
            if reason.kind == "exit"
            else None
        )
        test = node.test if isinstance(node, (ast.If, ast.IfExp)) else node
        r = self.ranks(test) if test is not None else None
        if test is None or r is None or r.subset not in (Subset.RANK0, Subset.NONZERO):
            return False
        return world_rank_test(self.ctx.ranks, test)


def roots(ctx: ChunkContext) -> list[ast.AST]:
    """Every frame of the chunk: its functions (methods, nested ones) and its module code."""
    out: list[ast.AST] = list(ctx.nodes(ast.FunctionDef, ast.AsyncFunctionDef))
    if any(not isinstance(s, (*FUNCS, ast.ClassDef)) for s in ctx.body):
        out.append(ctx.module_node)
    return out


def event_roots(ctx: ChunkContext, extract: Extractor) -> list[ast.AST]:
    """The frames of :func:`roots` that may hold an event: those holding a call ``extract``
    makes one of (a call belongs to the innermost function, lambda or class around it, or to
    the module code). Found from the chunk's calls at once, so frames without an event (most
    of them) are never walked; :meth:`Flow.run` still checks its own frame."""
    found: set[int] = set()
    module = False
    for call in ctx.calls():
        if extract(call) is None:
            continue
        for a in ctx.ancestors(call):
            if isinstance(a, _SCOPES):
                found.add(id(a))
                break
        else:
            module = True
    return [r for r in roots(ctx) if id(r) in found or (module and r is ctx.module_node)]


def _order(node: ast.AST) -> tuple[int, int]:
    return (getattr(node, "lineno", 0), getattr(node, "col_offset", 0))


def chunk_misses(
    ctx: ChunkContext, extract: Extractor, callers_guarded: bool = False
) -> list[Miss]:
    """Every event of the chunk some ranks reach and others do not, in source order (each
    frame walked once; memoised per extractor kind): DDP103 and the uniformity analysis's
    collectives ask it with the same extractor of the chunk, the walk runs once."""
    return ctx.memo(
        ("chunk misses", extract, callers_guarded),
        lambda: _chunk_misses(ctx, extract, callers_guarded),
    )


def may_split(ctx: ChunkContext) -> bool:
    """Some frame of the chunk may tell the rank classes apart by its own code: it holds a
    condition (an ``if``, a conditional expression, ``and``/``or``: the only places
    :meth:`Flow.split` is asked) or a rank-zero decorator. Without one, every frame's two
    lanes start alike (unless every caller guards the function: DDP104's ``callers_guarded``)
    and stay equal, so no event is stranded (:meth:`Flow.run`), whatever the module facts
    say: :func:`chunk_misses` is then empty without a look at the chunk's calls (40-60% of
    the chunks of training scripts have no condition at all)."""

    def compute() -> bool:
        for cls in (ast.If, ast.IfExp, ast.BoolOp):
            if ctx.nodes(cls):
                return True
        fns: list[ast.FunctionDef | ast.AsyncFunctionDef] = ctx.nodes(*FUNCS)
        return any(last_name(d) in RANK_ZERO_DECORATORS for fn in fns for d in fn.decorator_list)

    return ctx.memo(("may split",), compute)


def guarded_functions(ctx: ChunkContext) -> bool:
    """Some function of the chunk is only called under a rank-0 guard (the facts'
    ``ONLY_CALLED_GUARDED``, as :meth:`Flow.run` asks it with ``callers_guarded``)."""
    fns: list[ast.FunctionDef | ast.AsyncFunctionDef] = ctx.nodes(*FUNCS)
    for fn in fns:
        if fn.body:
            qual, _ = ctx.scope(fn.body[0])
            if fact_model.ONLY_CALLED_GUARDED in ctx.facts.props(qual):
                return True
    return False


def _chunk_misses(ctx: ChunkContext, extract: Extractor, callers_guarded: bool) -> list[Miss]:
    if not may_split(ctx) and not (callers_guarded and guarded_functions(ctx)):
        return []  # no frame can split the ranks (see may_split)
    out: list[Miss] = []
    seen: set[int] = set()
    for root in event_roots(ctx, extract):
        try:
            misses = Flow(ctx, root, extract, callers_guarded=callers_guarded).run()
        except RecursionError:  # absurdly nested code: no findings rather than a crash
            continue
        for m in misses:
            if id(m.event.node) not in seen:
                seen.add(id(m.event.node))
                out.append(m)
    return out


def divergence_key(miss: Miss) -> tuple[object, ...]:
    """Misses with the same key strand their events at the same divergence point."""
    r = miss.reason
    return (r.kind, id(r.node), r.in_else, r.runner, r.loop)


def divergence_of(u: ChunkUniformity, miss: Miss) -> Divergence:
    """The divergence point (API form) that strands ``miss``'s event."""
    ctx = u.ctx
    r = miss.reason
    runner = RankSet(Subset.RANK0) if r.runner == Z else RankSet(Subset.NONZERO)
    if r.runner is None:
        runner = RankSet(
            Subset.SOME,
            chunktext.segment(ctx.chunk, r.node.test) if isinstance(r.node, ast.If) else "",
        )
    if r.kind in ("guard", "some"):
        test = getattr(r.node, "test", r.node)
        return Divergence(
            test,
            chunktext.span(ctx.chunk, test),
            "branch",
            chunktext.segment(ctx.chunk, test),
            runner,
            guard=r.node,
        )
    if r.kind == "decorator":
        return Divergence(
            r.node,
            chunktext.span(ctx.chunk, r.node),
            "decorator",
            chunktext.segment(ctx.chunk, r.node),
            runner,
        )
    if r.kind == "caller":
        name = getattr(r.node, "name", "this function")
        fn_line = getattr(r.node, "lineno", 1)
        at = chunktext.pos(ctx.chunk, fn_line, 0)
        from ddp_lsp.core.types import Span

        return Divergence(
            r.node, Span(at, at), "call", f"every caller of {name}() guards it", runner
        )
    guard = r.guard
    cond = chunktext.segment(ctx.chunk, guard.test) if isinstance(guard, ast.If) else ""
    kind = exit_kind(ctx, r.node) if isinstance(r.node, ast.stmt) else None
    return Divergence(
        r.node,
        chunktext.span(ctx.chunk, r.node),
        kind or "exit",
        cond,
        runner,
        fatal=fatal_exit(r.node),
        guard=guard,
    )
