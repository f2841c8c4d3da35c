"""Split a module's lines into chunks that can be parsed and analysed on their own.

A chunk is a top-level ``def``/``class``/compound statement (decorators included), a run of
module-level simple statements, or, inside a top-level class, one method (the class line, its
docstring, its attributes and its first method stay together). Each chunk is parsed and
summarised once and cached by its text, so an edit inside one function re-parses that
function only.

The splitter is a deterministic state machine over lines. Its state at every chunk start is
recorded; after an edit the machine re-runs from the chunk before the edit and stops as soon as
it reaches an old chunk start, past the edit, in the same state: from there on, the old
chunks are exactly what a fresh split would give. That is what makes incremental analysis
equal a full analysis of the same text.

The lexer here only tracks what decides statement boundaries: open brackets, strings (triple
quoted ones span lines), backslash continuations and comments. It never raises; on broken
code it still yields chunks, and the parser reports the error inside the chunk that has it.
"""

from __future__ import annotations

import re
import zlib
from bisect import bisect_right
from dataclasses import dataclass, replace
from operator import itemgetter
from typing import NamedTuple

_INTEREST = re.compile(r"[#'\"\\()\[\]{}]")
_BRACKETS = re.compile(r"[()\[\]{}]")
_FIRST_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_CLASS_NAME = re.compile(r"class\s+([A-Za-z_][A-Za-z0-9_]*)")

# Statements that continue the compound statement above them at the same indent.
_CONTINUATIONS = frozenset({"else", "elif", "except", "finally"})
_COMPOUND = frozenset({"def", "class", "async", "if", "for", "while", "with", "try", "match"})
# At column 0 these can never be inside an open bracket in valid code, so when we meet one
# with brackets still open the bracket was never closed (the user is typing): start afresh.
_RESYNC_WORDS = frozenset({"def", "class", "async", "import", "from"})
# Inside a top-level class split at its methods, a method's ``def`` at the class body's indent
# can never be inside an open bracket either (``def`` starts no expression): a bracket left
# open in one method ends there, and the class's later methods keep their own chunks (their
# parses, facts and findings) instead of joining the broken one until the next top-level line.
# (Only ``def``: a decorator line, ``@`` at the line start, is also a matrix product's
# continuation inside brackets; see ``_DECORATOR_LOOKAHEAD`` for decorators.)
_MEMBER_DEF = re.compile(r"(?:async[ \t]+)?def[ \t]")
# The decorators of a ``def``/``class`` where a bracket left open is given up start afresh
# with it (``@rank_zero_only`` above ``def save`` keeps its chunk, facts and findings while a
# call is typed open in the function above). A ``@`` line alone can be a matrix product's
# continuation, so it is decided by looking ahead: the run of lines at its indent that start
# with ``@`` (and blank or comment lines) must end at a line that gives the bracket up, with
# the bracket still open there (valid code never has that ``def`` inside a bracket, so no
# valid text splits differently). At most this many lines are looked at.
_DECORATOR_LOOKAHEAD = 32
# Runs of module-level simple statements are cut where a line's hash says so (content-defined
# chunking, as in rsync): the cut points move with the text, not with line numbers.
_RUN_SPLIT_MODULUS = 8


@dataclass(frozen=True)
class State:
    """Everything the splitter remembers between lines."""

    depth: int = 0
    quote: str | None = None  # the open string delimiter carried to the next line
    cont: bool = False  # the previous line ended with a backslash continuation
    top_kind: str | None = None  # "simple" | "import" | "compound" | "decorator" (last one)
    cls: str | None = None  # name of the top-level class being split at its methods
    cls_indent: str | None = None  # indent of that class's body
    member_seen: bool = False  # the class's first method has been seen (stays with header)
    member_decorator: bool = False  # the last member line was a decorator

    @property
    def clean(self) -> bool:
        return self.depth == 0 and self.quote is None and not self.cont


INITIAL = State()


