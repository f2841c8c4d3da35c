"""The project indexer: a child process that owns the server's project indexes.

The server starts it isolated (``python -I``, the server's own ``sys.path``, the filesystem root
as working directory: see :mod:`ddp_lsp._isolation`). It holds one
:class:`~ddp_lsp.project.ProjectIndex` per workspace folder, builds it from disk (with the
editor's text of open files laid over it), applies edits and file events, recomputes
:class:`~ddp_lsp.project.ProjectFacts` from the last computation (``flow.compute``'s
``previous``: import resolution, each module's resolved parts, and every stage an edit cannot
have changed are reused) and sends the server only the modules whose facts changed.

Why a process and not a thread: parsing a workspace and ``compute`` are pure-Python CPU work
(``compute`` alone is ~0.5 s for 500 modules). In a thread they hold the GIL in 5 ms slices
against the event loop, which doubles the latency of every keystroke analysed meanwhile; a
child process runs on the other core (and at a lower priority), so the editor's own file is
analysed exactly as fast while the workspace is indexed.

Wire format, both ways: a 4-byte big-endian length, then a pickle. Pickle is safe here, and only
here: both ends are our own processes on an anonymous pipe that no other process holds, and
every message is made by ``pickle.dumps`` of our own values; the repository's text travels
inside them as ``str`` data, which pickling never turns into code (SECURITY.md). Nothing read
from disk is ever unpickled: the on-disk index cache is JSON.

Requests: ``("open", fid, root, settings, cache_dir, overlays)``, ``("update", fid, items)``
where an item is ``(path, text)``: a ``str`` is the editor's text, ``None`` a deleted file and
:data:`DISK` "read it from disk again"; ``("close", fid)``. Answers: ``("begin", fid, total)``,
``("progress", fid, done, total)``, ``("facts", fid, changed, full)`` where ``changed`` maps a
project-relative path to its :class:`ModuleProjectFacts` (``None``: gone), ``("error", fid,
text)``, and ``("idle", 0)`` once the requests that were waiting are all handled (the server
sends the next edit then: see ``lsp/project.py``'s ``EDIT_PAUSE_S``). A file that cannot be read or parsed is skipped, never fatal; the process exits when
its input closes or its parent goes away.

``DDP_LSP_INDEX_INJECT`` exists for the tests: ``slow:SECONDS`` sleeps before each file of a
build, ``crash`` exits at the first build as a crash would.
"""

from __future__ import annotations

import logging
import os
import struct
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

# The server imports this module at start-up for the wire format and ``DISK``: the project
# package, the analysis core, pickle and the rest are imported where the indexer process uses
# them, so that ``initialize`` is answered without them (docs/performance.md, "Cold start";
# tests/lsp/test_cold_start.py).

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ddp_lsp.config import Settings
    from ddp_lsp.core.crossfile import ModuleProjectFacts
    from ddp_lsp.project import ProjectFacts, ProjectIndex

DISK = "<disk>"  # an update item's text: read the file again (closed in the editor, changed)
PROGRESS_EVERY_S = 0.2

log = logging.getLogger("ddp_lsp.indexer")
_HEADER = struct.Struct(">I")


def write_message(out: IO[bytes], msg: object) -> None:
    import pickle

    data = pickle.dumps(msg, protocol=pickle.HIGHEST_PROTOCOL)
    out.write(_HEADER.pack(len(data)) + data)
    out.flush()


def read_message(inp: IO[bytes]) -> Any:
    """The next message, or None at the end of the stream."""
    head = _read_exact(inp, _HEADER.size)
    if head is None:
        return None
    (length,) = _HEADER.unpack(head)
    data = _read_exact(inp, length)
    if data is None:
        return None
    import pickle

    return pickle.loads(data)


def _read_exact(inp: IO[bytes], n: int) -> bytes | None:
    # An unbuffered stream (the indexer's stdin) returns what the pipe holds, maybe less.
    parts = []
    while n > 0:
        chunk = inp.read(n)
        if not chunk:
            return None
        parts.append(chunk)
        n -= len(chunk)
    return b"".join(parts)


def _pending(inp: IO[bytes]) -> bool:
    """More input is waiting (never blocks)."""
    import select

    try:
        ready, _, _ = select.select([inp], [], [], 0)
    except (OSError, ValueError):
        return False
    return bool(ready)


def coalesce(messages: list[Any]) -> list[Any]:
    """Consecutive updates of one folder as one (the last text of each file wins): edits
    that queued up while a build or a ``compute`` ran cost one ``compute``, not one each."""
    out: list[Any] = []
    for msg in messages:
        last = out[-1] if out else None
        if msg[0] == "update" and last is not None and last[0] == "update" and last[1] == msg[1]:
            items = dict(last[2])
            for path, text in msg[2]:
                items.pop(path, None)  # re-inserted last: the order of the latest edits
                items[path] = text
            out[-1] = ("update", msg[1], list(items.items()))
        else:
            out.append(msg)
    return out


