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

The answer itself, its hints and the per-chunk cache are :mod:`ddp_lsp.lsp.rankanswer`
(pure: where the answer comes from is its :func:`~ddp_lsp.lsp.rankanswer.core_statements`, the
only function that asks the analysis core); this module is the LSP front ends over it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from lsprotocol import types as lsp

from ddp_lsp.core.types import Pos
from ddp_lsp.lsp.registration import Command, Feature, Handler

if TYPE_CHECKING:
    from ddp_lsp.core.facts import ModuleFacts
    from ddp_lsp.lsp.convert import Codec
    from ddp_lsp.lsp.rankanswer import WARN as WARN
    from ddp_lsp.lsp.rankanswer import (
        Analysis,
        CallSite,
        ChunkView,
        Collective,
        Point,
        Stmt,
    )
    from ddp_lsp.lsp.rankanswer import analysis_for as analysis_for
    from ddp_lsp.lsp.rankanswer import chunks_in as chunks_in
    from ddp_lsp.lsp.server import DdpLanguageServer
    from ddp_lsp.lsp.state import ServerState, Unit

log = logging.getLogger("ddp_lsp.rankview")

# The answer (rankanswer.py, 8 dataclasses) is imported by the first request that needs it,
# not when the server starts: `initialize` is answered before anything asks for a rank view.
_REEXPORTED = ("WARN", "ChunkView", "analysis_for", "chunks_in")


if not TYPE_CHECKING:  # (mypy reads the imports above, and still catches a misspelt name)

    def __getattr__(name: str) -> Any:
        if name not in _REEXPORTED:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        from ddp_lsp.lsp import rankanswer

        return getattr(rankanswer, name)


CMD_SHOW_RANK_PATHS = "ddp-lsp.showRankPaths"
HINTS_ALL = "all"
HINTS_COLLECTIVES = "collectives"
HINTS_OFF = "off"
HINT_MODES = (HINTS_ALL, HINTS_COLLECTIVES, HINTS_OFF)
TOKEN_TYPES = ["rankCode"]
TOKEN_MODIFIERS = ["rankDependent", "rankZero"]
LEGEND = lsp.SemanticTokensLegend(token_types=TOKEN_TYPES, token_modifiers=TOKEN_MODIFIERS)
_MOD_DEPENDENT = 1
_MOD_ZERO = 2


# -- LSP front ends --------------------------------------------------------------------------


def _unit_analysis(state: ServerState, unit: Unit, pending_ok: bool = True) -> Analysis | None:
    from ddp_lsp.core.document import Document
    from ddp_lsp.lsp.rankanswer import analysis_for

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
) -> list[lsp.InlayHint]:
    """The inlay hints of document lines ``first..last``, positions in ``codec``'s encoding
    and relative to a view starting at document line ``offset``."""
    from ddp_lsp.lsp.rankanswer import chunks_in

    lines = an.doc.lines
    out: list[lsp.InlayHint] = []
    for start, chunk in chunks_in(an.doc, first, last):
        for line, col, label, tooltip, coll in an.view(chunk).hints:
            if mode == HINTS_COLLECTIVES and not coll:
                continue
            dl = start + line
            if dl < first or dl > last or dl >= len(lines):
                continue
            vline, vchar = codec.to_lsp(lines, Pos(dl, col))
            out.append(
                lsp.InlayHint(
                    position=lsp.Position(line=vline - offset, character=vchar),
                    label=label,
                    padding_right=True,
                    tooltip=lsp.MarkupContent(kind=lsp.MarkupKind.Markdown, value=tooltip),
                )
            )
    return out


def _doc_lines_hit(an: Analysis, line: int) -> tuple[int, ChunkView] | None:
    from ddp_lsp.lsp.rankanswer import chunks_in

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
    from ddp_lsp.lsp.rankanswer import point_text

    return [f"- {point_text(p.placed(start), path)}" for p in points]


