"""The rank view's answer: which ranks run each line of a chunk, ready to show.

The pure part of the editor's rank view (:mod:`ddp_lsp.lsp.rankview` holds the LSP front
ends): the per-chunk answer (:class:`ChunkView`: statements, collectives, call sites, and the
inlay hints built from them), :func:`core_statements` (the only function that asks the
analysis core), and the per-chunk cache (:class:`Analysis`, :func:`analysis_for`), which keeps
an answer as long as its chunk's text is unchanged and none of the module facts it read
changed (the engine's red-green check, over the same recorded reads).
"""

from __future__ import annotations

import ast
import bisect
import logging
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from ddp_lsp.core import chunktext

if TYPE_CHECKING:
    from ddp_lsp.core.document import Document, ParsedChunk
    from ddp_lsp.core.env import Environment
    from ddp_lsp.core.facts import Entry, ModuleFacts
    from ddp_lsp.core.rule import ChunkContext
    from ddp_lsp.core.settings import Settings
    from ddp_lsp.core.uniformity import ChunkUniformity, Divergence, RankSet

log = logging.getLogger("ddp_lsp.rankview")

WARN = "⚠"


# -- the answer, per chunk (chunk-relative lines, code-point columns) ---------------------------


@dataclass(frozen=True)
class Point:
    """A divergence point: a place that decides which ranks get further."""

    line: int  # chunk-relative (document-relative once placed), 0-based
    col: int
    end_line: int
    end_col: int
    text: str  # "`if rank == 0:`", "`return` under `if rank != 0:`"
    path: str | None = None  # another file (absolute), from the project index
    other_line: int = 0  # 1-based line in that file
    shown: str = ""  # that file as the project index names it (relative to the project root)

    def placed(self, start: int) -> Point:
        if self.path is not None:
            return self
        return Point(self.line + start, self.col, self.end_line + start, self.end_col, self.text)


@dataclass(frozen=True)
class Ranks:
    """Which ranks run a statement, as the rank view shows it: the core's description
    (``RankSet.describe()``) and the divergence points deciding it."""

    text: str = "all ranks"
    everyone: bool = True
    only_zero: bool = False  # global or local rank 0 and no other rank
    points: tuple[Point, ...] = ()

    def describe(self) -> str:
        return self.text

    def same_set(self, other: Ranks) -> bool:
        return self.text == other.text


EVERYONE = Ranks()


def _merge_points(a: Sequence[Point], b: Sequence[Point]) -> tuple[Point, ...]:
    out = list(a)
    for p in b:
        if p not in out:
            out.append(p)
    return tuple(out)


@dataclass(frozen=True)
class Stmt:
    """One statement: the lines it covers itself (a block header only its header), where
    its code starts, and which ranks run it."""

    line: int
    col: int
    last_line: int
    ranks: Ranks
    header_end_col: int = -1  # -1: to the end of the line


@dataclass(frozen=True)
class Collective:
    line: int
    col: int
    end_line: int
    end_col: int
    display: str  # "dist.barrier()"
    ranks: Ranks
    skipped: bool  # some path skips it: DDP103 reports it
    why: str = ""  # DDP103's explanation when skipped
    skip_points: tuple[Point, ...] = ()


@dataclass(frozen=True)
class CallSite:
    line: int
    col: int
    end_line: int
    end_col: int
    callee: str  # the function's qualified name in this module, or the dotted spelling
    local: bool  # defined in this module
    ranks: Ranks
    only_called_guarded: bool = False  # every caller in the project guards it (project index)


@dataclass(frozen=True)
class ChunkView:
    stmts: tuple[Stmt, ...] = ()
    collectives: tuple[Collective, ...] = ()
    calls: tuple[CallSite, ...] = ()
    hints: tuple[tuple[int, int, str, str, bool], ...] = ()  # (line, col, label, tooltip, coll)


EMPTY_VIEW = ChunkView()


# -- the adapter: the one place that asks the core --------------------------------------------