class Outbox:
    """The server's messages to the indexer, waiting for the pipe: an update queued behind
    another update of the same folder is merged into it (:func:`coalesce`: the newest text of
    each file wins) instead of waiting beside it.

    While the indexer builds (seconds for a large project) it reads nothing, the pipe fills
    and the writer thread waits; every pause in typing queues the whole text of each edited
    file again. Queued side by side they grew without bound (23 MB over 100 edits of a
    20,000-line file); merged, one text per file waits (docs/performance.md, "Memory").
    ``None`` tells the writer to close the pipe."""

    def __init__(self) -> None:
        import threading
        from collections import deque

        self._queue: deque[Any] = deque()
        self._ready = threading.Condition()

    def put(self, msg: Any) -> None:
        with self._ready:
            last = self._queue[-1] if self._queue else None
            if (
                msg is not None
                and msg[0] == "update"
                and last is not None
                and last[0] == "update"
                and last[1] == msg[1]
            ):
                self._queue[-1] = coalesce([last, msg])[0]
            else:
                self._queue.append(msg)
            self._ready.notify()

    def get(self) -> Any:
        """The oldest message (blocks until there is one)."""
        with self._ready:
            while not self._queue:
                self._ready.wait()
            return self._queue.popleft()

    def __len__(self) -> int:
        with self._ready:
            return len(self._queue)


@dataclass
class _Folder:
    index: ProjectIndex
    facts: dict[str, ModuleProjectFacts] = field(default_factory=dict)
    # The last computation: the next one after an edit reuses its import resolution.
    computed: ProjectFacts | None = None
    # The index was just built (every summary unfrozen): the next freeze does not collect.
    built: bool = True


class Indexer:
    def __init__(self, out: IO[bytes]) -> None:
        self.out = out
        self.folders: dict[int, _Folder] = {}
        self.parent = os.getppid()
        inject = os.environ.get("DDP_LSP_INDEX_INJECT", "")
        self.slow = float(inject[5:]) if inject.startswith("slow:") else 0.0
        self.crash = inject == "crash"

    def send(self, msg: object) -> None:
        write_message(self.out, msg)

    def handle(self, msg: Any) -> None:
        import traceback

        op, fid = msg[0], msg[1]
        try:
            if op == "open":
                self.open(fid, *msg[2:])
            elif op == "update":
                self.update(fid, msg[2])
            elif op == "close":
                self.folders.pop(fid, None)
        except Exception:
            self.send(("error", fid, traceback.format_exc()))

    # -- building ------------------------------------------------------------------------------

    def open(
        self,
        fid: int,
        root: Path,
        settings: Settings,
        cache_dir: Path | bool,
        overlays: dict[Path, str],
    ) -> None:
        import time

        from ddp_lsp.project import ProjectIndex
        from ddp_lsp.project.build import fill
        from ddp_lsp.project.index import no_collection

        index = ProjectIndex(root, settings, cache_dir=cache_dir)
        folder = self.folders[fid] = _Folder(index)
        files = list(index.files())
        overlays = {p.resolve(): t for p, t in overlays.items()}
        self.send(("begin", fid, len(files)))
        if self.crash:
            os._exit(70)
        last = time.monotonic()

        def before(batch: Sequence[Path]) -> None:
            if os.getppid() != self.parent:
                sys.exit(0)  # the server is gone: nobody wants this index
            if self.slow:
                time.sleep(self.slow * len(batch))

        def after(done: int) -> None:
            nonlocal last
            now = time.monotonic()
            if now - last >= PROGRESS_EVERY_S:
                last = now
                self.send(("progress", fid, done, len(files)))

        with no_collection():  # the summaries live on (see no_collection)
            fill(index, files, overlays, before, after)
        # Open documents the walk did not meet: new, unsaved files under the root.
        for path, text in overlays.items():
            if self._wanted(index, path):
                self._apply(index, path, text)
        self.send(("progress", fid, len(files), len(files)))
        folder.facts = self._compute(folder)
        self.send(("facts", fid, dict(folder.facts), True))

    def _wanted(self, index: ProjectIndex, path: Path) -> bool:
        """A module of the index: under its root, and listed by the walk were it on disk."""
        from ddp_lsp.project.discover import is_discovered, nearest_settings

        if path.suffix != ".py":
            return False
        at = nearest_settings(index.root, index.settings)
        if is_discovered(path, index.root, at):
            return True
        try:  # the editor's name for it goes through a symlink
            return is_discovered(path.resolve(), index.root, at)
        except OSError:
            return False

    def _apply(
        self, index: ProjectIndex, path: Path, text: str | None
    ) -> bool | tuple[str, dict[int, int]]:
        """Lay ``text`` over ``path`` in the index; True when its summary changed in what
        the project reads, False when not (``same_for_project``: an edit the cross-file
        facts cannot see, such as a comment or a constant on a line, computes nothing), and
        (its path, ``line_map``) when only the lines its facts cite moved (a line added or
        removed around them: the facts stand, their provenance in it moved)."""
        import traceback

        from ddp_lsp.project.summary import line_map, same_for_project

        rel = _rel(index.root, path)
        before = index.summaries.get(rel)
        try:
            if text == DISK:  # closed in the editor, or changed behind it: the disk's text
                index.forget_text(path)
                if _small(path):
                    index.build([path])
                else:
                    index.update(path, None)  # deleted, or too large to be training code
            else:
                index.update(path, text)  # None: deleted; too large: left out
        except Exception:
            # One file that breaks the summariser (a recursion limit, an odd encoding) costs
            # that file only.
            log.warning("indexing %s failed:\n%s", path, traceback.format_exc())
            index.update(path, None)
        after = index.summaries.get(rel)
        if before is None or after is None:
            return before is not after
        if same_for_project(before, after):
            return False
        lines = line_map(before, after)
        return True if lines is None else (rel, lines)

    def update(self, fid: int, items: list[tuple[Path, str | None]]) -> None:
        from ddp_lsp.project.flow import moved

        folder = self.folders.get(fid)
        if folder is None:
            return
        changed = False
        moves: list[tuple[str, dict[int, int]]] = []
        for path, text in items:
            if text is not None and not self._wanted(folder.index, path):
                continue
            got = self._apply(folder.index, path, text)
            if isinstance(got, tuple):
                moves.append(got)
            else:
                changed |= got
        if changed:
            new = self._compute(folder)
        elif moves:
            new = dict(folder.facts)
            try:
                for rel, lines in moves:
                    new = {p: moved(m, rel, lines) for p, m in new.items()}
            except KeyError:  # a cited line the map does not know (never expected): compute
                new = self._compute(folder)
        else:
            return
        diff: dict[str, ModuleProjectFacts | None] = {
            p: m for p, m in new.items() if folder.facts.get(p) != m
        }
        diff.update({p: None for p in folder.facts if p not in new})
        folder.facts = new
        if diff:
            self.send(("facts", fid, diff, False))

    @staticmethod
    def _compute(folder: _Folder) -> dict[str, ModuleProjectFacts]:
        import gc

        from ddp_lsp.project import compute
        from ddp_lsp.project.index import no_collection

        # An update leaves what it allocated young (promote=False): moving it to the oldest
        # generation would unfreeze the whole index, and the collection below would then walk
        # all of it (about 1 s at 2,000 files).
        with no_collection(promote=folder.built):
            folder.computed = compute(folder.index, folder.computed, updatable=True)
        # The index and its facts live as long as the process: out of the cycle collector's
        # sight (a full collection walks every one of their millions of objects, about 1 s at
        # 2,000 files, and would land on whichever update comes next). Objects freed later are
        # still freed when their last reference goes.
        #
        # After an update, first collect what is not frozen yet: what this update allocated
        # (the edited file's summary and its facts, the stages it copied), a few thousand
        # objects. The update ran without the collector (no_collection), so its reference
        # cycles (a parser's recursive closure holding a piece of a syntax tree) would
        # otherwise be frozen with the survivors and never freed: the frozen heap then grows
        # with every update of a long editing session (lsp/heap.py does the same for the
        # server's analyses). After a build the whole index is unfrozen, and collecting would
        # walk all of it: freeze it as it is (the build leaves a few hundred such objects).
        if folder.built:
            folder.built = False
        else:
            gc.collect()
        gc.freeze()
        return dict(folder.computed.by_path)


