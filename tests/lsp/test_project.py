"""The project view in the server: background indexing, cross-file findings kept current.

Each test copies the DeiT-like fixture project (``tests/project/fixtures/deit``: ``main.py``
wraps the model in DDP and passes it to ``engine.train_one_epoch``, where gradient accumulation
without ``no_sync`` is DDP101 only when the project is known) into a temporary workspace folder,
with ``XDG_CACHE_HOME`` in a temporary directory so the index cache never touches the real one.

The indexer is slowed down (``DDP_LSP_INDEX_INJECT=slow:...``, a sleep before each file) where a
test is about order: the first diagnostics of an open file must not wait for the index, and
with a build that takes seconds that is observable without racing it. Every wait is for a
specific notification, with a timeout.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest
import pytest_lsp
from lsprotocol import types as lsp_types
from pytest_lsp import ClientServerConfig, LanguageClient

from tests.lsp.helpers import (
    SERVER_CMD,
    TIMEOUT,
    Doc,
    Published,
    Recorder,
    capabilities,
    make_client,
    wait_for_refresh,
)

FIXTURE = Path(__file__).resolve().parent.parent / "project" / "fixtures" / "deit"
WRAP = "model = DistributedDataParallel(model, device_ids=[args.gpu])"
UNWRAPPED = "model = model"
SLOW_S = 0.5  # per file: the build of the fixture takes a few seconds

_CACHE = tempfile.mkdtemp(prefix="ddp-lsp-index-cache-")


def _config(inject: str = "") -> ClientServerConfig:
    env = {**os.environ, "XDG_CACHE_HOME": _CACHE}
    env.pop("DDP_LSP_INDEX_INJECT", None)
    if inject:
        env["DDP_LSP_INDEX_INJECT"] = inject
    return ClientServerConfig(server_command=SERVER_CMD, client_factory=make_client, server_env=env)


def _workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    shutil.copytree(FIXTURE, root)
    return root


async def _start(
    client: LanguageClient, root: Path, profile: str, options: Any = None, refresh: bool = False
) -> None:
    result = await client.initialize_session(
        lsp_types.InitializeParams(
            capabilities=capabilities(profile, refresh=refresh),
            root_uri=root.as_uri(),
            workspace_folders=[lsp_types.WorkspaceFolder(uri=root.as_uri(), name="ws")],
            initialization_options=options,
        )
    )
    client.encoding = str(result.capabilities.position_encoding or "utf-16")  # type: ignore[attr-defined]
    client.root = root  # type: ignore[attr-defined]


# -- waiting ---------------------------------------------------------------------------------------


def _rec(client: LanguageClient) -> Recorder:
    return client.recorder  # type: ignore[attr-defined, no-any-return]


def _codes(p: Published) -> list[str]:
    return [str(d.code) for d in p.diagnostics if d.source == "ddp-lsp"]


async def _published(
    client: LanguageClient, uri: str, pred: Any, after: int = 0, timeout: float = TIMEOUT
) -> tuple[int, Published]:
    """(position, publication) of the first publication for ``uri`` at or after ``after`` (an
    index into everything published so far) that satisfies ``pred``."""
    rec = _rec(client)
    seen = after

    async def loop() -> tuple[int, Published]:
        nonlocal seen
        while True:
            for i in range(seen, len(rec.published)):
                p = rec.published[i]
                if p.uri == uri and pred(p):
                    return i, p
            seen = len(rec.published)
            await client.wait_for_notification(lsp_types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)

    return await asyncio.wait_for(loop(), timeout)


def _index_progress(client: LanguageClient) -> list[Any]:
    out: list[Any] = []
    for token, reports in client.progress_reports.items():
        if str(token).startswith("ddp-lsp-index-"):
            out.extend(reports)
    return out


def _ended(client: LanguageClient) -> bool:
    return any(isinstance(r, lsp_types.WorkDoneProgressEnd) for r in _index_progress(client))


async def _index_done(client: LanguageClient, timeout: float = TIMEOUT) -> None:
    async def loop() -> None:
        while not _ended(client):
            await client.wait_for_notification(lsp_types.PROGRESS)

    await asyncio.wait_for(loop(), timeout)


def _has(code: str) -> Any:
    return lambda p: code in _codes(p)


def _lacks(code: str) -> Any:
    return lambda p: code not in _codes(p)


def _open(client: LanguageClient, name: str) -> Doc:
    root: Path = client.root  # type: ignore[attr-defined]
    path = root / name
    return Doc(client, path.as_uri(), path.read_text(), client.encoding)  # type: ignore[attr-defined]


def _watched(client: LanguageClient, *changes: tuple[Path, lsp_types.FileChangeType]) -> None:
    client.workspace_did_change_watched_files(
        lsp_types.DidChangeWatchedFilesParams(
            [lsp_types.FileEvent(p.as_uri(), kind) for p, kind in changes]
        )
    )


# -- fixtures --------------------------------------------------------------------------------------


@pytest_lsp.fixture(config=_config(f"slow:{SLOW_S}"), params=["visual_studio_code", "neovim"])
async def slow(request: pytest.FixtureRequest, lsp_client: LanguageClient, tmp_path: Path):
    await _start(lsp_client, _workspace(tmp_path), request.param)
    yield
    await lsp_client.shutdown_session()


@pytest_lsp.fixture(config=_config())
async def client(lsp_client: LanguageClient, tmp_path: Path):
    await _start(lsp_client, _workspace(tmp_path), "visual_studio_code")
    yield
    await lsp_client.shutdown_session()


@pytest_lsp.fixture(config=_config(), params=["pyproject", "editor"])
async def off(request: pytest.FixtureRequest, lsp_client: LanguageClient, tmp_path: Path):
    root = _workspace(tmp_path)
    options = None
    if request.param == "pyproject":
        with (root / "pyproject.toml").open("a") as fh:
            fh.write("\n[tool.ddp-lsp]\nproject = false\n")
    else:
        options = {"ddp-lsp": {"project": False}}
    await _start(lsp_client, root, "visual_studio_code", options)
    yield
    await lsp_client.shutdown_session()


@pytest_lsp.fixture(config=_config())
async def broken(lsp_client: LanguageClient, tmp_path: Path):
    root = _workspace(tmp_path)
    # Sorted before the files that matter, so indexing meets them first.
    (root / "aa_syntax.py").write_text("def broken(:\n    pass\n")
    (root / "ab_nul.py").write_bytes(b"x = 1\x00\n")
    (root / "ac_latin1.py").write_bytes(b"name = '\xe9t\xe9'\n")
    (root / "ad_deep.py").write_text("x = " + "+".join(["1"] * 200_000) + "\n")  # RecursionError
    (root / "ae_huge.py").write_text("x = 1\n" * 400_000)  # 2.4 MB: skipped
    await _start(lsp_client, root, "visual_studio_code")
    yield
    await lsp_client.shutdown_session()


@pytest_lsp.fixture(config=_config("crash"))
async def crashing(lsp_client: LanguageClient, tmp_path: Path):
    await _start(lsp_client, _workspace(tmp_path), "visual_studio_code")
    yield
    await lsp_client.shutdown_session()


@pytest_lsp.fixture(config=_config(f"slow:{SLOW_S}"))
async def pulling(lsp_client: LanguageClient, tmp_path: Path):
    await _start(lsp_client, _workspace(tmp_path), "visual_studio_code", refresh=True)
    yield
    await lsp_client.shutdown_session()


# -- tests -----------------------------------------------------------------------------------------


async def test_open_files_are_published_at_once_and_again_when_indexed(slow: LanguageClient):
    client = slow
    engine = _open(client, "engine.py")
    _open(client, "main.py")
    # The first publication does not wait for the index (which takes seconds here): it is
    # the file on its own, without the cross-file DDP101.
    _, first = await _published(client, engine.uri, lambda p: True)
    assert "DDP101" not in _codes(first)
    assert not _ended(client)
    # Once the index is built, engine.py is re-published with what main.py tells it.
    at, later = await _published(client, engine.uri, _has("DDP101"))
    assert later.version == 1  # the same text, new facts
    progress = _index_progress(client)
    # Both profiles support window/workDoneProgress: begin, "N/M files" reports, end, all
    # before the publication the index caused.
    assert isinstance(progress[0], lsp_types.WorkDoneProgressBegin)
    assert "indexing" in progress[0].title
    reports = [r for r in progress if isinstance(r, lsp_types.WorkDoneProgressReport)]
    assert reports and reports[-1].message == "5/5 files" and reports[-1].percentage == 100
    assert isinstance(progress[-1], lsp_types.WorkDoneProgressEnd)


async def test_editing_main_removes_and_restores_ddp101_in_engine(client: LanguageClient):
    engine = _open(client, "engine.py")
    main = _open(client, "main.py")
    at, p = await _published(client, engine.uri, _has("DDP101"))
    # The message says where the model was wrapped, and the related location opens main.py.
    [d] = [d for d in p.diagnostics if d.code == "DDP101"]
    assert "(model is wrapped in DistributedDataParallel at main.py:12)" in d.message
    elsewhere = [r for r in d.related_information or [] if r.location.uri != engine.uri]
    assert [(r.location.uri, r.location.range.start.line) for r in elsewhere] == [
        (main.uri, 11),
        (main.uri, 17),
    ]
    # Remove the DDP wrap in the editor (unsaved): engine.py loses DDP101.
    start = main.text.index(WRAP)
    main.replace(start, start + len(WRAP), UNWRAPPED)
    at, _ = await _published(client, engine.uri, _lacks("DDP101"), after=at + 1)
    # Put it back: DDP101 returns.
    start = main.text.index(UNWRAPPED)
    main.replace(start, start + len(UNWRAPPED), WRAP)
    at, _ = await _published(client, engine.uri, _has("DDP101"), after=at + 1)
    # Closing main.py reverts its summary to the disk's text (which has the wrap): nothing
    # changes for engine.py. Removing the wrap, then closing, loses DDP101 only on close if
    # the disk says so: write the disk without the wrap first.
    path = client.root / "main.py"  # type: ignore[attr-defined]
    path.write_text(path.read_text().replace(WRAP, UNWRAPPED))
    main.close()
    await _published(client, engine.uri, _lacks("DDP101"), after=at + 1)


async def test_files_changed_on_disk_reach_open_files(client: LanguageClient):
    root: Path = client.root  # type: ignore[attr-defined]
    engine = _open(client, "engine.py")
    at, _ = await _published(client, engine.uri, _has("DDP101"))
    main = root / "main.py"
    text = main.read_text()
    main.write_text(text.replace(WRAP, UNWRAPPED))
    _watched(client, (main, lsp_types.FileChangeType.Changed))
    at, _ = await _published(client, engine.uri, _lacks("DDP101"), after=at + 1)
    main.write_text(text)
    _watched(client, (main, lsp_types.FileChangeType.Changed))
    at, _ = await _published(client, engine.uri, _has("DDP101"), after=at + 1)
    main.unlink()
    _watched(client, (main, lsp_types.FileChangeType.Deleted))
    at, _ = await _published(client, engine.uri, _lacks("DDP101"), after=at + 1)
    main.write_text(text)
    _watched(client, (main, lsp_types.FileChangeType.Created))
    await _published(client, engine.uri, _has("DDP101"), after=at + 1)


async def test_an_open_file_ignores_disk_events(client: LanguageClient):
    """The editor's text wins: a disk change to an open main.py is not indexed."""
    root: Path = client.root  # type: ignore[attr-defined]
    engine = _open(client, "engine.py")
    _open(client, "main.py")
    at, _ = await _published(client, engine.uri, _has("DDP101"))
    main, misc = root / "main.py", root / "util" / "misc.py"
    main.write_text(main.read_text().replace(WRAP, UNWRAPPED))
    # In the same notification, a change engine.py does see (all_reduce_mean is no longer
    # collective): the publication it causes shows the state after both events.
    misc.write_text(misc.read_text().replace("    dist.all_reduce(t)\n", ""))
    _watched(
        client, (main, lsp_types.FileChangeType.Changed), (misc, lsp_types.FileChangeType.Changed)
    )
    _, p = await _published(client, engine.uri, lambda p: True, after=at + 1)
    assert "DDP101" in _codes(p)


