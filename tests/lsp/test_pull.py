"""Pull diagnostics, workspace diagnostics and initializationOptions, one server per test.

A client that pulls stops getting pushed diagnostics (or it would show every finding twice),
so these tests use their own servers rather than the shared ones of ``test_client_profiles``.
"""

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
    wait_for_message,
    wait_for_refresh,
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
        lsp.InitializeParams(
            capabilities=capabilities(request.param, refresh=True),
            root_uri=tmp_path.as_uri(),
            workspace_folders=[lsp.WorkspaceFolder(uri=tmp_path.as_uri(), name="ws")],
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
            lsp.DocumentDiagnosticParams(lsp.TextDocumentIdentifier(doc.uri))
        ),
        TIMEOUT,
    )
    assert isinstance(report, lsp.RelatedFullDocumentDiagnosticReport)
    assert [d.code for d in ddp(report.items)] == ["DDP201"]
    assert report.result_id
    # Nothing changed: the client's previous result is still good.
    again = await client.text_document_diagnostic_async(
        lsp.DocumentDiagnosticParams(
            lsp.TextDocumentIdentifier(doc.uri), previous_result_id=report.result_id
        )
    )
    assert isinstance(again, lsp.RelatedUnchangedDocumentDiagnosticReport)
    assert again.result_id == report.result_id
    # A fix changes the report.
    at = doc.text.index("        torch.nn.utils.clip_grad_norm_")
    doc.replace(at, at, "        scaler.unscale_(optimizer)\n")
    fixed = await client.text_document_diagnostic_async(
        lsp.DocumentDiagnosticParams(
            lsp.TextDocumentIdentifier(doc.uri), previous_result_id=report.result_id
        )
    )
    assert isinstance(fixed, lsp.RelatedFullDocumentDiagnosticReport)
    assert ddp(fixed.items) == [] and fixed.result_id != report.result_id


async def test_workspace_diagnostics_respect_excludes(client: LanguageClient):
    root = client.root  # type: ignore[attr-defined]
    token = "ws-scan"
    client.progress_reports[token] = []  # a client-made token: pytest-lsp only knows its own
    report = await asyncio.wait_for(
        client.workspace_diagnostic_async(
            lsp.WorkspaceDiagnosticParams(previous_result_ids=[], work_done_token=token)
        ),
        TIMEOUT,
    )
    by_uri = {item.uri: item for item in report.items}
    train = (root / "pkg" / "train.py").as_uri()
    assert set(by_uri) == {train, (root / "pkg" / "clean.py").as_uri()}
    assert [d.code for d in ddp(by_uri[train].items)] == ["DDP201"]
    kinds = [getattr(v, "kind", None) for v in client.progress_reports[token]]
    assert kinds[0] == "begin" and kinds[-1] == "end"
    # Asking again with the result ids: nothing changed, so the server holds the request open
    # (vscode-languageclient would otherwise ask again every 2 s) ...
    held_token = "ws-held"
    client.progress_reports[held_token] = []
    held = asyncio.ensure_future(
        client.workspace_diagnostic_async(
            lsp.WorkspaceDiagnosticParams(
                previous_result_ids=[
                    lsp.PreviousResultId(i.uri, i.result_id) for i in report.items
                ],
                work_done_token=held_token,
            )
        )
    )

    async def progress_ended() -> None:
        while not any(
            getattr(v, "kind", None) == "end" for v in client.progress_reports[held_token]
        ):
            await client.wait_for_notification(lsp.PROGRESS)

    # The scan's progress ends when the scan does, not when the held answer goes out: a client
    # would otherwise show a busy indicator for as long as the request is held.
    await asyncio.wait_for(progress_ended(), TIMEOUT)
    # ... while it keeps serving everything else, open documents' diagnostics included.
    doc = Doc(client, (root / "other.py").as_uri(), TRAIN, client.encoding)  # type: ignore[attr-defined]
    await wait_for_diagnostics(client, doc.uri, 1, lambda d: ddp(d))
    await client.workspace_execute_command_async(
        lsp.ExecuteCommandParams(command="ddp-lsp.explainRule", arguments=["DDP201"])
    )
    assert not held.done()
    # A change to what it reports answers it: clean.py opened with a finding in it.
    clean = (root / "pkg" / "clean.py").as_uri()
    Doc(client, clean, TRAIN, client.encoding)  # type: ignore[attr-defined]
    again = await asyncio.wait_for(held, TIMEOUT)
    by_uri = {item.uri: item for item in again.items}
    assert isinstance(by_uri[clean], lsp.WorkspaceFullDocumentDiagnosticReport)
    assert [d.code for d in ddp(by_uri[clean].items)] == ["DDP201"]
    assert isinstance(by_uri[train], lsp.WorkspaceUnchangedDocumentDiagnosticReport)


