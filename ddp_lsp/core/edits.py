"""Text-edit builders for fixes, in the manner of ruff's ``fix::edits``.

Every rule builds its fix from these: insert a line before or after a statement, delete a
statement, replace a node, insert text right after a node, wrap a block in a header
(``if rank == 0:``, ``with model.no_sync() ...:``), and add, remove or replace a call argument
keeping the call's layout (one argument per line, trailing commas, comments). Positions are
chunk-relative (:class:`ddp_lsp.core.rule.ChunkContext` turns ast nodes into spans); the
edits keep comments and formatting, and an edit that cannot keep them returns nothing (no fix
rather than a wrong one). Pure: text in, :class:`~ddp_lsp.core.types.Edit` out.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ddp_lsp.core import chunktext
from ddp_lsp.core.types import Edit, Pos, Span

if TYPE_CHECKING:
    from ddp_lsp.core.rule import ChunkContext

# -- points and nodes ------------------------------------------------------------------------------


def insert_at(pos: Pos, text: str) -> Edit:
    """Insert ``text`` at ``pos``."""
    return Edit(Span(pos, pos), text)


def insert_after_node(ctx: ChunkContext, node: ast.AST, text: str) -> Edit:
    """Insert ``text`` right after ``node`` (``.module`` after ``model``)."""
    return insert_at(chunktext.span(ctx.chunk, node).end, text)


def replace_node(ctx: ChunkContext, node: ast.AST, text: str) -> Edit:
    """Replace the text of ``node``."""
    return Edit(chunktext.span(ctx.chunk, node), text)


def replace_span(span: Span, text: str) -> Edit:
    """Replace the text of ``span`` (a node with its parentheses, a part of a node)."""
    return Edit(span, text)


# -- statements ------------------------------------------------------------------------------------


def _lines_of(code: str, indent: str) -> str:
    return "".join(f"{indent}{line}\n" for line in code.splitlines())


def insert_before(ctx: ChunkContext, stmt: ast.stmt, code: str) -> Edit:
    """Insert ``code`` (one or more lines, no indent) as statements just before ``stmt``."""
    first, _ = chunktext.stmt_lines(ctx.chunk, stmt)
    return insert_at(Pos(first, 0), _lines_of(code, chunktext.indent_of(ctx.chunk, stmt)))


def insert_after(ctx: ChunkContext, stmt: ast.stmt, code: str) -> Edit:
    """Insert ``code`` as statements just after ``stmt`` (its trailing comment stays on its
    line), also when ``stmt`` ends the text without a newline."""
    _, last = chunktext.stmt_lines(ctx.chunk, stmt)
    indent = chunktext.indent_of(ctx.chunk, stmt)
    line = ctx.chunk.lines[last] if last < len(ctx.chunk.lines) else ""
    if line.endswith(("\n", "\r")) or last >= len(ctx.chunk.lines):
        return insert_at(Pos(last + 1, 0), _lines_of(code, indent))
    text = "".join(f"\n{indent}{ln}" for ln in code.splitlines())
    return insert_at(Pos(last, len(line)), text)


def delete_lines(first: int, last: int) -> Edit:
    """Remove chunk-relative lines ``first..last`` entirely."""
    return Edit(Span(Pos(first, 0), Pos(last + 1, 0)), "")


def delete_stmt(ctx: ChunkContext, stmt: ast.stmt) -> Edit:
    """Remove the lines of ``stmt`` (decorators and trailing comment included)."""
    first, last = chunktext.stmt_lines(ctx.chunk, stmt)
    return delete_lines(first, last)


# -- blocks ----------------------------------------------------------------------------------------


def string_lines(ctx: ChunkContext, stmt: ast.stmt) -> set[int]:
    """Chunk-relative lines inside ``stmt`` that start inside a multi-line string (their
    indentation is content and must not change when a fix re-indents the statement)."""
    out: set[int] = set()
    for node in ast.walk(stmt):
        if isinstance(node, (ast.Constant, ast.JoinedStr)) and (node.end_lineno or 0) > node.lineno:
            if isinstance(node, ast.Constant) and not isinstance(node.value, (str, bytes)):
                continue
            out.update(
                range(
                    chunktext.rel_line(ctx.chunk, node.lineno) + 1,
                    chunktext.rel_line(ctx.chunk, node.end_lineno or 0) + 1,
                )
            )
    return out


def reindent(
    ctx: ChunkContext, first: int, last: int, extra: str, skip: set[int] | None = None
) -> list[Edit]:
    """Edits that add ``extra`` in front of every non-blank line ``first..last``."""
    edits = []
    for rel in range(first, last + 1):
        if skip and rel in skip:
            continue
        text = ctx.chunk.lines[rel] if rel < len(ctx.chunk.lines) else ""
        if text.strip():
            edits.append(insert_at(Pos(rel, 0), extra))
    return edits


def wrap_block(ctx: ChunkContext, stmts: Sequence[ast.stmt], header: str) -> list[Edit]:
    """Wrap the consecutive statements ``stmts`` (one block, each on lines of its own) in
    ``header`` (``"if rank == 0:"``; earlier lines of a multi-line header are statements
    before it): the header goes where the first statement starts, the statements one
    indentation step deeper. Lines inside multi-line strings keep their text; continuation
    lines indented less than the block (inside brackets, where any indent is valid) too."""
    first, last = stmts[0], stmts[-1]
    indent = chunktext.indent_of(ctx.chunk, first)
    unit = chunktext.indent_unit(ctx.chunk, ctx.ancestors, first)
    first_line, _ = chunktext.stmt_lines(ctx.chunk, first)
    _, last_line = chunktext.stmt_lines(ctx.chunk, last)
    skip: set[int] = set()
    for s in stmts:
        skip |= string_lines(ctx, s)
    head = "".join(f"{line}\n{indent}" for line in header.splitlines())
    # One edit for the first line, so the header and its indent cannot be applied apart.
    edits = [insert_at(Pos(first_line, len(indent)), f"{head}{unit}")]
    lines = ctx.chunk.lines
    for rel in range(first_line + 1, last_line + 1):
        if rel in skip or rel >= len(lines):
            continue
        text = lines[rel]
        if text.strip() and text.startswith(indent):
            edits.append(insert_at(Pos(rel, len(indent)), unit))
    return edits


# -- call arguments --------------------------------------------------------------------------------


def _line(ctx: ChunkContext, rel: int) -> str:
    lines = ctx.chunk.lines
    return lines[rel] if 0 <= rel < len(lines) else ""


def _items(call: ast.Call) -> list[ast.AST]:
    items: list[ast.AST] = [*call.args, *call.keywords]
    items.sort(key=lambda n: (n.lineno, n.col_offset))  # type: ignore[attr-defined]
    return items


_REST_OF_ITEM_LINE = re.compile(r"^[ \t]*(,)?[ \t]*(#[^\r\n]*)?[\r\n]*$")


def _own_line(ctx: ChunkContext, sp: Span) -> re.Match[str] | None:
    """The item fills its lines alone (indent before, at most a comma and a comment after)."""
    start_line = _line(ctx, sp.start.line)
    if start_line[: sp.start.col].strip():
        return None
    return _REST_OF_ITEM_LINE.match(_line(ctx, sp.end.line)[sp.end.col :])


def _find_comma(ctx: ChunkContext, pos: Pos) -> Pos | None:
    """The first comma at or after ``pos``, skipping whitespace, newlines and comments."""
    line, col = pos.line, pos.col
    lines = ctx.chunk.lines
    while line < len(lines):
        text = lines[line]
        while col < len(text):
            ch = text[col]
            if ch == ",":
                return Pos(line, col)
            if ch == "#":
                break
            if ch not in " \t\r\n\\":
                return None
            col += 1
        line, col = line + 1, 0
    return None


def _spaces_after(ctx: ChunkContext, pos: Pos) -> Pos:
    text = _line(ctx, pos.line)
    col = pos.col
    while col < len(text) and text[col] in " \t":
        col += 1
    return Pos(pos.line, col)


def _gap_has_comment(ctx: ChunkContext, a: Pos, b: Pos) -> bool:
    for rel in range(a.line, b.line + 1):
        text = _line(ctx, rel)
        lo = a.col if rel == a.line else 0
        hi = b.col if rel == b.line else len(text)
        if "#" in text[lo:hi]:
            return True
    return False


def remove_argument(ctx: ChunkContext, call: ast.Call, item: ast.AST) -> list[Edit]:
    """Edits that delete one argument of ``call`` with its comma; comments stay."""
    items = _items(call)
    idx = next(i for i, x in enumerate(items) if x is item)
    sp = chunktext.span(ctx.chunk, item)
    own = _own_line(ctx, sp)
    multiline_call = (
        chunktext.span(ctx.chunk, call).start.line != chunktext.span(ctx.chunk, call).end.line
    )
    if own is not None and multiline_call and len(items) > 1:
        comment = own.group(2)
        first_other = chunktext.span(ctx.chunk, items[0] if idx else items[1])
        if first_other.start.line != sp.start.line:
            indent = _line(ctx, sp.start.line)[: sp.start.col]
            repl = f"{indent}{comment}\n" if comment else ""
            # The line may go if it takes the item's comma with it, or if the item is the last
            # one without a comma after it (the previous comma then becomes a trailing one).
            if own.group(1) is not None:
                whole_line = True
            else:
                whole_line = (
                    idx == len(items) - 1
                    and idx > 0
                    and _find_comma(ctx, sp.end) is None
                    and _find_comma(ctx, chunktext.span(ctx.chunk, items[idx - 1]).end) is not None
                )
            if whole_line:
                return [Edit(Span(Pos(sp.start.line, 0), Pos(sp.end.line + 1, 0)), repl)]
    if idx + 1 < len(items):
        comma = _find_comma(ctx, sp.end)
        if comma is None:
            return []
        end = _spaces_after(ctx, Pos(comma.line, comma.col + 1))
        if end.line == comma.line and end.col >= len(_line(ctx, end.line).rstrip("\r\n")):
            end = Pos(comma.line, comma.col + 1)
        return [Edit(Span(sp.start, end), "")]
    if idx > 0:
        prev_end = chunktext.span(ctx.chunk, items[idx - 1]).end
        if not _gap_has_comment(ctx, prev_end, sp.start):
            return [Edit(Span(prev_end, sp.end), "")]
        comma = _find_comma(ctx, sp.end)
        end = Pos(comma.line, comma.col + 1) if comma is not None else sp.end
        return [Edit(Span(sp.start, end), "")]
    comma = _find_comma(ctx, sp.end)
    end = Pos(comma.line, comma.col + 1) if comma is not None else sp.end
    return [Edit(Span(sp.start, end), "")]


def add_argument(ctx: ChunkContext, call: ast.Call, text: str) -> list[Edit]:
    """Edits that append ``text`` (``pin_memory=True``) as the call's last argument, one per
    line when the call already puts one argument per line; none for a call without
    arguments."""
    items = _items(call)
    if not items:
        return []
    last = items[-1]
    sp = chunktext.span(ctx.chunk, last)
    own = _own_line(ctx, sp)
    call_sp = chunktext.span(ctx.chunk, call)
    if own is not None and call_sp.start.line != sp.end.line:
        indent = _line(ctx, sp.start.line)[: sp.start.col]
        has_comma = own.group(1) is not None
        edits = []
        if not has_comma:
            edits.append(insert_at(sp.end, ","))
        edits.append(
            insert_at(Pos(sp.end.line + 1, 0), f"{indent}{text}{',' if has_comma else ''}\n")
        )
        return edits
    return [insert_at(sp.end, f", {text}")]


def replace_argument(ctx: ChunkContext, item: ast.AST, text: str) -> list[Edit]:
    """Edits that replace one argument (``shuffle=True`` -> ``shuffle=False``)."""
    return [replace_node(ctx, item, text)]
