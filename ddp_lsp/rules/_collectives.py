"""Which ranks reach which communicating call: the path analysis behind DDP103 and DDP104.

A DDP job runs the same code on every rank, and a collective completes only when every rank
of its group calls it, in the same order. Ranks differ only where the code asks which rank it
is, so the analysis splits the ranks into two classes, rank 0 (``Z``) and the others (``N``),
and walks each function once for both classes together:

- a condition that does not mention the rank (``if step % 100 == 0``, ``if world_size > 1``,
  ``if dist.is_initialized()``) is the same on every rank: both classes take the same branch,
  and the walk keeps one *joint path* per choice; a path remembers the conditions it decided,
  so ``if not args.deepspeed:`` tested twice goes the same way both times, and
  ``if rank == 0 and not evaluate:`` is walked as ``if not evaluate: if rank == 0:``;
- a rank guard (``if rank == 0``, ``if not is_main_process()``) sends each class into its own
  branch;
- ``return``, ``break``, ``continue``, ``raise`` and ``sys.exit()`` end a class's walk (or its
  loop iteration) where they are reached.

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

Limits, each erring towards silence: conditions on values computed from the rank elsewhere
(``stop = rank == 0`` then ``if stop_flag.item():``) are taken as rank-independent unless
the flag is assigned from a rank test in the same function; a collective on an explicit
process group (``group=pg``) under a guard is not reported (only the group's members may have
to call it); at module level a top-level ``if`` is its own chunk, so a guarded barrier there
may be half of a "zero first" pair in another chunk and is not reported when another top-level
``if`` of the module calls a barrier too (``ModuleFacts.barrier_ifs``).
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace

from ddp_lsp.core import facts as K
from ddp_lsp.core import names as N
from ddp_lsp.core import walk as W
from ddp_lsp.core.crossfile import Provenance
from ddp_lsp.core.facts import path_of
from ddp_lsp.core.ranks import Polarity
from ddp_lsp.core.rule import ChunkContext
from ddp_lsp.rules import _guard as G
from ddp_lsp.rules import _patterns as P

Z, NZ = 0, 1  # rank 0, the other ranks
BOTH = frozenset({Z, NZ})
FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef)
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)
_MAX_ALTS = 64  # joint paths kept per block; beyond it the walk drops paths (fewer findings)

# torch.distributed functions every rank of the group calls. `destroy_process_group` is not a
# rendezvous the other ranks wait in, so it is left out.
_COLLECTIVE_FUNCTIONS = (N.COLLECTIVE_FUNCTIONS - {"destroy_process_group"}) | {
    "new_subgroups",
    "new_subgroups_by_enumeration",
}
# Positional index of the `group` parameter of each torch.distributed collective.
_GROUP_POSITION = {
    "barrier": 0,
    "monitored_barrier": 0,
    "all_reduce": 2,
    "all_reduce_coalesced": 2,
    "broadcast": 2,
    "broadcast_object_list": 2,
    "all_gather": 2,
    "all_gather_into_tensor": 2,
    "all_gather_object": 2,
    "all_gather_coalesced": 2,
    "reduce": 3,
    "reduce_scatter": 3,
    "reduce_scatter_tensor": 3,
    "gather": 3,
    "gather_object": 3,
    "scatter": 3,
    "scatter_object_list": 3,
    "all_to_all": 2,
    "all_to_all_single": 4,
}
# ProcessGroup methods and the torch.distributed function each one is.
PG_METHODS = {
    "allreduce": "all_reduce",
    "allreduce_coalesced": "all_reduce_coalesced",
    "allgather": "all_gather",
    "allgather_coalesced": "all_gather_coalesced",
    "allgather_into_tensor_coalesced": "all_gather_into_tensor",
    "_allgather_base": "all_gather_into_tensor",
    "broadcast": "broadcast",
    "barrier": "barrier",
    "monitored_barrier": "monitored_barrier",
    "reduce": "reduce",
    "reduce_scatter": "reduce_scatter",
    "_reduce_scatter_base": "reduce_scatter_tensor",
    "gather": "gather",
    "scatter": "scatter",
    "alltoall": "all_to_all",
    "alltoall_base": "all_to_all_single",
}
_NEW_GROUP = frozenset({"torch.distributed.new_group"})
_WORLD = frozenset({"torch.distributed.group.WORLD", "torch.distributed.GroupMember.WORLD"})
_BARRIERS = frozenset(
    {
        "barrier",
        "monitored_barrier",
        "accelerator.wait_for_everyone",
        "comm.synchronize",
        "fabric.barrier",
        "comm.barrier",
        "comm.Barrier",
    }
)
_PROCESS_EXITS = frozenset({"sys.exit", "os._exit", "exit", "quit"})


# -- rank conditions ------------------------------------------------------------------------------


def _loop_targets(root: ast.AST) -> set[str]:
    """Names bound as loop or comprehension variables in ``root``'s own frame."""
    out: set[str] = set()
    for node in P.walk_scope(root):
        if isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)):
            out.update(n.id for n in W.bfs(node.target) if isinstance(n, ast.Name))
    return out


