"""The server's heap between keystrokes (ddp_lsp/lsp/heap.py): the frozen heap holds no
garbage, however many edits; a full collection happens only after a large build, when idle."""

from __future__ import annotations

import asyncio
import gc
from types import SimpleNamespace as NS
from typing import Any

from ddp_lsp.core import document
from ddp_lsp.lsp.heap import HeapKeeper
from ddp_lsp.lsp.state import ServerState
from tests.core.test_no_cycles import TEXT

URI = "file:///tmp/heap_test.py"
NAME_LINE = 10  # `    is_master = rank == 0`: an identifier of a function body


def _insert(line: int, col: int, text: str) -> Any:
    return NS(
        range=NS(start=NS(line=line, character=col), end=NS(line=line, character=col)), text=text
    )


def _delete(line: int, col: int) -> Any:
    return NS(
        range=NS(start=NS(line=line, character=col), end=NS(line=line, character=col + 1)), text=""
    )


def _frozen_garbage_after(edits: int) -> tuple[int, ServerState]:
    """Unreachable objects left in the heap after ``edits`` keystrokes analysed as the server
    analyses them (on its event loop, settling the heap after each publication)."""

    async def run() -> ServerState:
        state = ServerState(lambda uri, v, d: None, lambda m, e: None)
        unit = state.open(URI, TEXT, 1, "python")
        await asyncio.sleep(0)  # the flush callback: analyse, publish, settle
        assert unit.analysed_version == 1
        assert TEXT.split("\n")[NAME_LINE].startswith("    is_master")
        for version in range(2, edits + 2):
            # A character typed into `is_master` and deleted: each re-runs the chunk's rules.
            change = _insert(NAME_LINE, 6, "x") if version % 2 == 0 else _delete(NAME_LINE, 6)
            state.change(URI, version, [change])
            await asyncio.sleep(0)
            assert unit.analysed_version == version
        return state

    gc.unfreeze()
    gc.collect()  # start from a heap without garbage
    state = asyncio.run(run())
    gc.unfreeze()
    return gc.collect(), state


def test_the_frozen_heap_holds_no_garbage_however_many_edits() -> None:
    few, state_few = _frozen_garbage_after(4)
    many, state_many = _frozen_garbage_after(60)
    assert state_many.heap.settles == 61
    # Freezing each edit's cycles (a ChunkContext and what it held, closures) made this grow
    # by hundreds of objects per keystroke; now each edit's garbage is collected before the
    # heap is frozen again, so 60 edits leave no more than 4 do.
    assert many <= few + 50, (few, many)


def test_a_settle_after_a_large_build_freezes_without_a_full_collection() -> None:
    keeper = HeapKeeper()
    collections: list[int] = []

    def note(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            collections.append(info["generation"])

    async def run() -> None:
        keeper.settle()  # the first: the start-up heap is frozen unscanned
        assert collections == []
        keeper.settle()  # an ordinary edit: collects what is not frozen
        assert collections == [2]
        document.promotions += 1  # as gc_paused does after building a large tree
        collections.clear()
        keeper.settle()
        assert collections == []  # the whole heap is unfrozen now: no collection over it
        assert keeper.full_collections == 0  # owed, once no edit comes for a while
        keeper.settle()  # the next keystroke's objects alone: collected again
        assert collections == [2]
        keeper._on_idle()
        assert keeper.full_collections == 1
        collections.clear()
        keeper.settle()  # nothing owed any more: collect, freeze, no idle collection armed
        assert collections == [2] and keeper._idle is None

    gc.callbacks.append(note)
    try:
        asyncio.run(run())
    finally:
        gc.callbacks.remove(note)
        gc.unfreeze()


def test_a_pause_after_a_publication_starts_importing_what_a_keystroke_would(
    monkeypatch: Any,
) -> None:
    import sys
    import threading

    from ddp_lsp.lsp import heap

    name = "tests.lsp._preload_probe"
    monkeypatch.setattr(heap, "PRELOAD", (name,))
    monkeypatch.setattr(heap, "_preloaded", False)
    monkeypatch.setattr(heap, "PRELOAD_IDLE_S", 0.01)
    done = threading.Event()
    probe = type(sys)(name)
    finder_calls: list[str] = []

    class Finder:
        def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
            if fullname != name:
                return None
            finder_calls.append(threading.current_thread().name)
            import importlib.util

            class Loader:
                def create_module(self, spec: Any) -> Any:
                    return probe

                def exec_module(self, module: Any) -> None:
                    done.set()

            return importlib.util.spec_from_loader(fullname, Loader())

    monkeypatch.setattr(sys, "meta_path", [Finder(), *sys.meta_path])

    async def run() -> None:
        state = ServerState(lambda uri, v, d: None, lambda m, e: None)
        state.open(URI, TEXT, 1, "python")
        await asyncio.sleep(0)  # analysed and published: the import starts after a pause
        assert not heap._preloaded
        await asyncio.sleep(0.05)

    asyncio.run(run())
    assert done.wait(10)
    assert finder_calls == ["ddp-lsp-preload"]
    monkeypatch.delitem(sys.modules, name, raising=False)


def test_typing_without_a_pause_does_not_start_the_import(monkeypatch: Any) -> None:
    """The import thread holds the GIL while it runs: not while keystrokes keep coming."""
    from ddp_lsp.lsp import heap

    monkeypatch.setattr(heap, "_preloaded", False)
    monkeypatch.setattr(heap, "PRELOAD_IDLE_S", 60.0)
    started: list[bool] = []
    monkeypatch.setattr(heap, "preload_in_background", lambda done: started.append(True))

    async def run() -> None:
        state = ServerState(lambda uri, v, d: None, lambda m, e: None)
        state.open(URI, TEXT, 1, "python")
        await asyncio.sleep(0)
        first = state.preload._timer
        assert first is not None
        pos = NS(line=0, character=0)
        state.change(URI, 2, [NS(range=NS(start=pos, end=pos), text="#")])
        await asyncio.sleep(0)
        assert state.preload._timer is not None and state.preload._timer is not first
        assert first.cancelled()  # each analysis pushes the pause back
        state.preload._fire()  # the pause came
        assert started == [True] and state.preload._timer is None

    asyncio.run(run())


def test_a_finished_background_import_is_frozen_unscanned() -> None:
    """The preload thread's modules (libcst: a 23 ms collection) are frozen by the next
    settle without a collection scanning them; the idle full collection is owed instead."""
    collections: list[int] = []

    def note(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            collections.append(info["generation"])

    async def run() -> None:
        keeper = HeapKeeper()
        gc.disable()  # only the keeper's own collections (gc.collect runs while disabled)
        keeper.settle()  # the first settle: freezes unscanned, owes the idle collection
        keeper.collect_all()
        collections.clear()
        keeper.settle()
        assert collections == [2]  # this edit's objects only
        collections.clear()
        keeper.imported()
        keeper.settle()
        assert collections == [] and keeper._owed and keeper._idle is not None
        keeper.settle()
        assert collections == [2]
        keeper._idle.cancel()
        # The import finished, then the idle full collection scanned its objects: the next
        # settle collects this edit's objects only and owes nothing more.
        keeper.imported()
        keeper.collect_all()
        collections.clear()
        keeper.settle()
        assert collections == [2] and not keeper._owed

    gc.callbacks.append(note)
    try:
        asyncio.run(run())
    finally:
        gc.enable()
        gc.callbacks.remove(note)
        gc.unfreeze()
