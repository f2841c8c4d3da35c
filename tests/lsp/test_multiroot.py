"""Multi-root workspaces: per-folder pyproject.toml and per-folder workspace/configuration."""

from __future__ import annotations

import asyncio

import pytest
import pytest_lsp
from lsprotocol import types as lsp
from pytest_lsp import LanguageClient

from tests.lsp.helpers import (
    CONFIG,
    PROFILES,
    TIMEOUT,
    TRAIN,
    Doc,
    capabilities,
    ddp,
    wait_for_diagnostics,
)


@pytest_lsp.fixture(config=CONFIG, params=PROFILES)
async def client(request: pytest.FixtureRequest, lsp_client: LanguageClient, tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    (a / "disk.py").write_text(TRAIN)
    (b / "disk.py").write_text(TRAIN)
    (a / "pyproject.toml").write_text('[tool.ddp-lsp]\nseverity = { DDP201 = "warning" }\n')
    lsp_client.set_configuration(
        {"severity": {"DDP201": "hint"}}, section="ddp-lsp", scope_uri=b.as_uri()
    )
    result = await lsp_client.initialize_session(
        lsp.InitializeParams(
            capabilities=capabilities(request.param),
            workspace_folders=[
                lsp.WorkspaceFolder(uri=a.as_uri(), name="a"),
                lsp.WorkspaceFolder(uri=b.as_uri(), name="b"),
            ],
        )
    )
    lsp_client.encoding = str(result.capabilities.position_encoding or "utf-16")  # type: ignore[attr-defined]
    lsp_client.folders = (a, b)  # type: ignore[attr-defined]
    yield
    await lsp_client.shutdown_session()


def _severity(d: list[lsp.Diagnostic]) -> list[lsp.DiagnosticSeverity]:
    return [x.severity for x in ddp(d)]


async def test_each_folder_has_its_own_settings(client: LanguageClient):
    a, b = client.folders  # type: ignore[attr-defined]
    enc = client.encoding  # type: ignore[attr-defined]
    da = Doc(client, (a / "t.py").as_uri(), TRAIN, enc)
    db = Doc(client, (b / "t.py").as_uri(), TRAIN, enc)
    await wait_for_diagnostics(
        client, da.uri, pred=lambda d: _severity(d) == [lsp.DiagnosticSeverity.Warning]
    )
    await wait_for_diagnostics(
        client, db.uri, pred=lambda d: _severity(d) == [lsp.DiagnosticSeverity.Hint]
    )
    # Folder b leaves the workspace: its scoped settings go with it.
    client.workspace_did_change_workspace_folders(
        lsp.DidChangeWorkspaceFoldersParams(
            lsp.WorkspaceFoldersChangeEvent(
                added=[], removed=[lsp.WorkspaceFolder(b.as_uri(), "b")]
            )
        )
    )
    await wait_for_diagnostics(
        client, db.uri, pred=lambda d: _severity(d) == [lsp.DiagnosticSeverity.Error]
    )


async def test_workspace_diagnostic_covers_both_roots(client: LanguageClient):
    """Closed files of both folders, each with its own folder's settings."""
    a, b = client.folders  # type: ignore[attr-defined]
    # Folder b's settings come from workspace/configuration after initialized: wait for them.
    db = Doc(client, (b / "t.py").as_uri(), TRAIN, client.encoding)  # type: ignore[attr-defined]
    await wait_for_diagnostics(
        client, db.uri, pred=lambda d: _severity(d) == [lsp.DiagnosticSeverity.Hint]
    )
    db.close()
    report = await asyncio.wait_for(
        client.workspace_diagnostic_async(lsp.WorkspaceDiagnosticParams(previous_result_ids=[])),
        TIMEOUT,
    )
    by_uri = {item.uri: item for item in report.items}
    assert set(by_uri) == {(a / "disk.py").as_uri(), (b / "disk.py").as_uri()}
    assert _severity(by_uri[(a / "disk.py").as_uri()].items) == [lsp.DiagnosticSeverity.Warning]
    assert _severity(by_uri[(b / "disk.py").as_uri()].items) == [lsp.DiagnosticSeverity.Hint]