def _rel(root: Path, path: Path) -> str:
    # As ProjectIndex keys its summaries: relative to the resolved root, POSIX separators.
    try:
        return path.resolve().relative_to(root).as_posix()
    except (OSError, ValueError):
        return path.name


def _small(path: Path) -> bool:
    """The file is a regular file, not too large to be training code (like the analysis);
    the index reads it through sources.read_source, which checks again when it opens it."""
    from ddp_lsp.sources import ReadError, check_source

    try:
        check_source(path)
    except ReadError:
        return False
    return True


def main() -> int:
    import pickle

    # The protocol owns the real stdout; anything printed by accident goes to stderr.
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    logging.basicConfig(level=logging.WARNING, format="ddp-lsp indexer: %(message)s")
    try:
        os.nice(10)  # the editor's keystrokes come first
    except (AttributeError, OSError):
        pass
    indexer = Indexer(out)
    # Unbuffered: select() then tells truly whether another message is waiting.
    inp = os.fdopen(os.dup(0), "rb", buffering=0)
    while True:
        batch = []
        try:
            msg = read_message(inp)
            while msg is not None:
                batch.append(msg)
                if not _pending(inp):
                    break
                msg = read_message(inp)
        except (OSError, EOFError, pickle.UnpicklingError):
            return 1
        for m in coalesce(batch):
            try:
                indexer.handle(m)
            except (BrokenPipeError, OSError):
                return 0  # the server went away mid-answer
        if msg is None:
            return 0
        if not _pending(inp):
            try:
                indexer.send(("idle", 0))
            except (BrokenPipeError, OSError):
                return 0


if __name__ == "__main__":
    sys.exit(main())
