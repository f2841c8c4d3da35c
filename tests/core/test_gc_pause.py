"""``gc_paused``: the nodes built while the collector was paused are not scanned by the next
young collection, and a frozen heap (the server's) stays frozen."""

from __future__ import annotations

import ast
import gc

from ddp_lsp.core.document import gc_paused


def _build() -> list[ast.AST]:
    return [ast.parse(f"def f{i}(x):\n    return x + {i}\n") for i in range(300)]


def test_new_objects_leave_the_young_generation_unscanned() -> None:
    assert gc.isenabled()
    was_frozen = gc.get_freeze_count() > 0  # an in-process server test froze the heap
    if was_frozen:
        gc.unfreeze()
    try:
        _check_promoted()
    finally:
        if was_frozen:
            gc.freeze()


def _check_promoted() -> None:
    collections: list[int] = []

    def note(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            collections.append(info["generation"])

    gc.callbacks.append(note)
    try:
        with gc_paused():
            trees = _build()
            assert gc.get_count()[0] > 1000  # far past the young generation's threshold
        young = gc.get_count()[0]
        more = [[i] for i in range(100)]  # allocations that would start a young collection
    finally:
        gc.callbacks.remove(note)
    assert young < 100  # moved to the oldest generation: no collection waits to scan them
    assert collections == []
    assert trees and more


def test_a_frozen_heap_stays_frozen() -> None:
    keep = _build()
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        with gc_paused():
            trees = _build()
        assert gc.get_freeze_count() == frozen
    finally:
        gc.unfreeze()
    assert keep and trees
