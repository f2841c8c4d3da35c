"""Positions and text of a chunk: where an ``ast`` node is in the chunk's lines, and what it
says there.

Free functions over a chunk's lines (``chunk.lines``, ``chunk.line_base``: what
:class:`~ddp_lsp.core.document.ParsedChunk` holds), so fix builders and rules ask them without
a :class:`~ddp_lsp.core.rule.ChunkContext`: ``chunktext.span(ctx.chunk, node)``,
``chunktext.segment(ctx.chunk, node)``. Positions are chunk-relative (the engine moves them to
document lines); columns are characters (ast reports UTF-8 bytes).
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterable, Sequence
from typing import Protocol

from ddp_lsp.core.types import Pos, Span


class ChunkLines(Protocol):
    """What these functions need of a chunk."""

    @property
    def lines(self) -> Sequence[str]: ...

    @property
    def line_base(self) -> int: ...  # add to (ast lineno - 1) to get the chunk-relative line


def line(chunk: ChunkLines, node_line: int) -> str:
    """The chunk line for an ast ``lineno`` (1-based, as ast reports it)."""
    idx = node_line - 1 + chunk.line_base
    lines = chunk.lines
    return lines[idx] if 0 <= idx < len(lines) else ""


def rel_line(chunk: ChunkLines, node_line: int) -> int:
    """The chunk-relative (0-based) line of an ast ``lineno``."""
    return node_line - 1 + chunk.line_base


def _col(chunk: ChunkLines, node_line: int, byte_col: int) -> int:
    text = line(chunk, node_line)
    if text.isascii():
        return byte_col
    return len(text.encode("utf-8")[:byte_col].decode("utf-8", errors="ignore"))


def pos(chunk: ChunkLines, node_line: int, byte_col: int) -> Pos:
    """The chunk position of an ast (``lineno``, ``col_offset``) pair."""
    return Pos(rel_line(chunk, node_line), _col(chunk, node_line, byte_col))


def span(chunk: ChunkLines, node: ast.AST, end: ast.AST | None = None) -> Span:
    """From the start of ``node`` to the end of ``end`` (default: ``node``)."""
    last = end if end is not None else node
    start = pos(chunk, node.lineno, node.col_offset)  # type: ignore[attr-defined]
    stop = pos(
        chunk,
        last.end_lineno or last.lineno,  # type: ignore[attr-defined]
        last.end_col_offset if last.end_col_offset is not None else 0,  # type: ignore[attr-defined]
    )
    return Span(start, stop)


def segment(chunk: ChunkLines, node: ast.AST) -> str:
    """The source text of ``node``, as written."""
    sp = span(chunk, node)
    lines = chunk.lines
    if sp.start.line == sp.end.line:
        return lines[sp.start.line][sp.start.col : sp.end.col]
    parts = [lines[sp.start.line][sp.start.col :]]
    parts.extend(lines[sp.start.line + 1 : sp.end.line])
    parts.append(lines[sp.end.line][: sp.end.col])
    return "".join(parts)


def indent_of(chunk: ChunkLines, stmt: ast.stmt) -> str:
    """The indentation ``stmt``'s first line starts with."""
    text = line(chunk, stmt.lineno)
    return text[: len(text) - len(text.lstrip(" \t"))]


def indent_unit(
    chunk: ChunkLines, ancestors: Callable[[ast.AST], Iterable[ast.AST]], stmt: ast.stmt
) -> str:
    """The indentation step used around ``stmt`` (4 spaces unless the code says else);
    ``ancestors``: the chunk's traversal (``ctx.ancestors``)."""
    for a in ancestors(stmt):
        if isinstance(a, ast.stmt):
            outer = indent_of(chunk, a)
            inner = indent_of(chunk, stmt)
            if inner.startswith(outer) and len(inner) > len(outer):
                step = inner[len(outer) :]
                depth = sum(1 for x in ancestors(stmt) if isinstance(x, ast.stmt)) - sum(
                    1 for x in ancestors(a) if isinstance(x, ast.stmt)
                )
                if depth == 1:
                    return step
            break
    return "\t" if indent_of(chunk, stmt).startswith("\t") else "    "


def stmt_lines(chunk: ChunkLines, stmt: ast.stmt) -> tuple[int, int]:
    """Chunk-relative first and last line of a statement, decorators and comments on its
    last line included."""
    first = stmt.lineno
    decorators = getattr(stmt, "decorator_list", None)
    if decorators:
        first = min(d.lineno for d in decorators)
    return rel_line(chunk, first), rel_line(chunk, stmt.end_lineno or stmt.lineno)
