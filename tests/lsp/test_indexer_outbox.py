"""The server's queue to the indexer holds one text per edited file, however long it waits.

While the indexer builds it reads nothing; the writer thread waits on the full pipe and every
pause in typing queues the edited files' whole texts again. ``Outbox`` merges an update into
the update queued before it for the same folder (docs/performance.md, "Memory").
"""

from __future__ import annotations

import io
import threading
from pathlib import Path

from ddp_lsp.lsp.indexer import Outbox, read_message
from ddp_lsp.lsp.project import ProjectService

A, B = Path("/w/a.py"), Path("/w/b.py")


def _drain(box: Outbox) -> list[object]:
    out = []
    while len(box):
        out.append(box.get())
    return out


def test_updates_waiting_for_the_pipe_keep_the_newest_text_of_each_file() -> None:
    box = Outbox()
    box.put(("open", 1, Path("/w"), None, True, {}))
    for k in range(200):  # 200 pauses in typing while the indexer builds
        box.put(("update", 1, [(A, f"a{k}")]))
        if k % 2:
            box.put(("update", 1, [(B, f"b{k}")]))
    assert len(box) == 2
    assert _drain(box) == [
        ("open", 1, Path("/w"), None, True, {}),
        ("update", 1, [(A, "a199"), (B, "b199")]),
    ]


def test_other_folders_and_other_messages_keep_their_order() -> None:
    box = Outbox()
    msgs = [
        ("update", 1, [(A, "v1")]),
        ("update", 2, [(A, "other folder")]),
        ("update", 1, [(A, "v2")]),
        ("close", 1),
        ("update", 1, [(A, "v3")]),
        None,
    ]
    for m in msgs:
        box.put(m)
    assert _drain(box) == msgs


def test_the_writer_thread_sends_what_the_outbox_holds_and_stops_at_none() -> None:
    box = Outbox()
    pipe = io.BytesIO()
    pipe.close = lambda: None  # type: ignore[method-assign]  # read back below
    writer = threading.Thread(target=ProjectService._write, args=(pipe, box))
    box.put(("update", 1, [(A, "x" * 100_000)]))
    box.put(("close", 1))
    box.put(None)
    writer.start()
    writer.join(timeout=60)
    assert not writer.is_alive()
    pipe.seek(0)
    assert read_message(pipe) == ("update", 1, [(A, "x" * 100_000)])
    assert read_message(pipe) == ("close", 1)
    assert read_message(pipe) is None