class ChunkStart(NamedTuple):
    line: int
    state: State  # the splitter state just before this line
    member_of: str | None  # class name when the chunk is a method split out of its class


_line_of = itemgetter(0)  # ChunkStart.line, as a sort key


def _find_close(line: str, start: int, delim: str) -> int:
    """Index just after the closing ``delim`` in ``line`` from ``start``, or -1."""
    pos = start
    while True:
        k = line.find(delim, pos)
        if k < 0:
            return -1
        backslashes = 0
        b = k - 1
        while b >= start and line[b] == "\\":
            backslashes += 1
            b -= 1
        if backslashes % 2 == 0:
            return k + len(delim)
        pos = k + 1


def scan_line(line: str, depth: int, quote: str | None) -> tuple[int, str | None, bool]:
    """Lex one line; return (bracket depth, open quote, backslash continuation) after it."""
    if quote is None and "#" not in line and "'" not in line and '"' not in line:
        if "\\" not in line:
            # Brackets only (most lines): their sequence, in one call.
            for c in _BRACKETS.findall(line):
                if c in "([{":
                    depth += 1
                elif depth > 0:
                    depth -= 1
            return depth, None, False
    i = 0
    if quote is not None:
        i = _find_close(line, 0, quote)
        if i < 0:
            return depth, quote, False
    while True:
        m = _INTEREST.search(line, i)
        if m is None:
            return depth, None, False
        c = m.group()
        j = m.start()
        if c == "#":
            return depth, None, False
        if c == "\\":
            if line[j + 1 :].strip() == "":
                return depth, None, True
            i = j + 2
            continue
        if c in "([{":
            depth += 1
            i = j + 1
            continue
        if c in ")]}":
            depth = depth - 1 if depth > 0 else 0
            i = j + 1
            continue
        delim = line[j : j + 3] if line[j : j + 3] == c * 3 else c
        k = _find_close(line, j + len(delim), delim)
        if k < 0:
            if len(delim) == 3 or line.rstrip("\r\n").endswith("\\"):
                return depth, delim, False
            return depth, None, False  # unterminated string: a syntax error, ends at EOL
        i = k


def resynced(state: State, line: str) -> State:
    """The state before ``line`` once an unclosed bracket is given up: ``line`` is one that no
    bracket of valid code holds (``_RESYNC_WORDS`` at column 0, a method's ``def`` at the body
    indent of a class split at its methods). Otherwise ``state`` itself.

    The splitter records this state at chunk starts (:func:`split`, :func:`resplit`), so a
    chunk that starts afresh after a bracket left open has the state it has when the bracket is
    closed, and a re-split after a keystroke in that bracket stops there."""
    if state.depth > 0 and state.quote is None:
        if line[:1].isalpha():
            m = _FIRST_WORD.match(line)
            if m is not None and m.group() in _RESYNC_WORDS:
                return replace(state, depth=0, cont=False)
        else:
            cls_indent = state.cls_indent
            if (
                cls_indent is not None
                and line.startswith(cls_indent)
                and _MEMBER_DEF.match(line, len(cls_indent)) is not None
            ):
                return replace(state, depth=0, cont=False)
    return state


def _decorator_indent(state: State, line: str) -> str | None:
    """The indent of ``line`` when it is a decorator that can start a chunk: ``@`` at column 0,
    or at the body indent of a class split at its methods."""
    if line[:1] == "@":
        return ""
    ind = state.cls_indent
    if ind and line.startswith(ind) and line[len(ind) : len(ind) + 1] == "@":
        return ind
    return None


def _blank(line: str) -> bool:
    text = line.lstrip(" \t")
    return not text or text[0] in "#\r\n"


