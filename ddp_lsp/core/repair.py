"""Repairing a chunk that does not parse.

While a statement is typed key by key, most prefixes do not parse (`with`, `with torch.`,
`x = foo(a,`). The chunk is then parsed again with that one statement repaired (its brackets
closed, a missing ':' added) or set aside (replaced by `pass`, or by `if True:` when it heads
a block), every other line keeping its place. The repair is a function of the chunk's text
alone, so a fresh analysis of the same text repairs it the same way (incremental == full).

The rules of the chunk read the repaired tree (its other lines keep their findings); what the
rest of the module learns from the chunk is its parse with every broken statement *set aside*
(:func:`set_aside`): for a statement being typed on a new line that is exactly the previous
text's parse, so the module's facts, and every other chunk's findings, do not change while the
user types, even where closing the brackets gives a call that carries a fact (`dist.barrier(`
closed is a collective; `dist.barrier(group=` cannot be closed and is set aside: facts from
the closed call would come and go with the keys).
"""

from __future__ import annotations

import ast
import re
import warnings
from dataclasses import dataclass

from ddp_lsp.core import chunks as chunking

MEMBER_PREFIX = "if 1:\n"  # a method's chunk is parsed inside this block (its indent kept)


_REPAIR_TRIES = 6
_OPENERS = {"(": ")", "[": "]", "{": "}"}
_BLOCK_AFTER = re.compile(r"expected an indented block after .* on line (\d+)")


@dataclass(frozen=True)
class Repair:
    tree: ast.Module
    lines: frozenset[int]  # chunk-relative lines that were changed to make the chunk parse
    source: tuple[str, ...]  # the chunk's lines as repaired (what ``tree`` was parsed from)
    aside: bool = True  # every statement changed was set aside (no bracket closed, no ':')


def _scan_brackets(line: str, stack: list[str], quote: str | None) -> tuple[str | None, int]:
    """Lex one line like :func:`chunks.scan_line`, keeping the open brackets on ``stack``;
    return (open quote carried to the next line, column where the code ends: a comment's
    start or the line's end without its break)."""
    body = line.rstrip("\r\n")
    i = 0
    if quote is not None:
        i = chunking._find_close(body, 0, quote)
        if i < 0:
            return quote, len(body)
    while True:
        m = chunking._INTEREST.search(body, i)
        if m is None:
            return None, len(body)
        c = m.group()
        j = m.start()
        if c == "#":
            return None, j
        if c == "\\":
            i = j + 2
            continue
        if c in "([{":
            stack.append(c)
            i = j + 1
            continue
        if c in ")]}":
            if stack:
                stack.pop()
            i = j + 1
            continue
        delim = body[j : j + 3] if body[j : j + 3] == c * 3 else c
        k = chunking._find_close(body, j + len(delim), delim)
        if k < 0:
            return (delim if len(delim) == 3 else None), len(body)
        i = k


def _indent(line: str) -> str:
    return line[: len(line) - len(line.lstrip(" \t"))]


def _blank(line: str) -> bool:
    s = line.strip()
    return not s or s.startswith("#")


def _statement_at(lines: list[str], err: int) -> tuple[int, int]:
    """The lines ``[first, end)`` of the statement holding chunk line ``err``: its logical
    line, or, when its brackets never close, the lines below it that are indented deeper."""
    starts: list[bool] = []
    depth, quote, cont = 0, None, False
    for line in lines:
        starts.append(depth == 0 and quote is None and not cont)
        depth, quote, cont = chunking.scan_line(line, depth, quote)
    first = min(max(err, 0), len(lines) - 1)
    while first > 0 and (not starts[first] or _blank(lines[first])):
        first -= 1
    width = len(_indent(lines[first]))
    end = first + 1
    while end < len(lines) and not (starts[end] and not _blank(lines[end])):
        end += 1
    if end == len(lines) and not (depth == 0 and quote is None):
        # Never closed: the statement ends where the indentation comes back (a closing
        # bracket at the statement's own indent still belongs to it).
        end = first + 1
        while end < len(lines):
            line = lines[end]
            if not _blank(line) and len(_indent(line)) <= width and line.lstrip()[:1] not in ")]}":
                break
            end += 1
    while end > first + 1 and _blank(lines[end - 1]):
        end -= 1
    return first, end


def _is_header(lines: list[str], first: int, end: int) -> bool:
    """The statement heads a block: the next line with code is indented deeper. (A header
    with no body yet, `with torch.no_grad():` just typed, is set aside as `pass`.)"""
    width = len(_indent(lines[first]))
    for line in lines[end:]:
        if not _blank(line):
            return len(_indent(line)) > width
    return False


