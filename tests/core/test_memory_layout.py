"""What an analysed document keeps between analyses (docs/performance.md, "Memory").

The rules' shared traversal of a chunk (:class:`ddp_lsp.core.rule.Index`: every node by type
and each node's parent) is built for the context that checks the chunk and dropped with it:
kept for every chunk it was 12 MB of a 20,000-line file's analysis, and rebuilding it for
the few chunks an edit re-runs costs about 0.07 ms each.

Dropped by reference counting, not by a cycle collection: the server freezes its heap after
each analysis (``gc.freeze``), so a context caught in a reference cycle (its memoised
uniformity analysis referring back to it, a resolver closure passing itself on) stayed, with
its traversal and facts view, for as long as the server ran. The tests run the analysis with
the cycle collector off.
"""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from bench.gen import module
from ddp_lsp.core import rule
from ddp_lsp.core.document import Document
from ddp_lsp.core.engine import analyze
from ddp_lsp.core.settings import Settings
from ddp_lsp.core.types import Pos


def _track(monkeypatch: pytest.MonkeyPatch) -> list[weakref.ref[rule.Index]]:
    built: list[weakref.ref[rule.Index]] = []
    real = rule.Index

    class Tracked(real):  # type: ignore[misc, valid-type]
        def __init__(self, body: object) -> None:
            super().__init__(body)  # type: ignore[arg-type]
            built.append(weakref.ref(self))

    monkeypatch.setattr(rule, "Index", Tracked)
    return built


@pytest.fixture
def no_cycle_collection() -> Iterator[None]:
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


@pytest.mark.usefixtures("no_cycle_collection")
def test_no_chunk_keeps_its_rules_traversal_after_the_analysis(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    built = _track(monkeypatch)
    settings = Settings()
    doc = Document(module(400), settings.rank_model)
    first = analyze(doc, settings)
    assert len(built) >= len(doc.chunks()) // 2  # the rules ran on the chunks
    assert [r for r in built if r() is not None] == []
    # An edit re-runs its chunk with a traversal of its own, dropped again, and the findings
    # are those of a fresh analysis.
    before = len(built)
    line = next(i for i, t in enumerate(doc.lines) if "running = 0.0" in t)
    doc.apply_edit(Pos(line, 0), Pos(line, 0), "    total = 1\n")
    analyze(doc, settings)
    assert len(built) > before
    assert [r for r in built if r() is not None] == []
    doc.apply_edit(Pos(line, 0), Pos(line + 1, 0), "")
    assert analyze(doc, settings).findings == first.findings
