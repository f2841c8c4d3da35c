"""Code actions, built from the findings' own fixes (no re-analysis).

For every finding in the requested range: one quick fix per fix it carries (``isPreferred`` on
its preferred fix when that fix is safe), and "Ignore DDPxxx on this line", which adds the id to the line's
``# ddp-lsp: ignore[...]`` comment or starts one. ``source.fixAll.ddp-lsp`` applies every safe
fix of the document at once (overlapping ones are left for the next round, as ``ddp-lsp fix``
does). Edits are computed eagerly: they are already in the findings, so there is nothing to
gain from ``codeAction/resolve``.

Edits are sent as ``documentChanges`` with the document version when the client supports it,
so a client that has moved on rejects them instead of applying them to the wrong text.
"""

from __future__ import annotations

import io
import tokenize
from collections.abc import Iterable, Sequence

from lsprotocol import types as lsp

from ddp_lsp.core.fixes import select_non_overlapping
from ddp_lsp.core.registry import SYNTAX_ERROR
from ddp_lsp.core.suppress import add_suppression
from ddp_lsp.core.types import Edit, Finding, Fix, Pos, Span
from ddp_lsp.lsp.diagnostics import SOURCE, as_lsp
from ddp_lsp.lsp.state import ServerState, Unit

FIX_ALL_KIND = "source.fixAll.ddp-lsp"


def _wants(only: Sequence[str] | None, kind: str) -> bool:
    if not only:
        return True
    return any(kind == o or kind.startswith(o + ".") for o in only)


def _overlaps(span: Span, a: Pos, b: Pos) -> bool:
    return span.start <= b and a <= span.end


class _EditBuilder:
    """Maps unit edits to (view URI, TextEdit) and wraps them in a WorkspaceEdit."""

    def __init__(self, state: ServerState, unit: Unit) -> None:
        self.state = state
        self.unit = unit
        self.lines = unit.doc.lines
        self.versions = {uri: v for uri, _, v in unit.views()}

    def text_edit(self, edit: Edit) -> tuple[str, lsp.TextEdit] | None:
        uri, offset = self.unit.locate_line(edit.span.start.line)
        end_uri, _ = self.unit.locate_line(max(edit.span.end.line - (edit.span.end.col == 0), 0))
        if end_uri != uri and edit.span.end.line != edit.span.start.line:
            return None  # would cross notebook cells
        codec = self.state.codec
        sl, sc = codec.to_lsp(self.lines, edit.span.start)
        el, ec = codec.to_lsp(self.lines, edit.span.end)
        if edit.span.end.line >= len(self.lines):
            el, ec = len(self.lines) - 1, codec.to_lsp_col(self.lines[-1], len(self.lines[-1]))
        rng = lsp.Range(lsp.Position(sl - offset, sc), lsp.Position(el - offset, ec))
        return uri, lsp.TextEdit(range=rng, new_text=edit.text)

    def workspace_edit(self, edits: Iterable[Edit]) -> lsp.WorkspaceEdit | None:
        grouped: dict[str, list[lsp.TextEdit]] = {}
        seen: set[Edit] = set()
        for e in edits:
            if e in seen:  # two fixes needing the same import add it once
                continue
            seen.add(e)
            mapped = self.text_edit(e)
            if mapped is None:
                return None
            grouped.setdefault(mapped[0], []).append(mapped[1])
        if not grouped:
            return None
        if self.state.supports_document_changes:
            return lsp.WorkspaceEdit(
                document_changes=[
                    lsp.TextDocumentEdit(
                        text_document=lsp.OptionalVersionedTextDocumentIdentifier(
                            uri=uri, version=self.versions.get(uri)
                        ),
                        edits=list(tedits),
                    )
                    for uri, tedits in grouped.items()
                ]
            )
        return lsp.WorkspaceEdit(changes=grouped)


# Open brackets put in front of the tokenized piece: the piece starts at the finding, possibly
# inside a bracketed expression whose closers would otherwise be unmatched, and inside brackets
# every line end a comment may follow is an NL token. No finding sits 64 brackets deep.
_OPENERS = "(" * 64


def _comment_safe_lines(lines: list[str], start: Pos, last: int) -> set[int]:
    """Lines in ``start.line..last`` whose end a comment may follow: not inside a string
    (a triple-quoted one the line opens) and not after a backslash continuation."""
    piece = lines[start.line][start.col :] + "".join(lines[start.line + 1 : last + 1])
    if not piece.endswith(("\n", "\r")):
        piece += "\n"
    safe: set[int] = set()
    try:
        for tok in tokenize.generate_tokens(io.StringIO(_OPENERS + piece).readline):
            row = start.line + tok.start[0] - 1
            if row > last:
                break
            if tok.type in (tokenize.NL, tokenize.NEWLINE):
                safe.add(row)
    except (tokenize.TokenError, SyntaxError):
        pass  # the tokens before the problem were already seen; they are all we need
    return safe


