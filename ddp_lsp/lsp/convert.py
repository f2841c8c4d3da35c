"""Positions between LSP and the core: the only place that knows UTF-8 and UTF-16.

The core speaks 0-based lines and *code-point* columns. LSP columns are counted in the
negotiated ``positionEncoding``: UTF-16 code units unless the client offered UTF-8 or UTF-32.
An emoji is one code point, two UTF-16 units and four UTF-8 bytes; a CJK character is one
code point, one UTF-16 unit and three UTF-8 bytes. ASCII lines (nearly every line of Python)
take a fast path where all three agree.

Out-of-range positions are clamped, as the specification asks: a character past the end of a
line means the end of the line, a line past the end of the document means its end. A column
that falls inside a character (half a surrogate pair) is rounded down to its start.
"""

from __future__ import annotations

from collections.abc import Sequence

from ddp_lsp.core.types import Pos

UTF8 = "utf-8"
UTF16 = "utf-16"
UTF32 = "utf-32"
ENCODINGS = (UTF8, UTF16, UTF32)


def _units(ch: str, encoding: str) -> int:
    cp = ord(ch)
    if encoding == UTF16:
        return 2 if cp > 0xFFFF else 1
    # UTF-8
    if cp < 0x80:
        return 1
    if cp < 0x800:
        return 2
    if cp < 0x10000:
        return 3
    return 4


def _body(line: str) -> str:
    """The line without its line break (LSP columns never count the break)."""
    if line.endswith("\r\n"):
        return line[:-2]
    if line.endswith(("\n", "\r")):
        return line[:-1]
    return line


class Codec:
    """Converts columns for one negotiated encoding."""

    def __init__(self, encoding: str = UTF16) -> None:
        if encoding not in ENCODINGS:
            raise ValueError(f"unsupported position encoding {encoding!r}")
        self.encoding = encoding

    # -- one column ----------------------------------------------------------------------------

    def to_core_col(self, line: str, character: int) -> int:
        """LSP column (in this encoding) -> code-point column, clamped to the line's body."""
        body = _body(line)
        if character <= 0:
            return 0
        if self.encoding == UTF32 or body.isascii():
            return min(character, len(body))
        units = 0
        for i, ch in enumerate(body):
            units += _units(ch, self.encoding)
            if units > character:
                return i  # inside this character: round down to its start
            if units == character:
                return i + 1
        return len(body)

    def to_lsp_col(self, line: str, col: int) -> int:
        """Code-point column -> LSP column in this encoding, clamped to the line's body."""
        body = _body(line)
        col = max(0, min(col, len(body)))
        if self.encoding == UTF32 or body.isascii():
            return col
        head = body[:col]
        if self.encoding == UTF16:
            # Each astral character is one extra code unit (a surrogate pair).
            return col + sum(1 for ch in head if ord(ch) > 0xFFFF)
        return len(head.encode("utf-8", "surrogatepass"))

    # -- positions -----------------------------------------------------------------------------

    def to_core(self, lines: Sequence[str], line: int, character: int) -> Pos:
        """An LSP position -> a core position, clamped to the document."""
        if line < 0:
            return Pos(0, 0)
        if line >= len(lines):
            last = len(lines) - 1
            return Pos(last, len(_body(lines[last])))
        return Pos(line, self.to_core_col(lines[line], character))

    def to_lsp(self, lines: Sequence[str], pos: Pos) -> tuple[int, int]:
        """A core position -> (line, character) in this encoding, clamped to the document."""
        if pos.line >= len(lines):
            last = len(lines) - 1
            return last, self.to_lsp_col(lines[last], len(lines[last]))
        if pos.line < 0:
            return 0, 0
        return pos.line, self.to_lsp_col(lines[pos.line], pos.col)

    def range_dict(self, lines: Sequence[str], start: Pos, end: Pos) -> dict[str, dict[str, int]]:
        """A JSON-ready LSP ``Range`` (built as dicts: publishing skips the attrs round trip)."""
        sl, sc = self.to_lsp(lines, start)
        el, ec = self.to_lsp(lines, end)
        return {"start": {"line": sl, "character": sc}, "end": {"line": el, "character": ec}}


def choose_encoding(offered: Sequence[str] | None) -> str:
    """The client's first offered encoding that we support; UTF-16 when it offers none."""
    for enc in offered or ():
        if str(enc) in ENCODINGS:
            return str(enc)
    return UTF16
