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
    trace.close()
    assert trace.out.closed
    lines = (tmp_path / "trace.txt").read_text().splitlines()
    assert lines[0].startswith("#") and lines[1].split()[0] == "2"


def test_a_version_is_timed_from_its_change_to_its_publication() -> None:
    out = io.StringIO()
    trace = EditTrace(out)
    try:
        trace.changed("file:///a.py", 2)
        trace.changed("file:///a.py", 3)  # 2 superseded before it was analysed
        trace.published("file:///a.py", 3, 1)
        trace.published("file:///a.py", 2, 1)  # (never happens: 2 was forgotten)
        trace.published("file:///b.py", 7, 0)  # not an edited version: no line
    finally:
        trace.close()
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
        trace.close()
    rows = [line.split() for line in out.getvalue().splitlines()[1:]]
    assert rows[0][4:7] == ["0", "1", "0"] and rows[1][4:7] == ["0", "0", "0"]


def test_close_removes_the_collection_callback() -> None:
    import gc

    out = io.StringIO()
    trace = EditTrace(out)
    assert trace._on_gc in gc.callbacks
    trace.close()
    assert trace._on_gc not in gc.callbacks and not out.closed  # not the trace's own file
    trace.close()  # twice: nothing more


def test_the_server_closes_its_trace_at_shutdown(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import asyncio
    import gc

    from ddp_lsp.lsp.server import build_server, shutdown

    monkeypatch.setenv(TRACE_ENV, str(tmp_path / "trace.txt"))
    server = build_server()
    trace = server.edit_trace
    assert trace is not None and trace._on_gc in gc.callbacks
    try:
        asyncio.run(shutdown(server, None))
        assert trace._on_gc not in gc.callbacks and trace.out.closed
        assert server.edit_trace is None
    finally:
        trace.close()
