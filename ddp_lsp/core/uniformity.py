"""Rank uniformity: which ranks run each statement, and what splits them.

This is the one analysis every rule asks "is this guarded?" or "do all ranks reach this?"
(DDP103, DDP104, DDP401, DDP501-DDP504, DDP302, and the module facts' rank-0 helpers), in
the manner of Aiken and Gay's single-valued/multi-valued analysis of SPMD programs and a GPU
compiler's divergence analysis:

- **Values** are *uniform* (the same on every rank: arguments and config, the world size,
  "is this run distributed" such as ``int(os.environ.get("RANK", -1)) != -1`` or
  ``args.local_rank != -1``, ``dist.is_initialized()``, epoch and step counters, and values a
  collective made equal: the tensor of ``all_reduce``/``broadcast``, the list of
  ``broadcast_object_list``) or *rank-dependent* (``rank``, ``local_rank``,
  ``dist.get_rank()``, ``is_main_process()``, and anything computed from them). Rank
  dependence flows through assignments in a frame (``is_master = rank == 0``), attributes
  and module names assigned anywhere in the module (``self.is_master = rank == 0``,
  ``args.save_logs = args.logs and is_master(args)``: the module facts' rank predicates),
  objects made on some ranks only (``saver = Saver() if is_master else None`` makes
  ``saver is not None`` a rank test), calls that bind a helper's parameters
  (:mod:`ddp_lsp.core.gates`: ``save(..., synchronize=False)``, a zero-first helper given
  ``rank=-1``, ``f(load_on_all_ranks=u)`` on a path where ``u`` is false), helper
  functions whose returns are rank tests (module facts ``RANK_PREDICATE``), and across files
  through the project index (a predicate imported from another module). Loop variables named
  like a rank (``for rank in range(world_size)``) are uniform.
- **Statements** run on a rank subset exactly when they are control-dependent on a
  rank-dependent branch (``if``/``else``, ``while``, conditional expressions, ``and``/``or``
  short-circuits), on an earlier rank-dependent ``return``/``raise``/``sys.exit()`` of their
  function, a ``break``/``continue`` of their loop, a rank-zero decorator
  (``@rank_zero_only``), or on every caller of their function guarding the call.
- **Subsets** (:class:`Subset`): every rank, global rank 0, local rank 0 of each node, the
  ranks other than 0, the ranks other than local rank 0, and "the ranks where <condition>".
  A condition ``u or rank == 0`` with a uniform ``u`` is rank 0 *unless* ``u`` holds
  (:attr:`RankSet.unless`): every rank runs it then (``if load_on_all_ranks or rank == 0:``).
  Conditions that are true only in a single-process run (``not dist.is_initialized()``,
  ``world_size == 1``, ``local_rank == -1``) add nothing to a rank set: no rank of a
  distributed run takes them.
- **Error paths**: a ``raise`` or ``sys.exit()`` under a rank condition is a divergence point
  (the statements after it run on the other ranks only) marked ``fatal``: the launcher
  (torchrun, ``mp.spawn``, the DeepSpeed launcher) stops every worker when one exits with an
  error, so nothing hangs; DDP103 does not report them. A ``return`` (``return -1`` after
  "experiment exists") is not fatal: the process ends normally and the other ranks wait in
  their next collective until the timeout, so it is reported (docs/accuracy.md, F7).

The rank sets and the classifier of conditions (:class:`RankSet`, :func:`condition_ranks`)
live in :mod:`ddp_lsp.core.rankcond` and are re-exported here; this module is the per-chunk
analysis (values, statements, divergence points, collectives).

API (stable; the language server's rank view builds on it)
-----------------------------------------------------------

``uniformity(ctx) -> ChunkUniformity`` builds (once per :class:`ChunkContext`, memoised) the
analysis of one chunk from what the context holds: the chunk's ``ast`` body, the module facts
(``ctx.facts``, with the cross-file facts merged in by the engine) and the rank model
(``ctx.ranks``). It is pure (no host reads) and lazy: each question walks only the ancestors
of the node asked about, with per-block memos, so a rule pass stays within the keystroke
budget of docs/performance.md.

- ``ChunkUniformity.test(expr) -> RankSet | None``: the ranks on which a condition holds
  (None: every rank computes the same value).
- ``ChunkUniformity.ranks_of(node) -> RankSet``: the ranks that run ``node``
  (``RankSet.ALL`` when every rank does).
- ``ChunkUniformity.divergences_of(node) -> tuple[Divergence, ...]``: the divergence points
  that decide it, innermost first. Each :class:`Divergence` has ``span`` (a chunk-relative
  :class:`~ddp_lsp.core.types.Span`), ``node`` (the ``ast`` node: the ``if``/``while`` test,
  the ``return``/``raise``/``break``/``continue`` statement, the decorator, or the function
  for ``call``), ``kind`` (``"branch"``, ``"return"``, ``"raise"``, ``"break"``,
  ``"continue"``, ``"exit"``, ``"decorator"``, ``"call"``), ``condition`` (the condition's
  source text), ``ranks`` (the :class:`RankSet` that continues past it towards ``node``),
  ``fatal`` (an error exit: the launcher ends the job) and ``path`` (the file, relative to the
  project root, when the divergence is in another file; None in this file).
- ``ChunkUniformity.statements() -> list[StatementRanks]``: every statement of the chunk with
  ``stmt`` (the ``ast`` node), ``span`` (chunk-relative), ``ranks`` and ``divergences``
  (source order; what inlay hints and hovers show). Use spans, not ``ast`` line numbers:
  a chunk's ``lineno`` values are not document lines.
- ``ChunkUniformity.collectives() -> list[CollectiveReach]``: every collective call of the
  chunk (torch.distributed, process-group methods, known wrappers, helpers that reach one),
  with ``skipped`` (some path of the rank classes reaches it on some ranks only) and, when
  skipped, ``divergence`` (the point that strands it).
- ``document_uniformity(doc, settings=None, project=None)`` yields ``(first_line,
  ChunkUniformity)`` for every parsed chunk of a :class:`~ddp_lsp.core.document.Document`
  (spans are chunk-relative: add ``first_line`` to their lines), built the way the engine
  builds a rule's context (same module facts, same rank model). Nothing is yielded for a
  module that is not distributed code.
- ``RankSet.describe()``: ``"all ranks"``, ``"rank 0"``, ``"local rank 0"``, ``"ranks ≠ 0"``,
  ``"local ranks ≠ 0"``, ``"ranks where args.rank % 2 == 0"``, with ``" (all ranks when
  <u>)"`` appended for an ``unless``.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ddp_lsp.core import chunktext
from ddp_lsp.core import frames as scope_frames
from ddp_lsp.core.names import dotted, last_name
from ddp_lsp.core.rankcond import (
    EXTRA_PREDICATES,
    NONZERO_SIDE,
    RANK_ZERO_DECORATORS,
    SINGLE_PROCESS_CALLS,
    ZERO_SIDE,
    RankSet,
    Resolver,
    Subset,
    condition_ranks,
    single_process_test,
)
from ddp_lsp.core.types import Pos, Span
from ddp_lsp.core.walk import bfs, scope_nodes

if TYPE_CHECKING:
    from ddp_lsp.core.crossfile import ModuleProjectFacts
    from ddp_lsp.core.document import Document
    from ddp_lsp.core.rule import ChunkContext
    from ddp_lsp.core.settings import Settings

# The public names, with those of :mod:`ddp_lsp.core.rankcond` (rank sets, conditions) that
# rules, the rank paths and the rank view import from here.
__all__ = [
    "EXTRA_PREDICATES",
    "FUNCS",
    "NONZERO_SIDE",
    "RANK_ZERO_DECORATORS",
    "SINGLE_PROCESS_CALLS",
    "ZERO_SIDE",
    "ChunkUniformity",
    "CollectiveReach",
    "Divergence",
    "RankSet",
    "Resolver",
    "StatementRanks",
    "Subset",
    "condition_ranks",
    "document_uniformity",
    "exit_kind",
    "fatal_exit",
    "single_process_test",
    "uniformity",
]

FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef)
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)
_LOOPS = (ast.For, ast.AsyncFor, ast.While)
_MAX_DEPTH = 3

# Collectives whose arguments hold the same value on every rank afterwards.
_SYNCING = frozenset(
    {"all_reduce", "broadcast", "broadcast_object_list", "all_gather", "all_gather_object"}
)
_PROCESS_EXITS = frozenset({"sys.exit", "os._exit", "exit", "quit"})


# -- divergence points -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Divergence:
    """A point where the ranks split: a rank-dependent branch, exit, decorator or caller."""

    node: ast.AST
    span: Span
    kind: str  # "branch", "return", "raise", "break", "continue", "exit", "decorator", "call"
    condition: str  # the condition's source text
    ranks: RankSet  # the ranks that continue past it towards the statement asked about
    fatal: bool = False  # an error exit (raise, sys.exit): the launcher ends the whole job
    path: str | None = None  # the file, when the divergence is in another file
    guard: ast.AST | None = None  # for exits: the `if` whose test decides them


@dataclass(frozen=True)
class StatementRanks:
    stmt: ast.stmt
    span: Span  # chunk-relative
    ranks: RankSet
    divergences: tuple[Divergence, ...]


@dataclass(frozen=True)
class CollectiveReach:
    call: ast.Call
    label: str  # "barrier", "all_reduce", a helper's name
    skipped: bool  # some rank-dependent path reaches it on some ranks only
    divergence: Divergence | None  # the point that strands it


def exit_kind(ctx: ChunkContext, s: ast.stmt) -> str | None:
    """``return``, ``raise``, ``break``, ``continue``, ``exit`` (``sys.exit()``), or None."""
    if isinstance(s, ast.Return):
        return "return"
    if isinstance(s, ast.Raise):
        return "raise"
    if isinstance(s, ast.Break):
        return "break"
    if isinstance(s, ast.Continue):
        return "continue"
    if isinstance(s, ast.Expr) and isinstance(s.value, ast.Call):
        name = dotted(s.value.func) or ""
        qual = ctx.call_qualname(s.value) or name
        if qual in _PROCESS_EXITS or name in ("exit", "quit"):
            return "exit"
    return None


def fatal_exit(s: ast.AST) -> bool:
    """An exit that ends the process with an error status: ``raise``, or ``sys.exit(x)``
    with ``x`` not 0/None/absent. The launcher stops every worker then (nothing hangs)."""
    if isinstance(s, ast.Raise):
        return True
    if isinstance(s, ast.Expr) and isinstance(s.value, ast.Call):
        args = s.value.args
        if not args:
            return False
        a = args[0]
        return not (isinstance(a, ast.Constant) and a.value in (0, None, False))
    return False


# -- the analysis of one chunk ---------------------------------------------------------------------


class ChunkUniformity:
    """The rank uniformity of one chunk (see the module docstring for the contract)."""

    def __init__(self, ctx: ChunkContext) -> None:
        self.ctx = ctx
        self._tests: dict[int, RankSet | None] = {}
        self._ranks: dict[int, tuple[RankSet, tuple[Divergence, ...]]] = {}
        self._exits: dict[int, list[tuple[int, Divergence]]] = {}
        self._frames: dict[int, _Frame] = {}
        self._attrs: dict[str, list[ast.expr]] | None = None
        self._collectives: list[CollectiveReach] | None = None

    # -- conditions ----------------------------------------------------------------------------

    def test(self, expr: ast.AST) -> RankSet | None:
        """The ranks on which ``expr`` holds where it is evaluated (None: uniform)."""
        key = id(expr)
        if key not in self._tests:
            found = condition_ranks(self.ctx.ranks, expr, self._resolver(expr))
            if found is not None and self._loop_rank(expr):
                found = None  # `for rank in range(world_size): if rank == 0:` is uniform
            self._tests[key] = found
        return self._tests[key]

    def _resolver(self, at: ast.AST) -> Resolver:
        # A partial of a method, not a closure calling itself: a self-recursive closure is a
        # reference cycle holding this object, its ChunkContext and the chunk's facts view
        # alive until a cyclic collection (the server freezes its heap between keystrokes).
        return functools.partial(self._resolve, at)

    def _resolve(self, at: ast.AST, e: ast.expr, depth: int) -> RankSet | None:
        if depth >= _MAX_DEPTH:
            return None
        value = self._value_of(e, at)
        if value is None:
            return None
        if isinstance(value, ast.IfExp):
            # `saver = Saver() if is_master else None`: made on the ranks of the test.
            t = condition_ranks(self.ctx.ranks, value.test, self._resolver(at), depth + 1)
            if t is not None:
                if _is_none(value.orelse) and not _is_none(value.body):
                    return t
                if _is_none(value.body) and not _is_none(value.orelse):
                    return t.negated()
        made = self._made_in_rank_branch(e, value, at, depth)
        if made is not None:
            return made
        # A value the classifier calls uniform is uniform even if it names the rank
        # (`ddp = int(os.environ.get("RANK", -1)) != -1`: "is this run distributed").
        return condition_ranks(self.ctx.ranks, value, self._resolver(value), depth + 1)

    def _made_in_rank_branch(
        self, e: ast.expr, value: ast.expr, at: ast.AST, depth: int
    ) -> RankSet | None:
        """``writer = None`` then ``if local_rank == 0: writer = SummaryWriter(...)``: the
        statement form of ``Saver() if is_master else None``, an object only the ranks of the
        branch hold (None elsewhere)."""
        if not isinstance(e, ast.Name) or _is_none(value):
            return None
        stmt = self.ctx.parent(value)
        branch = self.ctx.parent(stmt) if isinstance(stmt, ast.Assign) else None
        if not isinstance(branch, ast.If):
            return None
        body = any(s is stmt for s in branch.body)
        if not body and not any(s is stmt for s in branch.orelse):
            return None
        other = branch.orelse if body else branch.body
        if any(
            isinstance(t, ast.Name) and t.id == e.id
            for s in other
            for n in bfs(s)
            if isinstance(n, (ast.Assign, ast.AnnAssign))
            for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
        ):
            return None  # the other ranks make one too
        frame = self._frame(at)
        if not _is_none(frame.frame.value_before(e.id, branch, frame.syncs) or value):
            return None  # no `x = None` before the branch: some value on the other ranks
        t = condition_ranks(self.ctx.ranks, branch.test, self._resolver(at), depth + 1)
        if t is None:
            return None
        return t if body else t.negated()

    def _value_of(self, e: ast.expr, at: ast.AST) -> ast.expr | None:
        """The value last assigned to ``e`` before ``at`` in its frame (names), or in the
        chunk (``self.x`` / ``args.x`` attributes assigned once); None when a collective made
        it uniform in between or nothing is known."""
        if isinstance(e, ast.Name):
            frame = self._frame(at)
            return frame.frame.value_before(e.id, at, frame.syncs)
        if isinstance(e, ast.Attribute):
            path = dotted(e)
            if path is None:
                return None
            values = self._attr_values().get(path, [])
            if len(values) == 1:
                return values[0]
        return None

    def _attr_values(self) -> dict[str, list[ast.expr]]:
        if self._attrs is None:
            self._attrs = {}
            for node in self.ctx.nodes(ast.Assign):
                assert isinstance(node, ast.Assign)
                for t in node.targets:
                    if isinstance(t, ast.Attribute):
                        path = dotted(t)
                        if path is not None:
                            self._attrs.setdefault(path, []).append(node.value)
        return self._attrs

    def _frame(self, at: ast.AST) -> _Frame:
        root = self.ctx.enclosing_function(at) or self.ctx.module_node
        frame = self._frames.get(id(root))
        if frame is None:
            frame = self._frames[id(root)] = _Frame(self.ctx, root)
        return frame

    def _loop_rank(self, expr: ast.AST) -> bool:
        """``expr`` tests the variable of a loop around it (``for rank in range(n):``) or of a
        comprehension it is in: the same on every rank. A comprehension elsewhere in the frame
        (``sum(x[rank] for rank in ...)``) does not rebind the frame's ``rank``."""
        frame = self._frame(expr)
        if not frame.loop_vars:
            return False
        ranks = self.ctx.ranks
        names = {
            n.id
            for n in bfs(expr)
            if isinstance(n, ast.Name)
            and n.id in frame.loop_vars
            and (ranks.is_rank_expr(n) or ranks.is_predicate(n))
        }
        if not names:
            return False
        for a in self.ctx.ancestors(expr):
            if isinstance(a, _SCOPES):
                break
            targets: list[ast.AST] = []
            if isinstance(a, (ast.For, ast.AsyncFor)):
                targets = [a.target]
            elif isinstance(a, (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)):
                targets = [g.target for g in a.generators]
            if any(isinstance(n, ast.Name) and n.id in names for t in targets for n in bfs(t)):
                return True
        return False

    # -- statements ----------------------------------------------------------------------------

    def ranks_of(self, node: ast.AST) -> RankSet:
        """The ranks that run ``node`` (every rank: ``RankSet.ALL``)."""
        return self._analyse(node)[0]

    def divergences_of(self, node: ast.AST) -> tuple[Divergence, ...]:
        """The divergence points that decide which ranks run ``node``, innermost first."""
        return self._analyse(node)[1]

    def statements(self) -> list[StatementRanks]:
        """Every statement of the chunk with its ranks and divergence points (source order)."""
        out = []
        for s in self.ctx.nodes(*_STMT_TYPES):
            ranks, divs = self._analyse(s)
            out.append(StatementRanks(s, chunktext.span(self.ctx.chunk, s), ranks, divs))
        out.sort(key=lambda r: _order(r.stmt))
        return out

    def _analyse(self, node: ast.AST) -> tuple[RankSet, tuple[Divergence, ...]]:
        key = id(node)
        known = self._ranks.get(key)
        if known is not None:
            return known
        ctx = self.ctx
        ranks = RankSet.ALL
        divs: list[Divergence] = []

        def add(d: Divergence) -> None:
            nonlocal ranks
            if not d.fatal:  # an error exit ends the whole job: the survivors run nothing
                ranks = ranks.intersect(d.ranks)
            divs.append(d)

        child: ast.AST = node
        for a in ctx.ancestors(node):
            if isinstance(a, (ast.If, ast.IfExp, ast.While)) and child is not a.test:
                t = self.test(a.test)
                if t is not None:
                    in_else = (
                        child is a.orelse
                        if isinstance(a, ast.IfExp)
                        else any(child is s for s in a.orelse)
                    )
                    if not (in_else and isinstance(a, ast.While)):
                        add(self._branch(a, t.negated() if in_else else t))
            elif isinstance(a, ast.BoolOp):
                for v in a.values:
                    if v is child:
                        break
                    t = self.test(v)
                    if t is not None:
                        add(self._branch(v, t if isinstance(a.op, ast.And) else t.negated()))
            if isinstance(child, ast.stmt):
                for d in self._exits_before(a, child):
                    add(d)
            if isinstance(a, _SCOPES):
                if isinstance(a, FUNCS):
                    for d in self._function_entry(a):
                        add(d)
                # A closure runs where it is defined (after the enclosing function's exits:
                # `if rank != 0: return` then `def hook(...)`); a method or module-level
                # function is its own frame.
                if isinstance(a, ast.ClassDef) or not any(
                    isinstance(o, (*FUNCS, ast.Lambda)) for o in ctx.ancestors(a)
                ):
                    break
            child = a
        else:
            if isinstance(child, ast.stmt):
                for d in self._exits_before(None, child):
                    add(d)
        result = (ranks, tuple(divs))
        self._ranks[key] = result
        return result

    def _branch(self, at: ast.AST, ranks: RankSet) -> Divergence:
        test = getattr(at, "test", at)
        return Divergence(
            test,
            chunktext.span(self.ctx.chunk, test),
            "branch",
            chunktext.segment(self.ctx.chunk, test),
            ranks,
            guard=at,
        )

    def _exits_before(self, parent: ast.AST | None, stmt: ast.stmt) -> list[Divergence]:
        """Rank-dependent early exits before ``stmt`` in its block that keep some ranks from
        reaching it: ``if <cond>: ... return`` (and the ``else`` side), once per block."""
        block = self._block(parent, stmt)
        if block is None:
            return []
        table = self._exits.get(id(block))
        if table is None:
            table = self._exits[id(block)] = self._block_exits(block)
        pos = next((i for i, s in enumerate(block) if s is stmt), -1)
        return [d for i, d in table if i < pos and self._exit_reaches(d, stmt)]

    def _block(self, parent: ast.AST | None, stmt: ast.stmt) -> list[ast.stmt] | None:
        if parent is None:
            return self.ctx.body
        for name in ("body", "orelse", "finalbody"):
            seq = getattr(parent, name, None)
            if isinstance(seq, list) and any(s is stmt for s in seq):
                return seq
        if isinstance(parent, ast.ExceptHandler) or isinstance(parent, ast.match_case):
            return parent.body
        return None

    def _block_exits(self, block: list[ast.stmt]) -> list[tuple[int, Divergence]]:
        """The rank-dependent exits of each statement of ``block``: its own ``if <rank>: ...
        return`` (any exit), or one nested in it (``if self.distributed: ... if not
        is_main_process(): return {}``; function exits only, a nested loop keeps its own
        ``break``/``continue``)."""
        out: list[tuple[int, Divergence]] = []
        for i, s in enumerate(block):
            if isinstance(s, ast.If):
                out.extend((i, d) for d in self._if_exits(s, loops=True))
            if isinstance(
                s, (ast.If, ast.For, ast.AsyncFor, ast.While, ast.With, ast.AsyncWith, ast.Try)
            ):
                for node in scope_nodes(s):
                    if isinstance(node, ast.If) and node is not s:
                        out.extend((i, d) for d in self._if_exits(node, loops=False))
        return out

    def _if_exits(self, s: ast.If, loops: bool) -> list[Divergence]:
        t = self.test(s.test)
        if t is None:
            return []
        out: list[Divergence] = []
        for side, ranks in ((s.body, t), (s.orelse, t.negated())):
            if not side:
                continue
            last = side[-1]
            kind = exit_kind(self.ctx, last)
            if kind is None or (not loops and kind in ("break", "continue")):
                continue
            if not loops and kind == "raise" and self._caught(last, s):
                continue
            out.append(
                Divergence(
                    last,
                    chunktext.span(self.ctx.chunk, last),
                    kind,
                    chunktext.segment(self.ctx.chunk, s.test),
                    ranks.negated(),
                    fatal=fatal_exit(last),
                    guard=s,
                )
            )
        return out

    def _caught(self, node: ast.AST, upto: ast.AST) -> bool:
        """A ``raise`` inside a ``try`` with handlers (between it and ``upto``)."""
        for a in self.ctx.ancestors(node):
            if isinstance(a, ast.Try) and a.handlers:
                return True
            if a is upto:
                break
        return False

    def _exit_reaches(self, d: Divergence, stmt: ast.stmt) -> bool:
        """A ``break``/``continue`` ends only its own loop's iteration: it keeps ranks from
        ``stmt`` only when ``stmt`` is in that loop."""
        if d.kind not in ("break", "continue"):
            return True
        loops = self.ctx.enclosing_loops(d.node)
        return bool(loops) and any(a is loops[0] for a in self.ctx.ancestors(stmt))

    def _function_entry(self, fn: ast.FunctionDef | ast.AsyncFunctionDef) -> list[Divergence]:
        deco = next((d for d in fn.decorator_list if last_name(d) in RANK_ZERO_DECORATORS), None)
        if deco is not None:
            return [
                Divergence(
                    deco,
                    chunktext.span(self.ctx.chunk, deco),
                    "decorator",
                    chunktext.segment(self.ctx.chunk, deco),
                    RankSet(Subset.RANK0),
                )
            ]
        from ddp_lsp.core.facts import ONLY_CALLED_GUARDED

        qual, _ = self.ctx.scope(fn.body[0]) if fn.body else ("", None)
        if ONLY_CALLED_GUARDED in self.ctx.facts.props(qual):
            line = Span(
                Pos(chunktext.rel_line(self.ctx.chunk, fn.lineno), 0),
                Pos(chunktext.rel_line(self.ctx.chunk, fn.lineno), 0),
            )
            return [
                Divergence(
                    fn,
                    line,
                    "call",
                    f"every caller of {fn.name}() guards it",
                    RankSet(Subset.RANK0),
                )
            ]
        return []

    # -- collectives ---------------------------------------------------------------------------

    def collectives(self) -> list[CollectiveReach]:
        """Every collective call of the chunk and whether some path skips it (the path
        analysis of :mod:`ddp_lsp.core.rankpaths`, shared with DDP103)."""
        if self._collectives is None:
            from ddp_lsp.core import rankpaths as rank_paths

            out: list[CollectiveReach] = []
            misses = {
                id(m.event.node): m
                for m in rank_paths.chunk_misses(
                    self.ctx, rank_paths.collective_extractor(self.ctx)
                )
            }
            extract = rank_paths.collective_extractor(self.ctx)
            for call in self.ctx.calls():
                ev = extract(call)
                if ev is None:
                    continue
                miss = misses.get(id(call))
                out.append(
                    CollectiveReach(
                        call,
                        ev.label,
                        miss is not None,
                        rank_paths.divergence_of(self, miss) if miss is not None else None,
                    )
                )
            self._collectives = out
        return self._collectives


