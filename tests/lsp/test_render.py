"""Diagnostics reused across edits for unchanged findings equal freshly built ones."""

from __future__ import annotations

from types import SimpleNamespace as NS
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ddp_lsp.lsp.diagnostics import ALL, DiagnosticSupport, to_diagnostic
from ddp_lsp.lsp.state import ServerState
from tests.lsp.helpers import TRAIN

TEXT = TRAIN + "\n\n" + TRAIN.split("\n\n\n", 1)[1].replace("def train(", "def train2(")


def _change(line: int, col: int, end_col: int, text: str) -> Any:
    return NS(
        range=NS(start=NS(line=line, character=col), end=NS(line=line, character=end_col)),
        text=text,
    )


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 30), st.integers(0, 12), st.sampled_from(["x", "\n", "😀", ""])),
        min_size=1,
        max_size=6,
    )
)
def test_reused_diagnostics_equal_fresh_ones(edits: list[tuple[int, int, str]]) -> None:
    published: list[tuple[int | None, list[dict[str, Any]]]] = []
    state = ServerState(lambda uri, v, d: published.append((v, d)), lambda m, e: None)
    unit = state.open("file:///tmp/render.py", TEXT, 1, "python")  # no loop: analysed at once
    for version, (line, col, text) in enumerate(edits, start=2):
        n = len(unit.doc.lines)
        line = min(line, n - 1)
        state.change(unit.key, version, [_change(line, col, col + (text == ""), text)])
        lines = unit.doc.lines
        fresh = [to_diagnostic(f, lines, state.codec, unit.locate_line) for f in unit.findings]
        assert published[-1] == (version, fresh)


@pytest.mark.parametrize("support", [ALL, DiagnosticSupport(frozenset(), False)])
def test_findings_moved_by_an_edit_above_are_not_converted_again(
    monkeypatch: Any, support: DiagnosticSupport
) -> None:
    """A line inserted at the top moves every finding: each diagnostic is the old one with its
    lines moved (only moved lines are re-rendered), and equals a fresh conversion, for a client
    that shows tags and related locations and for one that shows neither."""
    import ddp_lsp.lsp.state as S

    published: list[tuple[int | None, list[dict[str, Any]]]] = []
    state = ServerState(lambda uri, v, d: published.append((v, d)), lambda m, e: None)
    state.diagnostic_support = support
    unit = state.open("file:///tmp/render.py", TEXT, 1, "python")
    assert any("relatedInformation" in d for d in published[-1][1]) is support.related
    assert len(unit.findings) >= 2
    calls = []

    def counting(*args: Any, **kwargs: Any) -> dict[str, Any]:
        calls.append(args[0])
        return to_diagnostic(*args, **kwargs)

    monkeypatch.setattr(S, "to_diagnostic", counting)
    state.change(unit.key, 2, [_change(0, 0, 0, "# a comment line\n")])
    assert calls == []
    fresh = [
        to_diagnostic(f, unit.doc.lines, state.codec, unit.locate_line, support=support)
        for f in unit.findings
    ]
    assert published[-1] == (2, fresh)


def test_publications_encode_each_diagnostic_once_and_equal_a_plain_encoding(
    monkeypatch: Any,
) -> None:
    """The server's publication JSON (PublicationEncoder) is the plain message's JSON, and a
    diagnostic reused by the next analysis is not encoded again."""
    import json

    import ddp_lsp.lsp.diagnostics as D

    encoder = D.PublicationEncoder()
    encoded: list[dict[str, Any]] = []
    real = D._encode

    def counting(obj: Any) -> str:
        if isinstance(obj, dict):
            encoded.append(obj)
        return real(obj)

    monkeypatch.setattr(D, "_encode", counting)
    bodies: list[str] = []
    published: list[tuple[int | None, list[dict[str, Any]]]] = []

    def publish(uri: str, v: int | None, d: list[dict[str, Any]]) -> None:
        published.append((v, d))
        bodies.append(encoder.encode(uri, v, d))

    state = ServerState(publish, lambda m, e: None)
    uri = "file:///tmp/render.py"
    unit = state.open(uri, TEXT, 1, "python")
    assert len(unit.findings) >= 2 and len(encoded) == len(unit.findings)
    encoded.clear()
    state.change(uri, 2, [_change(30, 0, 0, "x = 1\n")])  # a line below the findings
    assert encoded == []  # every diagnostic reused, its JSON too
    for (v, diags), body in zip(published, bodies, strict=True):
        plain = {
            "jsonrpc": "2.0",
            "method": "textDocument/publishDiagnostics",
            "params": {"uri": uri, "version": v, "diagnostics": diags},
        }
        assert json.loads(body) == plain
    state.close(uri)
    assert json.loads(bodies[-1])["params"]["diagnostics"] == []
    assert encoder._held == {}  # a closed document's JSON is not kept


def test_the_publication_is_sent_before_the_pull_bookkeeping() -> None:
    """A pushing client waits for the publication only: the resultId a pulling client would
    get is computed after it is written."""
    state: ServerState
    seen: list[str | None] = []

    def publish(uri: str, version: int | None, diagnostics: list[dict[str, Any]]) -> None:
        seen.append(state.result_ids.current(uri))

    state = ServerState(publish, lambda m, e: None)
    state.open("file:///tmp/render.py", TEXT, 1, "python")
    state.change("file:///tmp/render.py", 2, [_change(3, 0, 0, "x = 1\n")])
    assert seen == [None, "1"]  # each publication saw the previous analysis's id
    assert state.result_ids.current("file:///tmp/render.py") == "2"
