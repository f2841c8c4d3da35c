"""The rank view: which ranks run each line, shown where people read code.

Four front ends over one per-chunk answer (:class:`ChunkView`):

- ``textDocument/inlayHint``: a hint at the start of each block that runs on a subset of the
  ranks (``rank 0``, ``local rank 0``, ``ranks ≠ 0``, ``ranks where <condition>``) and on each
  collective (``all ranks``; ``⚠ ...`` when some path skips it, which is exactly when DDP103
  reports it). Code that every rank runs gets no hint. The editor setting
  ``rankView.hints`` is ``"all"`` (the default), ``"collectives"`` or ``"off"``.
- hover on a collective or a rank guard: the divergence points that decide which ranks reach
  it (file:line with the condition, other files through the project index); on a call: which
  ranks call the function from here and from its other callers.
- the command ``ddp-lsp.showRankPaths`` ``[uri, {line, character}]``: the locations that make
  that line rank-dependent (VS Code shows them in a peek view).
- ``textDocument/semanticTokens/full`` (and ``/range``): a ``rankCode`` token over the code of
  each rank-dependent line with the modifier ``rankDependent`` (plus ``rankZero`` where only
  rank 0 runs it), for themes that tint rank-0 code. Off unless ``rankView.semanticTokens`` is
  true: VS Code uses a single semantic-token provider per document, and Pylance's must win.

Per chunk, the answer is computed once and cached with the chunk (a chunk's parse lives as long
as its text is unchanged): after an edit, a request for the visible range computes the chunks
it overlaps and nothing else. A cached answer stays valid across edits elsewhere unless one of
the module facts it read changed (the engine's red-green check, over the same recorded reads).

Where the answer comes from is :func:`core_statements`, the only function here that asks the
analysis core; everything else is presentation.
"""

from __future__ import annotations

import ast
import asyncio
import bisect
import logging
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from lsprotocol import types as T

from ddp_lsp.core.types import Pos
from ddp_lsp.lsp.registration import Command, Feature, Handler

if TYPE_CHECKING:
    from ddp_lsp.core.document import Document, ParsedChunk
    from ddp_lsp.core.env import Environment
    from ddp_lsp.core.facts import Entry, ModuleFacts
    from ddp_lsp.core.rule import ChunkContext
    from ddp_lsp.core.settings import Settings
    from ddp_lsp.core.uniformity import ChunkUniformity, Divergence, RankSet
    from ddp_lsp.lsp.convert import Codec
    from ddp_lsp.lsp.server import DdpLanguageServer
    from ddp_lsp.lsp.state import ServerState, Unit

log = logging.getLogger("ddp_lsp.rankview")

