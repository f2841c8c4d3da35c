"""What the server imports before it answers ``initialize`` (docs/performance.md, "Cold start").

The editor waits for the ``initialize`` result before it sends anything else, so everything
imported until then is start-up time: the analysis core, the rules, the project index (the
indexer process imports it, not the server), tomllib and pickle load after the response
(``state.warm_up``), or where they are first used. Each check runs in a fresh interpreter:
this test process has long imported all of them.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

from tests.lsp.rawclient import RawServer

# Modules whose import the first answer must not wait for (a prefix covers its submodules).
DEFERRED = (
    "ddp_lsp.core.document",
    "ddp_lsp.core.engine",
    "ddp_lsp.core.facts",
    "ddp_lsp.core.registry",
    "ddp_lsp.core.env",
    "ddp_lsp.rules",
    "ddp_lsp.project",
    "ddp_lsp.config",
    "ddp_lsp.preflight",
    "ddp_lsp.reporters",
    "ddp_lsp.launch",
    "libcst",
    "tomllib",
    "tempfile",
    "pickle",
)

# Modules only a request of their own imports: not at start, not by warm_up either.
ON_REQUEST = (
    "ddp_lsp.lsp.rankanswer",  # inlay hints, hover, semantic tokens, showRankPaths
    "ddp_lsp.lsp.notebook",  # the first notebook opened
)

_PROBE = textwrap.dedent(
    """
    import asyncio, json, sys
    from lsprotocol import types as lsp
    import ddp_lsp.cli
    from ddp_lsp.lsp import server
    from ddp_lsp.lsp.server import build_server

    async def main():
        ls = build_server()
        params = lsp.InitializeParams(
            capabilities=lsp.ClientCapabilities(),
            root_uri="file:///nonexistent-ddp-lsp-root",
            initialization_options={},
        )
        # As pygls answers the request: its own part, our handler, then the capabilities.
        steps = ls.protocol.lsp_initialize(params)
        handler, args, _ = next(steps)
        handler(*args)
        try:
            steps.send(None)
        except StopIteration as done:
            assert done.value.capabilities.text_document_sync is not None
        before = sorted(sys.modules)  # the response goes out now
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        waiting = sorted(sys.modules)  # warm_up waits for the client's `initialized`
        await server.initialized(ls, lsp.InitializedParams())
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        print(json.dumps([before, waiting, sorted(sys.modules)]))

    asyncio.run(main())
    """
)


def _probe() -> tuple[list[str], list[str], list[str]]:
    proc = subprocess.run(
        [sys.executable, "-I", "-c", _PROBE], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    before, waiting, after = json.loads(proc.stdout.splitlines()[-1])
    return before, waiting, after


def _deferred_in(modules: list[str]) -> list[str]:
    return [m for m in modules if any(m == d or m.startswith(d + ".") for d in DEFERRED)]


def test_initialize_is_answered_without_the_core_the_index_or_the_rules() -> None:
    before, waiting, after = _probe()
    assert _deferred_in(before) == []
    assert _deferred_in(waiting) == []
    # Deferred, not dropped: the core and the rules load on `initialized`, before the first
    # document usually arrives (so its first diagnostics do not pay for them).
    assert "ddp_lsp.core.engine" in after
    assert any(m.startswith("ddp_lsp.rules.") for m in after)
    assert [m for m in after if m in ON_REQUEST] == []


def test_the_server_reads_the_indexer_wire_format_without_the_project_package() -> None:
    # ddp_lsp.lsp.project imports the indexer module for DISK and read_message; the indexer
    # process imports the project package where it uses it.
    code = (
        "import json, sys; from ddp_lsp.lsp import indexer; print(json.dumps(sorted(sys.modules)))"
    )
    proc = subprocess.run(
        [sys.executable, "-I", "-c", code], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert _deferred_in(json.loads(proc.stdout)) == []


# The real server (the entry point, stdio transport, pygls' dispatch) with two hooks that
# append to a file as they run: every message about to be written to stdout (its id, whether
# the analysis core was loaded then, the collector's state) and every call of ``warm_up``.
_TRACED_SERVER = textwrap.dedent(
    """
    import gc, json, sys
    trace = sys.argv.pop(1)
    full = []  # per full collection: how many objects were frozen (not scanned) when it began
    gc.callbacks.append(lambda phase, info: phase == "start" and info["generation"] == 2
                        and full.append(gc.get_freeze_count()))

    def event(kind, **fields):
        fields.update(event=kind, core="ddp_lsp.core.engine" in sys.modules)
        fields.update(gc_enabled=gc.isenabled(), frozen=gc.get_freeze_count())
        fields.update(full_collections=list(full))
        with open(trace, "a") as fh:
            fh.write(json.dumps(fields) + "\\n")

    import pygls.io_
    from ddp_lsp.lsp import server

    write = pygls.io_.StdoutWriter.write

    def traced_write(self, data):  # traced first: the client may read it at once
        message = json.loads(data.split(b"\\r\\n\\r\\n", 1)[1])
        event("sent", id=message.get("id"), method=message.get("method"))
        write(self, data)

    pygls.io_.StdoutWriter.write = traced_write
    warm_up = server.warm_up

    def traced_warm_up():
        event("warm_up")
        warm_up()

    server.warm_up = traced_warm_up
    full.clear()  # the collections of the tracer's own imports above
    from ddp_lsp.__main__ import run

    sys.argv[1:] = ["serve"]
    sys.exit(run())
    """
)


def _traced_server(trace: Path) -> RawServer:
    return RawServer(cmd=[sys.executable, "-I", "-c", _TRACED_SERVER, str(trace)])


def _events(trace: Path) -> list[dict[str, Any]]:
    if not trace.exists():
        return []
    return [json.loads(line) for line in trace.read_text().splitlines()]


def test_the_core_loads_only_once_the_client_has_the_initialize_result(tmp_path: Path) -> None:
    # The cold start is spawn to the initialize result: warm_up's 100-200 ms of imports must
    # not be in it, nor run while the client is still reading the result (a CPU measurement
    # of the start would count them). The client says it has the result with `initialized`.
    trace = tmp_path / "trace.jsonl"
    s = _traced_server(trace)
    try:
        result = s.request("initialize", {"processId": None, "rootUri": None, "capabilities": {}})
        assert "capabilities" in result["result"]
        # A round trip: whatever the server queued behind the response has run by its answer.
        assert "error" in s.request("ddp-lsp/noSuchMethod", {})
        events = _events(trace)
        assert [e["event"] for e in events] == ["sent", "sent"], events
        assert events[0]["id"] == 1 and not events[0]["core"]
        s.notify("initialized", {})
        deadline = time.monotonic() + 60
        while not any(e["event"] == "warm_up" for e in _events(trace)):
            assert time.monotonic() < deadline, _events(trace)
            time.sleep(0.05)
        assert s.request("shutdown")["result"] is None
        events = _events(trace)
        assert events[-1]["core"], events  # loaded by the shutdown's answer
    finally:
        s.close()


def test_no_full_collection_scans_the_start_up_heap(tmp_path: Path) -> None:
    # The imports' heap (pygls, lsprotocol, our modules: ~50,000 objects) lives as long as the
    # server. A full collection over it while pygls built its converter was 20-35 ms of the
    # cold start: it is frozen first, and the collector stays on.
    trace = tmp_path / "trace.jsonl"
    s = _traced_server(trace)
    try:
        s.request("initialize", {"processId": None, "rootUri": None, "capabilities": {}})
        answer = _events(trace)[0]
        assert answer["id"] == 1 and answer["gc_enabled"], answer
        assert all(frozen > 10_000 for frozen in answer["full_collections"]), answer
        assert answer["frozen"] > 10_000, answer
    finally:
        s.close()