def _negative_or_sign_test(ctx: ChunkContext, test: ast.AST) -> bool:
    """``args.local_rank != -1``, ``local_rank >= 0``: "is this a distributed run", the same
    answer on every rank (the launcher sets the rank on all of them or on none)."""
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1):
        return False
    left, op, right = test.left, test.ops[0], test.comparators[0]
    if ctx.ranks.is_rank_expr(right) and not ctx.ranks.is_rank_expr(left):
        left, right = right, left
        op = {ast.Lt: ast.Gt(), ast.Gt: ast.Lt(), ast.LtE: ast.GtE(), ast.GtE: ast.LtE()}.get(
            type(op), op
        )
    if not ctx.ranks.is_rank_expr(left):
        return False
    value: object = None
    if isinstance(right, ast.UnaryOp) and isinstance(right.op, ast.USub):
        if isinstance(right.operand, ast.Constant):
            value = -right.operand.value if isinstance(right.operand.value, int) else None
    elif isinstance(right, ast.Constant):
        value = right.value
    if not isinstance(value, int) or isinstance(value, bool):
        return False
    if value < 0 and isinstance(op, (ast.Eq, ast.NotEq, ast.Is, ast.IsNot, ast.Gt, ast.LtE)):
        return True
    return value == 0 and isinstance(op, (ast.GtE, ast.Lt))


def _single_process(ctx: ChunkContext, e: ast.AST) -> bool:
    """True on every rank or on none: ``not dist.is_initialized()``, ``world_size == 1``,
    ``args.local_rank == -1``."""
    if _negative_or_sign_test(ctx, e):
        return True
    if isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.Not):
        inner = e.operand.func if isinstance(e.operand, ast.Call) else e.operand
        return (P.last_name(inner) or "") in (
            "is_initialized",
            "is_available",
            "is_dist_avail_and_initialized",
            "distributed",
        )
    if isinstance(e, ast.Compare) and len(e.ops) == 1:
        return (P.last_name(e.left) or "").lower() == "world_size"
    return False


