"""``workspace/diagnostic``: every Python file of every workspace folder, as ``ddp-lsp check`` finds them.

Closed files are read from disk and analysed with a fresh document each (their settings come
from their own nearest pyproject.toml, like ``ddp-lsp check``); open ones report what the
server already holds, with their version. A file whose diagnostics did not change since the
client's ``previousResultIds`` gets an "unchanged" report.

Cost of a repeated pull. vscode-languageclient asks again 2 s after every answer, for as long
as the window is open, so a repeated pull must be nearly free:

- Closed files are cached by (path, mtime_ns, size, settings, environment, project facts): an
  unchanged file costs a ``stat`` and a settings lookup, not a read and an analysis.
- Between files the handler yields to the event loop, so edits to open documents keep being
  analysed and published while a large workspace is scanned.
- When the client already holds every result (all "unchanged"), the request is held open (the
  specification allows a long-running workspace pull) until something that can change the
  answer happens: a document opened, closed or saved, settings, a pyproject.toml or a preflight
  report changed; or ``HOLD_S`` passed, which catches files changed on disk behind the
  editor's back. Keystrokes do not wake it: open documents have their own diagnostics.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lsprotocol import types as lsp

from ddp_lsp.config import Settings
from ddp_lsp.core.crossfile import ModuleProjectFacts
from ddp_lsp.core.engine import analyze
from ddp_lsp.core.env import Environment
from ddp_lsp.lsp.convert import Codec
from ddp_lsp.lsp.diagnostics import as_lsp, to_diagnostic
from ddp_lsp.lsp.state import ServerState
from ddp_lsp.project.discover import discover
from ddp_lsp.sources import MAX_SOURCE_BYTES, ReadError, read_source

MAX_FILE_BYTES = MAX_SOURCE_BYTES  # larger "Python" files are generated data, not training code
HOLD_S = 60.0  # the longest an all-unchanged answer is held back

Progress = Callable[[str, int], None]


@dataclass(frozen=True)
class _Key:
    mtime_ns: int
    size: int
    settings: Settings
    env: Environment | None
    encoding: str
    project: ModuleProjectFacts | None  # what the rest of the project says (compared by value)


@dataclass(frozen=True)
class _Cached:
    key: _Key
    diagnostics: list[dict[str, Any]]


class WorkspaceCache:
    """Diagnostics of closed files by path, valid while their :class:`_Key` is."""

    def __init__(self) -> None:
        self.files: dict[Path, _Cached] = {}


def python_files(state: ServerState, root: Path) -> Iterator[tuple[Path, Settings]]:
    """The files :func:`~ddp_lsp.project.discover.discover` lists under a workspace folder
    (the ``ddp-lsp check`` walk, each directory with its own settings), minus the ones the
    editor's settings disable."""

    def at(directory: Path) -> tuple[Settings, Path]:
        probe = directory / "__init__.py"  # a file of that directory, for its settings
        settings, _ = state.settings_for(probe.as_uri(), probe)
        return settings, state.config.exclude_root(probe) or root

    for path in discover(root, at):
        settings, enabled = state.settings_for(path.as_uri(), path)
        if enabled:
            yield path, settings


def _file_report(
    state: ServerState, cache: WorkspaceCache, path: Path, settings: Settings
) -> tuple[list[dict[str, Any]], str]:
    try:
        st = path.stat()
    except OSError:
        cache.files.pop(path, None)
        return [], state.result_ids.get(path.as_uri(), [])
    key = _Key(
        st.st_mtime_ns,
        st.st_size,
        settings,
        state.environment_for(path),
        state.codec.encoding,
        state.project.facts_at(path, settings),
    )
    cached = cache.files.get(path)
    if cached is not None and cached.key == key:
        return cached.diagnostics, state.result_ids.get(path.as_uri(), cached.diagnostics)
    diags: list[dict[str, Any]] = []
    if st.st_size <= MAX_FILE_BYTES:
        try:  # a FIFO, a device or a loop named *.py is never read (it would hang the server)
            text: str | None = read_source(path).decode("utf-8", errors="replace")
        except ReadError:
            text = None
        if text is not None:
            from ddp_lsp.core.document import split_lines

            result = analyze(text, settings, key.env, project=key.project)
            lines = split_lines(text)
            codec: Codec = state.codec
            support = state.diagnostic_support
            diags = [to_diagnostic(f, lines, codec, support=support) for f in result.findings]
    cache.files[path] = _Cached(key, diags)
    return diags, state.result_ids.get(path.as_uri(), diags)


async def _report(
    state: ServerState,
    cache: WorkspaceCache,
    previous: dict[str, str],
    progress: Progress | None,
) -> tuple[list[lsp.WorkspaceDocumentDiagnosticReport], bool]:
    """(the items, whether any differs from the client's previous results)."""
    roots = [p for _, p in state.config.folders if p is not None]
    files: list[tuple[Path, Settings]] = []
    for root in roots:
        files.extend(python_files(state, root))
        await asyncio.sleep(0)
    items: list[lsp.WorkspaceDocumentDiagnosticReport] = []
    seen: set[str] = set()
    changed = False
    for n, (path, settings) in enumerate(files):
        uri = path.as_uri()
        if uri in seen:
            continue  # nested workspace folders
        seen.add(uri)
        if progress is not None:
            progress(f"{path.name}", int(100 * n / max(len(files), 1)))
        unit = state.units.get(uri)
        if unit is not None:
            state.ensure_current(unit)
            diags = unit.diagnostics.get(uri, [])
            version = unit.version
            rid = state.result_ids.get(uri, diags)
        else:
            diags, rid = _file_report(state, cache, path, settings)
            version = None
        if previous.get(uri) == rid:
            items.append(
                lsp.WorkspaceUnchangedDocumentDiagnosticReport(
                    uri=uri, version=version, result_id=rid
                )
            )
        else:
            changed = True
            items.append(
                lsp.WorkspaceFullDocumentDiagnosticReport(
                    uri=uri, version=version, items=[as_lsp(d) for d in diags], result_id=rid
                )
            )
        await asyncio.sleep(0)  # keep serving edits while scanning
    if set(previous) - seen:
        changed = True  # a file the client knows is gone (or now excluded)
    live = {p for p, _ in files}
    for gone in [p for p in cache.files if p not in live]:
        del cache.files[gone]
    return items, changed


async def workspace_diagnostics(
    state: ServerState,
    cache: WorkspaceCache,
    params: lsp.WorkspaceDiagnosticParams,
    progress: Progress | None,
    hold_s: float = HOLD_S,
    scanned: Callable[[], None] | None = None,
) -> lsp.WorkspaceDiagnosticReport:
    """``scanned`` is called once the first scan is done: the progress ends there, not when
    a held request is finally answered (a client would show a busy bar all along)."""
    previous = {p.uri: p.value for p in params.previous_result_ids}
    deadline = time.monotonic() + hold_s
    while True:
        wake = state.workspace_change()  # taken before the scan: a change during it counts
        items, changed = await _report(state, cache, previous, progress)
        if scanned is not None:
            scanned()
            scanned = progress = None  # later scans of a held request are silent
        left = deadline - time.monotonic()
        if changed or not previous or left <= 0:
            return lsp.WorkspaceDiagnosticReport(items=items)
        try:
            await asyncio.wait_for(wake.wait(), left)
        except asyncio.TimeoutError:
            pass
