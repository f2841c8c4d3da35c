"""The server's garbage-collection policy: per keystroke, work in proportion to the edit.

With a 20,000-line file open the heap holds about a million objects (AST nodes, facts,
findings); a full cyclic collection over them takes ~0.4 s. So after each analysis, once its
diagnostics are written, the heap is frozen (``gc.freeze``): automatic collections then only
scan what later edits allocate.

Freezing alone froze each edit's *garbage* too: the reference cycles an analysis leaves (a
``ChunkContext`` and what its rules memoised, closures of ``ast.dump``) never reached a
collection, so the frozen heap grew by ~600 objects per keystroke at 20,000 lines (over
500 edits: 117,000 garbage objects, +20 MB RSS in process, ~40 MB more peak RSS for the
server under the shared harness). Now :meth:`HeapKeeper.settle` first collects what is *not* frozen, which is
what this edit allocated and kept (a few thousand objects: 1-3 ms at 20,000 lines), then
freezes the survivors; the frozen heap holds only live objects and stays the size of the
document's analysis.

Two exceptions: the first settle, and any after building a large tree (a document opened, a big paste)
:func:`ddp_lsp.core.document.gc_paused` moves the young generation to the oldest one
unscanned, which also unfreezes the whole heap (``document.promotions`` counts those). Such a
settle freezes without collecting (a collection would be a full one), and the
garbage frozen with it is reclaimed by one full collection once no edit has come for
:data:`IDLE_COLLECT_S` seconds.
"""

from __future__ import annotations

import asyncio
import gc
import sys
from collections.abc import Callable

IDLE_COLLECT_S = 5.0


def _promotions() -> int:
    # The core is imported after the initialize response (cold start): read it if loaded.
    document = sys.modules.get("ddp_lsp.core.document")
    return getattr(document, "promotions", 0) if document is not None else 0


class HeapKeeper:
    """Collects and freezes after each analysis; a full collection when idle, when owed."""

    def __init__(self) -> None:
        # None: the first settle freezes unscanned too (the server's start-up heap, pygls and
        # the core's modules, is not the first edit's to collect).
        self._seen: int | None = None
        self._owed = False  # objects were frozen unscanned: their cycles wait for a full one
        self._imported = False  # a background import allocated since the last settle
        self._idle: asyncio.TimerHandle | None = None
        self.settles = 0  # analyses settled (tests)
        self.full_collections = 0  # idle full collections run (tests)

    def settle(self) -> None:
        """After an analysis's diagnostics are written: collect this edit's garbage, freeze."""
        self.settles += 1
        promotions = _promotions()
        if promotions != self._seen or self._imported:
            # A large build unfroze the heap since the last settle, or an import on the
            # preload thread left its modules unscanned (libcst: a 23 ms collection): collecting
            # now would scan all of it. Freeze it as it is; the idle collection reclaims cycles.
            self._seen = promotions
            self._imported = False
            self._owed = True
            gc.freeze()
        else:
            gc.collect()  # only what is not frozen: this edit's objects
            gc.freeze()
        if self._owed:
            self._arm()  # pushed back by every edit: runs once typing pauses

    def imported(self) -> None:
        """A background import finished (on the event loop): the next settle freezes its
        objects without scanning them."""
        self._imported = True

    def _arm(self) -> None:
        if self._idle is not None:
            self._idle.cancel()
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop (tests driving the state directly): collect now
            self.collect_all()
            return
        self._idle = loop.call_later(IDLE_COLLECT_S, self._on_idle)

    def _on_idle(self) -> None:
        self._idle = None
        self.collect_all()

    def collect_all(self) -> None:
        """One full collection of the whole heap (~0.4 s at 20,000 lines), then freeze."""
        gc.unfreeze()
        gc.collect()
        gc.freeze()
        self._owed = False
        self._imported = False  # a background import's objects were scanned just now
        self._seen = _promotions()
        self.full_collections += 1


# -- imports the keystroke path would otherwise pay for ------------------------------------------

# libcst answers whether a chunk that ``ast`` rejects parses in a newer Python
# (core/document.py), for the few chunks that core/newsyntax.py cannot decide alone (half-typed
# f-strings it decides: no grammar accepts them). Importing it costs 0.12-0.25 s of CPU: on the
# event loop, one keystroke's wait (measured: the slowest edit of a 200-edit run at 1,500 and at
# 20,000 lines, when every half-typed f-string asked libcst). It is imported on a thread once
# typing pauses for PRELOAD_IDLE_S: started right after the first diagnostics, as it was, the
# thread held the GIL between the first keystrokes' messages, and each of the first 10-20
# edits of a typing run waited for it (up to the 5 ms switch interval, several times: the
# slowest edits of a 1,500-line run, docs/performance.md).
PRELOAD = ("libcst",)
PRELOAD_IDLE_S = 1.0
_preloaded = False


def preload_in_background(done: Callable[[], None] | None = None) -> None:
    """Start importing :data:`PRELOAD` on a daemon thread (once per process); ``done`` is
    called on the running event loop once it has finished."""
    global _preloaded
    if _preloaded:
        return
    _preloaded = True
    import threading

    loop = asyncio.get_running_loop() if done is not None else None

    def run() -> None:
        import importlib

        for name in PRELOAD:
            try:
                importlib.import_module(name)
            except Exception:  # an unusable libcst fails again, and is handled, where it is used
                pass
        if loop is not None and done is not None:
            try:
                loop.call_soon_threadsafe(done)
            except RuntimeError:  # the loop has closed: the server is exiting
                pass

    threading.Thread(target=run, name="ddp-lsp-preload", daemon=True).start()


class IdlePreload:
    """Calls :func:`preload_in_background` once no analysis has run for ``PRELOAD_IDLE_S``."""

    def __init__(self, heap: HeapKeeper) -> None:
        self.heap = heap
        self._timer: asyncio.TimerHandle | None = None

    def analysed(self) -> None:
        """An analysis was published: (re)arm the pause, until the import has started."""
        if _preloaded:
            return
        if self._timer is not None:
            self._timer.cancel()
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop (tests driving the state directly)
            return
        self._timer = loop.call_later(PRELOAD_IDLE_S, self._fire)

    def _fire(self) -> None:
        self._timer = None
        preload_in_background(self.heap.imported)