async def test_project_false_analyses_each_file_alone(off: LanguageClient):
    client = off
    engine = _open(client, "engine.py")
    _open(client, "main.py")
    _, first = await _published(client, engine.uri, lambda p: True)
    assert "DDP101" not in _codes(first)
    # The settings are known once the first publication is out: the folder has no index.
    info = await asyncio.wait_for(
        client.workspace_execute_command_async(
            lsp_types.ExecuteCommandParams(command="ddp-lsp.debugDocument", arguments=[engine.uri])
        ),
        TIMEOUT,
    )
    assert info["project"] is None
    assert _index_progress(client) == []


async def test_debug_document_describes_the_index(client: LanguageClient):
    engine = _open(client, "engine.py")
    await _published(client, engine.uri, _has("DDP101"))
    info = await asyncio.wait_for(
        client.workspace_execute_command_async(
            lsp_types.ExecuteCommandParams(command="ddp-lsp.debugDocument", arguments=[engine.uri])
        ),
        TIMEOUT,
    )
    assert info["project"] == {
        "root": str(client.root),  # type: ignore[attr-defined]
        "path": "engine.py",
        "ready": True,
        "failed": False,
        "facts": True,
    }


async def test_broken_files_do_not_stop_indexing(broken: LanguageClient):
    client = broken
    engine = _open(client, "engine.py")
    await _published(client, engine.uri, _has("DDP101"))
    await _index_done(client)
    reports = [
        r for r in _index_progress(client) if isinstance(r, lsp_types.WorkDoneProgressReport)
    ]
    assert reports[-1].message == "10/10 files"
    assert not [m for m in client.log_messages if m.type == lsp_types.MessageType.Error]


