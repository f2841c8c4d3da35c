"""ServerState: the one object that owns documents, findings, settings and preflight results.

Scheduling. Edits only mark a unit dirty; analysis runs from one ``call_soon`` callback after
the server has handled every message already waiting (see ``server._StdioLoop``), so a burst of
keystrokes is analysed once, at its newest version, and diagnostics are only ever published for
the text the server holds at that moment: an old version can never be published after a newer
one. Requests that read findings (code actions, hover, pull diagnostics) first bring the unit
up to date, synchronously: the core's incremental analysis makes that a few milliseconds.

A *unit* is what gets analysed: one text document, or all code cells of one notebook; a *view*
is a URI the client knows (the document itself, or one cell) with its line offset in the unit.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from ddp_lsp.core.types import Finding, Pos
from ddp_lsp.lsp.configuration import ConfigurationService, uri_to_path
from ddp_lsp.lsp.convert import UTF16, Codec
from ddp_lsp.lsp.diagnostics import (
    ALL,
    DiagnosticSupport,
    Rendered,
    covered_lines,
    moved_pool,
    reuse_moved,
    to_diagnostic,
)
from ddp_lsp.lsp.heap import HeapKeeper, IdlePreload
from ddp_lsp.sources import MAX_SOURCE_BYTES, too_large_message

if TYPE_CHECKING:
    from ddp_lsp.config import Settings
    from ddp_lsp.core.crossfile import ModuleProjectFacts
    from ddp_lsp.core.document import Document
    from ddp_lsp.core.env import Environment
    from ddp_lsp.lsp.notebook import Notebook  # (imported by the first notebook opened)
    from ddp_lsp.preflight.schema import PreflightReport

# The analysis core (document, engine, rules) is imported on first use, not at import time:
# the server must answer ``initialize`` as fast as a bare pygls server. ``warm_up`` loads it
# on the ``initialized`` notification (the client has the result), before the first document
# usually arrives.


def warm_up() -> None:
    from ddp_lsp.core import document, engine  # noqa: F401
    from ddp_lsp.core.registry import all_rules

    all_rules()


def _split_lines(text: str) -> list[str]:
    """``core.document.split_lines``, with a fast path for text without a CR (5x on a 2 MB
    paste): plain text over the size limit is only ever split, never parsed."""
    if "\r" not in text:
        lines = [line + "\n" for line in text.split("\n")]
        lines[-1] = lines[-1][:-1]
        return lines
    from ddp_lsp.core.document import split_lines

    return split_lines(text)


def _is_document(doc: object) -> bool:
    return not isinstance(doc, PlainText)


log = logging.getLogger("ddp_lsp.lsp")

# Larger files are kept in sync but not analysed: the first analysis of a 5 MB module takes
# the core close to a minute, during which the server could answer nothing. Training scripts
# are far below this (a 20,000-line file is about 0.7 MB).
MAX_ANALYSED_CHARS = MAX_SOURCE_BYTES  # one limit for CLI, index and server: ddp_lsp/sources.py
# A document longer than FIRST_LOOK_MIN_LINES gets the findings of its first FIRST_LOOK_LINES
# lines (where an editor opens it) published before the rules have run on the rest.
FIRST_LOOK_MIN_LINES = 4000
FIRST_LOOK_LINES = 1000

# Garbage collection between keystrokes: see ddp_lsp/lsp/heap.py (collect what the edit left
# unfrozen, freeze the survivors; a full collection only once typing pauses, when owed).

Publish = Callable[[str, "int | None", list[dict[str, Any]]], None]
ShowError = Callable[[str, bool], None]  # (message, is_error)


class PlainText:
    """A document too large to analyse: only its lines, kept in sync with the client.

    Edits splice the line list (only the lines they touch are rebuilt), so typing in a 5 MB
    file costs what the edit touches, not a rebuild of the whole text per keystroke.
    """

    def __init__(self, text: str) -> None:
        self._lines = _split_lines(text)
        self.size = len(text)

    @property
    def text(self) -> str:
        return "".join(self._lines)

    @property
    def lines(self) -> list[str]:
        return self._lines

    def set_text(self, text: str) -> None:
        self._lines = _split_lines(text)
        self.size = len(text)

    def apply_edit(self, start: Pos, end: Pos, text: str) -> None:
        if end < start:
            start, end = end, start
        lines = self._lines
        last = len(lines) - 1
        sl, el = min(start.line, last), min(end.line, last)
        sc = min(start.col, len(lines[sl])) if start.line <= last else len(lines[sl])
        ec = min(end.col, len(lines[el])) if end.line <= last else len(lines[el])
        # Take one more line on each side when it exists: a lone CR at the end of the line
        # before, or an LF at the start of the line after, must merge with what the edit puts
        # next to it, as a fresh split of the whole text would.
        lo = max(sl - 1, 0)
        hi = min(el + 1, last)
        head = "".join(lines[lo:sl]) + lines[sl][:sc]
        tail = lines[el][ec:] + "".join(lines[el + 1 : hi + 1])
        old_len = sum(len(ln) for ln in lines[lo : hi + 1])
        piece = head + text + tail
        new = _split_lines(piece)
        if hi < last and new and new[-1] == "" and piece:
            new.pop()  # the split's trailing empty line is the start of the next kept line
        lines[lo : hi + 1] = new
        self.size += len(piece) - old_len


def _span_chars(lines: list[str], start: Pos, end: Pos) -> int:
    """How many code points an edit from ``start`` to ``end`` removes (clamped as edits are)."""
    if end < start:
        start, end = end, start
    last = len(lines) - 1
    if last < 0:
        return 0

    def clamp(p: Pos) -> tuple[int, int]:
        line = min(p.line, last)
        return line, min(p.col, len(lines[line])) if p.line <= last else len(lines[line])

    (sl, sc), (el, ec) = clamp(start), clamp(end)
    if sl == el:
        return ec - sc
    return len(lines[sl]) - sc + sum(map(len, lines[sl + 1 : el])) + ec


def make_document(text: str, settings: Settings) -> Document | PlainText:
    if len(text) > MAX_ANALYSED_CHARS:
        return PlainText(text)
    from ddp_lsp.core.document import Document

    return Document(text, settings.rank_model)


@dataclass
class Unit:
    key: str  # the text document's or the notebook's URI
    path: Path | None
    doc: Document | PlainText
    version: int | None
    settings: Settings
    language: str = "python"
    notebook: Notebook | None = None
    enabled: bool = True
    findings: tuple[Finding, ...] = ()
    analysed_version: object = None  # the (version) the findings belong to
    dirty: bool = True
    diagnostics: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # by view URI
    # Diagnostics built for the current findings, by id(finding): (finding, index, view, dict,
    # the text of the lines it covers).
    rendered: dict[int, Rendered] = field(default_factory=dict)
    size_bound: int = 0  # at least the text's length in code points (see _check_size)
    env: Environment | None = None  # launch config next to the file + preflight facts
    project: ModuleProjectFacts | None = None  # the project facts the findings were made with
    # The findings of the first lines were published ahead of the rest (FIRST_LOOK_LINES).
    first_look: bool = False

    def views(self) -> Iterator[tuple[str, int, int | None]]:
        """(URI, first line in the unit, version) of every view the client knows."""
        if self.notebook is None:
            yield self.key, 0, self.version
        else:
            for v in self.notebook.views:
                yield v.cell.uri, v.start, v.cell.version

    def locate_line(self, line: int) -> tuple[str, int]:
        """(view URI, line offset) for a unit line."""
        if self.notebook is None:
            return self.key, 0
        view = self.notebook.view_at(line)
        if view is None:
            return self.key, 0
        return view.cell.uri, view.start


class ResultIds:
    """The resultIds of pulled diagnostics, one scheme for document and workspace pulls: a
    document's id changes exactly when what the user sees of it changes (range, code, message,
    severity), and ids come from one server-wide counter, so a document reopened (or a closed
    file re-read after an open) is never answered "unchanged" against an id an earlier
    incarnation handed out."""

    def __init__(self) -> None:
        self._seq = 0
        # uri -> (the diagnostics last seen, their signature, resultId)
        self._held: dict[str, tuple[list[dict[str, Any]], list[Any], str]] = {}

    def get(self, uri: str, diagnostics: list[dict[str, Any]]) -> str:
        held = self._held.get(uri)
        if (
            held is not None
            and len(held[0]) == len(diagnostics)
            and all(a is b for a, b in zip(held[0], diagnostics, strict=True))
        ):
            return held[2]  # the very same dicts (never changed once published): unchanged
        sig = [(d["range"], d["code"], d["message"], d["severity"]) for d in diagnostics]
        if held is not None and held[1] == sig:
            self._held[uri] = (list(diagnostics), sig, held[2])
            return held[2]
        self._seq += 1
        rid = str(self._seq)
        self._held[uri] = (list(diagnostics), sig, rid)
        return rid

    def current(self, uri: str) -> str | None:
        held = self._held.get(uri)
        return None if held is None else held[2]

    def forget(self, uri: str) -> None:
        self._held.pop(uri, None)


class ProjectProvider(Protocol):
    """The project view as an analysis sees it (:class:`~ddp_lsp.lsp.project.ProjectService`)."""

    def facts_for(self, unit: Unit) -> ModuleProjectFacts | None:
        """The project facts of an open document: called at every analysis."""

    def facts_at(self, path: Path, settings: Settings) -> ModuleProjectFacts | None:
        """The project facts of a closed file (workspace diagnostics)."""

    def text_changed(self, unit: Unit, event: str) -> None:
        """A document was opened, edited or closed (``event``: open, change, close)."""


class MachineProvider(Protocol):
    """Where the facts about the machine come from
    (:class:`~ddp_lsp.lsp.preflight.PreflightService`)."""

    def report_for(self, folder: Path) -> PreflightReport | None:
        """A folder's last preflight report (None when never measured)."""


