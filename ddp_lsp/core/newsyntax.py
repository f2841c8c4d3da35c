"""Whether a newer Python surely rejects a chunk too, decided without libcst (f-strings).

A chunk that ``ast`` rejects is asked of libcst when its broken statement holds a construct of
a newer grammar (``core/document.py``): code valid only in a newer Python is then skipped, not
reported. Most such statements are half-typed f-strings (``print(f"step {st``), which no grammar
accepts, and asking libcst costs its import (0.12-0.25 s, once) and a parse of the chunk per
keystroke (a failing 17-line function: 0.29 ms; this module's answer: 0.15 ms).
:func:`newer_grammar_rejects` answers for the chunks whose only possible newer constructs are
f-strings and t-strings: it lexes them as Python 3.12 does (PEP 701: any quotes, comments and
line breaks inside replacement fields), and

- an f-string, t-string or string left open (the end of the chunk reached inside it, or a line
  break in a single-quoted literal part) is an error in every grammar;
- otherwise every f-string and t-string is replaced by a plain string literal, which is valid
  wherever they are; what then still does not parse (a bracket left open, an operator without
  its operand) is not parsed by a newer grammar either (the rest of the chunk is read the same
  by both).

Anything it does not model exactly (a backslash inside a replacement field or a format spec,
``\\{``, ``{{`` in a format spec, a lone ``}``) returns False: libcst is asked, as before. So the
answer True is only given when a newer grammar rejects the chunk (``tests/core/test_newsyntax.py``
checks it against libcst on every prefix of typed statements).
"""

from __future__ import annotations

import ast
import re
import warnings

# What Pythons newer than the running one accept and it does not (the one definition, used by
# ``core/document.py`` too): `type X = ...` anywhere in a line (after `;` or `:` too) and
# `def f[T]` / `class C[T]` (3.12), `except A, B:` without brackets (3.14), and f-strings
# (3.12: quotes reused, backslashes, comments) and t-strings (3.14). Each pattern matches at
# least every statement holding the construct (more is safe: libcst is then asked).
NEWER_CONSTRUCTS = (
    r"\btype(?:\s|\\)+(?:[^\W\d]|[^\x00-\x7f])"  # `type` then a name: `type X`
    r"|\b(?:def|class)\s+\w+\s*\["
    r"|\bexcept\b[^:]*[,\[(]"  # a comma before the clause's ':' (or a bracket: maybe one)
)
NEWER_STRINGS = r"""(?<![\w.])(?:[fFtT][rR]?|[rR][fFtT])["']"""
NEWER_MARKERS = re.compile(f"{NEWER_CONSTRUCTS}|{NEWER_STRINGS}")
# A chunk holding a newer construct that is not a string is left to libcst.
_OTHER = re.compile(NEWER_CONSTRUCTS)
_PREFIXES = frozenset(
    {"r", "u", "b", "f", "t", "br", "rb", "fr", "rf", "tr", "rt"}
)  # lower-cased; "f"/"t" among them make an f-string / t-string
# Where code outside strings can change state: a comment, a line continuation, a quote, or a
# word of one or two prefix letters right before a quote.
_TOP = re.compile(r"""[#\\'"]|\b[rRbBuUfFtT]{1,2}(?=['"])""")
_WORD = re.compile(r"\w+")
_CLOSER = {"(": ")", "[": "]", "{": "}"}
# SyntaxError messages of the grammar itself (no rule matched, a bracket left open).
_STRUCTURAL = re.compile(
    r"invalid syntax|'.' was never closed|unexpected EOF|unterminated|expected|unmatched"
    r"|closing parenthesis|unexpected indent|unindent"
)


class _Unknown(Exception):
    """Something the lexer does not model exactly: ask libcst."""


class _Open(Exception):
    """A string left open: an error in every grammar."""


def newer_grammar_rejects(src: str) -> bool:
    """True when no newer Python parses ``src`` either (which ``ast`` rejected), as far as
    this module can tell without libcst; False when libcst must be asked."""
    if _OTHER.search(src):
        return False
    try:
        blanked = _Lexer(src).blanked()
    except _Open:
        return True
    except (_Unknown, RecursionError):
        return False
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ast.parse(blanked)
    except SyntaxError as exc:
        # Only where the grammar itself fails: libcst's parser does not make the checks
        # CPython's does beyond it (`"" = 1`: "cannot assign to literal"), so it is asked then.
        return _STRUCTURAL.match(exc.msg or "") is not None
    except (ValueError, RecursionError, MemoryError):
        return False
    return False  # parses with plain strings: only libcst can say whether the f-strings do