def polarity(ctx: ChunkContext, test: ast.AST, root: ast.AST) -> Polarity | None:
    """Which ranks take the true branch of ``test`` (None: every rank takes the same one)."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        inner = polarity(ctx, test.operand, root)
        return inner.negated() if inner is not None else None
    if isinstance(test, ast.NamedExpr):
        return polarity(ctx, test.value, root)
    if (
        isinstance(test, ast.Compare)
        and len(test.ops) == 1
        and isinstance(test.left, ast.NamedExpr)
    ):
        # `(r := dist.get_rank()) == 0` tests what the walrus binds.
        test = ast.Compare(test.left.value, test.ops, test.comparators)
    if _negative_or_sign_test(ctx, test):
        return None
    if isinstance(test, ast.BoolOp):
        parts = [polarity(ctx, v, root) for v in test.values]
        found = [p for p in parts if p is not None]
        if not found:
            return None
        if isinstance(test.op, ast.And):
            if Polarity.ZERO in found:
                return Polarity.ZERO
            if all(p is Polarity.NONZERO for p in found):
                return Polarity.NONZERO
            return Polarity.SOME
        # `or`: the true branch runs where any operand holds.
        if all(
            p is Polarity.ZERO or (p is None and _single_process(ctx, v))
            for p, v in zip(parts, test.values, strict=True)
        ):
            return Polarity.ZERO
        if all(p is Polarity.NONZERO for p in parts):
            return Polarity.NONZERO
        return Polarity.SOME
    return G.polarity(ctx, test, root)


def takers(pol: Polarity) -> frozenset[int]:
    return frozenset({Z}) if pol is Polarity.ZERO else frozenset({NZ})


# -- events ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Event:
    """A call every rank has to make together."""

    node: ast.Call
    label: str  # what must match on the other ranks ("barrier", "all_reduce", "model")
    display: str  # how the message names it ("dist.barrier()")
    wild: bool = False  # a same-file helper: matches any collective
    subgroup: bool = False  # on an explicit process group: only its members may call it


Extractor = Callable[[ast.Call], "Event | None"]


def _kw(call: ast.Call, name: str) -> ast.expr | None:
    for kw in call.keywords:
        if kw.arg == name:
            return kw.value
    return None


def _is_true(e: ast.AST | None) -> bool:
    return isinstance(e, ast.Constant) and e.value is True


def process_groups(ctx: ChunkContext) -> dict[str, bool]:
    """Paths bound to ``dist.new_group(...)`` in this chunk: path -> is a subgroup."""
    out: dict[str, bool] = {}
    for node in ctx.nodes(ast.Assign, ast.AnnAssign):
        assert isinstance(node, (ast.Assign, ast.AnnAssign))
        value = node.value
        if not isinstance(value, ast.Call) or ctx.call_qualname(value) not in _NEW_GROUP:
            continue
        ranks = value.args[0] if value.args else _kw(value, "ranks")
        sub = ranks is not None and not (isinstance(ranks, ast.Constant) and ranks.value is None)
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        for t in targets:
            p = path_of(t)
            if p is not None:
                out[p] = sub
    return out


def _group_is_sub(ctx: ChunkContext, group: ast.expr | None, pgs: dict[str, bool]) -> bool:
    if group is None or (isinstance(group, ast.Constant) and group.value is None):
        return False
    if ctx.qualname(group) in _WORLD:
        return False
    p = path_of(group)
    if p is not None and p in pgs:
        return pgs[p]
    return True


def _closure_collective(ctx: ChunkContext, call: ast.Call, name: str) -> bool:
    """``inner()`` defined in an enclosing function (the facts name it ``outer.inner``)."""
    if "." in name:
        return False
    scope, _ = ctx.scope(call)
    while scope:
        if K.COLLECTIVE in ctx.facts.props(f"{scope}.{name}"):
            return True
        scope = scope.rpartition(".")[0]
    return False


def collective_extractor(ctx: ChunkContext) -> Extractor:
    """Events of DDP103: torch.distributed collectives, process-group methods, well-known
    wrappers (accelerate, Fabric, detectron2, mpi4py) and same-file helpers that reach one."""
    pgs = process_groups(ctx)
    aliases = ctx.facts.aliases

    def extract(call: ast.Call) -> Event | None:
        name = N.dotted(call.func)
        qual = ctx.call_qualname(call)
        if qual is not None and qual.startswith("torch.distributed."):
            fn = qual[len("torch.distributed.") :]
            if fn in _COLLECTIVE_FUNCTIONS:
                if fn == "new_group" and _is_true(_kw(call, "use_local_synchronization")):
                    return None
                pos = _GROUP_POSITION.get(fn)
                group = _kw(call, "group")
                if group is None and pos is not None and len(call.args) > pos:
                    group = call.args[pos]
                return Event(call, fn, f"{name or qual}()", subgroup=_group_is_sub(ctx, group, pgs))
            return None
        if name is None:
            return None
        if K.is_collective_call(name, aliases, ctx.ranks.frameworks):
            return Event(call, ".".join(name.rsplit(".", 2)[-2:]), f"{name}()")
        if isinstance(call.func, ast.Attribute) and call.func.attr in PG_METHODS:
            receiver = path_of(call.func.value)
            if receiver is not None and receiver in pgs:
                return Event(call, PG_METHODS[call.func.attr], f"{name}()", subgroup=pgs[receiver])
        if K.COLLECTIVE in ctx.callee_props(call) or _closure_collective(ctx, call, name):
            return Event(call, name, f"{name}()", wild=True)
        return None

    return extract


# -- the walk ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Exit:
    kind: str  # "return", "raise", "break", "continue", "exit", "decorator", "caller", "frozen"
    node: ast.AST


_FROZEN = Exit("frozen", ast.Pass())


@dataclass(frozen=True)
class Lane:
    """One rank class along one joint path."""

    events: tuple[Event, ...] = ()
    exit: Exit | None = None
    skips: tuple[Exit, ...] = ()  # continue/break taken in loop iterations already left


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
    _pol_cache: dict[int, Polarity | None] = field(default_factory=dict)
    _loop_vars: set[str] | None = None

    # -- public ------------------------------------------------------------------------------

    def run(self) -> list[Miss]:
        # Most frames hold no event at all: skip the two-lane walk for them (it is the
        # costliest part of the analysis on big files).
        if not any(
            isinstance(n, ast.Call) and self.extract(n) is not None
            for n in W.scope_nodes(self.root)
        ):
            return []
        body: list[ast.stmt]
        start: list[Lane] = [Lane(), Lane()]
        if isinstance(self.root, FUNCS):
            body = self.root.body
            deco = next(
                (d for d in self.root.decorator_list if P.last_name(d) in G.RANK_ZERO_DECORATORS),
                None,
            )
            if deco is not None:
                start[NZ] = Lane(exit=Exit("decorator", deco))
            elif self.callers_guarded:
                qual, _ = self.ctx.scope(self.root.body[0]) if self.root.body else ("", None)
                if K.ONLY_CALLED_GUARDED in self.ctx.facts.props(qual):
                    start[NZ] = Lane(exit=Exit("caller", self.root))
        else:
            body = [s for s in self.ctx.body if not isinstance(s, (*FUNCS, ast.ClassDef))]
        joints = self.block(body, [Joint(start[Z], start[NZ])], BOTH)
        for j in joints:
            self.compare(j)
        return sorted(self.misses.values(), key=lambda m: P.order(m.event.node))

    # -- conditions ----------------------------------------------------------------------------

    def polarity(self, test: ast.AST) -> Polarity | None:
        key = id(test)
        if key not in self._pol_cache:
            pol = polarity(self.ctx, test, self.root)
            if pol is not None and self._mentions_loop_variable(test):
                pol = None  # `for rank in range(world_size): if rank == 0:` is the same everywhere
            self._pol_cache[key] = pol
        return self._pol_cache[key]

    def _mentions_loop_variable(self, test: ast.AST) -> bool:
        if self._loop_vars is None:
            self._loop_vars = _loop_targets(self.root)
        return any(
            isinstance(n, ast.Name)
            and n.id in self._loop_vars
            and (self.ctx.ranks.is_rank_expr(n) or self.ctx.ranks.is_predicate(n))
            for n in W.bfs(test)
        )

    def nonrank_conjuncts(self, test: ast.AST) -> list[ast.expr]:
        """The rank-independent parts of ``rank == 0 and not evaluate``."""
        if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
            return [v for v in test.values if self.polarity(v) is None]
        return []

    def split(self, test: ast.AST) -> frozenset[int] | None:
        pol = self.polarity(test)
        if pol is Polarity.ZERO or pol is Polarity.NONZERO:
            return takers(pol)
        return None

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
            if self.polarity(s.test) is Polarity.SOME:
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
        for child in W.children(s):
            if isinstance(child, ast.expr):
                joints = self.expr(child, joints, active)
        if isinstance(s, ast.Expr) and isinstance(s.value, ast.Call):
            name = N.dotted(s.value.func) or ""
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
        inside = {id(n) for b in s.body for n in W.bfs(b)}
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
        inside = {id(n) for part in (s.body, s.handlers, s.orelse) for b in part for n in W.bfs(b)}
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
        out: list[Joint] = []
        iterations: dict[frozenset[int], list[Joint]] = {}
        for j in joints:
            live = frozenset(c for c in active if j[c].exit is None)
            out.append(j)  # no iteration (or no live class)
            if not live:
                continue
            its = iterations.get(live)
            if its is None:
                # One iteration, walked once per set of live classes: it does not depend on
                # what happened before the loop.
                fresh = [Lane() if c in live else Lane(exit=_FROZEN) for c in (Z, NZ)]
                its = [Joint(fresh[Z], fresh[NZ])]
                if test is not None:
                    its = self.expr(test, its, live)
                its = self.block(s.body, its, live)
                self.loop_check(its, live)
                iterations[live] = its
            for it in its:
                lanes = j.lanes()
                for c in live:
                    ex = it[c].exit
                    ev = lanes[c].events + it[c].events
                    if ex is None or ex.kind in ("break", "continue"):
                        skips = lanes[c].skips + it[c].skips + ((ex,) if ex is not None else ())
                        lanes[c] = Lane(ev, None, skips)
                    else:
                        lanes[c] = Lane(ev, ex, lanes[c].skips + it[c].skips)
                out.append(j.with_lanes(lanes))
        out = _dedupe(out)
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
                    lanes[c] = replace(lanes[c], events=lanes[c].events + tuple(per_class[c]))
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
        for child in W.children(node):
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
            if x.kind != "frozen" and P.before(x.node, ev.node)
        ]
        for x in sorted(candidates, key=lambda x: P.order(x.node), reverse=True):
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

        body, orelse = alts(s.body), alts(s.orelse)
        for mine, theirs, in_else in ((body, orelse, False), (orelse, body, True)):
            if len(theirs) != 1:
                continue
            for seq in mine:
                if len(seq) <= len(theirs[0]):
                    continue
                for ev in _unmatched(seq, theirs[0]):
                    self.miss(ev, Reason("some", s, in_else=in_else))

    def miss(self, ev: Event, reason: Reason) -> None:
        if ev.subgroup or id(ev.node) in self.misses:
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


def _key(test: ast.AST) -> tuple[str, bool]:
    """A condition's identity and sense: ``not x`` is ``x`` decided the other way."""
    truth = True
    while isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        test, truth = test.operand, not truth
    return ast.dump(test), truth


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