def _candidates(lines: list[str], first: int, end: int) -> list[list[str]]:
    """Ways to make the statement ``lines[first:end]`` parse, least damage first."""
    out: list[list[str]] = []
    header = _is_header(lines, first, end)
    stack: list[str] = []
    quote: str | None = None
    code_end = 0
    last = first
    for k in range(first, end):
        quote, stop = _scan_brackets(lines[k], stack, quote)
        if not _blank(lines[k]):
            last, code_end = k, stop
    if quote is None and (stack or header):
        # Close what is open (`dist.init_process_group(backend="nccl"`), add a missing ':'.
        closers = "".join(_OPENERS[b] for b in reversed(stack))
        line = lines[last]
        head = line[:code_end].rstrip()
        if header and not (head + closers).endswith(":"):
            closers += ":"
        if closers:
            fixed = list(lines)
            fixed[last] = head + closers + line[code_end:]
            out.append(fixed)
    # Set the statement aside: `pass` keeps a block that holds only it a block, `if True:` keeps
    # the block it heads parsed.
    aside = list(lines)
    line = lines[first]
    ending = line[len(line.rstrip("\r\n")) :]
    aside[first] = _indent(line) + (_stand_in_header(line) if header else "pass") + ending
    for k in range(first + 1, end):
        other = lines[k]
        aside[k] = other[len(other.rstrip("\r\n")) :]
    out.append(aside)
    return out


_DEF_NAME = re.compile(r"\s*(?:async\s+)?def\s+([A-Za-z_][A-Za-z0-9_]*)")
_CLASS_NAME = re.compile(r"\s*class\s+([A-Za-z_][A-Za-z0-9_]*)")


def _stand_in_header(line: str) -> str:
    """A header that parses in place of a broken one: the function or class keeps its name
    (its body stays its scope in the facts), any other block becomes ``if True:``."""
    m = _DEF_NAME.match(line)
    if m is not None:
        return f"def {m.group(1)}(*args, **kwargs):"
    m = _CLASS_NAME.match(line)
    if m is not None:
        return f"class {m.group(1)}:"
    return "if True:"


def _error_line(exc: SyntaxError, line_base: int, n: int) -> int:
    if isinstance(exc, IndentationError):
        m = _BLOCK_AFTER.search(exc.msg or "")
        if m is not None:  # the header without a body, not the line after it
            return min(max(int(m.group(1)) - 1 + line_base, 0), n - 1)
    return min(max((exc.lineno or 1) - 1 + line_base, 0), n - 1)


def _try_parse(lines: list[str], member_of: str | None) -> ast.Module | SyntaxError | None:
    src = "".join(lines)
    if member_of is not None:
        src = MEMBER_PREFIX + src
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return ast.parse(src)
    except SyntaxError as exc:
        return exc
    except (ValueError, RecursionError, MemoryError):
        return None


def repair(
    lines: list[str],
    member_of: str | None,
    line_base: int,
    exc: SyntaxError,
    aside_only: bool = False,
) -> Repair | None:
    """The chunk parsed with its unparsable statements repaired or set aside (see above);
    ``aside_only``: set aside, never closed or completed."""
    if not lines or "\x00" in "".join(lines):
        return None
    current = list(lines)
    touched: set[int] = set()
    closed = False  # a statement before this one was carried on from its closed form
    for _ in range(_REPAIR_TRIES):
        first, end = _statement_at(current, _error_line(exc, line_base, len(current)))
        touched.update(range(first, end))
        next_exc: SyntaxError | None = None
        chosen: list[str] | None = None
        candidates = _candidates(current, first, end)
        if aside_only:
            candidates = candidates[-1:]
        for cand in candidates:
            got = _try_parse(cand, member_of)
            if isinstance(got, ast.Module):
                aside = not closed and cand is candidates[-1]
                return Repair(got, frozenset(touched), tuple(cand), aside)
            if got is None:
                return None
            if next_exc is None or (got.lineno or 0) > (next_exc.lineno or 0):
                # Carry on from the candidate that got furthest.
                chosen, next_exc = cand, got
        if chosen is None or next_exc is None or chosen == current:
            return None
        closed = closed or chosen is not candidates[-1]
        current, exc = chosen, next_exc
    return None


def set_aside(
    lines: list[str], line_base: int, exc: SyntaxError
) -> tuple[tuple[str, ...], frozenset[int]]:
    """What :func:`repair` with ``aside_only`` tries first: the chunk's lines with the statement
    at the error set aside, and the lines changed (no parse: a caller that has parsed these
    lines before can skip the repair)."""
    first, end = _statement_at(lines, _error_line(exc, line_base, len(lines)))
    return tuple(_candidates(lines, first, end)[-1]), frozenset(range(first, end))
