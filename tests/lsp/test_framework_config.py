"""``[[tool.ddp-lsp.framework]]`` through the language server: a configured helper changes the
diagnostics, an invalid entry is shown (file and key) and the defaults apply, and the server
keeps serving."""

from __future__ import annotations

import pytest
import pytest_lsp
from lsprotocol import types as lsp
from pytest_lsp import LanguageClient

from tests.lsp.helpers import CONFIG, Doc, capabilities, wait_for_diagnostics, wait_for_message

pytestmark = pytest.mark.asyncio(loop_scope="module")

TRAIN = """\
import torch.distributed as dist
from infra.comm import sync_all


def finish(rank, model):
    if rank == 0:
        sync_all(model)
"""

GOOD = """\
[tool.ddp-lsp]
[[tool.ddp-lsp.framework]]
call = "infra.comm.sync_all"
means = ["collective"]
"""


@pytest_lsp.fixture(config=CONFIG, scope="module")
async def client(lsp_client: LanguageClient, tmp_path_factory):
    root = tmp_path_factory.mktemp("ws-frameworks")
    await lsp_client.initialize_session(
        lsp.InitializeParams(
            capabilities=capabilities("visual_studio_code"),
            root_uri=root.as_uri(),
            workspace_folders=[lsp.WorkspaceFolder(uri=root.as_uri(), name="ws")],
        )
    )
    lsp_client.root = root  # type: ignore[attr-defined]
    yield
    await lsp_client.shutdown_session()


def _rules(diags: list[lsp.Diagnostic]) -> list[str]:
    return [str(d.code) for d in diags if d.source == "ddp-lsp"]


async def test_framework_entries_apply_and_bad_ones_are_shown(client: LanguageClient) -> None:
    root = client.root  # type: ignore[attr-defined]
    pyproject = root / "pyproject.toml"
    pyproject.write_text(GOOD)
    doc = Doc(client, (root / "train.py").as_uri(), TRAIN, "utf-16")
    await wait_for_diagnostics(client, doc.uri, pred=lambda d: _rules(d) == ["DDP103"])

    before = len(client.messages)
    pyproject.write_text(GOOD.replace('"collective"', '"collectve"'))
    client.workspace_did_change_watched_files(
        lsp.DidChangeWatchedFilesParams(
            [lsp.FileEvent(pyproject.as_uri(), lsp.FileChangeType.Changed)]
        )
    )
    # The defaults apply (no entry: sync_all is an ordinary call)...
    await wait_for_diagnostics(client, doc.uri, pred=lambda d: _rules(d) == [])

    # ...and the error was shown, naming the file and the key.
    shown = await wait_for_message(
        client, lambda m: "framework" in m.message and client.messages.index(m) >= before
    )
    assert str(pyproject) in shown.message, shown.message
    assert "'collectve' is not a meaning" in shown.message
    doc.close()