def _dedupe(joints: Iterable[Joint]) -> list[Joint]:
    """Drop repeated joint paths and keep at most ``_MAX_ALTS``: one per distinct pair of
    lanes first (those are what the comparison looks at), then variants that only differ in
    the conditions they decided. Dropping paths can only lose findings."""
    seen: set[tuple[object, ...]] = set()
    firsts: list[Joint] = []
    rest: list[Joint] = []
    lane_keys: set[tuple[object, ...]] = set()
    for j in joints:
        lanes = tuple(
            (
                tuple(id(e.node) for e in lane.events),
                id(lane.exit.node) if lane.exit else None,
                tuple(id(x.node) for x in lane.skips),
            )
            for lane in j.lanes()
        )
        key = (lanes, j.decided)
        if key in seen:
            continue
        seen.add(key)
        if lanes in lane_keys:
            rest.append(j)
        else:
            lane_keys.add(lanes)
            firsts.append(j)
    return (firsts + rest)[:_MAX_ALTS]


def _unmatched(longer: Sequence[Event], shorter: Sequence[Event]) -> list[Event]:
    """Events of ``longer`` left without a partner by the best alignment with ``shorter``
    (the same call site scores higher than the same collective elsewhere)."""
    n, m = len(longer), len(shorter)
    score = [[0] * (m + 1) for _ in range(n + 1)]
    for i in range(n - 1, -1, -1):
        for k in range(m - 1, -1, -1):
            best = max(score[i + 1][k], score[i][k + 1])
            w = _weight(longer[i], shorter[k])
            if w:
                best = max(best, w + score[i + 1][k + 1])
            score[i][k] = best
    out: list[Event] = []
    i = k = 0
    while i < n and k < m:
        w = _weight(longer[i], shorter[k])
        if w and score[i][k] == w + score[i + 1][k + 1]:
            i += 1
            k += 1
        elif score[i][k] == score[i + 1][k]:
            out.append(longer[i])
            i += 1
        else:
            k += 1
    out.extend(longer[i:])
    return out


