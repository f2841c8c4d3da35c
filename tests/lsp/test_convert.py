"""Position conversion: code points <-> utf-8 / utf-16 / utf-32 columns, clamping, line ends."""

from __future__ import annotations

import pytest

from ddp_lsp.core.document import split_lines
from ddp_lsp.core.types import Pos
from ddp_lsp.lsp.convert import Codec, choose_encoding

LINE = 'x = "中😀\té"  # end\r\n'


@pytest.mark.parametrize(
    ("encoding", "cp", "units"),
    [
        ("utf-16", 5, 5),  # before the CJK character: ASCII so far
        ("utf-16", 6, 6),  # after 中 (one unit)
        ("utf-16", 7, 8),  # after 😀 (a surrogate pair)
        ("utf-16", 8, 9),  # after the tab
        ("utf-8", 6, 8),  # 中 is three bytes
        ("utf-8", 7, 12),  # 😀 is four
        ("utf-8", 9, 15),  # é is two
        ("utf-32", 9, 9),
    ],
)
def test_round_trip(encoding: str, cp: int, units: int):
    codec = Codec(encoding)
    assert codec.to_lsp_col(LINE, cp) == units
    assert codec.to_core_col(LINE, units) == cp


def test_inside_a_surrogate_pair_rounds_down():
    codec = Codec("utf-16")
    assert codec.to_core_col(LINE, 7) == 6  # between the two halves of 😀


def test_clamping_never_counts_the_line_break():
    lines = split_lines("ab\r\ncd\n")
    codec = Codec("utf-16")
    assert codec.to_core(lines, 0, 99) == Pos(0, 2)
    assert codec.to_core(lines, 99, 0) == Pos(2, 0)
    assert codec.to_core(lines, -1, 5) == Pos(0, 0)
    assert codec.to_lsp(lines, Pos(0, 99)) == (0, 2)
    assert codec.to_lsp(lines, Pos(7, 0)) == (2, 0)


def test_negotiation():
    assert choose_encoding(None) == "utf-16"
    assert choose_encoding([]) == "utf-16"
    assert choose_encoding(["utf-8", "utf-16"]) == "utf-8"
    assert choose_encoding(["latin-1", "utf-32"]) == "utf-32"
    with pytest.raises(ValueError):
        Codec("latin-1")
