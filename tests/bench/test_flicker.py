"""bench/flicker.py: what it counts as a flicker, on a module of our own."""

from __future__ import annotations

import pytest

from bench import flicker
from ddp_lsp.core import document
from ddp_lsp.core.settings import Settings
from tests.core.test_incremental import CALLED_BY_RANK_ZERO as TEXT


def test_statement_starts_are_indented_lines_outside_brackets() -> None:
    lines = [
        "def f(x,\n",
        "      y):\n",
        "    a = g(\n",
        "        1)\n",
        "    # c\n",
        "    b = 2\n",
    ]
    assert flicker.statement_starts(lines) == [2, 5]


def test_a_half_typed_collective_is_no_flicker(monkeypatch: pytest.MonkeyPatch) -> None:
    """Typed into `evaluate` (called on rank 0 only), the collective reaches `main`'s DDP103
    once it parses; while it is half typed nothing outside `evaluate` changes. With the module
    told the repaired tree's facts (`dist.all_reduce(` closed) the flicker is reported."""
    settings = Settings()
    stmt = "dist.all_reduce(loss, op=dist.ReduceOp.SUM)"
    assert flicker.trial(TEXT, 4, stmt, settings) is None
    monkeypatch.setattr(document, "_aside_facts", lambda *args: None)
    got = flicker.trial(TEXT, 4, stmt, settings)
    assert got is not None and got[0] == "dist.all_reduce("
    assert [f[0] for f in got[1]] == ["DDP103"]  # type: ignore[index]