def _weight(a: Event, b: Event) -> int:
    if a.node is b.node:
        return 3
    if a.label == b.label:
        return 2
    if a.wild or b.wild:
        return 1
    return 0


def roots(ctx: ChunkContext) -> list[ast.AST]:
    """Every frame of the chunk: its functions (methods, nested ones) and its module code."""
    out: list[ast.AST] = list(ctx.nodes(ast.FunctionDef, ast.AsyncFunctionDef))
    if any(not isinstance(s, (*FUNCS, ast.ClassDef)) for s in ctx.body):
        out.append(ctx.module_node)
    return out


# -- describing ranks and conditions ----------------------------------------------------------------


def short(text: str, limit: int = 70) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def is_local(ctx: ChunkContext, node: ast.AST) -> bool:
    test = getattr(node, "test", node)
    return "local" in ctx.segment(test).lower()


def ranks_text(cls: int, local: bool) -> str:
    if local:
        return "local rank 0 of each node" if cls == Z else "the other local ranks"
    return "rank 0" if cls == Z else "ranks 1..N-1"


def condition_text(ctx: ChunkContext, reason: Reason) -> str:
    """``if rank == 0:``, ``the else branch of if rank == 0:``, ``is_main and ...``."""
    node = reason.node if reason.kind in ("guard", "some") else reason.guard
    if isinstance(node, ast.If):
        head = f"if {short(ctx.segment(node.test))}:"
        return f"the `else` branch of `{head}`" if reason.in_else else f"`{head}`"
    if isinstance(node, ast.IfExp):
        cond = short(ctx.segment(node.test))
        return (
            f"`else` of `... if {cond} else ...`" if reason.in_else else f"`... if {cond} else ...`"
        )
    if node is not None:
        return f"`{short(ctx.segment(node))}`"
    return "a rank condition"


