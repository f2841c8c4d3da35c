"""An opt-in per-edit trace of the server: what each keystroke cost it, in wall and CPU time.

Set ``DDP_LSP_TRACE_EDITS`` to a file path and the server appends one line per published
version of an edited document: the version, the wall-clock and thread CPU milliseconds from
its ``didChange`` reaching the handler to the publication written to the client, how many
chunks ran their rules, and, over the same interval, the cyclic collections by generation and
their milliseconds, and the server thread's voluntary and involuntary context switches (a
voluntary one inside an edit is a wait: for the GIL held by another thread of the server; an
involuntary one, the CPU taken by another process). Off by default (nothing is timed then).
The shared latency harness times the same edits from the client's side: the difference is the
pipe and the client, and CPU below wall is the machine's load (docs/performance.md, *Server
CPU per edit, traced*).
"""

from __future__ import annotations

import gc
import os
import time
from typing import Any, TextIO

TRACE_ENV = "DDP_LSP_TRACE_EDITS"

try:
    import resource

    def _switches() -> tuple[int, int]:
        ru = resource.getrusage(getattr(resource, "RUSAGE_THREAD", resource.RUSAGE_SELF))
        return ru.ru_nvcsw, ru.ru_nivcsw

except ImportError:  # Windows

    def _switches() -> tuple[int, int]:
        return 0, 0


class EditTrace:
    """Times each edited version from its ``didChange`` to its publication."""

    def __init__(self, out: TextIO, owns_out: bool = False) -> None:
        self.out = out
        self._owns_out = owns_out  # close() closes it (the file the environment named)
        # (uri, version) -> (wall, CPU, collections by generation, collection ms, switches)
        self.started: dict[tuple[str, int], tuple[Any, ...]] = {}
        self.collections = [0, 0, 0]
        self.gc_ms = 0.0
        self._gc_began = 0.0
        gc.callbacks.append(self._on_gc)
        out.write("# version wall_ms cpu_ms rules_ran gc0 gc1 gc2 gc_ms vcsw ivcsw\n")
        out.flush()

    @classmethod
    def from_environment(cls) -> EditTrace | None:
        path = os.environ.get(TRACE_ENV)
        if not path:
            return None
        try:
            return cls(open(path, "a", encoding="utf-8"), owns_out=True)  # noqa: SIM115 (close())
        except OSError:
            return None

    def close(self) -> None:
        """Stop counting collections (the gc callback is removed) and close the file it
        opened; the server calls it at shutdown."""
        if self._on_gc in gc.callbacks:
            gc.callbacks.remove(self._on_gc)
        if self._owns_out:
            self.out.close()

    def _on_gc(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._gc_began = time.perf_counter()
        else:
            self.collections[info["generation"]] += 1
            self.gc_ms += (time.perf_counter() - self._gc_began) * 1e3

    def changed(self, uri: str, version: int | None) -> None:
        if version is not None and (uri, version) not in self.started:
            self.started[(uri, version)] = (
                time.perf_counter(),
                time.thread_time(),
                tuple(self.collections),
                self.gc_ms,
                _switches(),
            )

    def published(self, uri: str, version: int | None, rules_ran: int) -> None:
        if version is None:
            return
        begun = self.started.pop((uri, version), None)
        if begun is None:
            return
        # Older versions never published (superseded while waiting) are forgotten.
        for key in [k for k in self.started if k[0] == uri and k[1] < version]:
            del self.started[key]
        wall = (time.perf_counter() - begun[0]) * 1e3
        cpu = (time.thread_time() - begun[1]) * 1e3
        gcs = " ".join(str(b - a) for a, b in zip(begun[2], self.collections, strict=True))
        vol, invol = (b - a for a, b in zip(begun[4], _switches(), strict=True))
        self.out.write(
            f"{version} {wall:.3f} {cpu:.3f} {rules_ran} {gcs} {self.gc_ms - begun[3]:.3f} "
            f"{vol} {invol}\n"
        )
        self.out.flush()
