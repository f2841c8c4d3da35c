"""Preflight through the server: command with progress, code lens, hover facts, cancel, cache.

The preflight child runs for real with this interpreter, restricted to two quick system probes
(no torch needed). ``XDG_CACHE_HOME`` points at a temporary directory so no report from another
run leaks in. The cancel test makes one probe hang (the preflight's own fault injection).
"""

from __future__ import annotations

import asyncio
import os
import tempfile

import pytest
import pytest_lsp
from lsprotocol import types as lsp
from pytest_lsp import ClientServerConfig, LanguageClient

from tests.lsp.helpers import (
    SERVER_CMD,
    TIMEOUT,
    Doc,
    capabilities,
    make_client,
    wait_for_refresh,
)

PROBES = ["cpu.workers", "shm.capacity", "rdzv.port", "env.lint"]
SCRIPT = """import os
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader


def main(model, dataset):
    dist.init_process_group("gloo")
    model = DDP(model)
    loader = DataLoader(dataset, batch_size=8, num_workers=4)
    return model, loader
"""
INIT_LINE = 8

_CACHE = tempfile.mkdtemp(prefix="ddp-lsp-preflight-cache-")
CONFIG = ClientServerConfig(
    server_command=SERVER_CMD,
    client_factory=make_client,
    server_env={
        **os.environ,
        "XDG_CACHE_HOME": _CACHE,
        # Only probes named "hang:<id>" hang; the tests below ask for which.
        "DDP_LSP_PREFLIGHT_INJECT": "hang:limits",
    },
)


@pytest_lsp.fixture(config=CONFIG, params=["neovim", "visual_studio_code"])
async def client(request: pytest.FixtureRequest, lsp_client: LanguageClient, tmp_path):
    await lsp_client.initialize_session(
        lsp.InitializeParams(
            # With workspace.diagnostics.refreshSupport, as VS Code has it.
            capabilities=capabilities(request.param, refresh=True),
            workspace_folders=[lsp.WorkspaceFolder(uri=tmp_path.as_uri(), name="ws")],
            # Only DDP201 (silent here): hovers then show preflight facts and nothing else.
            initialization_options={"ddp-lsp": {"select": ["DDP201"]}},
        )
    )
    lsp_client.root = tmp_path  # type: ignore[attr-defined]
    yield
    await lsp_client.shutdown_session()


async def _lenses(client: LanguageClient, uri: str) -> list[lsp.CodeLens]:
    result = await client.text_document_code_lens_async(
        lsp.CodeLensParams(lsp.TextDocumentIdentifier(uri))
    )
    return list(result or [])


async def _hover(client: LanguageClient, uri: str, line: int, col: int) -> str | None:
    h = await client.text_document_hover_async(
        lsp.HoverParams(lsp.TextDocumentIdentifier(uri), lsp.Position(line, col))
    )
    return h.contents.value if h is not None else None  # type: ignore[union-attr]


async def test_run_preflight_with_progress_lens_and_hover(client: LanguageClient):
    root = client.root  # type: ignore[attr-defined]
    doc = Doc(client, (root / "train.py").as_uri(), SCRIPT, "utf-16")
    (lens,) = await _lenses(client, doc.uri)
    assert lens.range.start.line == INIT_LINE and lens.command is not None
    assert lens.command.title == "▶ Run preflight"
    assert lens.command.command == "ddp-lsp.runPreflight"
    init_col = SCRIPT.splitlines()[INIT_LINE].index("init_process_group")
    assert await _hover(client, doc.uri, INIT_LINE, init_col) is None  # nothing measured yet

    result = await asyncio.wait_for(
        client.workspace_execute_command_async(
            lsp.ExecuteCommandParams(
                command="ddp-lsp.runPreflight",
                arguments=[*lens.command.arguments, {"quick": True, "probes": PROBES}],
            )
        ),
        120,
    )
    assert result["ok"] is True, result
    assert result["folder"] == str(root)
    reports = [
        r
        for token, rs in client.progress_reports.items()
        if str(token).startswith("ddp-lsp-preflight")
        for r in rs
    ]
    kinds = [r.kind for r in reports]
    assert kinds[0] == "begin" and kinds[-1] == "end"
    messages = " ".join(r.message or "" for r in reports)
    assert all(p in messages for p in PROBES)

    (lens,) = await _lenses(client, doc.uri)
    assert "last: ✗0" in lens.command.title and "just now" in lens.command.title
    facts = await _hover(client, doc.uri, INIT_LINE, init_col)
    assert facts is not None and "**Preflight**" in facts, facts
    assert "MASTER_PORT" in facts or "port" in facts.lower(), facts  # the rdzv.port fact
    loader_line = next(i for i, ln in enumerate(SCRIPT.splitlines()) if "DataLoader(" in ln)
    col = SCRIPT.splitlines()[loader_line].index("DataLoader")
    facts = await _hover(client, doc.uri, loader_line, col + 2)
    assert facts is not None and "**Preflight**" in facts and "num_workers" in facts


async def test_cancel_kills_the_run(client: LanguageClient):
    root = client.root  # type: ignore[attr-defined]
    doc = Doc(client, (root / "train.py").as_uri(), SCRIPT, "utf-16")
    task = asyncio.ensure_future(
        client.workspace_execute_command_async(
            lsp.ExecuteCommandParams(
                command="ddp-lsp.runPreflight",
                arguments=[doc.uri, {"probes": ["cpu.workers", "limits"]}],
            )
        )
    )

    async def token_started() -> str:
        while True:
            for token, reports in client.progress_reports.items():
                if any(getattr(r, "message", "") == "limits..." for r in reports):
                    return str(token)
            await client.wait_for_notification(lsp.PROGRESS)

    token = await asyncio.wait_for(token_started(), 120)
    client.window_work_done_progress_cancel(lsp.WorkDoneProgressCancelParams(token=token))
    result = await asyncio.wait_for(task, TIMEOUT)
    assert result["ok"] is False and result["error"] == "cancelled"
    # A cancelled run is not remembered: the lens still offers a fresh run.
    (lens,) = await _lenses(client, doc.uri)
    assert lens.command.title == "▶ Run preflight"


async def test_bad_preflight_arguments(client: LanguageClient):
    for args, needle in [
        ([42], "takes [uri]"),
        ([None, {"worldSize": 0}], "world_size"),
        ([None, {"nope": 1}], "unknown option"),
    ]:
        with pytest.raises(Exception) as err:
            await client.workspace_execute_command_async(
                lsp.ExecuteCommandParams(command="ddp-lsp.runPreflight", arguments=args)
            )
        assert needle in str(err.value)


async def test_preflight_tells_a_pulling_client_to_refresh(client: LanguageClient):
    """Findings depend on the machine's facts: a client that pulls must be told to ask again."""
    root = client.root  # type: ignore[attr-defined]
    doc = Doc(client, (root / "pulled.py").as_uri(), SCRIPT, "utf-16")
    await asyncio.wait_for(
        client.text_document_diagnostic_async(
            lsp.DocumentDiagnosticParams(lsp.TextDocumentIdentifier(doc.uri))
        ),
        TIMEOUT,
    )
    result = await asyncio.wait_for(
        client.workspace_execute_command_async(
            lsp.ExecuteCommandParams(
                command="ddp-lsp.runPreflight",
                arguments=[doc.uri, {"quick": True, "probes": PROBES}],
            )
        ),
        120,
    )
    assert result["ok"] is True, result
    await wait_for_refresh(client)