def core_statements(ctx: ChunkContext) -> ChunkView:
    """Per statement of the chunk, the ranks that run it and the divergence points deciding
    it; per collective, whether some path skips it; per call, the ranks that make it.

    All of it is the core's rank-uniformity analysis (:mod:`ddp_lsp.core.uniformity`), the one
    the rules ask: "some path skips this collective" is the path analysis DDP103 reports from
    (:mod:`ddp_lsp.core.rankpaths`), so a hint agrees with DDP103 by construction.
    """
    from ddp_lsp.core.uniformity import uniformity

    u = uniformity(ctx)
    stmts: list[Stmt] = []
    for sr in u.statements():
        s = sr.stmt
        start = chunktext.pos(ctx.chunk, s.lineno, s.col_offset)
        stmts.append(
            Stmt(start.line, start.col, _header_last(ctx, s), _ranks(ctx, sr.ranks, sr.divergences))
        )
    collectives: list[Collective] = []
    for reach in u.collectives():
        call = reach.call
        sp = chunktext.span(ctx.chunk, call)
        ranks = _ranks(ctx, u.ranks_of(call), u.divergences_of(call))
        skip_points: tuple[Point, ...] = ()
        why = ""
        if reach.skipped:
            d = reach.divergence
            if d is not None:
                skip_points = (_point(ctx, d),)
                why = f"some ranks never get here: {_point_text(ctx, d)}"
            else:
                why = "a rank-dependent path reaches it on some ranks only"
            elsewhere = _elsewhere(ctx, call, "collective")
            if elsewhere is not None:
                skip_points += (elsewhere,)
        collectives.append(
            Collective(
                sp.start.line,
                sp.start.col,
                sp.end.line,
                sp.end.col,
                _display(ctx, call, reach.label),
                ranks,
                reach.skipped,
                why,
                skip_points,
            )
        )
    calls: list[CallSite] = []
    for call in ctx.calls():
        site = _call_site(ctx, u, call)
        if site is not None:
            calls.append(site)
    return ChunkView(tuple(stmts), tuple(collectives), tuple(calls))


def _ranks(ctx: ChunkContext, ranks: RankSet, divergences: Sequence[Divergence]) -> Ranks:
    points = tuple(_point(ctx, d) for d in reversed(divergences))  # outermost first
    for d in divergences:
        if d.kind == "branch":
            foreign = _elsewhere_in(ctx, d.node)
            if foreign is not None and foreign not in points:
                points += (foreign,)
    return Ranks(ranks.describe(), ranks.is_all, ranks.zero, points if not ranks.is_all else ())


def _point(ctx: ChunkContext, d: Divergence) -> Point:
    text = _point_text(ctx, d)
    if d.path is not None:
        proj = ctx.facts.project
        line = d.span.start.line + 1
        where = proj.absolute(d.path) if proj is not None else d.path
        return Point(0, 0, 0, 0, text, where, line, d.path)
    sp = d.span
    return Point(sp.start.line, sp.start.col, sp.end.line, sp.end.col, text)


def _point_text(ctx: ChunkContext, d: Divergence) -> str:
    from ddp_lsp.rules._collectives import short

    cond = short(d.condition, 60)
    if d.kind == "branch":
        g = d.guard
        if isinstance(g, ast.If):
            head = f"`if {cond}:`"
        elif isinstance(g, ast.While):
            head = f"`while {cond}:`"
        else:
            head = f"`{cond}`"
        return f"{head} → {d.ranks.describe()}"
    if d.kind == "decorator":
        return f"`@{cond}` runs the function on {d.ranks.describe()} only"
    if d.kind == "call":
        return f"{cond} → {d.ranks.describe()}"
    exit_text = short(chunktext.segment(ctx.chunk, d.node), 30)
    tail = " (an error exit: the launcher ends the job)" if d.fatal else ""
    guard = f" under `if {cond}:`" if cond else ""
    return f"`{exit_text}`{guard} → {d.ranks.describe()} continue{tail}"


def _elsewhere_in(ctx: ChunkContext, test: ast.AST) -> Point | None:
    """A rank predicate of ``test`` defined in another file (project index)."""
    for node in ast.walk(test):
        if isinstance(node, ast.Call):
            found = _elsewhere(ctx, node, "rank_predicate")
            if found is not None:
                return found
    return None


def _elsewhere(ctx: ChunkContext, call: ast.Call, prop: str) -> Point | None:
    src = ctx.callee_source(call, prop)
    proj = ctx.facts.project
    if src is None or proj is None:
        return None
    return Point(0, 0, 0, 0, src.message, proj.absolute(src.path), src.line, src.path)


def _display(ctx: ChunkContext, call: ast.Call, label: str) -> str:
    from ddp_lsp.core.names import dotted

    name = dotted(call.func)
    return f"{name}()" if name else f"{label}()"


