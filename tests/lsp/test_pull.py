"""Pull diagnostics, workspace diagnostics and initializationOptions, one server per test.

A client that pulls stops getting pushed diagnostics (or it would show every finding twice),
so these tests use their own servers rather than the shared ones of ``test_e2e``.
"""

from __future__ import annotations

import asyncio

import pytest
import pytest_lsp
from lsprotocol import types as T
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
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "train.py").write_text(TRAIN)
    (tmp_path / "pkg" / "clean.py").write_text("import torch\nprint(torch.ones(1))\n")
    (tmp_path / "generated").mkdir()
    (tmp_path / "generated" / "skip.py").write_text(TRAIN)
    (tmp_path / ".venv").mkdir()
    (tmp_path / ".venv" / "lib.py").write_text(TRAIN)
    result = await lsp_client.initialize_session(
        T.InitializeParams(
            capabilities=capabilities(request.param),
            root_uri=tmp_path.as_uri(),
            workspace_folders=[T.WorkspaceFolder(uri=tmp_path.as_uri(), name="ws")],
            initialization_options={
                "ddp-lsp": {"exclude": ["generated"], "rankGuardNames": ["not an identifier"]}
            },
        )
    )
    lsp_client.encoding = str(result.capabilities.position_encoding or "utf-16")  # type: ignore[attr-defined]
    lsp_client.root = tmp_path  # type: ignore[attr-defined]
    yield
    await lsp_client.shutdown_session()


async def test_pull_diagnostics_with_result_ids(client: LanguageClient):
    root = client.root  # type: ignore[attr-defined]
    doc = Doc(client, (root / "pull.py").as_uri(), TRAIN, client.encoding)  # type: ignore[attr-defined]
    report = await asyncio.wait_for(
        client.text_document_diagnostic_async(
            T.DocumentDiagnosticParams(T.TextDocumentIdentifier(doc.uri))
        ),
        TIMEOUT,
    )
    assert isinstance(report, T.RelatedFullDocumentDiagnosticReport)
    assert [d.code for d in ddp(report.items)] == ["DDP201"]
    assert report.result_id
    # Nothing changed: the client's previous result is still good.
    again = await client.text_document_diagnostic_async(
        T.DocumentDiagnosticParams(
            T.TextDocumentIdentifier(doc.uri), previous_result_id=report.result_id
        )
    )
    assert isinstance(again, T.RelatedUnchangedDocumentDiagnosticReport)
    assert again.result_id == report.result_id
    # A fix changes the report.
    at = doc.text.index("        torch.nn.utils.clip_grad_norm_")
    doc.replace(at, at, "        scaler.unscale_(optimizer)\n")
    fixed = await client.text_document_diagnostic_async(
        T.DocumentDiagnosticParams(
            T.TextDocumentIdentifier(doc.uri), previous_result_id=report.result_id
        )
    )
    assert isinstance(fixed, T.RelatedFullDocumentDiagnosticReport)
    assert ddp(fixed.items) == [] and fixed.result_id != report.result_id


async def test_workspace_diagnostics_respect_excludes(client: LanguageClient):
    root = client.root  # type: ignore[attr-defined]
    token = "ws-scan"
    client.progress_reports[token] = []  # a client-made token: pytest-lsp only knows its own
    report = await asyncio.wait_for(
        client.workspace_diagnostic_async(
            T.WorkspaceDiagnosticParams(previous_result_ids=[], work_done_token=token)
        ),
        TIMEOUT,
    )
    by_uri = {item.uri: item for item in report.items}
    train = (root / "pkg" / "train.py").as_uri()
    assert set(by_uri) == {train, (root / "pkg" / "clean.py").as_uri()}
    assert [d.code for d in ddp(by_uri[train].items)] == ["DDP201"]
    kinds = [getattr(v, "kind", None) for v in client.progress_reports[token]]
    assert kinds[0] == "begin" and kinds[-1] == "end"
    # Asking again with the result ids: every file is unchanged.
    again = await client.workspace_diagnostic_async(
        T.WorkspaceDiagnosticParams(
            previous_result_ids=[T.PreviousResultId(i.uri, i.result_id) for i in report.items]
        )
    )
    assert all(isinstance(i, T.WorkspaceUnchangedDocumentDiagnosticReport) for i in again.items)


async def test_invalid_initialization_option_is_reported(client: LanguageClient):
    root = client.root  # type: ignore[attr-defined]

    async def reported() -> T.ShowMessageParams:
        while True:
            for m in client.messages:
                if "rank" in m.message.lower() and "not an identifier" in m.message:
                    return m
            await client.wait_for_notification(T.WINDOW_SHOW_MESSAGE)

    msg = await asyncio.wait_for(reported(), TIMEOUT)
    assert msg.type == T.MessageType.Error
    # The valid option (exclude) still applies: an excluded file gets no diagnostics.
    doc = Doc(client, (root / "generated" / "skip.py").as_uri(), TRAIN, client.encoding)  # type: ignore[attr-defined]
    pub = await wait_for_diagnostics(client, doc.uri)
    assert pub.diagnostics == []
