"""Workspace pulls: a repeated pull over unchanged files costs a stat, not an analysis."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from lsprotocol import types as lsp

from ddp_lsp.lsp import workspace as workspace_pull
from ddp_lsp.lsp.state import ServerState
from tests.lsp.helpers import TRAIN


def _state(root: Path) -> ServerState:
    state = ServerState(lambda uri, version, diags: None, lambda message, is_error: None)
    state.config.folders = [(root.as_uri(), root)]
    return state


async def test_unchanged_files_are_not_read_again(tmp_path: Path, monkeypatch: Any) -> None:
    for i in range(5):
        (tmp_path / f"f{i}.py").write_text(TRAIN)
    analysed: list[int] = []
    real = workspace_pull.analyze

    def counting(text: str, *args: Any, **kwargs: Any) -> Any:
        analysed.append(len(text))
        return real(text, *args, **kwargs)

    monkeypatch.setattr(workspace_pull, "analyze", counting)
    state, cache = _state(tmp_path), workspace_pull.WorkspaceCache()
    params = lsp.WorkspaceDiagnosticParams(previous_result_ids=[])
    first = await workspace_pull.workspace_diagnostics(state, cache, params, None)
    assert len(first.items) == 5 and len(analysed) == 5
    again = await workspace_pull.workspace_diagnostics(state, cache, params, None)
    assert len(analysed) == 5  # every file's (mtime, size, settings) is unchanged
    assert [i.result_id for i in again.items] == [i.result_id for i in first.items]
    # One file changes on disk: only it is analysed again.
    changed = tmp_path / "f3.py"
    changed.write_text(TRAIN.replace("clip_grad_norm_", "clip_grad_value_"))
    st = changed.stat()
    os.utime(changed, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # a distinct mtime
    await workspace_pull.workspace_diagnostics(state, cache, params, None)
    assert len(analysed) == 6


async def test_settings_change_invalidates_the_cache(tmp_path: Path, monkeypatch: Any) -> None:
    (tmp_path / "train.py").write_text(TRAIN)
    state, cache = _state(tmp_path), workspace_pull.WorkspaceCache()
    params = lsp.WorkspaceDiagnosticParams(previous_result_ids=[])
    first = await workspace_pull.workspace_diagnostics(state, cache, params, None)
    assert isinstance(first.items[0], lsp.WorkspaceFullDocumentDiagnosticReport)
    assert [d.severity for d in first.items[0].items] == [lsp.DiagnosticSeverity.Error]
    from ddp_lsp.lsp import config as settings_config

    state.config.editor_global = settings_config.parse_editor_settings(
        {"severity": {"DDP201": "hint"}}, "test"
    )
    state.configuration_changed()
    again = await workspace_pull.workspace_diagnostics(state, cache, params, None)
    assert [d.severity for d in again.items[0].items] == [lsp.DiagnosticSeverity.Hint]  # type: ignore[union-attr]


async def test_an_unchanged_answer_is_held_at_most_hold_s(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(TRAIN)
    state, cache = _state(tmp_path), workspace_pull.WorkspaceCache()
    first = await workspace_pull.workspace_diagnostics(
        state, cache, lsp.WorkspaceDiagnosticParams(previous_result_ids=[]), None
    )
    prev = [lsp.PreviousResultId(i.uri, i.result_id) for i in first.items]  # type: ignore[arg-type]
    again = await workspace_pull.workspace_diagnostics(
        state, cache, lsp.WorkspaceDiagnosticParams(previous_result_ids=prev), None, hold_s=0.0
    )
    assert all(isinstance(i, lsp.WorkspaceUnchangedDocumentDiagnosticReport) for i in again.items)
