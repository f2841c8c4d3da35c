"""The opt-in per-edit trace (DDP_LSP_TRACE_EDITS): one line per published edited version."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from ddp_lsp.lsp.edittrace import TRACE_ENV, EditTrace


def test_off_unless_the_environment_names_a_file(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv(TRACE_ENV, raising=False)
    assert EditTrace.from_environment() is None
    monkeypatch.setenv(TRACE_ENV, str(tmp_path / "trace.txt"))
    trace = EditTrace.from_environment()
    assert trace is not None
    trace.changed("file:///a.py", 2)
    trace.published("file:///a.py", 2, 1)
    trace.out.close()
    lines = (tmp_path / "trace.txt").read_text().splitlines()
    assert lines[0].startswith("#") and lines[1].split()[0] == "2"


def test_a_version_is_timed_from_its_change_to_its_publication() -> None:
    out = io.StringIO()
    trace = EditTrace(out)
    trace.changed("file:///a.py", 2)
    trace.changed("file:///a.py", 3)  # 2 superseded before it was analysed
    trace.published("file:///a.py", 3, 1)
    trace.published("file:///a.py", 2, 1)  # (never happens: 2 was forgotten)
    trace.published("file:///b.py", 7, 0)  # not an edited version: no line
    rows = [line.split() for line in out.getvalue().splitlines()[1:]]
    assert len(rows) == 1
    version, wall, cpu, ran, gc0, gc1, gc2, gc_ms, vol, invol = rows[0]
    assert version == "3" and float(wall) >= 0 and float(cpu) >= 0 and ran == "1"
    assert all(int(n) >= 0 for n in (gc0, gc1, gc2, vol, invol)) and float(gc_ms) >= 0
    assert not trace.started


def test_collections_inside_an_edit_are_counted() -> None:
    import gc

    out = io.StringIO()
    trace = EditTrace(out)
    try:
        trace.changed("file:///a.py", 2)
        gc.collect(1)
        trace.published("file:///a.py", 2, 0)
        trace.changed("file:///a.py", 3)
        trace.published("file:///a.py", 3, 0)
    finally:
        gc.callbacks.remove(trace._on_gc)
    rows = [line.split() for line in out.getvalue().splitlines()[1:]]
    assert rows[0][4:7] == ["0", "1", "0"] and rows[1][4:7] == ["0", "0", "0"]