async def test_an_indexer_crash_is_logged_and_files_are_analysed_alone(crashing: LanguageClient):
    client = crashing
    engine = _open(client, "engine.py")

    async def logged() -> lsp_types.LogMessageParams:
        while True:
            for m in client.log_messages:
                if "indexer stopped" in m.message:
                    return m
            await client.wait_for_notification(lsp_types.WINDOW_LOG_MESSAGE)

    msg = await asyncio.wait_for(logged(), TIMEOUT)
    assert msg.type == lsp_types.MessageType.Error
    _, p = await _published(client, engine.uri, lambda p: True)
    assert "DDP101" not in _codes(p)
    # Still serving: hover and edits work.
    hover = await asyncio.wait_for(
        client.text_document_hover_async(
            lsp_types.HoverParams(
                lsp_types.TextDocumentIdentifier(engine.uri), lsp_types.Position(0, 0)
            )
        ),
        TIMEOUT,
    )
    assert hover is None
    version = engine.replace(0, 0, "# edited\n")
    await _published(client, engine.uri, lambda p: p.version == version)


async def test_pulled_documents_are_refreshed_when_facts_arrive(pulling: LanguageClient):
    client = pulling
    engine = _open(client, "engine.py")

    async def pull() -> list[str]:
        report = await asyncio.wait_for(
            client.text_document_diagnostic_async(
                lsp_types.DocumentDiagnosticParams(lsp_types.TextDocumentIdentifier(engine.uri))
            ),
            TIMEOUT,
        )
        assert isinstance(report, lsp_types.RelatedFullDocumentDiagnosticReport)
        return [str(d.code) for d in report.items]

    assert "DDP101" not in await pull()  # at once, before the (slow) index
    await wait_for_refresh(client)
    assert "DDP101" in await pull()


