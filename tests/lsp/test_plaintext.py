"""The plain-text representation of documents too large to analyse: incremental line edits.

Property: splicing the line list gives exactly what re-splitting the whole edited text gives,
line breaks of every kind included (a CR next to an inserted LF merges, as LSP says).
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from ddp_lsp.core.document import split_lines
from ddp_lsp.core.types import Pos
from ddp_lsp.lsp.state import PlainText

ALPHABET = st.sampled_from(["a", "b", " ", "\n", "\r", "\r\n", "é", "😀"])
TEXT = st.lists(ALPHABET, max_size=30).map("".join)


def _pos(lines: list[str], i: int) -> Pos:
    for n, ln in enumerate(lines):
        if i <= len(ln) or n == len(lines) - 1:
            return Pos(n, min(i, len(ln.rstrip("\r\n"))))
        i -= len(ln)
    raise AssertionError


def _index(lines: list[str], p: Pos) -> int:
    return sum(len(ln) for ln in lines[: p.line]) + p.col


@settings(max_examples=400, deadline=None)
@given(TEXT, st.lists(st.tuples(st.integers(0, 40), st.integers(0, 40), TEXT), max_size=8))
def test_line_splicing_equals_a_fresh_split(text: str, edits: list[tuple[int, int, str]]) -> None:
    doc = PlainText(text)
    for a, b, new in edits:
        lines = split_lines(text)
        pa, pb = _pos(lines, a), _pos(lines, b)
        doc.apply_edit(pa, pb, new)
        lo, hi = sorted((_index(lines, pa), _index(lines, pb)))
        text = text[:lo] + new + text[hi:]
        assert doc.lines == split_lines(text)
        assert doc.size == len(text) == len(doc.text)


def test_an_edit_costs_what_it_touches(monkeypatch) -> None:
    # Counted, not timed: each keystroke re-splits only the lines around the edit (at most the
    # edited line and one neighbour on each side), never the 4 MB text.
    from ddp_lsp.lsp import state

    line = "x = torch.ones(3)  # padding padding padding padding padding padding\n"
    doc = PlainText(line * 60_000)  # ~4 MB
    split = state._split_lines
    chars: list[int] = []

    def counting_split(text: str) -> list[str]:
        chars.append(len(text))
        return split(text)

    monkeypatch.setattr(state, "_split_lines", counting_split)
    for i in range(200):
        doc.apply_edit(Pos(30_000, i), Pos(30_000, i), "y")
    assert len(chars) == 200
    assert max(chars) <= 3 * (len(line) + 200), max(chars)
    assert doc.lines[30_000].startswith("y" * 200)
    assert doc.size == len(doc.text) == len(line) * 60_000 + 200