async def test_invalid_initialization_option_is_reported(client: LanguageClient):
    root = client.root  # type: ignore[attr-defined]

    async def reported() -> lsp.ShowMessageParams:
        while True:
            for m in client.messages:
                if "rank" in m.message.lower() and "not an identifier" in m.message:
                    return m
            await client.wait_for_notification(lsp.WINDOW_SHOW_MESSAGE)

    msg = await asyncio.wait_for(reported(), TIMEOUT)
    assert msg.type == lsp.MessageType.Error
    # The valid option (exclude) still applies: an excluded file gets no diagnostics.
    doc = Doc(client, (root / "generated" / "skip.py").as_uri(), TRAIN, client.encoding)  # type: ignore[attr-defined]
    pub = await wait_for_diagnostics(client, doc.uri)
    assert pub.diagnostics == []


async def _pull(client: LanguageClient, uri: str, previous: str | None = None) -> object:
    return await asyncio.wait_for(
        client.text_document_diagnostic_async(
            lsp.DocumentDiagnosticParams(
                lsp.TextDocumentIdentifier(uri), previous_result_id=previous
            )
        ),
        TIMEOUT,
    )


def _open_notebook(client: LanguageClient, nb_uri: str, text: str) -> str:
    cell = f"{nb_uri}#cell-1"
    client.notebook_document_did_open(
        lsp.DidOpenNotebookDocumentParams(
            notebook_document=lsp.NotebookDocument(
                uri=nb_uri,
                notebook_type="jupyter-notebook",
                version=1,
                cells=[lsp.NotebookCell(kind=lsp.NotebookCellKind.Code, document=cell)],
            ),
            cell_text_documents=[lsp.TextDocumentItem(cell, "python", 1, text)],
        )
    )
    return cell


async def test_pulling_one_document_keeps_pushing_the_others(client: LanguageClient):
    """VS Code pulls text documents but not notebook cells: cells must stay pushed."""
    root = client.root  # type: ignore[attr-defined]
    enc = client.encoding  # type: ignore[attr-defined]
    pulled = Doc(client, (root / "pulled.py").as_uri(), TRAIN, enc)
    pushed = Doc(client, (root / "pushed.py").as_uri(), TRAIN, enc)
    await wait_for_diagnostics(client, pushed.uri, 1, lambda d: ddp(d))
    await wait_for_diagnostics(client, pulled.uri, 1, lambda d: ddp(d))
    report = await _pull(client, pulled.uri)
    assert [d.code for d in ddp(report.items)] == ["DDP201"]  # type: ignore[attr-defined]
    # What was pushed for the pulled document is cleared (it would show twice)...
    await wait_for_diagnostics(client, pulled.uri, None, lambda d: d == [])
    # ...and the other document and a notebook cell opened later are still pushed.
    at = pushed.text.index("        scaler.update()")
    v = pushed.replace(at, at, "        pass\n")
    pub = await wait_for_diagnostics(client, pushed.uri, v)
    assert [d.code for d in ddp(pub.diagnostics)] == ["DDP201"]
    cell = _open_notebook(client, (root / "nb.ipynb").as_uri(), TRAIN)
    pub = await wait_for_diagnostics(client, cell, 1, lambda d: ddp(d))
    assert [d.code for d in ddp(pub.diagnostics)] == ["DDP201"]
    # The pulled document is never pushed again while open.
    n = len(client.recorder.published)  # type: ignore[attr-defined]
    at = pulled.text.index("        scaler.update()")
    pulled.replace(at, at, "        pass\n")
    v = pushed.replace(at, at, "        pass\n")
    await wait_for_diagnostics(client, pushed.uri, v)
    later = client.recorder.published[n:]  # type: ignore[attr-defined]
    assert [p for p in later if p.uri == pulled.uri] == []


