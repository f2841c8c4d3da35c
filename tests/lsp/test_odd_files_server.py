"""The server's own disk reads (workspace pull, the indexer process) on odd ``*.py`` files.

The indexer and the workspace pull read every Python file of a folder; a FIFO there used to
hang them and a symlink to /dev/zero to kill the indexer with MemoryError. Both now read
through ``ddp_lsp.sources.read_source``: the odd file is skipped, the others are analysed.
"""

from __future__ import annotations

import os
import signal
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from lsprotocol import types as lsp

from ddp_lsp.core.settings import Settings
from ddp_lsp.lsp import indexer as indexer_process
from ddp_lsp.lsp import workspace as workspace_pull
from ddp_lsp.lsp.state import ServerState
from ddp_lsp.sources import MAX_SOURCE_BYTES
from tests.lsp.helpers import TRAIN

pytestmark = pytest.mark.skipif(os.name != "posix", reason="FIFOs, sockets and devices: POSIX")


@pytest.fixture(autouse=True)
def deadline() -> Iterator[None]:
    def expire(signum: int, frame: object) -> None:
        raise TimeoutError("blocked on an odd file")

    old = signal.signal(signal.SIGALRM, expire)
    signal.alarm(60)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def _odd_folder(root: Path) -> None:
    (root / "train.py").write_text(TRAIN)
    (root / "zero.py").symlink_to("/dev/zero")
    os.mkfifo(root / "pipe.py")
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(root / "sock.py"))
    s.close()
    (root / "loop.py").symlink_to("loop.py")
    (root / "huge.py").write_text("#" * (MAX_SOURCE_BYTES + 1))


async def test_workspace_pull_skips_odd_files(tmp_path: Path) -> None:
    _odd_folder(tmp_path)
    state = ServerState(lambda uri, version, diags: None, lambda message, is_error: None)
    state.config.folders = [(tmp_path.as_uri(), tmp_path)]
    params = lsp.WorkspaceDiagnosticParams(previous_result_ids=[])
    report = await workspace_pull.workspace_diagnostics(
        state, workspace_pull.WorkspaceCache(), params, None
    )
    by_name = {Path(i.uri).name: i for i in report.items}
    train = by_name["train.py"]
    assert isinstance(train, lsp.WorkspaceFullDocumentDiagnosticReport) and train.items
    for name in ("zero.py", "pipe.py", "sock.py", "huge.py"):
        item = by_name[name]
        assert isinstance(item, lsp.WorkspaceFullDocumentDiagnosticReport) and not item.items


def test_indexer_skips_odd_files(tmp_path: Path) -> None:
    _odd_folder(tmp_path)
    sent: list[object] = []
    ix = indexer_process.Indexer.__new__(indexer_process.Indexer)
    ix.folders, ix.parent, ix.slow, ix.crash = {}, os.getppid(), 0.0, False
    ix.send = sent.append  # type: ignore[method-assign]
    ix.open(1, tmp_path, Settings(), False, {})
    facts = [m for m in sent if isinstance(m, tuple) and m[0] == "facts"]
    assert facts, sent
    index = ix.folders[1].index
    assert set(index.summaries) == {"train.py"}
    kinds = {p.name: e.kind for p, e in index.unread.items()}
    assert kinds == {
        "zero.py": "not-regular",
        "pipe.py": "not-regular",
        "sock.py": "not-regular",
        "loop.py": "loop",
        "huge.py": "too-large",
    }
    # An editor closing a FIFO "file" asks for the disk's text: still not read.
    assert not indexer_process._small(tmp_path / "pipe.py")
    assert not ix._apply(index, tmp_path / "pipe.py", indexer_process.DISK)
    # The pipe becomes a file: read, summarised, no longer listed as unread.
    (tmp_path / "pipe.py").unlink()
    (tmp_path / "pipe.py").write_text("x = 1\n")
    assert ix._apply(index, tmp_path / "pipe.py", indexer_process.DISK)
    assert "pipe.py" in index.summaries and tmp_path / "pipe.py" not in index.unread
