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


def test_an_edit_waits_for_a_busy_indexer_and_goes_when_it_is_idle() -> None:
    """An edit is sent only to an idle indexer: while one update runs, later edits are held,
    and the indexer's "idle" sends the newest text of every file edited meanwhile, in one
    update."""
    import asyncio
    from types import SimpleNamespace

    from ddp_lsp.lsp.indexer import DISK
    from ddp_lsp.lsp.project import Folder

    texts = {"a": "x = 1\n", "b": "y = 2\n"}
    units = {
        k: SimpleNamespace(key=k, path=Path(f"/w/{k}.py"), doc=SimpleNamespace(text=t))
        for k, t in texts.items()
    }
    config = SimpleNamespace(folder_of=lambda path: Path("/w"))
    ls = SimpleNamespace(state=SimpleNamespace(units=units, config=config))
    service = ProjectService(ls)  # type: ignore[arg-type]
    service.folders[Path("/w")] = Folder(1, Path("/w"), Path("/w"), "w", None)  # type: ignore[arg-type]
    proc = object()
    service._proc = proc  # type: ignore[assignment]

    async def run() -> None:
        service._send(("update", 1, [(A, DISK)]))  # an update the indexer is working on
        assert service._busy
        _drain(service._outbox)
        service._edited.update(("a", "b"))
        service._due = 0.0
        service._flush()  # the pause is over, but the indexer is busy: held
        assert len(service._outbox) == 0 and service._held
        units["a"].doc.text = "x = 3\n"  # typed on meanwhile
        service._on_message(proc, ("idle", 0))  # type: ignore[arg-type]
        sent = _drain(service._outbox)
        assert len(sent) == 1 and sent[0][:2] == ("update", 1)  # type: ignore[index]
        assert sorted(sent[0][2]) == [(A, "x = 3\n"), (B, "y = 2\n")]  # type: ignore[index]
        assert service._busy and not service._held
        # Idle again: an edit goes after the pause without waiting.
        service._on_message(proc, ("idle", 0))  # type: ignore[arg-type]
        assert not service._busy
        service._edited.add("b")
        service._due = 0.0
        service._flush()
        assert _drain(service._outbox) == [("update", 1, [(B, "y = 2\n")])]

    asyncio.run(run())