def guard_span_node(reason: Reason) -> ast.AST | None:
    node = reason.node if reason.kind in ("guard", "some") else reason.guard
    if isinstance(node, (ast.If, ast.IfExp)):
        return node.test
    return node


_EXIT_WORDS = {
    "return": ("return", "returns"),
    "raise": ("raise", "raises"),
    "break": ("break out of the loop", "breaks out of the loop"),
    "continue": ("skip to the next iteration", "skips to the next iteration"),
    "exit": ("exit", "exits"),
}


def elsewhere_source(ctx: ChunkContext, miss: Miss) -> Provenance | None:
    """For a helper defined in another file: where it performs its collective."""
    node = miss.event.node
    if not miss.event.wild or not isinstance(node, ast.Call):
        return None
    return ctx.callee_source(node, K.COLLECTIVE)


def explain(
    ctx: ChunkContext, miss: Miss, consequence: str
) -> tuple[str, list[tuple[ast.AST, str]]]:
    """The part of a message saying which ranks make the call and which skip it, and the
    places to point at (related information)."""
    r = miss.reason
    text = ctx.segment(miss.event.node)
    call = (
        f"`{short(text)}`"
        if len(text) <= 40 and "\n" not in text
        else f"`{short(miss.event.display)}`"
    )
    if miss.event.wild:
        src = elsewhere_source(ctx, miss)
        call += f" (which reaches a collective: {src})" if src else " (which reaches a collective)"
    runner = r.runner
    if r.kind == "some":
        cond = short(ctx.segment(r.node.test))  # type: ignore[attr-defined]
        return (
            f"{call} runs only on the ranks where `{cond}` {'does not hold' if r.in_else else 'holds'} "
            f"({condition_text(ctx, r)}); the other ranks never reach it and {consequence}",
            [(guard_span_node(r) or r.node, "the rank condition")],
        )
    assert runner is not None
    skipper = NZ if runner == Z else Z
    where = r.node if r.kind == "guard" else r.guard
    local = r.kind in ("guard", "exit") and where is not None and is_local(ctx, where)
    runs, skips = ranks_text(runner, local), ranks_text(skipper, local)
    plural = skips.startswith(("ranks", "the other"))
    if r.kind == "guard":
        verb = "never reach" if plural else "never reaches"
        return (
            f"{call} runs only on {runs} ({condition_text(ctx, r)}); {skips} {verb} it "
            f"and {consequence}",
            [(guard_span_node(r) or r.node, "the rank condition")],
        )
    if r.kind == "decorator":
        fn = ctx.enclosing_function(miss.event.node)
        name = fn.name if fn is not None else "this function"
        verb = "never reach" if plural else "never reaches"
        return (
            f"{call} runs only on {runs}: `{name}` is decorated with "
            f"`@{short(ctx.segment(r.node))}`; {skips} {verb} it and {consequence}",
            [(r.node, "runs the function on rank 0 only")],
        )
    if r.kind == "caller":
        name = getattr(r.node, "name", "this function")
        return (
            f"{call} runs only on {runs}: `{name}` is only called under a rank-0 guard; "
            f"{skips} never reach it and {consequence}",
            [],
        )
    kind = "exit"
    exit_node = r.node
    if isinstance(exit_node, ast.Return):
        kind = "return"
    elif isinstance(exit_node, ast.Raise):
        kind = "raise"
    elif isinstance(exit_node, ast.Break):
        kind = "break"
    elif isinstance(exit_node, ast.Continue):
        kind = "continue"
    words = _EXIT_WORDS[kind][0 if plural else 1]
    cond = condition_text(ctx, r)
    exit_text = short(ctx.segment(exit_node))
    related = [
        (guard_span_node(r) or exit_node, "the rank condition"),
        (exit_node, "the early exit"),
    ]
    runs_plural = runs.startswith(("ranks", "the other"))
    tail = ""
    if kind in ("raise", "exit"):
        tail = " (unless the launcher stops the whole job when that rank fails)"
    if r.loop:
        return (
            f"{skips} {'leave' if plural else 'leaves'} the loop around {call} at "
            f"`{exit_text}` under {cond}, while {runs} "
            f"{'keep iterating and call' if runs_plural else 'keeps iterating and calls'} it "
            f"alone, so {consequence}{tail}",
            related,
        )
    return (
        f"{skips} {words} at `{exit_text}` under {cond} and never reach{'' if plural else 'es'} "
        f"{call}; {runs} call{'' if runs_plural else 's'} it alone and {consequence}{tail}",
        related,
    )
