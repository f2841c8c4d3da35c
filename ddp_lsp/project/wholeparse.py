"""One file's ``ast`` tree, parsed top-level statement by top-level statement when it is large.

The project index summarises a file from one whole-file tree (:mod:`ddp_lsp.project.summary`).
For a large file, CPython's parser holds far more than the tree it returns while it runs: its
token array, the memo of the PEG parser and the C-level tree it converts from. Parsing a
20,000-line module (830 KB) peaks 44 MB above the finished tree (128 MB for the indexer
process, against 84 MB with pieces: docs/performance.md, "Memory"), and the language server's
memory is judged as the sum of its processes' peaks.

:func:`parse_module` cuts the text where the analysis core's chunk splitter
(:func:`ddp_lsp.core.chunks.split`) starts a top-level chunk (never inside a class: its
methods stay with it), parses each piece on its own, and joins the bodies. Each piece is
preceded by as many newlines as lines before it, so every node's line is its line in the file;
columns are within a line and need nothing. The result is the tree ``ast.parse`` gives
(``tests/project/test_wholeparse.py`` compares ``ast.dump(..., include_attributes=True)``).

When any piece fails to parse, the whole text is parsed as one: its error (or tree, had the
splitter cut inside a statement of valid code) is exactly ``ast.parse``'s. Text under
:data:`PIECES_MIN_CHARS` is parsed whole: the parser's overhead is small there, and the
cost of the split is not worth it.
"""

from __future__ import annotations

import ast
import re

from ddp_lsp.core.chunks import split

# About 6,000 lines of ordinary code: below, a file's parse peaks a few MB over its tree.
PIECES_MIN_CHARS = 256 * 1024

# Lines as Python's tokenizer sees them (\n, \r\n, \r), endings kept; str.splitlines would
# also cut at form feeds and other separators the tokenizer reads as plain characters.
_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+\Z")


def parse_module(text: str, min_chars: int = PIECES_MIN_CHARS) -> ast.Module:
    """``ast.parse(text)``, with the parser's peak memory of one piece rather than the file's
    when ``text`` has at least ``min_chars`` characters. Raises what ``ast.parse`` raises."""
    # (No future import changes what ast.parse accepts: `barry_as_FLUFL` acts in compile only.)
    if len(text) >= min_chars:
        body = _pieces(text)
        if body is not None:
            return ast.Module(body=body, type_ignores=[])
    return ast.parse(text)


def _pieces(text: str) -> list[ast.stmt] | None:
    """The top-level statements, parsed piece by piece; None when a piece does not parse
    (the pieces parsed so far are freed before the caller parses the whole text)."""
    lines = _LINE.findall(text)
    cuts = [start.line for start in split(lines) if start.member_of is None]
    cuts.append(len(lines))
    body: list[ast.stmt] = []
    for first, end in zip(cuts, cuts[1:], strict=False):
        if first >= end:
            continue
        try:
            body += ast.parse("\n" * first + "".join(lines[first:end])).body
        except (SyntaxError, ValueError):
            return None  # the whole file's own error, at its own place, comes from ast.parse
    return body
