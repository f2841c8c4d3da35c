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
        before = sorted(sys.modules)  # the response goes out now; warm_up runs after it
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        print(json.dumps([before, sorted(sys.modules)]))

    asyncio.run(main())
    """
)


def _probe() -> tuple[list[str], list[str]]:
    proc = subprocess.run(
        [sys.executable, "-I", "-c", _PROBE], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    before, after = json.loads(proc.stdout.splitlines()[-1])
    return before, after


def _deferred_in(modules: list[str]) -> list[str]:
    return [m for m in modules if any(m == d or m.startswith(d + ".") for d in DEFERRED)]


def test_initialize_is_answered_without_the_core_the_index_or_the_rules() -> None:
    before, after = _probe()
    assert _deferred_in(before) == []
    # Deferred, not dropped: the core and the rules load right after the response, before
    # the first document usually arrives (so its first diagnostics do not pay for them).
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