def _collective_hover(c: Collective, start: int, path: str | None) -> str:
    from ddp_lsp.lsp.rankanswer import _merge_points, collective_label

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
    from ddp_lsp.lsp.rankanswer import _fields, collective_label, point_text

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
) -> list[lsp.Location]:
    """The locations that make view line ``line`` rank-dependent (empty: every rank runs it)."""
    from ddp_lsp.lsp.rankanswer import _fields, _merge_points

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
    out: list[lsp.Location] = []
    seen: set[tuple[object, ...]] = set()
    for p in points:
        where = (p.path, p.other_line) if p.path is not None else _fields(p)
        if where in seen:  # DDP103's "rank condition" and the guard itself: one place
            continue
        seen.add(where)
        if p.path is not None:
            from pathlib import Path

            at = lsp.Position(line=max(p.other_line - 1, 0), character=0)
            out.append(lsp.Location(uri=Path(p.path).as_uri(), range=lsp.Range(start=at, end=at)))
            continue
        placed = p.placed(start)
        vuri, voff = unit.locate_line(placed.line)
        if unit.notebook is None:
            vuri, voff = uri, 0
        rng = state.codec.range_dict(
            lines, Pos(placed.line, placed.col), Pos(placed.end_line, placed.end_col)
        )
        out.append(
            lsp.Location(
                uri=vuri,
                range=lsp.Range(
                    start=lsp.Position(
                        line=rng["start"]["line"] - voff, character=rng["start"]["character"]
                    ),
                    end=lsp.Position(
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
    from ddp_lsp.lsp.rankanswer import chunks_in

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


def inlay_hint(ls: DdpLanguageServer, params: lsp.InlayHintParams) -> list[lsp.InlayHint] | None:
    return inlay_hint_request(ls, params)


def tokens_full(
    ls: DdpLanguageServer, params: lsp.SemanticTokensParams
) -> lsp.SemanticTokens | None:
    return _tokens(ls.state, params.text_document.uri, None)


def tokens_range(
    ls: DdpLanguageServer, params: lsp.SemanticTokensRangeParams
) -> lsp.SemanticTokens | None:
    return _tokens(ls.state, params.text_document.uri, params.range)


def _tokens(state: ServerState, uri: str, rng: lsp.Range | None) -> lsp.SemanticTokens | None:
    found = state.lookup(uri)
    if found is None:
        return None
    unit, offset = found
    if not state.config.editor_for(unit.key).options.rank_tokens:
        return None  # another provider's tokens (Pylance's) win
    first, last = view_lines(unit, uri, offset, rng)
    return lsp.SemanticTokens(
        data=semantic_tokens(state, unit, offset, first - offset, last - offset)
    )


def show_rank_paths(ls: Any, *args: Any) -> list[lsp.Location]:
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
            f'{CMD_SHOW_RANK_PATHS} takes [uri, {{"line": N, "character": N}}]; got {list(args)!r}'
        )
    found = state.lookup(args[0])
    if found is None:
        raise JsonRpcInvalidParams(f"{CMD_SHOW_RANK_PATHS}: {args[0]!r} is not an open document")
    unit, offset = found
    return rank_paths(state, unit, args[0], offset, int(args[1]["line"]))


# The rank view's rows of the server's handler table (lsp/registration.py).
HANDLERS: tuple[Handler, ...] = (
    Feature(lsp.TEXT_DOCUMENT_INLAY_HINT, inlay_hint, lsp.InlayHintOptions(resolve_provider=False)),
    Feature(lsp.TEXT_DOCUMENT_SEMANTIC_TOKENS_FULL, tokens_full, LEGEND),
    Feature(lsp.TEXT_DOCUMENT_SEMANTIC_TOKENS_RANGE, tokens_range, LEGEND),
    Command(CMD_SHOW_RANK_PATHS, show_rank_paths),
)


def inlay_hint_request(server: Any, params: lsp.InlayHintParams) -> list[lsp.InlayHint] | None:
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


def view_lines(unit: Unit, uri: str, offset: int, rng: lsp.Range | None) -> tuple[int, int]:
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