async def test_result_ids_are_never_reused_after_reopening(client: LanguageClient):
    root = client.root  # type: ignore[attr-defined]
    enc = client.encoding  # type: ignore[attr-defined]
    uri = (root / "reopen.py").as_uri()
    doc = Doc(client, uri, TRAIN, enc)
    first = await _pull(client, uri)
    assert ddp(first.items)  # type: ignore[attr-defined]
    doc.close()
    fixed = TRAIN.replace(
        "        torch.nn.utils", "        scaler.unscale_(optimizer)\n        torch.nn.utils"
    )
    Doc(client, uri, fixed, enc)
    again = await _pull(client, uri, first.result_id)  # type: ignore[attr-defined]
    # The old result is stale: a full report without the finding, not "unchanged".
    assert isinstance(again, lsp.RelatedFullDocumentDiagnosticReport)
    assert ddp(again.items) == [] and again.result_id != first.result_id  # type: ignore[attr-defined]


async def test_pulling_client_is_told_to_refresh_on_configuration_change(client: LanguageClient):
    root = client.root  # type: ignore[attr-defined]
    doc = Doc(client, (root / "refresh.py").as_uri(), TRAIN, client.encoding)  # type: ignore[attr-defined]
    await _pull(client, doc.uri)
    client.workspace_did_change_configuration(
        lsp.DidChangeConfigurationParams(settings={"ddp-lsp": {"severity": {"DDP201": "hint"}}})
    )
    await wait_for_refresh(client)
    report = await _pull(client, doc.uri)
    assert [d.severity for d in ddp(report.items)] == [lsp.DiagnosticSeverity.Hint]  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        ('[tool.ddp-lsp]\nseverity = { DDP201 = "loud" }\n', "loud"),
        ("[tool.ddp-lsp\nseverity = 1\n", "invalid TOML"),
        ("[tool]\nddp-lsp = 5\n", ":2: [tool.ddp-lsp] must be a table"),
    ],
    ids=["invalid-value", "invalid-toml", "not-a-table"],
)
async def test_bad_pyproject_shows_message(client: LanguageClient, content: str, needle: str):
    root = client.root  # type: ignore[attr-defined]
    proj = root / "badproj"
    proj.mkdir()
    pyproject = proj / "pyproject.toml"
    pyproject.write_text(content)
    doc = Doc(client, (proj / "train.py").as_uri(), TRAIN, client.encoding)  # type: ignore[attr-defined]
    msg = await wait_for_message(
        client, lambda m: str(pyproject) in m.message and needle in m.message
    )
    assert msg.type == lsp.MessageType.Error
    # The defaults apply: DDP201 is still an error.
    pub = await wait_for_diagnostics(client, doc.uri, 1, lambda d: ddp(d))
    assert [d.severity for d in ddp(pub.diagnostics)] == [lsp.DiagnosticSeverity.Error]


async def test_document_and_workspace_pulls_share_one_result_id(client: LanguageClient):
    # One resultId scheme: the id a document pull hands out for an open file is the id the
    # workspace pull reports for it (a client may mix the two), until what it shows changes.
    root = client.root  # type: ignore[attr-defined]
    uri = (root / "pkg" / "train.py").as_uri()
    Doc(client, uri, TRAIN, client.encoding)  # type: ignore[attr-defined]
    single = await _pull(client, uri)
    report = await asyncio.wait_for(
        client.workspace_diagnostic_async(lsp.WorkspaceDiagnosticParams(previous_result_ids=[])),
        TIMEOUT,
    )
    by_uri = {item.uri: item for item in report.items}
    assert single.result_id and by_uri[uri].result_id == single.result_id  # type: ignore[attr-defined]
    again = await _pull(client, uri, single.result_id)  # type: ignore[attr-defined]
    assert isinstance(again, lsp.RelatedUnchangedDocumentDiagnosticReport)