def _call_site(ctx: ChunkContext, u: ChunkUniformity, node: ast.Call) -> CallSite | None:
    from ddp_lsp.core import facts as fact_model
    from ddp_lsp.core.names import dotted

    name = dotted(node.func)
    if name is None:
        return None
    qual = name if name in ctx.facts.func_params else None
    if qual is None and isinstance(node.func, ast.Attribute) and name.startswith("self."):
        _, cls = ctx.scope(node)
        if cls is not None and f"{cls}.{node.func.attr}" in ctx.facts.func_params:
            qual = f"{cls}.{node.func.attr}"
    guarded = qual is not None and fact_model.ONLY_CALLED_GUARDED in ctx.facts.props(qual)
    sp = chunktext.span(ctx.chunk, node)
    return CallSite(
        sp.start.line,
        sp.start.col,
        sp.end.line,
        sp.end.col,
        qual or name,
        qual is not None,
        _ranks(ctx, u.ranks_of(node), u.divergences_of(node)),
        guarded,
    )


_TRY_STAR: tuple[type, ...] = (ast.TryStar,) if hasattr(ast, "TryStar") else ()
_HEADS: dict[type, str] = {
    ast.If: "test",
    ast.While: "test",
    ast.For: "iter",
    ast.AsyncFor: "iter",
    ast.Match: "subject",
}