CMD_SHOW_RANK_PATHS = "ddp-lsp.showRankPaths"
HINTS_ALL = "all"
HINTS_COLLECTIVES = "collectives"
HINTS_OFF = "off"
HINT_MODES = (HINTS_ALL, HINTS_COLLECTIVES, HINTS_OFF)
WARN = "⚠"
TOKEN_TYPES = ["rankCode"]
TOKEN_MODIFIERS = ["rankDependent", "rankZero"]
LEGEND = T.SemanticTokensLegend(token_types=TOKEN_TYPES, token_modifiers=TOKEN_MODIFIERS)
_MOD_DEPENDENT = 1
_MOD_ZERO = 2


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
        start = ctx.pos(s.lineno, s.col_offset)
        stmts.append(
            Stmt(start.line, start.col, _header_last(ctx, s), _ranks(ctx, sr.ranks, sr.divergences))
        )
    collectives: list[Collective] = []
    for reach in u.collectives():
        call = reach.call
        sp = ctx.span(call)
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
    exit_text = short(ctx.segment(d.node), 30)
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
    from ddp_lsp.core import facts as K
    from ddp_lsp.core.names import dotted

    name = dotted(node.func)
    if name is None:
        return None
    qual = name if name in ctx.facts.func_params else None
    if qual is None and isinstance(node.func, ast.Attribute) and name.startswith("self."):
        _, cls = ctx.scope(node)
        if cls is not None and f"{cls}.{node.func.attr}" in ctx.facts.func_params:
            qual = f"{cls}.{node.func.attr}"
    guarded = qual is not None and K.ONLY_CALLED_GUARDED in ctx.facts.props(qual)
    sp = ctx.span(node)
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
        return ctx.rel_line(head.end_lineno or head.lineno)
    if isinstance(s, (ast.With, ast.AsyncWith)) and s.items:
        last = s.items[-1].context_expr
        return ctx.rel_line(last.end_lineno or last.lineno)
    if isinstance(s, (ast.Try, *_TRY_STAR, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return ctx.rel_line(s.lineno)
    return ctx.rel_line(s.end_lineno or s.lineno)


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


# -- LSP front ends --------------------------------------------------------------------------


def _unit_analysis(state: ServerState, unit: Unit, pending_ok: bool = True) -> Analysis | None:
    from ddp_lsp.core.document import Document

    if not unit.enabled or not isinstance(unit.doc, Document):
        return None
    # While the analysis of the newest text is pending (``unit.dirty``), do not merge the
    # module facts here: the analysis is about to, and the hints must not wait for it.
    return analysis_for(
        unit.doc, unit.settings, unit.env, unit.project, pending=unit.dirty and pending_ok
    )


def hint_mode(state: ServerState, uri: str) -> str:
    return state.config.editor_for(uri).options.rank_hints


def hints_in_range(
    an: Analysis, codec: Codec, first: int, last: int, mode: str = HINTS_ALL, offset: int = 0
) -> list[T.InlayHint]:
    """The inlay hints of document lines ``first..last``, positions in ``codec``'s encoding
    and relative to a view starting at document line ``offset``."""
    lines = an.doc.lines
    out: list[T.InlayHint] = []
    for start, chunk in chunks_in(an.doc, first, last):
        for line, col, label, tooltip, coll in an.view(chunk).hints:
            if mode == HINTS_COLLECTIVES and not coll:
                continue
            dl = start + line
            if dl < first or dl > last or dl >= len(lines):
                continue
            vline, vchar = codec.to_lsp(lines, Pos(dl, col))
            out.append(
                T.InlayHint(
                    position=T.Position(line=vline - offset, character=vchar),
                    label=label,
                    padding_right=True,
                    tooltip=T.MarkupContent(kind=T.MarkupKind.Markdown, value=tooltip),
                )
            )
    return out


def _doc_lines_hit(an: Analysis, line: int) -> tuple[int, ChunkView] | None:
    for start, chunk in chunks_in(an.doc, line, line):
        return start, an.view(chunk)
    return None


def _stmt_at(view: ChunkView, rel: int) -> Stmt | None:
    best: Stmt | None = None
    for s in view.stmts:
        if s.line <= rel <= s.last_line and (
            best is None or (s.line, s.col) >= (best.line, best.col)
        ):
            best = s
    return best


def _inside(line: int, col: int, l0: int, c0: int, l1: int, c1: int) -> bool:
    return (l0, c0) <= (line, col) <= (l1, c1)


def hover(state: ServerState, unit: Unit, pos: Pos) -> str | None:
    """Markdown for a collective, a rank guard or a call under ``pos`` (unit coordinates)."""
    an = _unit_analysis(state, unit)
    if an is None:
        return None
    hit = _doc_lines_hit(an, pos.line)
    if hit is None:
        return None
    start, view = hit
    rel = Pos(pos.line - start, pos.col)
    path = unit.path.name if unit.path is not None else None
    for c in view.collectives:
        if _inside(rel.line, rel.col, c.line, c.col, c.end_line, c.end_col):
            return _collective_hover(c, start, path)
    for s in view.stmts:
        if s.line == rel.line:
            here = [
                p
                for p in view_guard_points(view, s)
                if _inside(rel.line, rel.col, p.line, p.col, p.end_line, p.end_col)
            ]
            if here:
                return _guard_hover(view, start, here, path)
    best: CallSite | None = None
    for cs in view.calls:
        if _inside(rel.line, rel.col, cs.line, cs.col, cs.end_line, cs.end_col):
            best = cs  # the innermost call: the last one that starts before
    if best is not None:
        return _call_hover(an, best, start, path)
    return None


def view_guard_points(view: ChunkView, s: Stmt) -> list[Point]:
    """The rank conditions written on the header of ``s`` (an `if` that splits the ranks)."""
    out: list[Point] = []
    for other in view.stmts:
        for p in other.ranks.points:
            if p.path is None and p.line == s.line and p not in out:
                out.append(p)
    return out


def _points_md(points: Sequence[Point], start: int, path: str | None) -> list[str]:
    return [f"- {point_text(p.placed(start), path)}" for p in points]


def _collective_hover(c: Collective, start: int, path: str | None) -> str:
    head = f"**ddp-lsp rank view** · `{c.display}` · {collective_label(c)}"
    lines = [head, ""]
    if c.skipped:
        lines.append(f"Some path skips this collective: {c.why}.")
        pts = _merge_points(c.skip_points, c.ranks.points)
    else:
        lines.append(f"Reached by {c.ranks.describe()}.")
        if not c.ranks.everyone:
            lines.append("The other ranks make the same collective on their own path.")
        pts = c.ranks.points
    if pts:
        lines += ["", "Divergence points that decide which ranks reach it:"]
        lines += _points_md(pts, start, path)
    else:
        lines += ["", "No rank-dependent branch or exit decides whether it runs."]
    return "\n".join(lines)


def _guard_hover(view: ChunkView, start: int, here: Sequence[Point], path: str | None) -> str:
    """A rank condition or early exit: where each side goes, and the collectives it decides."""
    where = _fields(here[0])
    pts = [
        p for st in view.stmts for p in st.ranks.points if p.path is None and _fields(p) == where
    ]
    lines = [f"**ddp-lsp rank view** · {point_text(here[0].placed(start), path)}", ""]
    sides = list(dict.fromkeys(p.text for p in pts))
    if len(sides) > 1:
        lines += ["Where the ranks go:"] + [f"- {t}" for t in sides] + [""]
    branches = list(
        dict.fromkeys(
            st.ranks.describe()
            for st in view.stmts
            if any(_fields(p) == where for p in st.ranks.points if p.path is None)
        )
    )
    if branches:
        lines.append("Code it decides runs on: " + "; ".join(branches) + ".")
    colls = [
        c
        for c in view.collectives
        if any(_fields(p) == where for p in (*c.ranks.points, *c.skip_points) if p.path is None)
    ]
    if colls:
        lines += ["", "Collectives it decides:"]
        for c in colls:
            lines.append(f"- line {c.line + start + 1}: `{c.display}` · {collective_label(c)}")
    return "\n".join(lines)


def _call_hover(an: Analysis, cs: CallSite, start: int, path: str | None) -> str | None:
    """Which ranks make this call, and which make the function's other calls in the file.
    Quiet (None) when every rank makes every one of them, as the hints are."""
    others: list[str] = []
    rank_dependent = not cs.ranks.everyone or cs.only_called_guarded
    if cs.local:
        for cstart, chunk in an.doc.chunks():
            for other in an.view(chunk).calls:
                if other.callee != cs.callee or (
                    cstart + other.line == start + cs.line and other.col == cs.col
                ):
                    continue
                rank_dependent |= not other.ranks.everyone
                others.append(f"- line {cstart + other.line + 1}: {other.ranks.describe()}")
    if not rank_dependent:
        return None
    lines = [f"**ddp-lsp rank view** · `{cs.callee}()` is called here on {cs.ranks.describe()}"]
    if cs.ranks.points:
        lines += ["", "Decided by:"] + _points_md(cs.ranks.points, start, path)
    if others:
        lines += ["", "Its other callers in this file:"] + others[:20]
        if len(others) > 20:
            lines.append(f"- … and {len(others) - 20} more")
    if cs.only_called_guarded:
        lines += [
            "",
            "Every caller in the project calls it under a rank-0 guard (project index).",
        ]
    return "\n".join(lines)


def rank_paths(
    state: ServerState, unit: Unit, uri: str, offset: int, line: int
) -> list[T.Location]:
    """The locations that make view line ``line`` rank-dependent (empty: every rank runs it)."""
    an = _unit_analysis(state, unit)
    if an is None:
        return []
    dl = line + offset
    hit = _doc_lines_hit(an, dl)
    if hit is None:
        return []
    start, view = hit
    rel = dl - start
    points: list[Point] = []
    for c in view.collectives:
        if c.line <= rel <= c.end_line and c.skipped:
            points = list(_merge_points(points, c.skip_points))
    s = _stmt_at(view, rel)
    if s is not None:
        points = list(_merge_points(points, s.ranks.points))
    lines = unit.doc.lines
    out: list[T.Location] = []
    seen: set[tuple[object, ...]] = set()
    for p in points:
        where = (p.path, p.other_line) if p.path is not None else _fields(p)
        if where in seen:  # DDP103's "rank condition" and the guard itself: one place
            continue
        seen.add(where)
        if p.path is not None:
            from pathlib import Path

            at = T.Position(line=max(p.other_line - 1, 0), character=0)
            out.append(T.Location(uri=Path(p.path).as_uri(), range=T.Range(start=at, end=at)))
            continue
        placed = p.placed(start)
        vuri, voff = unit.locate_line(placed.line)
        if unit.notebook is None:
            vuri, voff = uri, 0
        rng = state.codec.range_dict(
            lines, Pos(placed.line, placed.col), Pos(placed.end_line, placed.end_col)
        )
        out.append(
            T.Location(
                uri=vuri,
                range=T.Range(
                    start=T.Position(
                        line=rng["start"]["line"] - voff, character=rng["start"]["character"]
                    ),
                    end=T.Position(
                        line=rng["end"]["line"] - voff, character=rng["end"]["character"]
                    ),
                ),
            )
        )
    return out


def semantic_tokens(
    state: ServerState, unit: Unit, offset: int, first: int, last: int
) -> list[int]:
    """Encoded tokens (LSP relative form) over the view lines ``first..last``."""
    an = _unit_analysis(state, unit)
    if an is None:
        return []
    lines = unit.doc.lines
    codec = state.codec
    per_line: dict[int, int] = {}
    for start, chunk in chunks_in(an.doc, first + offset, last + offset):
        for s in an.view(chunk).stmts:
            if s.ranks.everyone:
                continue
            mods = _MOD_DEPENDENT | (_MOD_ZERO if s.ranks.only_zero else 0)
            for rel in range(s.line, s.last_line + 1):
                per_line[start + rel] = mods
    data: list[int] = []
    prev_line = 0
    for dl in sorted(per_line):
        if dl < first + offset or dl > last + offset or dl >= len(lines):
            continue
        text = lines[dl].rstrip("\r\n")
        body = text.lstrip()
        if not body or body.startswith("#"):
            continue
        c0 = len(text) - len(body)
        _, s0 = codec.to_lsp(lines, Pos(dl, c0))
        _, s1 = codec.to_lsp(lines, Pos(dl, len(text.rstrip())))
        vline = dl - offset
        delta_line = vline - prev_line
        data += [delta_line, s0, s1 - s0, 0, per_line[dl]]  # one token per line: s0 absolute
        prev_line = vline
    return data


# -- registration (called from server.build_server) --------------------------------------------


def inlay_hint(ls: DdpLanguageServer, params: T.InlayHintParams) -> list[T.InlayHint] | None:
    return inlay_hint_request(ls, params)


def tokens_full(ls: DdpLanguageServer, params: T.SemanticTokensParams) -> T.SemanticTokens | None:
    return _tokens(ls.state, params.text_document.uri, None)


def tokens_range(
    ls: DdpLanguageServer, params: T.SemanticTokensRangeParams
) -> T.SemanticTokens | None:
    return _tokens(ls.state, params.text_document.uri, params.range)


def _tokens(state: ServerState, uri: str, rng: T.Range | None) -> T.SemanticTokens | None:
    found = state.lookup(uri)
    if found is None:
        return None
    unit, offset = found
    if not state.config.editor_for(unit.key).options.rank_tokens:
        return None  # another provider's tokens (Pylance's) win
    first, last = view_lines(unit, uri, offset, rng)
    return T.SemanticTokens(data=semantic_tokens(state, unit, offset, first - offset, last - offset))


def show_rank_paths(ls: Any, *args: Any) -> list[T.Location]:
    # `ls: Any`: pygls reads a command handler's annotations at run time (no TYPE_CHECKING names).
    from pygls.exceptions import JsonRpcInvalidParams

    state = ls.state
    if (
        len(args) != 2
        or not isinstance(args[0], str)
        or not isinstance(args[1], dict)
        or not isinstance(args[1].get("line"), int)
    ):
        raise JsonRpcInvalidParams(
            f'{CMD_SHOW_RANK_PATHS} takes [uri, {{"line": N, "character": N}}]; '
            f"got {list(args)!r}"
        )
    found = state.lookup(args[0])
    if found is None:
        raise JsonRpcInvalidParams(f"{CMD_SHOW_RANK_PATHS}: {args[0]!r} is not an open document")
    unit, offset = found
    return rank_paths(state, unit, args[0], offset, int(args[1]["line"]))


# The rank view's rows of the server's handler table (lsp/registration.py).
HANDLERS: tuple[Handler, ...] = (
    Feature(T.TEXT_DOCUMENT_INLAY_HINT, inlay_hint, T.InlayHintOptions(resolve_provider=False)),
    Feature(T.TEXT_DOCUMENT_SEMANTIC_TOKENS_FULL, tokens_full, LEGEND),
    Feature(T.TEXT_DOCUMENT_SEMANTIC_TOKENS_RANGE, tokens_range, LEGEND),
    Command(CMD_SHOW_RANK_PATHS, show_rank_paths),
)


def inlay_hint_request(server: Any, params: T.InlayHintParams) -> list[T.InlayHint] | None:
    """``textDocument/inlayHint``: the hints of the requested range."""
    state: ServerState = server.state
    found = state.lookup(params.text_document.uri)
    if found is None:
        return None
    unit, offset = found
    mode = hint_mode(state, unit.key)
    # The last analysis's facts only where the client can be told to ask again.
    an = (
        _unit_analysis(state, unit, _can_refresh(server, "inlay_hint"))
        if mode != HINTS_OFF
        else None
    )
    if an is None:
        return []
    if an.pending:
        _catch_up(server, state, unit, an.facts)
    first, last = view_lines(unit, params.text_document.uri, offset, params.range)
    return hints_in_range(an, state.codec, first, last, mode, offset)


def view_lines(unit: Unit, uri: str, offset: int, rng: T.Range | None) -> tuple[int, int]:
    """The unit lines of the view ``uri`` that ``rng`` (None: all of it) covers: a notebook
    cell's request never reaches into the next cell."""
    end = len(unit.doc.lines) - 1
    if unit.notebook is not None:
        view = unit.notebook.view_of(uri)
        if view is not None:
            end = view.start + max(view.count - 1, 0)
    if rng is None:
        return offset, end
    return rng.start.line + offset, min(rng.end.line + offset, end)


def _catch_up(server: Any, state: ServerState, unit: Unit, used: ModuleFacts) -> None:
    """Hints were computed with the last analysis's module facts while the analysis of the
    newest text was pending: once it has run (it was scheduled first, so it runs before this
    callback), ask the client again if the facts changed (a new import, a new rank flag)."""

    def check() -> None:
        if unit.dirty or state.units.get(unit.key) is not unit:
            return  # another edit: its own request will follow
        an = _unit_analysis(state, unit)
        if an is not None and an.facts is not used:
            refresh(server)

    try:
        asyncio.get_running_loop().call_soon(check)
    except RuntimeError:  # no loop (tests driving the handlers directly)
        pass


def _can_refresh(server: Any, what: str) -> bool:
    """The client supports ``workspace/<what>/refresh`` (``inlay_hint``, ``semantic_tokens``)."""
    caps = getattr(server, "client_capabilities", None)
    ws = getattr(caps, "workspace", None) if caps is not None else None
    feature = getattr(ws, what, None) if ws is not None else None
    return bool(feature is not None and feature.refresh_support)


def refresh(server: Any) -> None:
    """Ask the client to re-request hints and tokens (the settings changed)."""
    try:
        if _can_refresh(server, "inlay_hint"):
            server.workspace_inlay_hint_refresh(None)
        if _can_refresh(server, "semantic_tokens"):
            server.workspace_semantic_tokens_refresh(None)
    except Exception as exc:  # a refresh is a courtesy; never fail the settings change
        log.info("inlay hint refresh failed: %s", exc)