def resynced_at(state: State, lines: list[str], i: int) -> State:
    """:func:`resynced` for ``lines[i]``, and the state given up at the first of the
    decorators of a ``def``/``class`` that gives the bracket up (``_DECORATOR_LOOKAHEAD``)."""
    line = lines[i]
    fresh = resynced(state, line)
    if fresh is not state or state.quote is not None:
        return fresh
    indent = _decorator_indent(state, line)
    if indent is None:
        return state
    depth, quote, cont = state.depth, None, state.cont
    for j in range(i, min(i + _DECORATOR_LOOKAHEAD, len(lines))):
        nxt = lines[j]
        if _blank(nxt):
            continue
        if nxt.startswith(indent) and nxt[len(indent) : len(indent) + 1] == "@":
            depth, quote, cont = scan_line(nxt, depth, quote)
            if quote is not None or depth <= 0:
                return state  # a string opened, or the bracket closed: not decorators
            continue
        probe = replace(state, depth=depth, cont=cont)
        return replace(state, depth=0, cont=False) if resynced(probe, nxt) is not probe else state
    return state


def _window_end(lines: list[str], i: int, stop: int) -> int:
    """The line that decides whether a decorator at ``lines[i]`` starts afresh: the first one
    after the decorator run and blank lines (:func:`resynced_at`), looked for below ``stop``
    only (``stop`` when it is not found above it)."""
    indent = lines[i][: len(lines[i]) - len(lines[i].lstrip(" \t"))]
    for j in range(i + 1, min(i + _DECORATOR_LOOKAHEAD, stop)):
        nxt = lines[j]
        if not (_blank(nxt) or nxt.startswith(indent + "@")):
            return j
    return stop


def step(state: State, line: str) -> tuple[State, bool, bool]:
    """Feed one line; return (new state, line starts a chunk, chunk is a class member)."""
    if not state.clean:
        fresh = resynced(state, line)
        if fresh is not state:
            return step(fresh, line)
        depth, quote, cont = scan_line(line, state.depth, state.quote)
        if depth == state.depth and quote == state.quote and cont == state.cont:
            return state, False, False  # unchanged (`dataclasses.replace` costs microseconds)
        return replace(state, depth=depth, quote=quote, cont=cont), False, False

    text = line.lstrip(" \t")
    if not text or text[0] in "#\r\n":
        return state, False, False  # blank or comment line: belongs to the chunk above
    depth, quote, cont = scan_line(line, 0, None)
    indent = line[: len(line) - len(text)]

    if not indent:
        m = _FIRST_WORD.match(text)
        word = m.group() if m else ""
        if word in _CONTINUATIONS:
            new = replace(
                state,
                depth=depth,
                quote=quote,
                cont=cont,
                top_kind="compound",
                cls=None,
                cls_indent=None,
                member_seen=False,
                member_decorator=False,
            )
            return new, False, False
        if text.startswith("@"):
            kind = "decorator"
        elif word in _COMPOUND and (word != "match" or text.rstrip().endswith(":")):
            kind = "compound"
        elif word in ("import", "from"):
            # The import block is a chunk of its own: a syntax error typed just below the
            # imports must not take the module's aliases (and so every rule) down with it.
            kind = "import"
        else:
            kind = "simple"
        boundary = state.top_kind != "decorator"
        if boundary and kind == "import" and state.top_kind == "import":
            boundary = False
        elif (
            boundary
            and kind == "simple"
            and state.top_kind == "simple"
            and zlib.crc32(text.encode("utf-8", "surrogatepass")) % _RUN_SPLIT_MODULUS != 0
        ):
            boundary = False
        m2 = _CLASS_NAME.match(text) if word == "class" else None
        cls = m2.group(1) if m2 else None
        new = State(depth, quote, cont, kind, cls, None, False, False)
        return new, boundary, False

    # An indented line at a clean statement start.
    if state.cls is None:
        if depth == 0 and quote is None and not cont:
            return state, False, False  # still clean: the same state (most lines of a file)
        return replace(state, depth=depth, quote=quote, cont=cont), False, False
    cls_indent = state.cls_indent if state.cls_indent is not None else indent
    boundary = False
    member_seen = state.member_seen
    member_decorator = state.member_decorator
    if indent == cls_indent:
        is_member = text.startswith(("def ", "def\t", "async ", "@"))
        if is_member:
            if state.member_decorator:
                boundary = False
            elif state.member_seen:
                boundary = True
            member_seen = True
            member_decorator = text.startswith("@")
        else:
            member_decorator = False
    if (
        depth == 0
        and quote is None
        and not cont
        and cls_indent == state.cls_indent
        and member_seen == state.member_seen
        and member_decorator == state.member_decorator
    ):
        return state, boundary, boundary  # most lines of a class body: the same state
    new = replace(
        state,
        depth=depth,
        quote=quote,
        cont=cont,
        cls_indent=cls_indent,
        member_seen=member_seen,
        member_decorator=member_decorator,
    )
    return new, boundary, boundary


