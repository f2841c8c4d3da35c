"""An opt-in per-edit trace of the server: what each keystroke cost it, in wall and CPU time.

Set ``DDP_LSP_TRACE_EDITS`` to a file path and the server appends one line per published
version of an edited document: the version, the wall-clock and thread CPU milliseconds from
its ``didChange`` reaching the handler to the publication written to the client, and how many
chunks ran their rules. Off by default (nothing is timed then). The shared latency harness
times the same edits from the client's side: the difference is the pipe and the client, and
CPU below wall is the machine's load (docs/performance.md, *Server CPU per edit, traced*).
"""

from __future__ import annotations

import os
import time
from typing import TextIO

TRACE_ENV = "DDP_LSP_TRACE_EDITS"


class EditTrace:
    """Times each edited version from its ``didChange`` to its publication."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.started: dict[tuple[str, int], tuple[float, float]] = {}
        out.write("# version wall_ms cpu_ms rules_ran\n")
        out.flush()

    @classmethod
    def from_environment(cls) -> EditTrace | None:
        path = os.environ.get(TRACE_ENV)
        if not path:
            return None
        try:
            return cls(open(path, "a", encoding="utf-8"))  # noqa: SIM115 (the server's lifetime)
        except OSError:
            return None

    def changed(self, uri: str, version: int | None) -> None:
        if version is not None:
            self.started.setdefault((uri, version), (time.perf_counter(), time.thread_time()))

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
        self.out.write(f"{version} {wall:.3f} {cpu:.3f} {rules_ran}\n")
        self.out.flush()
