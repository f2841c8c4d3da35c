"""A long document's first lines get their findings published before the rest is analysed.

The first publication holds final findings (the module facts are the whole module's): every
one of them is in the complete publication that follows, with the same range, rule and
message, and nothing of the first lines is missing from it (no flicker).
"""

from __future__ import annotations

from types import SimpleNamespace as NS
from typing import Any

import pytest

import ddp_lsp.lsp.state as S
from ddp_lsp.core.engine import analyze
from ddp_lsp.lsp.state import ServerState
from tests.lsp.helpers import TRAIN

_HEADER, _BODY = TRAIN.split("\n\n\n", 1)


def _long_text(copies: int) -> str:
    """TRAIN's function ``copies`` times under one header: one DDP201 finding per copy."""
    bodies = [_BODY.replace("def train(", f"def train{i}(") for i in range(copies)]
    return _HEADER + "\n\n\n" + "\n\n".join(bodies)


def _key(d: dict[str, Any]) -> tuple[object, ...]:
    r = d["range"]
    return (
        r["start"]["line"],
        r["start"]["character"],
        r["end"]["line"],
        r["end"]["character"],
        d["code"],
        d["message"],
    )


def _open(monkeypatch: pytest.MonkeyPatch, text: str) -> list[list[dict[str, Any]]]:
    monkeypatch.setattr(S, "FIRST_LOOK_MIN_LINES", 100)
    monkeypatch.setattr(S, "FIRST_LOOK_LINES", 60)
    published: list[list[dict[str, Any]]] = []
    state = ServerState(lambda uri, v, d: published.append(d), lambda m, e: None)
    unit = state.open("file:///tmp/first_look.py", text, 1, "python")  # no loop: at once
    assert not unit.dirty
    expected = analyze(unit.doc, unit.settings, unit.env, project=unit.project).findings
    assert [(f.span.start.line, f.rule_id) for f in unit.findings] == [
        (f.span.start.line, f.rule_id) for f in expected
    ]
    return published


def test_a_long_documents_first_lines_are_published_first_and_stay(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    text = _long_text(20)
    assert len(text.splitlines()) > 100
    published = _open(monkeypatch, text)
    assert len(published) == 2
    first, complete = ({_key(d) for d in p} for p in published)
    assert first, "the first lines hold findings"
    assert first < complete, "the first publication is part of the complete one"
    assert {k for k in complete if k[0] < 60} <= first, "nothing of the first lines is missing"
    assert all(k[0] < 70 for k in first), "only the chunks that start in the first lines"


def test_a_short_document_is_published_once(monkeypatch: pytest.MonkeyPatch) -> None:
    text = _long_text(3)
    assert len(text.splitlines()) <= 100
    published = _open(monkeypatch, text)
    assert len(published) == 1 and published[0]


def test_only_the_first_analysis_is_split(monkeypatch: pytest.MonkeyPatch) -> None:
    text = _long_text(20)
    monkeypatch.setattr(S, "FIRST_LOOK_MIN_LINES", 100)
    monkeypatch.setattr(S, "FIRST_LOOK_LINES", 60)
    published: list[list[dict[str, Any]]] = []
    state = ServerState(lambda uri, v, d: published.append(d), lambda m, e: None)
    unit = state.open("file:///tmp/first_look.py", text, 1, "python")
    before = len(published)
    line = len(unit.doc.lines) - 1
    assert not unit.doc.lines[line].strip()
    edit = NS(
        range=NS(start=NS(line=line, character=0), end=NS(line=line, character=0)),
        text="# the end",
    )
    state.change(unit.key, 2, [edit])
    assert len(published) == before + 1
    assert {_key(d) for d in published[-1]} == {_key(d) for d in published[before - 1]}