def split(lines: list[str], start: int = 0, state: State = INITIAL) -> list[ChunkStart]:
    """Chunk starts for ``lines[start:]`` beginning in ``state`` (line ``start`` is a start)."""
    starts = [ChunkStart(start, state, None)]
    for i in range(start, len(lines)):
        if state.depth:
            state = resynced_at(state, lines, i)
        before = state
        state, boundary, member = step(state, lines[i])
        if boundary and i != start:
            starts.append(ChunkStart(i, before, before.cls if member else None))
    return starts


@dataclass(frozen=True)
class Resplit:
    """New chunk starts, and which of them differ from the old ones.

    ``starts[:lo]`` are the old ``[:lo]`` unchanged; ``starts[hi_new:]`` are the old
    ``[hi_old:]`` moved by the edit's line delta (same text, same parse); only
    ``starts[lo:hi_new]`` need their text re-read and maybe re-parsed.
    """

    starts: list[ChunkStart]
    lo: int
    hi_new: int
    hi_old: int


def resplit(
    lines: list[str],
    old: list[ChunkStart],
    first_changed: int,
    last_changed: int,
    delta: int,
) -> Resplit:
    """Chunk starts after an edit, re-running the splitter only where it can differ.

    ``lines`` is the new text; lines ``first_changed..last_changed`` (new numbering) were
    replaced, and every old line after the edit moved by ``delta``.
    """
    # Restart from the chunk holding the edit when the edit starts below its first line: that
    # line and every line above it are unchanged, so it is a chunk start in the same state.
    # When the edit starts on a chunk's first line, restart from the chunk before: that line
    # may have stopped being a chunk start, merging into its predecessor.
    k = max(bisect_right(old, first_changed, key=_line_of) - 1, 0)
    if k and old[k].line >= first_changed:
        k -= 1
    elif k and lines[old[k].line].lstrip(" \t")[:1] == "@":
        # A chunk started by decorators may have started there because of the lines below
        # them (a bracket given up at their ``def``): an edit among those lines re-decides.
        if _window_end(lines, old[k].line, first_changed + 1) >= first_changed:
            k -= 1
    restart = old[k]
    # Old starts strictly after the edited region, by their new line number: ``old[j]`` is
    # the first of them at or after the line the splitter is at (the old starts are sorted).
    j = k
    while j < len(old) and old[j].line + delta <= last_changed:
        j += 1
    new_starts = list(old[: k + 1])
    state = restart.state
    start = restart.line
    for i in range(start, len(lines)):
        if state.depth:
            state = resynced_at(state, lines, i)  # as split records it
        if i > last_changed and i != start:
            while j < len(old) and old[j].line + delta < i:
                j += 1
            if j < len(old) and old[j].line + delta == i and old[j].state == state:
                hi_new = len(new_starts)
                if delta:
                    make = tuple.__new__
                    new_starts.extend(
                        make(ChunkStart, (cs[0] + delta, cs[1], cs[2])) for cs in old[j:]
                    )
                else:
                    new_starts.extend(old[j:])  # nothing moved: the same starts
                return Resplit(new_starts, k, hi_new, j)
        before = state
        state, boundary, member = step(state, lines[i])
        if boundary and i != start:
            new_starts.append(ChunkStart(i, before, before.cls if member else None))
    return Resplit(new_starts, k, len(new_starts), len(old))