class _Lexer:
    def __init__(self, src: str) -> None:
        self.src = src
        self.n = len(src)

    def blanked(self) -> str:
        """``src`` with every f-string and t-string replaced by a plain string literal (the
        same line breaks: ``\"\"\"`` around them when it spans lines)."""
        src = self.src
        out: list[str] = []
        last = i = 0
        while True:
            m = _TOP.search(src, i)
            if m is None:
                break
            c = m.group()
            j = m.start()
            if c == "#":
                i = self._line_end(j)
            elif c == "\\":
                i = self._after_backslash(j)
            else:
                prefix = "" if c in "'\"" else c
                end = self.string(j + len(prefix), prefix.lower())
                if "f" in prefix.lower() or "t" in prefix.lower():
                    breaks = src.count("\n", j, end) + src.count("\r", j, end)
                    out.append(src[last:j])
                    # A space between it and a quote next to it: `f"{x}"""` is two strings,
                    # `""""` would open a triple-quoted one (a line's indentation is kept: a
                    # space goes before it only after a quote).
                    before = " " if src[j - 1 : j] in ("'", '"') else ""
                    after = " " if src[end : end + 1] in ("'", '"') else ""
                    blank = '""' if not breaks else '"""' + "\n" * breaks + '"""'
                    out.append(before + blank + after)
                    last = end
                i = end
        out.append(src[last:])
        return "".join(out)

    def _line_end(self, j: int) -> int:
        ends = [k for k in (self.src.find("\n", j), self.src.find("\r", j)) if k >= 0]
        return min(ends) if ends else self.n

    def _after_backslash(self, j: int) -> int:
        return j + 3 if self.src.startswith("\r\n", j + 1) else j + 2

    def string(self, i: int, prefix: str) -> int:
        """The index after the string literal whose opening quote is at ``i``."""
        src = self.src
        quote = src[i : i + 3] if src[i : i + 3] in ('"""', "'''") else src[i]
        single = len(quote) == 1
        formatted = "f" in prefix or "t" in prefix
        j = i + len(quote)
        while True:
            if j >= self.n:
                raise _Open
            c = src[j]
            if src.startswith(quote, j):
                return j + len(quote)
            if c == "\\":
                if formatted and src[j + 1 : j + 2] in ("{", "}"):
                    raise _Unknown
                j = self._after_backslash(j)
            elif c in "\r\n":
                if single:
                    raise _Open
                j += 1
            elif formatted and c == "{":
                j = j + 2 if src.startswith("{", j + 1) else self.field(j + 1, quote)
            elif formatted and c == "}":
                if not src.startswith("}", j + 1):
                    raise _Unknown  # a lone '}'
                j += 2
            else:
                j += 1

    def field(self, j: int, quote: str) -> int:
        """A replacement field from after its ``{`` in an f-string closed by ``quote``: the
        index after its ``}``."""
        src = self.src
        stack: list[str] = []
        while True:
            if j >= self.n:
                raise _Open
            c = src[j]
            if c in "([{":
                stack.append(_CLOSER[c])
                j += 1
            elif c in ")]}":
                if not stack:
                    if c == "}":
                        return j + 1
                    raise _Open  # `f"{x)}"`: unmatched in every grammar
                if stack.pop() != c:
                    raise _Open  # `(]`: mismatched in every grammar
                j += 1
            elif c == "#":
                j = self._line_end(j)
            elif c == "\\":
                raise _Unknown
            elif c in "'\"":
                j = self.string(j, "")
            elif c.isalnum() or c == "_" or not c.isascii():
                m = _WORD.match(src, j)
                end = m.end() if m is not None else j + 1
                word = src[j:end].lower()
                if src[end : end + 1] in ("'", '"') and word in _PREFIXES:
                    j = self.string(end, word)
                else:
                    j = end
            elif not stack and c == ":":
                return self.spec(j + 1, quote)
            elif not stack and c == "!" and not src.startswith("!=", j):
                j += 1  # a conversion (`!r`): its name, then ':' or '}'
            else:
                j += 1

    def spec(self, j: int, quote: str) -> int:
        """A format spec from after its ``:``: the index after the field's ``}``."""
        src = self.src
        while True:
            if j >= self.n or src.startswith(quote, j):
                raise _Open  # the f-string ends inside its field: an error in every grammar
            c = src[j]
            if c == "}":
                return j + 1
            if c == "{":
                if src.startswith("{", j + 1):
                    raise _Unknown
                j = self.field(j + 1, quote)
            elif c == "\\":
                raise _Unknown
            else:
                j += 1  # a line break too: some 3.12 and 3.13 releases accept one here
