"""``workspace/diagnostic``: every Python file of every workspace folder, excludes respected.

Closed files are read from disk and analysed with a fresh document each (their settings come
from their own nearest pyproject.toml, like ``ddp-lsp check``); open ones report what the
server already holds, with their version. Between files the handler yields to the event loop,
so edits keep being served while a large workspace is scanned, and ``$/progress`` says how far
it got. A file whose diagnostics did not change since the client's ``previousResultIds`` gets an
"unchanged" report.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from lsprotocol import types as T

from ddp_lsp.config import DEFAULT_EXCLUDE
from ddp_lsp.core.engine import analyze
from ddp_lsp.lsp.convert import Codec
from ddp_lsp.lsp.diagnostics import as_lsp, to_diagnostic
from ddp_lsp.lsp.state import ServerState

MAX_FILE_BYTES = 2_000_000  # larger "Python" files are generated data, not training code

Progress = Callable[[str, int], None]


def python_files(state: ServerState, root: Path) -> Iterator[Path]:
    for directory, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in DEFAULT_EXCLUDE and not d.startswith("."))
        for name in sorted(files):
            if name.endswith(".py"):
                path = Path(directory) / name
                settings, enabled = state.settings_for(path.as_uri(), path)
                if enabled:
                    yield path


def _result_id(diags: list[dict[str, Any]]) -> str:
    sig = [(d["range"], d["code"], d["message"], d["severity"]) for d in diags]
    return hashlib.sha1(json.dumps(sig, sort_keys=True).encode()).hexdigest()[:16]


def _file_report(state: ServerState, path: Path) -> list[dict[str, Any]] | None:
    try:
        if path.stat().st_size > MAX_FILE_BYTES:
            return None
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    settings, _ = state.settings_for(path.as_uri(), path)
    from ddp_lsp.core.document import split_lines

    result = analyze(text, settings, state.environment_for(path))
    lines = split_lines(text)
    codec: Codec = state.codec
    return [to_diagnostic(f, i, None, lines, codec) for i, f in enumerate(result.findings)]


async def workspace_diagnostics(
    state: ServerState, params: T.WorkspaceDiagnosticParams, progress: Progress | None
) -> T.WorkspaceDiagnosticReport:
    previous = {p.uri: p.value for p in params.previous_result_ids}
    roots = [p for _, p in state.folders if p is not None]
    files: list[Path] = []
    for root in roots:
        files.extend(python_files(state, root))
        await asyncio.sleep(0)
    items: list[T.WorkspaceDocumentDiagnosticReport] = []
    seen: set[str] = set()
    for n, path in enumerate(files):
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
        else:
            diags = _file_report(state, path) or []
            version = None
        rid = _result_id(diags)
        if previous.get(uri) == rid:
            items.append(
                T.WorkspaceUnchangedDocumentDiagnosticReport(
                    uri=uri, version=version, result_id=rid
                )
            )
        else:
            items.append(
                T.WorkspaceFullDocumentDiagnosticReport(
                    uri=uri, version=version, items=[as_lsp(d) for d in diags], result_id=rid
                )
            )
        await asyncio.sleep(0)  # keep serving edits while scanning
    return T.WorkspaceDiagnosticReport(items=items)