def suppression_edit(unit: Unit, finding: Finding) -> Edit | None:
    """The edit that adds ``finding``'s id to an ignore comment on its first or last line
    (where the core looks for it), on whichever of them a comment can end: a line that opens
    a triple-quoted string or ends with a backslash cannot take one. None when neither can."""
    lines = unit.doc.lines
    first, last = finding.span.start.line, min(finding.span.end.line, len(lines) - 1)
    if first >= len(lines):
        return None
    safe = _comment_safe_lines(lines, finding.span.start, last)
    for line_no in dict.fromkeys((first, last)):
        if line_no not in safe:
            continue
        body = lines[line_no].rstrip("\r\n")
        new = add_suppression(body, finding.rule_id)
        if new == body:
            return None  # already ignored there
        return Edit(Span(Pos(line_no, 0), Pos(line_no, len(body))), new)
    return None


def safe_fix_edits(findings: Iterable[Finding]) -> list[Edit]:
    fixes = [f.safe_fix for f in findings]
    chosen = select_non_overlapping(f for f in fixes if f is not None)
    return [e for fix in chosen for e in fix.edits]


def code_actions(
    state: ServerState,
    unit: Unit,
    offset: int,
    uri: str,
    rng: lsp.Range,
    context: lsp.CodeActionContext,
) -> list[lsp.CodeAction]:
    state.ensure_current(unit)
    if not unit.enabled or not unit.findings:
        return []
    lines = unit.doc.lines
    codec = state.codec
    a = codec.to_core(lines, rng.start.line + offset, rng.start.character)
    b = codec.to_core(lines, rng.end.line + offset, rng.end.character)
    only = context.only
    builder = _EditBuilder(state, unit)
    client_diags = {
        (
            d.code,
            d.range.start.line,
            d.range.start.character,
            d.range.end.line,
            d.range.end.character,
        ): d
        for d in context.diagnostics
        if d.source == SOURCE
    }

    def diagnostic_for(f: Finding) -> lsp.Diagnostic | None:
        """The diagnostic published for ``f`` (the client's own copy when it sent it back):
        the actions are built from the current findings, never from anything the client
        carries, so a diagnostic needs no ``data`` to be found again."""
        hit = unit.rendered.get(id(f))
        if hit is None or hit[0] is not f or hit[2] != uri:
            return None
        d = hit[3]
        r = d["range"]
        key = (
            d["code"],
            r["start"]["line"],
            r["start"]["character"],
            r["end"]["line"],
            r["end"]["character"],
        )
        return client_diags.get(key) or as_lsp(d)

    out: list[lsp.CodeAction] = []
    if _wants(only, lsp.CodeActionKind.QuickFix):
        for f in unit.findings:
            if not _overlaps(f.span, a, b):
                continue
            if unit.locate_line(f.span.start.line)[0] != uri:
                continue
            diag = diagnostic_for(f)
            preferred = f.preferred_fix
            for fix in f.fixes:
                edit = builder.workspace_edit(fix.edits)
                if edit is None:
                    continue
                out.append(
                    lsp.CodeAction(
                        title=_title(f, fix),
                        kind=lsp.CodeActionKind.QuickFix,
                        diagnostics=[diag] if diag else None,
                        # VS Code's "auto fix" applies the preferred action unasked: never an
                        # unsafe one.
                        is_preferred=fix is preferred and fix.safe,
                        edit=edit,
                    )
                )
            if f.rule_id != SYNTAX_ERROR.id:
                sup = suppression_edit(unit, f)
                edit = builder.workspace_edit([sup]) if sup is not None else None
                if edit is not None:
                    out.append(
                        lsp.CodeAction(
                            title=f"Ignore {f.rule_id} on this line",
                            kind=lsp.CodeActionKind.QuickFix,
                            diagnostics=[diag] if diag else None,
                            edit=edit,
                        )
                    )
    if _wants(only, FIX_ALL_KIND) and (only or out):
        action = fix_all_action(state, unit)
        if action is not None:
            out.append(action)
    return out


def fix_all_action(state: ServerState, unit: Unit) -> lsp.CodeAction | None:
    edits = safe_fix_edits(unit.findings)
    if not edits:
        return None
    edit = _EditBuilder(state, unit).workspace_edit(edits)
    if edit is None:
        return None
    return lsp.CodeAction(
        title="ddp-lsp: fix all safely fixable problems",
        kind=FIX_ALL_KIND,
        edit=edit,
    )


def _title(f: Finding, fix: Fix) -> str:
    title = f"{f.rule_id}: {fix.title}"
    return title if fix.safe else f"{title} (unsafe)"


def whole_text_edit(state: ServerState, unit: Unit, old: str, new: str) -> lsp.WorkspaceEdit | None:
    """One edit turning ``old`` into ``new``, limited to the lines that differ."""
    from ddp_lsp.core.document import split_lines

    a, b = split_lines(old), split_lines(new)
    lo = 0
    while lo < min(len(a), len(b)) and a[lo] == b[lo]:
        lo += 1
    hi_a, hi_b = len(a), len(b)
    while hi_a > lo and hi_b > lo and a[hi_a - 1] == b[hi_b - 1]:
        hi_a -= 1
        hi_b -= 1
    if lo == hi_a == hi_b:
        return None
    end = Pos(hi_a, 0) if hi_a < len(a) else Pos(len(a) - 1, len(a[-1]))
    edit = Edit(Span(Pos(lo, 0), end), "".join(b[lo:hi_b]))
    return _EditBuilder(state, unit).workspace_edit([edit])
