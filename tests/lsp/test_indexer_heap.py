"""The project indexer's heap over a long editing session (ddp_lsp/lsp/indexer.py): each
computation runs without the cycle collector (``index.no_collection``) and the heap is then
frozen (``gc.freeze``), so a reference cycle an update leaves behind would be frozen with the
survivors and never freed. The indexer collects what is not frozen first (what the update
allocated), as the server does after each analysis (lsp/heap.py); after a build it freezes the
whole index unscanned (a collection would walk all of it). And the index forgets the own
facts of file versions no file has any more (a long session kept one per edit)."""

from __future__ import annotations

import gc
import io
import shutil
import weakref
from pathlib import Path

import pytest

from ddp_lsp import project as P
from ddp_lsp.config import Settings
from ddp_lsp.lsp import indexer as indexer_mod

FIXTURES = Path(__file__).resolve().parents[1] / "project" / "fixtures"


class _Cycle:
    """Garbage in a reference cycle, as a parser's recursive closure leaves it."""

    def __init__(self) -> None:
        self.me = self


@pytest.fixture
def ix(tmp_path: Path) -> indexer_mod.Indexer:
    root = tmp_path / "deit"
    shutil.copytree(FIXTURES / "deit", root)
    out = indexer_mod.Indexer(io.BytesIO())
    out.open(1, root, Settings(), False, {})
    return out


def test_an_updates_cyclic_garbage_is_collected_not_frozen(
    ix: indexer_mod.Indexer, monkeypatch: pytest.MonkeyPatch
) -> None:
    dropped: list[weakref.ref[_Cycle]] = []
    real = P.compute

    def leaving_garbage(*args: object, **kwargs: object) -> P.ProjectFacts:
        junk = _Cycle()  # made while the collector is off, as the update's own cycles are
        dropped.append(weakref.ref(junk))
        del junk
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(P, "compute", leaving_garbage)
    folder = ix.folders[1]
    main = (folder.index.root / "main.py").resolve()
    text = main.read_text()
    try:
        for _ in range(3):  # facts change both ways: each update computes
            ix.update(1, [(main, text.replace("DistributedDataParallel(", "identity("))])
            ix.update(1, [(main, text)])
        assert len(dropped) == 6
        # Before, each was frozen with the survivors: alive for as long as the indexer.
        assert [r() for r in dropped] == [None] * 6
    finally:
        gc.unfreeze()


def test_a_build_is_frozen_without_a_collection(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first freeze after indexing a folder does not walk the whole index."""
    collections: list[int] = []
    real_collect = gc.collect

    def counted(*args: int) -> int:
        collections.append(1)
        return real_collect(*args)

    root = tmp_path / "deit"
    shutil.copytree(FIXTURES / "deit", root)
    ix = indexer_mod.Indexer(io.BytesIO())
    monkeypatch.setattr(gc, "collect", counted)
    try:
        ix.open(1, root, Settings(), False, {})
        assert collections == []
        main = (root / "main.py").resolve()
        ix.update(1, [(main, main.read_text().replace("DistributedDataParallel(", "identity("))])
        assert collections == [1]  # an update: its own objects collected
    finally:
        monkeypatch.undo()
        gc.unfreeze()


def test_a_large_update_keeps_the_index_frozen(
    ix: indexer_mod.Indexer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An update that allocates more than no_collection's promotion threshold must not move
    its objects to the oldest generation: that unfreezes the whole index, and the collection
    after the update would walk all of it (about 1 s at 2,000 files)."""
    from ddp_lsp.project import index as index_mod

    frozen_at_collect: list[int] = []
    real_collect = gc.collect
    real = P.compute

    def spying(*args: int) -> int:
        frozen_at_collect.append(gc.get_freeze_count())
        return real_collect(*args)

    def allocating(*args: object, **kwargs: object) -> P.ProjectFacts:
        keep = [[k] for k in range(index_mod._PROMOTE_AT + 10_000)]  # young, tracked
        out = real(*args, **kwargs)  # type: ignore[arg-type]
        kept.append(keep)
        return out

    kept: list[object] = []
    monkeypatch.setattr(P, "compute", allocating)
    monkeypatch.setattr(gc, "collect", spying)
    folder = ix.folders[1]
    main = (folder.index.root / "main.py").resolve()
    try:
        frozen = gc.get_freeze_count()
        assert frozen > 0  # the build's index
        ix.update(1, [(main, main.read_text().replace("DistributedDataParallel(", "identity("))])
        # Before: none frozen when the update's collection ran (the index unfrozen by the move).
        # (Some frozen objects are freed by the update itself: the facts it replaced.)
        assert frozen_at_collect and frozen_at_collect[-1] > frozen // 2
    finally:
        monkeypatch.undo()
        gc.unfreeze()


def test_own_facts_of_old_versions_are_forgotten(ix: indexer_mod.Indexer) -> None:
    index = ix.folders[1].index
    main = (index.root / "main.py").resolve()
    text = main.read_text()
    try:
        for k in range(130):  # a new version of main.py each time
            index.update(main, text + f"\nx_{k} = {k}\n")
            index.own_facts(index.modules["main"])
        live = {s.digest for s in index.modules.values()}
        # At most the versions since the last pruning (every 64 edits) besides the live ones.
        assert len(set(index._own) - live) <= 64
    finally:
        gc.unfreeze()
