"""``gc_paused``: after a large tree is built, its nodes leave the young generation unscanned;
after a small one (a keystroke's re-parse) a frozen heap (the server's) stays frozen."""

from __future__ import annotations

import ast
import gc

from ddp_lsp.core.document import _PROMOTE_AT, gc_paused


def _module(functions: int) -> ast.Module:
    return ast.parse("\n".join(f"def f{i}(x):\n    return x + {i}\n" for i in range(functions)))


def test_a_large_tree_leaves_the_young_generation_unscanned() -> None:
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
            tree = _module(5000)
            assert gc.get_count()[0] > _PROMOTE_AT  # far past the young threshold too
        young = gc.get_count()[0]
        more = [[i] for i in range(100)]  # allocations that would start a young collection
    finally:
        gc.callbacks.remove(note)
    assert young < 100  # moved to the oldest generation: no collection waits to scan them
    assert collections == []
    assert tree.body and more


def test_a_small_tree_leaves_a_frozen_heap_frozen() -> None:
    keep = _module(50)
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        with gc_paused():
            tree = _module(50)
            assert gc.get_count()[0] < _PROMOTE_AT
        assert gc.get_freeze_count() >= frozen
    finally:
        gc.unfreeze()
    assert keep.body and tree.body