async def test_related_locations_in_other_files_are_uris() -> None:
    """A finding's related location in another file becomes that file's URI, whole lines."""
    from ddp_lsp.core.types import Finding, Pos, Related, Severity, Span
    from ddp_lsp.lsp.convert import Codec
    from ddp_lsp.lsp.diagnostics import as_lsp, to_diagnostic

    other = str(FIXTURE / "main.py")
    f = Finding(
        "DDP101",
        Span(Pos(0, 0), Pos(0, 3)),
        "m",
        Severity.WARNING,
        related=(
            Related(Span(Pos(11, 4), Pos(11, 20)), "wrapped here", other),
            Related(Span(Pos(0, 1), Pos(0, 2)), "here", None),
        ),
    )
    d = to_diagnostic(f, ["abc\n"], Codec("utf-16"), lambda line: ("file:///x.py", 0))
    rel = d["relatedInformation"]
    assert rel[0]["location"]["uri"] == Path(other).as_uri()
    assert rel[0]["location"]["range"] == {
        "start": {"line": 11, "character": 0},
        "end": {"line": 12, "character": 0},
    }
    assert rel[1]["location"]["uri"] == "file:///x.py"
    lsp = as_lsp(d)
    assert lsp.related_information is not None
    assert lsp.related_information[0].location.uri == Path(other).as_uri()


def test_queued_edits_cost_one_compute() -> None:
    from pathlib import Path

    from ddp_lsp.lsp.indexer import coalesce

    a, b = Path("/w/a.py"), Path("/w/b.py")
    msgs = [
        ("update", 1, [(a, "v1")]),
        ("update", 1, [(b, "x"), (a, "v2")]),
        ("update", 2, [(a, "other folder")]),
        ("update", 2, [(a, None)]),
        ("close", 2),
        ("update", 1, [(a, "v3")]),
    ]
    assert coalesce(msgs) == [
        ("update", 1, [(b, "x"), (a, "v2")]),
        ("update", 2, [(a, None)]),
        ("close", 2),
        ("update", 1, [(a, "v3")]),
    ]
