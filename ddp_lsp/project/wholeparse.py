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

When a piece fails to parse, :func:`parse_or_none` decides whether the text parses (below;
a tree had the splitter cut inside a statement of valid code), and a text that does not is
parsed whole for ``ast.parse``'s own error: what :func:`parse_module` raises is exactly
``ast.parse``'s. Text under
:data:`PIECES_MIN_CHARS` is parsed whole: the parser's overhead is small there, and the
cost of the split is not worth it.

:func:`parse_or_none` is for callers that only need to know *whether* the text parses (the
project's summary of a half-typed file): where the first piece that fails fails for a reason
the text after it cannot change, the whole text fails too, and is not parsed again. A failed
whole-file parse was the indexer's heaviest step while someone typed in a 20,000-line file
(the parser's tokens, memo and C tree of everything before the error, twice: 88 MB over the
process, against 50 MB for the tree of a file that parses; docs/performance.md, "Peak RSS
while typing"). Why the piece's failure is the file's (see :func:`_verdict`): every
piece before it parsed on its own, so the tokenizer meets the piece's first line as it meets
a fresh text's (no bracket or string open, a new logical line) and the statements before it
end there (only ``else``, ``elif``, ``except`` and ``finally`` continue a statement on a line
at column 0, and a piece beginning with one does not parse). The parser then reads the
piece's tokens exactly as it reads them alone, and where it failed before asking for a token
past the piece's end (compiled with ``PyCF_ALLOW_INCOMPLETE_INPUT``, such a failure is not
"incomplete input"), nothing after the piece is read by the parse that fails in the file
either. Otherwise (an unclosed bracket or string at the piece's end, a block left without
a body: ``loss = crit(`` half typed) the text from that piece to the end is parsed alone: its
tokens and statements are the whole text's from there on, so it parses exactly when the whole
text does, and a failing parse holds the parser's state from the piece to the error, not of
the whole file before it (one seed of the harness's typing reached 395 MB summed with the whole
text parsed again). Where the piece does not start as a fresh text does (indented, a
continued line, ``else:``), the whole text is parsed as before.

:func:`bodies` gives :func:`parse_or_none`'s body in parts, each parsed when the caller asks
for the next, for a caller that walks each part and drops it (the project's summary of a large
file, :mod:`ddp_lsp.project.summary`): what is alive is one piece's tree, not the file's (49 MB
at 20,000 lines, over the indexer's 70 MB at rest). :func:`parse_or_none` is built on it.
"""

from __future__ import annotations

import ast
import re
import sys
from collections.abc import Iterator

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
    tree = parse_or_none(text, min_chars)
    return tree if tree is not None else ast.parse(text)  # ast.parse's own error


def parse_or_none(text: str, min_chars: int = PIECES_MIN_CHARS) -> ast.Module | None:
    """:func:`parse_module`'s tree, or None where ``ast.parse(text)`` raises ``SyntaxError``
    or ``ValueError``; a large text whose first failing piece fails for a reason the rest of
    the text cannot change is not parsed whole (see the module's docstring)."""
    body: list[ast.stmt] = []
    try:
        for part in bodies(text, min_chars):
            if part is RESTART:
                body = []
            else:
                body += part
    except Unparsable:
        return None
    return ast.Module(body=body, type_ignores=[])


class Unparsable(Exception):
    """:func:`bodies`: the text does not parse (``ast.parse`` raises ``SyntaxError`` or
    ``ValueError``)."""


# bodies's answer where the bodies it gave so far are not the text's: the whole text's follows.
RESTART: list[ast.stmt] = []


def bodies(
    text: str, min_chars: int = PIECES_MIN_CHARS, changed: tuple[int, int] | None = None
) -> Iterator[list[ast.stmt]]:
    """The body of :func:`parse_or_none`'s tree, in parts, each parsed when the caller asks
    for it, so that a caller that drops each part before asking for the next holds the tree
    of one piece, not of the file (the project's summary of a large file); raises
    :class:`Unparsable`, maybe after some parts, where :func:`parse_or_none` gives None. A
    text under ``min_chars`` characters is one part. :data:`RESTART` (compare by identity):
    forget the parts so far, the whole text's body follows (a piece that only the whole text's
    parse can decide, and that parse succeeded: see :func:`_verdict`).

    ``changed``: the lines (0-based, end excluded) where ``text`` differs from a version
    before it (:func:`changed_lines`), a hint that changes no answer. Where a piece holding
    them does not parse alone, the text most likely does not parse (someone is typing there):
    it is decided as :func:`parse_or_none` decides, before any part is given, so that a caller
    walking each part does not walk the parts above a half-typed line for nothing."""
    if len(text) < min_chars:
        yield _whole(text)
        return
    lines = _LINE.findall(text)
    cuts = [start.line for start in split(lines) if start.member_of is None]
    cuts.append(len(lines))
    if changed is not None and not _parse_alone(lines, cuts, *changed):
        for part in _parts(text, lines, cuts):  # raises Unparsable: the usual case
            del part  # (only whether it parses is asked here: one piece's tree at a time)
        # It parses after all (the text after the edited piece completes it): again, in parts.
    yield from _parts(text, lines, cuts)


def _parse_alone(lines: list[str], cuts: list[int], start: int, stop: int) -> bool:
    """Whether each piece holding one of the lines ``start`` to ``stop`` (excluded; the line
    ``start`` where they are none) parses alone."""
    last = max(start, stop - 1)
    for first, end in zip(cuts, cuts[1:], strict=False):
        if first < end and first <= last and end > start:
            try:
                ast.parse("\n" * first + "".join(lines[first:end]))
            except (SyntaxError, ValueError):
                return False
    return True


def changed_lines(old: str, new: str) -> tuple[int, int]:
    """The lines of ``new`` (0-based, end excluded) outside which it is ``old``: what lies
    before them and after them is the same in both (the lines of an edit)."""
    n = min(len(old), len(new))
    lo, hi = 0, n  # the common prefix's length, in [lo, hi]
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if old[:mid] == new[:mid]:
            lo = mid
        else:
            hi = mid - 1
    prefix = lo
    lo, hi = 0, n - prefix  # the common suffix's length, not overlapping the prefix
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if old[len(old) - mid :] == new[len(new) - mid :]:
            lo = mid
        else:
            hi = mid - 1
    start = new.count("\n", 0, prefix)
    return start, max(start + 1, new.count("\n", 0, len(new) - lo) + 1)


def _parts(text: str, lines: list[str], cuts: list[int]) -> Iterator[list[ast.stmt]]:
    """:func:`bodies` of a large text, cut at ``cuts``."""
    for first, end in zip(cuts, cuts[1:], strict=False):
        if first >= end:
            continue
        piece = "\n" * first + "".join(lines[first:end])
        try:
            body = ast.parse(piece).body
        except (SyntaxError, ValueError):
            verdict = _verdict(piece, lines, first, end)
            del piece
            if verdict is _FAILS:
                raise Unparsable from None
            if verdict is _WHOLE:
                # Else the whole file's own verdict comes from ast.parse.
                del lines
                yield RESTART
                yield _whole(text)
                return
            # The piece starts as a fresh text does and may go on into what follows (a
            # bracket left open: `loss = crit(` typed): the text from here on, parsed alone,
            # is what the whole text's parse meets from here, so it parses exactly when the
            # whole text does, and where it fails, it fails near the piece, holding the
            # parser's state of that stretch only, not of everything above it.
            yield _whole("\n" * first + "".join(lines[first:]))
            return
        del piece
        yield body
        del body  # (before the next piece is parsed: the caller holds it, or has dropped it)


def _whole(text: str) -> list[ast.stmt]:
    try:
        return ast.parse(text).body
    except (SyntaxError, ValueError):
        raise Unparsable from None


# _verdict's answers: the whole text fails, parse the text from the failing piece on, or all.
_FAILS: list[ast.stmt] = []
_TAIL: list[ast.stmt] = []
_WHOLE: list[ast.stmt] = []


# Python 3.11's flag (codeop's): a parse that fails at the end of its input says "incomplete
# input", any other failure says what failed. 3.10 has no such flag: a failing piece that
# starts as a fresh text does is parsed with the text after it there.
_INCOMPLETE_FLAG = 0x4000 if sys.version_info >= (3, 11) else None
_INCOMPLETE = "incomplete input"
# The keywords that continue a statement on a line of its own at column 0.
_CONTINUES = frozenset({"else", "elif", "except", "finally"})
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _verdict(piece: str, lines: list[str], first: int, end: int) -> list[ast.stmt]:
    """What the failure of the piece ``lines[first:end]`` (``piece``: its text as parsed),
    parsed after pieces that each parsed alone, says of the whole text (see the module's
    docstring): :data:`_FAILS` (it fails whatever follows), :data:`_TAIL` (the piece starts
    as a fresh text does, but what follows it may complete it) or :data:`_WHOLE` (only the
    whole text's parse can tell)."""
    if "\0" in piece:
        return _FAILS  # ast.parse refuses a text that holds a NUL anywhere
    head = next((line for line in lines[first:end] if _significant(line)), None)
    if head is None or head[0] in " \t\f\\":
        return _WHOLE  # a piece of a block above it, or a continued line
    word = _WORD.match(head)
    if word is not None and word.group() in _CONTINUES:
        return _WHOLE  # continues the statement before it
    if end == len(lines):
        return _FAILS  # nothing follows: the piece's tokens are the file's
    if _INCOMPLETE_FLAG is None:
        return _TAIL
    try:
        compile(piece, "<piece>", "exec", ast.PyCF_ONLY_AST | _INCOMPLETE_FLAG)
    except SyntaxError as exc:
        # (3.13 raises a SyntaxError subclass with the same message for incomplete input.)
        if exc.msg != _INCOMPLETE and type(exc).__name__ != "_IncompleteInputError":
            return _FAILS
    except ValueError:
        return _FAILS
    return _TAIL


def _significant(line: str) -> bool:
    """A line the tokenizer does not skip as blank or comment-only."""
    stripped = line.lstrip(" \t\f")
    return bool(stripped) and stripped[0] not in "#\r\n"