class NoProject:
    """No project view: every file is analysed on its own."""

    def facts_for(self, unit: Unit) -> ModuleProjectFacts | None:
        return None

    def facts_at(self, path: Path, settings: Settings) -> ModuleProjectFacts | None:
        return None

    def text_changed(self, unit: Unit, event: str) -> None:
        pass


class NoMachine:
    """No preflight: analyses know nothing of the machine."""

    def report_for(self, folder: Path) -> PreflightReport | None:
        return None


class ServerState:
    """Documents, findings and their diagnostics. What it does not own comes in through the
    constructor: where settings come from (``config``), the project view (``project``) and
    the preflight reports (``machine``); without them, defaults of no project and no
    machine facts (the unit tests' state)."""

    def __init__(
        self,
        publish: Publish,
        show_error: ShowError,
        *,
        config: ConfigurationService | None = None,
        project: ProjectProvider | None = None,
        machine: MachineProvider | None = None,
    ) -> None:
        self.publish = publish
        self.show_error = show_error
        self.config = config if config is not None else ConfigurationService()
        self.project: ProjectProvider = project if project is not None else NoProject()
        self.machine: MachineProvider = machine if machine is not None else NoMachine()
        self.codec = Codec(UTF16)
        # What of a diagnostic the client shows (tags, related locations): set by initialize.
        self.diagnostic_support: DiagnosticSupport = ALL
        self.units: dict[str, Unit] = {}
        self.cell_owner: dict[str, str] = {}  # cell URI -> notebook URI
        # URIs whose diagnostics the client pulls (``textDocument/diagnostic``): those are
        # not pushed, or the client would show every finding twice; every other URI (notebook
        # cells in VS Code, documents of a client that never pulls) keeps being pushed.
        self.pulled: set[str] = set()
        # The one resultId scheme of document and workspace pulls (see ResultIds).
        self.result_ids = ResultIds()
        self.supports_document_changes = False
        self.supports_pull_refresh = False
        self._shown: set[str] = set()
        self._workspace_event: asyncio.Event | None = None
        self._flush_scheduled = False
        self.heap = HeapKeeper()
        self.preload = IdlePreload(self.heap)

    # -- workspace pulls ------------------------------------------------------------------------

    def workspace_change(self) -> asyncio.Event:
        """An event set at the next change that can alter a workspace diagnostic report (a
        document opened, closed or saved, settings or environment changed; not keystrokes)."""
        if self._workspace_event is None:
            self._workspace_event = asyncio.Event()
        return self._workspace_event

    def workspace_changed(self) -> None:
        if self._workspace_event is not None:
            self._workspace_event.set()
            self._workspace_event = None

    # -- configuration -------------------------------------------------------------------------

    def settings_for(self, uri: str, path: Path | None) -> tuple[Settings, bool]:
        """(analysis settings, enabled) for a document; reports invalid keys once each."""
        settings, enabled, errors = self.config.resolve(uri, path)
        for err in errors:
            self.report(err)
        return settings, enabled

    def notify_once(self, message: str) -> None:
        if message not in self._shown:
            self._shown.add(message)
            self.show_error(message, False)

    def report(self, message: str) -> None:
        if message not in self._shown:
            self._shown.add(message)
            self.show_error(f"ddp-lsp: invalid setting: {message} (using the default)", True)

    def configuration_changed(self) -> None:
        """Settings may differ for every document: recompute, re-analyse, re-publish."""
        self._shown.clear()
        self.config.projects.forget()
        for unit in self.units.values():
            unit.dirty = True
            self._refresh_settings(unit)
        self.schedule()
        self.workspace_changed()

    def _refresh_settings(self, unit: Unit) -> None:
        unit.settings, enabled = self.settings_for(unit.key, unit.path)
        unit.enabled = enabled and unit.language == "python"
        unit.env = self.environment_for(unit.path)

    def environment_for(self, path: Path | None) -> Environment | None:
        """Where the file's code runs: the launch configuration next to it (torchrun line,
        SLURM header, Accelerate/DeepSpeed config) and the folder's last preflight report."""
        from ddp_lsp.core.env import Environment  # with the core, after ``initialize``

        if path is None:
            report = self.machine.report_for(self.config.machine_folder(None))
            if report is None:
                return None
            from ddp_lsp.preflight.report import machine_info

            return Environment(machine=machine_info(report), launch=None)
        from ddp_lsp.launch import launch_info

        folder = self.config.folder_of(path)
        try:
            launch = launch_info(path, folder)
        except Exception:  # a launch file we cannot make sense of must not stop analysis
            log.exception("reading the launch configuration for %s failed", path)
            launch = None
        machine = None
        report = self.machine.report_for(self.config.machine_folder(path))
        if report is not None:
            from ddp_lsp.preflight.report import machine_info

            machine = machine_info(report)
        if launch is None and machine is None:
            return None
        return Environment(machine=machine, launch=launch)

    def environment_changed(self) -> None:
        """A new preflight report or launch file: re-read environments, re-analyse."""
        for unit in self.units.values():
            unit.env = self.environment_for(unit.path)
            unit.dirty = True
        self.schedule()
        self.workspace_changed()

    # -- documents -----------------------------------------------------------------------------

    def open(self, uri: str, text: str, version: int | None, language: str) -> Unit:
        path = uri_to_path(uri)
        lang = (
            "python"
            if language == "python" or (path and path.suffix in (".py", ".pyi"))
            else language
        )
        settings, _ = self.settings_for(uri, path)
        unit = Unit(uri, path, make_document(text, settings), version, settings, lang)
        unit.size_bound = len(text)
        self._refresh_settings(unit)
        self.units[uri] = unit
        self.project.text_changed(unit, "open")
        self.schedule()
        self.workspace_changed()
        return unit

    def change(self, uri: str, version: int | None, changes: list[Any]) -> None:
        unit = self.units.get(uri)
        if unit is None:
            log.warning("didChange for a document that is not open: %s", uri)
            return
        for ch in changes:
            rng = getattr(ch, "range", None)
            if rng is None:
                self._replace_text(unit, ch.text)
                continue
            lines = unit.doc.lines
            start = self.codec.to_core(lines, rng.start.line, rng.start.character)
            end = self.codec.to_core(lines, rng.end.line, rng.end.character)
            self._leave_analysis_if_too_large(unit, start, end, len(ch.text))
            unit.doc.apply_edit(start, end, ch.text)
        self._check_size(unit, sum(len(ch.text) for ch in changes))
        unit.version = version
        unit.dirty = True
        self.project.text_changed(unit, "change")
        self.schedule()

    def _replace_text(self, unit: Unit, text: str) -> None:
        if _is_document(unit.doc) and len(text) <= MAX_ANALYSED_CHARS:
            unit.doc.set_text(text)  # keeps the parses of unchanged chunks
        else:
            unit.doc = make_document(text, unit.settings)
        unit.size_bound = len(text)

    def _leave_analysis_if_too_large(self, unit: Unit, start: Pos, end: Pos, inserted: int) -> None:
        """Before an edit that takes an analysed document over the size limit, turn it into
        plain text, so the edit is a splice of lines: applied to the analysed document it
        would split and parse the oversized text first (a 2 MB paste: 9 to 28 s of frozen
        server), only to be thrown away by ``_check_size``. Cheap when far below the limit:
        the upper bound decides, the lines are only counted near it."""
        doc = unit.doc
        if isinstance(doc, PlainText) or unit.size_bound + inserted <= MAX_ANALYSED_CHARS:
            return
        lines = doc.lines
        unit.size_bound = sum(map(len, lines))
        if unit.size_bound - _span_chars(lines, start, end) + inserted > MAX_ANALYSED_CHARS:
            unit.doc = PlainText(doc.text)

    def _check_size(self, unit: Unit, inserted: int) -> None:
        """Switch between analysed and plain text when edits cross the size limit, either way.

        Summing every line per keystroke would cost ~0.3 ms at 20,000 lines, so an analysed
        document keeps an upper bound (the size at the last count plus everything inserted
        since) and only counts when the bound passes the limit. Plain text knows its size.
        """
        doc = unit.doc
        if isinstance(doc, PlainText):
            if doc.size <= MAX_ANALYSED_CHARS:
                unit.doc = make_document(doc.text, unit.settings)
                unit.size_bound = doc.size
            return
        unit.size_bound += inserted
        if unit.size_bound <= MAX_ANALYSED_CHARS:
            return
        unit.size_bound = sum(map(len, doc.lines))
        if unit.size_bound > MAX_ANALYSED_CHARS:
            unit.doc = PlainText(doc.text)

    def close(self, uri: str) -> None:
        unit = self.units.pop(uri, None)
        if unit is not None:
            self.project.text_changed(unit, "close")
            self.workspace_changed()
            for view_uri, _, _ in unit.views():
                self.pulled.discard(view_uri)
                self.result_ids.forget(view_uri)
                self.publish(view_uri, None, [])

    def start_pulling(self, uri: str) -> None:
        """The client pulls ``uri``: stop pushing it, clearing what was pushed before."""
        if uri in self.pulled:
            return
        found = self.lookup(uri)
        if found is None:
            return  # not open: nothing is pushed for it anyway (and close would never forget it)
        self.pulled.add(uri)
        if found[0].diagnostics.get(uri):
            self.publish(uri, None, [])

    def lookup(self, uri: str) -> tuple[Unit, int] | None:
        """The unit holding a URI (a document or a notebook cell) and the view's line offset."""
        unit = self.units.get(uri)
        if unit is not None:
            return unit, 0
        owner = self.cell_owner.get(uri)
        if owner is None:
            return None
        unit = self.units.get(owner)
        if unit is None or unit.notebook is None:
            return None
        view = unit.notebook.view_of(uri)
        return (unit, view.start) if view is not None else None

    # -- notebooks -----------------------------------------------------------------------------

    def open_notebook(self, nb: Notebook) -> None:
        path = uri_to_path(nb.uri)
        settings, _ = self.settings_for(nb.uri, path)
        unit = Unit(
            nb.uri, path, make_document(nb.source(), settings), nb.version, settings, "python", nb
        )
        unit.size_bound = len(nb.source())
        self._refresh_settings(unit)
        self.units[nb.uri] = unit
        for c in nb.cells:
            self.cell_owner[c.uri] = nb.uri
        self.schedule()

    def notebook_changed(self, uri: str) -> None:
        unit = self.units.get(uri)
        if unit is None or unit.notebook is None:
            return
        before = {v.cell.uri for v in unit.notebook.views}
        self._replace_text(unit, unit.notebook.source())
        for c in unit.notebook.cells:
            self.cell_owner[c.uri] = uri
        after = {v.cell.uri for v in unit.notebook.views}
        for gone in before - after:
            self.publish(gone, None, [])
            self.pulled.discard(gone)
            unit.diagnostics.pop(gone, None)
            self.result_ids.forget(gone)
        unit.dirty = True
        self.schedule()

    def close_notebook(self, uri: str) -> None:
        unit = self.units.get(uri)
        if unit is None or unit.notebook is None:
            return
        for c in unit.notebook.cells:
            self.cell_owner.pop(c.uri, None)
        self.close(uri)

    # -- analysis ------------------------------------------------------------------------------

    def schedule(self) -> None:
        """Analyse dirty units once the messages already waiting have been handled."""
        if self._flush_scheduled:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self.flush()  # no loop (unit tests driving the state directly)
            return
        self._flush_scheduled = True
        loop.call_soon(self._flush_callback)

    def _flush_callback(self) -> None:
        self._flush_scheduled = False
        try:
            self.flush()
        except Exception:  # never let one bad analysis stop the server
            log.exception("analysis failed")
        self.heap.settle()  # the diagnostics are written: collect this edit's garbage, freeze
        self.preload.analysed()  # libcst once typing pauses (heap.py)

    def flush(self) -> None:
        for unit in list(self.units.values()):
            if unit.dirty:
                self.analyse(unit, first_look=True)

    def ensure_current(self, unit: Unit) -> None:
        if unit.dirty:
            self.analyse(unit)

    def analyse(self, unit: Unit, publish: bool = True, first_look: bool = False) -> None:
        """Analyse ``unit`` and render (and publish) its diagnostics.

        ``first_look``: when this is the first analysis of a long document whose diagnostics
        are pushed, publish the findings of its first ``FIRST_LOOK_LINES`` lines first, then
        analyse the rest on the next turn of the loop (docs/server.md, "First look")."""
        unit.dirty = False
        before: int | None = None
        unit.project = self.project.facts_for(unit)
        if isinstance(unit.doc, PlainText):
            if unit.enabled:
                self.notify_once(
                    f"ddp-lsp: {unit.path.name if unit.path else unit.key} " + too_large_message()
                )
            findings: tuple[Finding, ...] = ()
        elif unit.enabled:
            from ddp_lsp.core.engine import analyze

            if (
                first_look
                and publish
                and not unit.first_look
                and unit.analysed_version is None
                and unit.notebook is None
                and unit.key not in self.pulled
                and len(unit.doc.lines) > FIRST_LOOK_MIN_LINES
            ):
                before = FIRST_LOOK_LINES
            try:
                result = analyze(
                    unit.doc, unit.settings, unit.env, project=unit.project, before_line=before
                )
                findings = result.findings
                for err in result.errors:
                    log.error(
                        "rule %s failed on %s:%d: %s",
                        err.rule_id,
                        unit.key,
                        err.line + 1,
                        err.message,
                    )
            except Exception:
                log.exception("analysis of %s failed", unit.key)
                findings = ()
        else:
            findings = ()
        unit.findings = findings
        if before is not None:
            # Final findings, the first lines' only: published now, the rest next turn.
            unit.first_look = True
            self._render(unit, publish)
            unit.dirty = True
            self.schedule()
            return
        unit.analysed_version = unit.version
        self._render(unit, publish)

    def _render(self, unit: Unit, publish: bool) -> None:
        lines = unit.doc.lines
        by_view: dict[str, list[dict[str, Any]]] = {uri: [] for uri, _, _ in unit.views()}
        # The core hands back the very same Finding objects for chunks an edit did not touch
        # (377 of 378 at 20,000 lines), and a Finding is immutable: its diagnostic is reused
        # as it is (it names no version or index, see diagnostics.py). A finding that moved
        # with its chunk (lines inserted above it) is a new object equal to an old one but for
        # its lines: the old diagnostic is copied with its lines moved, when the lines it
        # covers hold the same text (so the columns, in the client's encoding, are the same).
        # Anything else, and every finding of a notebook (cells shift under unchanged
        # findings), is converted afresh.
        cache = unit.rendered if unit.notebook is None else {}
        moved: dict[tuple[object, ...], list[Rendered]] | None = None
        fresh: dict[int, Rendered] = {}
        for i, f in enumerate(unit.findings):
            hit = cache.get(id(f))
            if hit is not None and hit[0] is f:
                uri, diag, texts = hit[2], hit[3], hit[4]
            else:
                copied = None
                if cache:
                    if moved is None:
                        moved = moved_pool(cache, unit.findings)
                    copied, texts = reuse_moved(moved, f, lines)
                if copied is not None:
                    uri, diag = unit.key, copied
                else:
                    uri, offset = unit.locate_line(f.span.start.line)
                    diag = to_diagnostic(
                        f, lines, self.codec, unit.locate_line, offset, self.diagnostic_support
                    )
                    texts = covered_lines(f, lines)
            fresh[id(f)] = (f, i, uri, diag, texts)
            by_view.setdefault(uri, []).append(diag)
        unit.rendered = fresh
        versions = {uri: v for uri, _, v in unit.views()}
        for uri, diags in by_view.items():
            unit.diagnostics[uri] = diags
            if publish and uri not in self.pulled:
                self.publish(uri, versions.get(uri, unit.version), diags)
        for uri, diags in by_view.items():
            # The resultId changes when what the user sees changes: an edit elsewhere gets an
            # "unchanged" pull report. (After the publications: a pushing client does not wait
            # for it.)
            self.result_ids.get(uri, diags)

    def all_units(self) -> list[Unit]:
        return list(self.units.values())
