"""End-to-end: the rank view (inlay hints, hover, ddp-lsp.showRankPaths, semantic tokens)
through the real server over stdio, with pytest-lsp's recorded client profiles."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import pytest_lsp
from lsprotocol import types as lsp
from pytest_lsp import LanguageClient

from tests.lsp.helpers import CONFIG, PROFILES, TIMEOUT, Doc, capabilities, wait_for_diagnostics

pytestmark = pytest.mark.asyncio(loop_scope="module")

RANKS = """\
import torch
import torch.distributed as dist


def train(model, rank, loader, t):
    dist.init_process_group("nccl")
    for x in loader:
        model(x)
    if rank == 0:
        torch.save(model.state_dict(), "ckpt.pt")
        dist.barrier()
    dist.all_reduce(t)
    if rank != 0:
        return
    print("ëé 🙂 done")
    dist.all_reduce(t)
"""
GUARD_LINE, SAVE_LINE, BARRIER_LINE, REDUCE_LINE = 8, 9, 10, 11
EXIT_LINE, PRINT_LINE, LATE_REDUCE_LINE = 13, 14, 15
WARN = "⚠"


@pytest_lsp.fixture(config=CONFIG, scope="module", params=PROFILES)
async def client(request: pytest.FixtureRequest, lsp_client: LanguageClient, tmp_path_factory):
    root = tmp_path_factory.mktemp(f"rv-{request.param}")
    result = await lsp_client.initialize_session(
        lsp.InitializeParams(
            capabilities=capabilities(request.param),
            root_uri=root.as_uri(),
            workspace_folders=[lsp.WorkspaceFolder(uri=root.as_uri(), name="ws")],
        )
    )
    lsp_client.encoding = str(result.capabilities.position_encoding or "utf-16")  # type: ignore[attr-defined]
    lsp_client.root = root  # type: ignore[attr-defined]
    lsp_client.server_caps = result.capabilities  # type: ignore[attr-defined]
    lsp_client.profile = request.param  # type: ignore[attr-defined]
    yield
    await lsp_client.shutdown_session()


def _open(client: LanguageClient, name: str, text: str = RANKS) -> Doc:
    uri = (client.root / name).as_uri()  # type: ignore[attr-defined]
    return Doc(client, uri, text, client.encoding)  # type: ignore[attr-defined]


async def _hints(
    client: LanguageClient, doc: Doc, first: int = 0, last: int = 200
) -> list[lsp.InlayHint]:
    result = await asyncio.wait_for(
        client.text_document_inlay_hint_async(
            lsp.InlayHintParams(
                lsp.TextDocumentIdentifier(doc.uri),
                lsp.Range(lsp.Position(first, 0), lsp.Position(last, 0)),
            )
        ),
        TIMEOUT,
    )
    return list(result or [])


def _labels(hints: list[lsp.InlayHint]) -> list[tuple[int, str]]:
    return [(h.position.line, str(h.label)) for h in hints]


async def _reconfigure(client: LanguageClient, section: dict[str, Any]) -> None:
    """Send settings and wait until the server applied them: it then asks the client to
    refresh its hints and tokens (each recorded profile supports one of the two refreshes)."""
    rec = client.recorder  # type: ignore[attr-defined]
    rec.view_refreshed.clear()
    client.workspace_did_change_configuration(
        lsp.DidChangeConfigurationParams(settings={"ddp-lsp": section})
    )
    await asyncio.wait_for(rec.view_refreshed.wait(), TIMEOUT)


async def test_capabilities(client: LanguageClient):
    caps: lsp.ServerCapabilities = client.server_caps  # type: ignore[attr-defined]
    assert caps.inlay_hint_provider
    assert caps.semantic_tokens_provider is not None
    legend = caps.semantic_tokens_provider.legend
    assert "rankDependent" in legend.token_modifiers and "rankZero" in legend.token_modifiers
    assert caps.execute_command_provider is not None
    assert "ddp-lsp.showRankPaths" in caps.execute_command_provider.commands


async def test_inlay_hints_mark_rank_subsets_and_collectives(client: LanguageClient):
    doc = _open(client, "hints.py")
    await wait_for_diagnostics(client, doc.uri, 1)
    hints = await _hints(client, doc)
    assert _labels(hints) == [
        (SAVE_LINE, "rank 0"),
        (BARRIER_LINE, f"{WARN} rank 0"),
        (REDUCE_LINE, "all ranks"),
        (EXIT_LINE, "ranks ≠ 0"),
        (PRINT_LINE, "rank 0"),
        (LATE_REDUCE_LINE, f"{WARN} rank 0"),
    ]
    assert all(h.position.character == 4 or h.position.character == 8 for h in hints)
    barrier = hints[1]
    assert isinstance(barrier.tooltip, lsp.MarkupContent)
    assert "if rank == 0:" in barrier.tooltip.value
    # The hints of a visible range only.
    assert _labels(await _hints(client, doc, REDUCE_LINE, EXIT_LINE)) == [
        (REDUCE_LINE, "all ranks"),
        (EXIT_LINE, "ranks ≠ 0"),
    ]
    doc.close()


async def test_hints_follow_edits(client: LanguageClient):
    doc = _open(client, "hints_edit.py")
    await wait_for_diagnostics(client, doc.uri, 1)
    # Un-guard the barrier: rank 0's block loses it and the barrier runs on every rank.
    at = doc.text.index("        dist.barrier()\n")
    doc.replace(at, at + len("        dist.barrier()\n"), "")
    at = doc.text.index("    dist.all_reduce(t)\n")
    doc.replace(at, at, "    dist.barrier()\n")
    labels = _labels(await _hints(client, doc))
    assert (BARRIER_LINE, "all ranks") in labels and (BARRIER_LINE, f"{WARN} rank 0") not in labels
    doc.close()


async def test_setting_collectives_only_and_off(client: LanguageClient):
    doc = _open(client, "hints_setting.py")
    await wait_for_diagnostics(client, doc.uri, 1)
    await _reconfigure(client, {"rankView": {"hints": "collectives"}})
    hints = await _hints(client, doc)
    assert [line for line, _ in _labels(hints)] == [BARRIER_LINE, REDUCE_LINE, LATE_REDUCE_LINE]
    await _reconfigure(client, {"rankView": {"hints": "off"}})
    assert await _hints(client, doc) == []
    await _reconfigure(client, {})
    assert (SAVE_LINE, "rank 0") in _labels(await _hints(client, doc))
    doc.close()


async def test_hover_on_collective_guard_and_call(client: LanguageClient):
    doc = _open(client, "hover_rank.py")
    await wait_for_diagnostics(client, doc.uri, 1)

    async def hover(line: int, character: int) -> str:
        h = await asyncio.wait_for(
            client.text_document_hover_async(
                lsp.HoverParams(lsp.TextDocumentIdentifier(doc.uri), lsp.Position(line, character))
            ),
            TIMEOUT,
        )
        assert h is not None and isinstance(h.contents, lsp.MarkupContent)
        return h.contents.value

    text = await hover(LATE_REDUCE_LINE, 10)
    assert (
        "rank view" in text
        and f"hover_rank.py:{EXIT_LINE + 1}: `return` under `if rank != 0:`" in text
    )
    text = await hover(GUARD_LINE, 8)  # on `rank == 0`
    assert "`if rank == 0:` → rank 0" in text and "Collectives it decides" in text
    assert "`dist.barrier()` · ⚠ rank 0" in text
    text = await hover(SAVE_LINE, 10)  # on torch.save(...)
    assert (
        "called here on rank 0" in text
        and f"hover_rank.py:{GUARD_LINE + 1}: `if rank == 0:`" in text
    )
    doc.close()


async def test_show_rank_paths_command(client: LanguageClient):
    doc = _open(client, "paths.py")
    await wait_for_diagnostics(client, doc.uri, 1)
    locs = await asyncio.wait_for(
        client.workspace_execute_command_async(
            lsp.ExecuteCommandParams(
                "ddp-lsp.showRankPaths", [doc.uri, {"line": PRINT_LINE, "character": 4}]
            )
        ),
        TIMEOUT,
    )
    # The early exit that keeps the other ranks from this line.
    assert [(loc["uri"], loc["range"]["start"]["line"]) for loc in locs] == [(doc.uri, EXIT_LINE)]
    assert locs[0]["range"]["start"]["character"] == 8  # `return`
    none = await client.workspace_execute_command_async(
        lsp.ExecuteCommandParams(
            "ddp-lsp.showRankPaths", [doc.uri, {"line": REDUCE_LINE, "character": 4}]
        )
    )
    assert none == []
    with pytest.raises(Exception, match="showRankPaths takes"):
        await client.workspace_execute_command_async(
            lsp.ExecuteCommandParams("ddp-lsp.showRankPaths", [doc.uri])
        )
    doc.close()


async def test_semantic_tokens_are_opt_in(client: LanguageClient):
    doc = _open(client, "tokens.py")
    await wait_for_diagnostics(client, doc.uri, 1)
    params = lsp.SemanticTokensParams(lsp.TextDocumentIdentifier(doc.uri))
    assert await client.text_document_semantic_tokens_full_async(params) is None
    await _reconfigure(client, {"rankView": {"semanticTokens": True}})
    got = await client.text_document_semantic_tokens_full_async(params)
    assert got is not None
    data = list(got.data)
    line, rows = 0, []
    for i in range(0, len(data), 5):
        line += data[i]
        rows.append((line, data[i + 1], data[i + 4]))
    zero = 1 | 2  # rankDependent | rankZero
    assert rows == [
        (SAVE_LINE, 8, zero),
        (BARRIER_LINE, 8, zero),
        (EXIT_LINE, 8, 1),
        (PRINT_LINE, 4, zero),
        (LATE_REDUCE_LINE, 4, zero),
    ]
    # The print line holds non-ASCII text: its length is in the negotiated encoding.
    length = data[3 * 5 + 2]
    body = 'print("ëé 🙂 done")'
    enc = client.encoding  # type: ignore[attr-defined]
    expected = {"utf-8": len(body.encode()), "utf-16": len(body.encode("utf-16-le")) // 2}.get(
        enc, len(body)
    )
    assert length == expected
    await _reconfigure(client, {})
    doc.close()


async def test_hints_catch_up_when_an_edit_changes_the_module_facts(client: LanguageClient):
    # Not distributed code until the import arrives: no hints. The edit and the request go
    # out together; if the request is answered before the analysis of the edit merged the
    # new facts, the server asks the client to refresh once it has (inlayHint/refresh).
    text = "import os\n\n\ndef f(rank, t):\n    if rank == 0:\n        dist.barrier()\n"
    doc = _open(client, "catch_up.py", text)
    await wait_for_diagnostics(client, doc.uri, 1)
    assert await _hints(client, doc) == []
    rec = client.recorder  # type: ignore[attr-defined]
    rec.inlay_hint_refreshed.clear()
    doc.replace(0, 0, "import torch.distributed as dist\n")
    first = _labels(await _hints(client, doc))
    want = [(6, f"{WARN} rank 0")]
    if first != want:
        caps = capabilities(client.profile).workspace  # type: ignore[attr-defined]
        assert caps and caps.inlay_hint and caps.inlay_hint.refresh_support, first
        await asyncio.wait_for(rec.inlay_hint_refreshed.wait(), TIMEOUT)
        assert _labels(await _hints(client, doc)) == want
    doc.close()


async def test_a_request_racing_the_analysis_is_refreshed_once_it_ran():
    # In process, to order the messages as a busy server can see them: the edit, then the
    # request before the scheduled analysis ran.
    from ddp_lsp.lsp import rankview
    from ddp_lsp.lsp.server import build_server

    server = build_server()
    server.protocol.client_capabilities = lsp.ClientCapabilities(
        workspace=lsp.WorkspaceClientCapabilities(
            inlay_hint=lsp.InlayHintWorkspaceClientCapabilities(refresh_support=True)
        )
    )
    refreshed = asyncio.Event()
    server.workspace_inlay_hint_refresh = lambda params: refreshed.set()  # type: ignore[method-assign]
    state = server.state
    uri = "file:///race/train.py"
    state.open(
        uri,
        "import os\n\n\ndef f(rank, t):\n    if rank == 0:\n        dist.barrier()\n",
        1,
        "python",
    )
    state.flush()
    params = lsp.InlayHintParams(
        lsp.TextDocumentIdentifier(uri), lsp.Range(lsp.Position(0, 0), lsp.Position(20, 0))
    )
    assert rankview.inlay_hint_request(server, params) == []
    state.change(
        uri,
        2,
        [
            lsp.TextDocumentContentChangePartial(
                range=lsp.Range(lsp.Position(0, 0), lsp.Position(0, 0)),
                text="import torch.distributed as dist\n",
            )
        ],
    )
    assert state.units[uri].dirty  # the analysis is scheduled, not run
    stale = rankview.inlay_hint_request(server, params)
    assert stale == []  # the last analysis's facts: not distributed code yet
    await asyncio.wait_for(refreshed.wait(), TIMEOUT)
    fresh = rankview.inlay_hint_request(server, params) or []
    assert [(h.position.line, h.label) for h in fresh] == [(6, f"{WARN} rank 0")]


async def test_notebook_cells_get_their_hints_and_paths_in_cell_coordinates():
    from ddp_lsp.lsp import rankview
    from ddp_lsp.lsp.notebook import Cell, Notebook
    from ddp_lsp.lsp.server import build_server

    server = build_server()
    state = server.state
    nb = "file:///nb/train.ipynb"
    first = "vscode-notebook-cell:/nb/train.ipynb#a"
    second = "vscode-notebook-cell:/nb/train.ipynb#b"
    cells = [
        Cell(first, 2, "import torch.distributed as dist\nrank = dist.get_rank()\n", 1),
        Cell(second, 2, "if rank == 0:\n    dist.barrier()\ndist.all_reduce(t)\n", 1),
    ]
    state.open_notebook(Notebook(nb, 1, cells))
    state.cell_owner.update({first: nb, second: nb})
    state.flush()

    def hints(uri: str) -> list[tuple[int, int, str]]:
        params = lsp.InlayHintParams(
            lsp.TextDocumentIdentifier(uri), lsp.Range(lsp.Position(0, 0), lsp.Position(10, 0))
        )
        got = rankview.inlay_hint_request(server, params) or []
        return [(h.position.line, h.position.character, str(h.label)) for h in got]

    assert hints(first) == []
    assert hints(second) == [(1, 4, f"{WARN} rank 0"), (2, 0, "all ranks")]
    show = server.protocol.fm.commands[rankview.CMD_SHOW_RANK_PATHS]  # the server is bound
    locs = show(second, {"line": 1, "character": 4})
    assert [(loc.uri, loc.range.start.line, loc.range.start.character) for loc in locs] == [
        (second, 0, 3)
    ]
    # Semantic tokens of a cell: its own lines only, in its own coordinates.
    from ddp_lsp.lsp import config as settings_config

    state.config.editor_global = settings_config.EditorSettings(
        options=settings_config.EditorOptions(rank_tokens=True)
    )
    full = server.protocol.fm.features[lsp.TEXT_DOCUMENT_SEMANTIC_TOKENS_FULL]
    assert full(lsp.SemanticTokensParams(lsp.TextDocumentIdentifier(first))).data == []
    data = full(lsp.SemanticTokensParams(lsp.TextDocumentIdentifier(second))).data
    assert data == [1, 4, len("dist.barrier()"), 0, 1 | 2]
