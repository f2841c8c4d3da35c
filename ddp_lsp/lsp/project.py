"""The project view in the server: one index per workspace folder, kept current in the background.

Each workspace folder whose settings leave ``project`` on gets a project index (see
:mod:`ddp_lsp.project`) in the indexer child process (:mod:`ddp_lsp.lsp.indexer`), built from
startup with ``$/progress`` ("12/500 files") when the client lets the server create a token.
Open documents are analysed at once with whatever facts are known (none before the first build
ends) and re-analysed when their :class:`ModuleProjectFacts` change, compared by value, so a
project update that does not concern an open file re-runs nothing for it.

What feeds the index:

- open documents, with their editor text (not the disk's): an edit is sent ``EDIT_PAUSE_S``
  after the last keystroke when the indexer is idle, and as soon as it is idle again when it
  is busy (with the newest text of every file edited meanwhile: one update, not one per
  pause), never on the keystroke path; closing a document sends the disk's text back;
- ``workspace/didChangeWatchedFiles`` for ``**/*.py``: files created, changed or deleted behind
  the editor. A file open in the editor ignores them: the editor's text wins.

When the facts of open files change they are re-published, or, for documents the client pulls,
the client gets ``workspace/diagnostic/refresh``. If the indexer cannot start or dies, the
failure is logged (``window/logMessage``) and every file is analysed on its own from then on.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from lsprotocol import types as lsp

from ddp_lsp._isolation import NEUTRAL_CWD, python_argv
from ddp_lsp.lsp.configuration import uri_to_path
from ddp_lsp.lsp.indexer import DISK, Outbox, read_message, write_message
from ddp_lsp.lsp.state import PlainText, ServerState, Unit

if TYPE_CHECKING:
    from ddp_lsp.config import Settings
    from ddp_lsp.core.crossfile import ModuleProjectFacts
    from ddp_lsp.lsp.server import DdpLanguageServer

log = logging.getLogger("ddp_lsp.lsp")

# An edit reaches the index this long after the last keystroke, when the indexer is idle (a
# pause in typing, not every keystroke: each update summarises the whole file again, about
# 1 s of CPU and 100 MB at 20,000 lines, so a shorter pause re-summarised a large file between
# a typist's keys); while it is busy, edits wait until it is idle and go together. The other
# open files see an edit's facts this pause plus one update after typing stops (docs/server.md,
# "The editor's text").
EDIT_PAUSE_S = 0.4
EVENT_DEBOUNCE_S = 0.1  # file events come in bursts (a git checkout): one update per burst


def _index_key(settings: Settings) -> tuple[object, ...]:
    """The settings an index depends on: changing a severity does not rebuild it."""
    return (settings.project, settings.exclude, settings.rank_guard_names)


@dataclass
class Folder:
    fid: int
    root: Path  # as the server knows the workspace folder (from its URI)
    resolved: Path
    name: str
    settings: Settings
    facts: dict[str, ModuleProjectFacts] = field(default_factory=dict)  # by relative path
    ready: bool = False  # the first build has ended
    progress: str | None = None  # the $/progress token once begun
    started: float = field(default_factory=time.monotonic)
    total: int = 0


class ProjectService:
    def __init__(self, ls: DdpLanguageServer) -> None:
        self.ls = ls
        self.folders: dict[Path, Folder] = {}
        self._by_fid: dict[int, Folder] = {}
        self._fids = itertools.count(1)
        self._tokens = itertools.count(1)
        self._proc: subprocess.Popen[bytes] | None = None
        self._outbox = Outbox()
        self._loop: asyncio.AbstractEventLoop | None = None
        self.failed = False
        self._stopping = False
        self._where: dict[str, tuple[Folder, str] | None] = {}  # unit key -> (folder, rel)
        # What the index has not seen yet: documents edited since (by URI), disk events.
        self._edited: set[str] = set()
        self._events: dict[Path, str | None] = {}
        self._due = 0.0
        self._timer: asyncio.TimerHandle | None = None
        # Requests the indexer has not finished yet (its "idle" clears it); what waited
        # for that meanwhile.
        self._busy = False
        self._held = False

    @property
    def state(self) -> ServerState:
        """The server's state, which is given this service as its project view: read when
        the service runs, never while the server is being built."""
        return self.ls.state

    # -- facts for the analysis ------------------------------------------------------------------

    def _folder_of(self, path: Path) -> tuple[Folder, str] | None:
        root = self.state.config.folder_of(path)
        folder = self.folders.get(root) if root is not None else None
        if folder is None:
            return None
        try:
            rel = path.relative_to(root).as_posix()  # type: ignore[arg-type]
        except ValueError:
            return None
        return folder, rel

    def facts_for(self, unit: Unit) -> ModuleProjectFacts | None:
        """The project facts of an open document (called at every analysis: a dict lookup)."""
        if unit.notebook is not None or unit.path is None or not unit.settings.project:
            return None
        try:
            where = self._where[unit.key]
        except KeyError:
            where = self._where[unit.key] = self._folder_of(unit.path)
        return where[0].facts.get(where[1]) if where is not None else None

    def facts_at(self, path: Path, settings: Settings) -> ModuleProjectFacts | None:
        """The project facts of a closed file (workspace diagnostics)."""
        if not settings.project:
            return None
        where = self._folder_of(path)
        return where[0].facts.get(where[1]) if where is not None else None

    def describe(self, unit: Unit) -> dict[str, Any] | None:
        """For ``ddp-lsp.debugDocument``: the index the document belongs to, if any."""
        where = self._folder_of(unit.path) if unit.path is not None else None
        if where is None:
            return None
        folder, rel = where
        return {
            "root": str(folder.root),
            "path": rel,
            "ready": folder.ready,
            "failed": self.failed,
            "facts": self.facts_for(unit) is not None,
        }

    # -- folders -------------------------------------------------------------------------------

    def sync_folders(self) -> None:
        """Open an index for every workspace folder that wants one, close the others (called at
        startup and after any change of settings, pyproject.toml files or folders)."""
        if self._stopping:
            return
        wanted: dict[Path, tuple[str, Settings]] = {}
        for uri, root in self.state.config.folders:
            if root is None or root in wanted:
                continue
            probe = uri.rstrip("/") + "/pyproject.toml"
            if not self.state.config.editor_for(probe).options.enable:
                continue
            settings, _ = self.state.settings_for(probe, root / "pyproject.toml")
            if settings.project:
                wanted[root] = (uri, settings)
        changed = False
        for root, folder in list(self.folders.items()):
            if root not in wanted or _index_key(folder.settings) != _index_key(wanted[root][1]):
                self._close(folder)
                changed = True
        for root, (uri, settings) in wanted.items():
            if root not in self.folders:
                self._open(root, uri, settings)
                changed = True
        if changed:
            self._where.clear()
            self._facts_changed()

    def _open(self, root: Path, uri: str, settings: Settings) -> None:
        try:
            resolved = root.resolve()
        except OSError:
            resolved = root
        folder = Folder(next(self._fids), root, resolved, root.name or uri, settings)
        self.folders[root] = folder
        self._by_fid[folder.fid] = folder
        if not self._ensure_process():
            return
        overlays: dict[Path, str] = {}
        for unit in self.state.units.values():
            if self._indexed(unit) and self.state.config.folder_of(unit.path) == root:
                overlays[unit.path] = unit.doc.text  # type: ignore[index]
                self._edited.discard(unit.key)
        self._send(("open", folder.fid, resolved, settings, True, overlays))
        asyncio.ensure_future(self._begin_progress(folder))

    def _close(self, folder: Folder) -> None:
        self.folders.pop(folder.root, None)
        self._by_fid.pop(folder.fid, None)
        self._end_progress(folder, "stopped")
        if self._proc is not None:
            self._send(("close", folder.fid))

    # -- the child process -----------------------------------------------------------------------

    def _ensure_process(self) -> bool:
        if self._proc is not None:
            return True
        if self.failed:
            return False
        self._loop = asyncio.get_running_loop()
        try:
            # Isolated (-I, our own sys.path, the filesystem root as working directory): with
            # `-m` in the editor's working directory, a `struct.py` or a `ddp_lsp/` folder of the
            # opened repository would be imported instead of ours, and run.
            proc = subprocess.Popen(
                python_argv("ddp_lsp.lsp.indexer"),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                cwd=NEUTRAL_CWD,
            )
        except OSError as exc:
            self._fail(f"could not start the project indexer: {exc}")
            return False
        self._proc = proc
        self._outbox = Outbox()
        self._busy = self._held = False
        assert proc.stdin is not None and proc.stdout is not None
        threading.Thread(
            target=self._write, args=(proc.stdin, self._outbox), daemon=True, name="index-writer"
        ).start()
        threading.Thread(
            target=self._read, args=(proc, proc.stdout), daemon=True, name="index-reader"
        ).start()
        return True

    def _send(self, msg: object) -> None:
        if isinstance(msg, tuple) and msg[0] in ("open", "update"):
            self._busy = True
        # Written (and pickled: a 20,000-line text is ~1 ms) by the writer thread: a pipe write
        # blocks while the indexer is busy, and the event loop must not wait for it. Updates
        # queued meanwhile are merged (see Outbox).
        self._outbox.put(msg)

    @staticmethod
    def _write(pipe: IO[bytes], outbox: Outbox) -> None:
        while (msg := outbox.get()) is not None:
            try:
                write_message(pipe, msg)
            except (OSError, ValueError):
                return
        try:
            pipe.close()
        except OSError:
            pass

    def _read(self, proc: subprocess.Popen[bytes], pipe: IO[bytes]) -> None:
        loop = self._loop
        assert loop is not None
        while True:
            try:
                msg = read_message(pipe)
            except Exception:
                log.exception("reading from the project indexer failed")
                msg = None
            if msg is None:
                break
            try:
                loop.call_soon_threadsafe(self._on_message, proc, msg)
            except RuntimeError:
                return  # the loop has closed: the server is exiting
        # Reaped here, off the event loop (also after stop() kills it: no zombie is left).
        try:
            rc: int | None = proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            rc = None
        try:
            loop.call_soon_threadsafe(self._on_exit, proc, rc)
        except RuntimeError:
            pass

    def _on_message(self, proc: subprocess.Popen[bytes], msg: Any) -> None:
        if proc is not self._proc:
            return
        op, fid = msg[0], msg[1]
        folder = self._by_fid.get(fid)
        if op == "idle":
            self._busy = False
            if self._held and self._timer is None:
                self._held = False
                self._flush()  # what was edited while it worked, at once
            return
        if op == "error":
            self._log(lsp.MessageType.Warning, f"ddp-lsp: indexing failed: {msg[2]}")
            return
        if folder is None:
            return  # closed meanwhile
        if op == "begin":
            folder.total = msg[2]
            self._report(folder, 0, folder.total)
        elif op == "progress":
            self._report(folder, msg[2], msg[3])
        elif op == "facts":
            changed: dict[str, ModuleProjectFacts | None] = msg[2]
            for rel, facts in changed.items():
                if facts is None:
                    folder.facts.pop(rel, None)
                else:
                    folder.facts[rel] = facts
            if msg[3] and not folder.ready:
                folder.ready = True
                took = time.monotonic() - folder.started
                log.info("indexed %s: %d files in %.2f s", folder.root, folder.total, took)
                self._end_progress(folder, f"{folder.total} files")
            self._facts_changed()

    def _on_exit(self, proc: subprocess.Popen[bytes], rc: int | None) -> None:
        if proc is not self._proc:
            return
        self._proc = None
        self._outbox.put(None)
        if self._stopping:
            return
        self._fail(f"the project indexer stopped (exit status {rc})")

    def _fail(self, why: str) -> None:
        self.failed = True
        self._log(
            lsp.MessageType.Error,
            f"ddp-lsp: {why}; files are analysed one at a time, without facts from the "
            "rest of the project",
        )
        for folder in self.folders.values():
            folder.facts = {}
            self._end_progress(folder, "failed")
        self._facts_changed()

    def _log(self, kind: lsp.MessageType, message: str) -> None:
        log.warning("%s", message)
        try:
            self.ls.window_log_message(lsp.LogMessageParams(type=kind, message=message))
        except Exception:  # the transport is closing
            pass

    def stop(self) -> None:
        """Shutdown: end the progress, stop the child (it also exits when its input closes)."""
        self._stopping = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        for folder in self.folders.values():
            self._end_progress(folder, "cancelled")
        proc, self._proc = self._proc, None
        if proc is not None:
            self._outbox.put(None)
            try:
                proc.kill()
            except OSError:
                pass

    # -- progress --------------------------------------------------------------------------------

    async def _begin_progress(self, folder: Folder) -> None:
        caps = self.ls.client_capabilities.window
        if not (caps and caps.work_done_progress):
            return  # the client shows no progress: index silently
        token = f"ddp-lsp-index-{next(self._tokens)}"
        try:
            await self.ls.work_done_progress.create_async(token)
        except Exception as exc:
            log.info("work done progress refused: %s", exc)
            return
        if self._by_fid.get(folder.fid) is not folder or self._stopping:
            return
        folder.progress = token
        self.ls.work_done_progress.begin(
            token,
            lsp.WorkDoneProgressBegin(
                title=f"ddp-lsp: indexing {folder.name}", percentage=0, cancellable=False
            ),
        )
        if folder.ready:
            self._end_progress(folder, f"{folder.total} files")
        elif folder.total:
            self._report(folder, 0, folder.total)

    def _report(self, folder: Folder, done: int, total: int) -> None:
        if folder.progress is None:
            return
        self.ls.work_done_progress.report(
            folder.progress,
            lsp.WorkDoneProgressReport(
                message=f"{done}/{total} files", percentage=int(100 * done / max(total, 1))
            ),
        )

    def _end_progress(self, folder: Folder, message: str) -> None:
        token, folder.progress = folder.progress, None
        if token is not None:
            try:
                self.ls.work_done_progress.end(token, lsp.WorkDoneProgressEnd(message=message))
            except Exception:
                pass

    # -- re-publishing -------------------------------------------------------------------------

    def _facts_changed(self) -> None:
        """Re-analyse the open documents whose facts are no longer those they were analysed
        with; a pulling client is asked to refresh."""
        state = self.state
        pulled = False
        changed = False
        for unit in state.units.values():
            if unit.project != self.facts_for(unit):
                unit.dirty = True
                changed = True
                pulled |= any(uri in state.pulled for uri, _, _ in unit.views())
        if changed:
            state.schedule()
        if pulled:
            self.ls.refresh_pulled()
        state.workspace_changed()  # closed files' facts may have changed too

    # -- what feeds the index --------------------------------------------------------------------

    def _indexed(self, unit: Unit) -> bool:
        return unit.notebook is None and unit.path is not None and unit.path.suffix == ".py"

    def text_changed(self, unit: Unit, event: str) -> None:
        """A document was opened, edited or closed (``event``); the index hears of it later."""
        if not self.folders or not self._indexed(unit):
            return
        if event == "close":
            self._where.pop(unit.key, None)
            self._edited.discard(unit.key)
            self._events[unit.path] = DISK  # type: ignore[index]
            self._arm(EVENT_DEBOUNCE_S)
        else:
            self._edited.add(unit.key)
            self._arm(EDIT_PAUSE_S)

    def files_changed(self, changes: list[lsp.FileEvent]) -> None:
        """``workspace/didChangeWatchedFiles``: Python files changed behind the editor."""
        for ch in changes:
            path = uri_to_path(ch.uri)
            if path is None or path.suffix != ".py" or ch.uri in self.state.units:
                continue  # open in the editor: its text wins over the disk's
            self._events[path] = None if ch.type == lsp.FileChangeType.Deleted else DISK
        if self._events and self.folders:
            self._arm(EVENT_DEBOUNCE_S)

    def _arm(self, delay: float) -> None:
        loop = asyncio.get_running_loop()
        self._due = max(self._due, loop.time() + delay)
        if self._timer is None:
            self._timer = loop.call_at(self._due, self._flush)

    def _flush(self) -> None:
        loop = asyncio.get_running_loop()
        if loop.time() < self._due:
            self._timer = loop.call_at(self._due, self._flush)  # typed on since: wait more
            return
        self._timer = None
        if self._proc is None or self._stopping:
            self._edited.clear()
            self._events.clear()
            return
        if self._busy:
            self._held = True  # sent when the indexer says it is idle
            return
        items: dict[int, list[tuple[Path, str | None]]] = {}

        def add(path: Path, text: str | None) -> None:
            where = self._folder_of(path)
            if where is not None:
                items.setdefault(where[0].fid, []).append((path, text))

        for path, what in self._events.items():
            add(path, what)
        for key in self._edited:
            unit = self.state.units.get(key)
            if unit is not None and unit.path is not None:
                add(unit.path, None if isinstance(unit.doc, PlainText) else unit.doc.text)
        self._edited.clear()
        self._events.clear()
        self._held = False
        for fid, batch in items.items():
            self._send(("update", fid, batch))
