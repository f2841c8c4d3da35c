"""ServerState gets its configuration service and providers through its constructor.

The project view and the machine facts are whatever the state was built with: nothing is
patched in afterwards, and a state built without them analyses every file on its own, with
no machine facts.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ddp_lsp.lsp.configuration import ConfigurationService
from ddp_lsp.lsp.state import ServerState, Unit
from ddp_lsp.preflight.schema import PreflightReport, ProbeResult, Status


class RecordingProject:
    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []
        self.asked: list[str] = []
        self.facts: Any = None

    def facts_for(self, unit: Unit) -> Any:
        self.asked.append(unit.key)
        return self.facts

    def facts_at(self, path: Path, settings: Any) -> Any:
        return self.facts

    def text_changed(self, unit: Unit, event: str) -> None:
        self.events.append((unit.key, event))


class OneMachine:
    def __init__(self, report: PreflightReport) -> None:
        self.report = report
        self.folders: list[Path] = []

    def report_for(self, folder: Path) -> PreflightReport | None:
        self.folders.append(folder)
        return self.report


def _report(cpus: int) -> PreflightReport:
    return PreflightReport(
        host="h",
        python="/py",
        python_version="3.11",
        platform="Linux",
        created="2026-01-01T00:00:00+00:00",
        duration_s=1.0,
        probes=(ProbeResult("cpu.workers", "CPUs", Status.PASS, "ok", values={"cpus": cpus}),),
    )


def _state(**providers: Any) -> ServerState:
    state = ServerState(lambda uri, v, d: None, lambda message, is_error: None, **providers)
    state.schedule = lambda: None  # type: ignore[method-assign]  # analysed on demand here
    return state


def test_the_project_view_given_hears_every_document_and_feeds_the_analysis(
    tmp_path: Path,
) -> None:
    project = RecordingProject()
    project.facts = object()  # whatever the view says is what the analysis is given
    state = _state(project=project)
    uri = (tmp_path / "train.py").as_uri()
    state.open(uri, "x = 1\n", 1, "python")
    state.change(uri, 2, [])
    unit = state.units[uri]
    state.ensure_current(unit)
    assert unit.project is project.facts and project.asked == [uri]
    state.close(uri)
    assert project.events == [(uri, "open"), (uri, "change"), (uri, "close")]


def test_the_machine_given_is_read_for_the_files_workspace_folder(tmp_path: Path) -> None:
    config = ConfigurationService()
    config.set_folders([tmp_path.as_uri()])
    machine = OneMachine(_report(cpus=3))
    state = _state(config=config, machine=machine)
    assert state.config is config
    uri = (tmp_path / "pkg" / "train.py").as_uri()
    state.open(uri, "x = 1\n", 1, "python")
    env = state.units[uri].env
    assert env is not None and env.machine is not None and env.machine.cpu_count == 3
    assert machine.folders[-1] == tmp_path


def test_without_providers_there_is_no_project_and_no_machine(tmp_path: Path) -> None:
    state = _state()
    uri = (tmp_path / "train.py").as_uri()
    state.open(uri, "x = 1\n", 1, "python")
    unit = state.units[uri]
    state.ensure_current(unit)
    assert unit.project is None and unit.env is None