def _header_last(ctx: ChunkContext, s: ast.stmt) -> int:
    """The chunk line where the statement's own code ends: a block statement's header only."""
    attr = _HEADS.get(type(s))
    if attr is not None:
        head = getattr(s, attr)
        return chunktext.rel_line(ctx.chunk, head.end_lineno or head.lineno)
    if isinstance(s, (ast.With, ast.AsyncWith)) and s.items:
        last = s.items[-1].context_expr
        return chunktext.rel_line(ctx.chunk, last.end_lineno or last.lineno)
    if isinstance(s, (ast.Try, *_TRY_STAR, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return chunktext.rel_line(ctx.chunk, s.lineno)
    return chunktext.rel_line(ctx.chunk, s.end_lineno or s.lineno)


def _fields(p: Point) -> tuple[int, int, int, int]:
    return (p.line, p.col, p.end_line, p.end_col)


# -- hints from the answer ----------------------------------------------------------------------


def _tooltip(title: str, points: Sequence[Point], extra: str = "") -> str:
    parts = [title]
    if extra:
        parts.append(extra)
    if points:
        parts.append("Decided by:")
        parts.extend(f"- {point_text(p)}" for p in points)
    return "\n".join(parts)


def point_text(p: Point, uri_path: str | None = None) -> str:
    if p.path is not None:
        return f"{p.shown or p.path}:{p.other_line}: {p.text}"
    where = f"{uri_path}:" if uri_path else "line "
    return f"{where}{p.line + 1}: {p.text}"


def build_hints(view: ChunkView) -> tuple[tuple[int, int, str, str, bool], ...]:
    """(line, column, label, tooltip, is-collective), chunk-relative, in order."""
    out: dict[tuple[int, int], tuple[int, int, str, str, bool]] = {}
    prev: Ranks | None = None
    for s in view.stmts:
        if not s.ranks.everyone and (prev is None or not prev.same_set(s.ranks)):
            label = s.ranks.describe()
            out[(s.line, s.col)] = (
                s.line,
                s.col,
                label,
                _tooltip(f"ddp-lsp: this block runs on {label}.", s.ranks.points),
                False,
            )
        prev = s.ranks
    for c in view.collectives:
        label = collective_label(c)
        if c.skipped:
            title = f"ddp-lsp: some path skips {c.display}: {c.why}"
        else:
            title = f"ddp-lsp: {c.display} is reached by {c.ranks.describe()}"
            if not c.ranks.everyone:
                title += " (the other ranks make the same collective on their own path)"
        points = c.skip_points if c.skipped else c.ranks.points
        # A collective at the start of its statement replaces the block hint there.
        out[(c.line, c.col)] = (c.line, c.col, label, _tooltip(title + ".", points), True)
        stmt_key = _stmt_start_for(view, c.line, c.col)
        if stmt_key is not None and stmt_key in out and not out[stmt_key][4]:
            if stmt_key[0] == c.line:
                del out[stmt_key]
    return tuple(out[k] for k in sorted(out))


def _stmt_start_for(view: ChunkView, line: int, col: int) -> tuple[int, int] | None:
    best: tuple[int, int] | None = None
    for s in view.stmts:
        if (s.line, s.col) <= (line, col) and line <= s.last_line:
            best = (s.line, s.col)
    return best


def collective_label(c: Collective) -> str:
    if c.skipped:
        return (
            f"{WARN} skipped on some path" if c.ranks.everyone else f"{WARN} {c.ranks.describe()}"
        )
    return c.ranks.describe()


# -- the per-chunk cache ----------------------------------------------------------------------


@dataclass
class _Cached:
    key: tuple[object, ...]
    facts: ModuleFacts
    reads: frozenset[Entry]
    view: ChunkView


# Lives and dies with the parsed chunk (shared by every document holding the same text).
_CACHE: weakref.WeakKeyDictionary[ParsedChunk, _Cached] = weakref.WeakKeyDictionary()


@dataclass
class Analysis:
    """What one request needs to compute chunk views: the module facts and settings."""

    doc: Document
    facts: ModuleFacts
    settings: Settings
    env: Environment | None
    key: tuple[object, ...]
    changes: dict[int, tuple[ModuleFacts, frozenset[Entry]]] = field(default_factory=dict)
    computed: int = 0  # chunks computed (not from the cache) by this request
    pending: bool = False  # the facts of the last analysis, the newest text's not merged yet

    def view(self, chunk: ParsedChunk) -> ChunkView:
        if chunk.tree is None or not self.facts.distributed:
            return EMPTY_VIEW
        cached = _CACHE.get(chunk)
        if cached is not None and cached.key == self.key:
            if cached.facts is self.facts:
                return cached.view
            from ddp_lsp.core.facts import changed_entries

            memo = self.changes.get(id(cached.facts))
            if memo is None or memo[0] is not cached.facts:
                memo = self.changes[id(cached.facts)] = (
                    cached.facts,
                    changed_entries(cached.facts, self.facts),
                )
            if cached.reads.isdisjoint(memo[1]):
                cached.facts = self.facts
                return cached.view
        from ddp_lsp.core.facts import FactsView, recording_ranks
        from ddp_lsp.core.rule import ChunkContext

        view_facts = FactsView(self.facts)
        ranks = self.settings.rank_model.with_extra(
            self.facts.rank_vars, self.facts.rank_predicates
        )
        ctx = ChunkContext(
            chunk,
            cast("ModuleFacts", view_facts),
            self.settings,
            recording_ranks(ranks, view_facts.reads),
            self.env,
        )
        try:
            view = core_statements(ctx)
        except Exception:  # the rank view of one chunk must never take the server down
            log.exception("rank view of a chunk failed")
            view = EMPTY_VIEW
        if chunk.repaired:
            # A half-typed statement was repaired to parse: say nothing about its lines.
            view = _without_lines(view, chunk.repaired)
        view = ChunkView(view.stmts, view.collectives, view.calls, build_hints(view))
        _CACHE[chunk] = _Cached(self.key, self.facts, frozenset(view_facts.reads), view)
        self.computed += 1
        return view


def _without_lines(view: ChunkView, lines: frozenset[int]) -> ChunkView:
    return ChunkView(
        tuple(s for s in view.stmts if s.line not in lines),
        tuple(c for c in view.collectives if c.line not in lines),
        tuple(c for c in view.calls if c.line not in lines),
    )


# The module facts each document's rank view last used, with what they were merged under.
_LAST_FACTS: weakref.WeakKeyDictionary[Document, tuple[ModuleFacts, bool, object]] = (
    weakref.WeakKeyDictionary()
)


def analysis_for(
    doc: Document,
    settings: Settings,
    env: Environment | None,
    project: Any = None,
    pending: bool = False,
) -> Analysis:
    """What a request needs to compute chunk views of ``doc``.

    ``pending``: an analysis of the document's newest text is scheduled and will merge its
    module facts; until it has, use the facts this document's view last used instead of
    merging them here (a merge costs tens of milliseconds at 20,000 lines). The chunks an edit
    changed are computed against those facts; a view whose fact reads the merge then changes
    is recomputed by the next request (the red-green check in :meth:`Analysis.view`).
    """
    if pending:
        last = _LAST_FACTS.get(doc)
        if last is not None and last[1] == settings.assume_distributed and last[2] == project:
            return Analysis(doc, last[0], settings, env, (settings, env), pending=True)
    facts = doc.module_facts(settings.assume_distributed, project)
    _LAST_FACTS[doc] = (facts, settings.assume_distributed, project)
    return Analysis(doc, facts, settings, env, (settings, env))


def chunks_in(doc: Document, first: int, last: int) -> list[tuple[int, ParsedChunk]]:
    """The chunks overlapping lines ``first..last`` (document lines, inclusive)."""
    chunks = doc.chunks()
    # The last chunk starting at or before ``first``, then on while they start by ``last``.
    i = max(bisect.bisect_right(chunks, first, key=lambda c: c[0]) - 1, 0)
    out: list[tuple[int, ParsedChunk]] = []
    while i < len(chunks) and chunks[i][0] <= last:
        out.append(chunks[i])
        i += 1
    return out