_STMT_TYPES = tuple(
    t
    for t in vars(ast).values()
    if isinstance(t, type) and issubclass(t, ast.stmt) and t is not ast.stmt
)


def _order(node: ast.AST) -> tuple[int, int]:
    return (getattr(node, "lineno", 0), getattr(node, "col_offset", 0))


def _is_none(e: ast.AST) -> bool:
    return isinstance(e, ast.Constant) and e.value is None


class _Frame:
    """One frame (the frame the rules' guard helpers read too, :mod:`ddp_lsp.core.frames`),
    its loop variables, and the collectives that sync names."""

    def __init__(self, ctx: ChunkContext, root: ast.AST) -> None:
        frame = scope_frames.frame(ctx, root)
        self.frame = frame  # its assignments: Frame.value_before
        self.loop_vars: set[str] = frame.loop_vars
        self.syncs: dict[str, list[ast.AST]] = {}
        for node in frame.nodes:
            if isinstance(node, ast.Call) and last_name(node) in _SYNCING:
                qual = ctx.call_qualname(node) or dotted(node.func) or ""
                if "." in qual:
                    # The tensor (or object list) passed by name holds the same value on
                    # every rank afterwards; a name inside a list display does not change.
                    for a in (*node.args, *(k.value for k in node.keywords)):
                        if isinstance(a, ast.Name):
                            self.syncs.setdefault(a.id, []).append(node)


def uniformity(ctx: ChunkContext) -> ChunkUniformity:
    """The rank uniformity of ``ctx``'s chunk, built once per context."""
    return ctx.memo(("uniformity",), lambda: ChunkUniformity(ctx))


def document_uniformity(
    doc: Document, settings: Settings | None = None, project: ModuleProjectFacts | None = None
) -> Iterator[tuple[int, ChunkUniformity]]:
    """``(first line, analysis)`` for each parsed chunk of ``doc`` (see the module docstring)."""
    from ddp_lsp.core.rule import ChunkContext
    from ddp_lsp.core.settings import Settings as _Settings

    settings = settings or _Settings()
    ranks = settings.rank_model
    doc.reconfigure(ranks)
    facts = doc.module_facts(settings.assume_distributed, project)
    if not facts.distributed:
        return
    model = ranks.with_extra(facts.rank_vars, facts.rank_predicates)
    for start, chunk in doc.chunks():
        if chunk.tree is None:
            continue
        yield start, uniformity(ChunkContext(chunk, facts, settings, model))
