"""The child process end to end through the client: a probe that hangs is killed at its
timeout with its whole tree and its /dev/shm file, the other results still arrive, cancel
kills everything, and the asyncio loop keeps running meanwhile. Most probes used here are
torch-free, so the runner never imports torch; the last test (marked torch) covers the helper
that runs torch-free probes while the runner imports torch."""

from __future__ import annotations

import asyncio
import glob
import os
import sys
import time

import pytest

from ddp_lsp.preflight.client import run_preflight, run_preflight_sync
from ddp_lsp.preflight.probes.ranks import INJECT_ENV
from ddp_lsp.preflight.schema import PreflightOptions, ProbeResult, Status

from .conftest import new_marker, processes_with_marker


def _env(marker: str, inject: str) -> dict[str, str]:
    return {**os.environ, "DDP_LSP_TEST_MARKER": marker, INJECT_ENV: inject}


def _hang_files() -> set[str]:
    return set(glob.glob("/dev/shm/ddp-lsp-pf-*-hang"))


def test_hung_probe_is_killed_at_its_timeout_and_the_report_still_arrives() -> None:
    marker = new_marker()
    before = _hang_files()
    streamed: list[ProbeResult] = []
    # limits has a 3 s timeout; x0.4 -> 1.2 s.
    options = PreflightOptions(probes=("limits", "env.lint"), timeout_scale=0.4)
    report = run_preflight_sync(
        sys.executable, options, streamed.append, env=_env(marker, "hang:limits"), timeout_s=60
    )
    assert report.error is None
    limits = report.probe("limits")
    assert limits is not None and limits.status is Status.FAIL
    assert "did not finish within 1.2 s" in limits.message
    assert len(limits.values["killed_pids"]) >= 2  # the worker and the grandchild it forked
    assert any(name.endswith("-hang") for name in limits.values["removed_shm"])
    env_lint = report.probe("env.lint")
    assert env_lint is not None and env_lint.status is Status.PASS
    assert [r.id for r in streamed] == ["limits", "env.lint"]
    assert report.exit_code() == 1
    assert processes_with_marker(marker) == []
    assert _hang_files() - before == set()


async def test_cancel_kills_the_group_keeps_finished_results_and_the_loop_responsive() -> None:
    marker = new_marker()
    before = _hang_files()
    cancel = asyncio.Event()
    started: list[str] = []
    options = PreflightOptions(probes=("shm.capacity", "limits"), timeout_scale=100)

    async def cancel_when_hung() -> None:
        # Wait for the hanging probe to start and create its /dev/shm file, then cancel.
        while not ("limits" in started and _hang_files() - before):
            await asyncio.sleep(0.02)
        cancel.set()

    gaps: list[float] = []

    async def heartbeat() -> None:
        last = time.perf_counter()
        while not cancel.is_set():
            await asyncio.sleep(0.01)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    run = asyncio.create_task(
        run_preflight(
            sys.executable,
            options,
            None,
            cancel,
            on_start=lambda pid, i, n: started.append(pid),
            env=_env(marker, "hang:limits"),
            timeout_s=120,
        )
    )
    await asyncio.wait_for(asyncio.gather(cancel_when_hung(), heartbeat()), 60)
    report = await asyncio.wait_for(run, 30)
    assert report.error == "cancelled"
    assert [p.id for p in report.probes] == ["shm.capacity"]
    assert report.exit_code() == 2
    assert processes_with_marker(marker) == []
    assert _hang_files() - before == set()
    # The event loop kept running while the probe hung: a blocked loop would never have let
    # cancel_when_hung see the hang and cancel (counted ticks, not timed gaps).
    assert gaps


def test_overall_timeout_returns_partial_results() -> None:
    marker = new_marker()
    options = PreflightOptions(probes=("shm.capacity", "limits"), timeout_scale=100)
    report = run_preflight_sync(
        sys.executable, options, env=_env(marker, "hang:limits"), timeout_s=3
    )
    assert report.error is not None and "timed out" in report.error
    ids = [p.id for p in report.probes]
    assert "limits" not in ids
    # shm.capacity finishes in well under a second; on a very loaded box it may not have.
    assert ids in (["shm.capacity"], [])
    assert processes_with_marker(marker) == []


def test_unknown_probe_is_a_preflight_error() -> None:
    report = run_preflight_sync(sys.executable, PreflightOptions(probes=("no.such",)), timeout_s=60)
    assert report.exit_code() == 2 and "unknown probe" in (report.error or "")


def test_child_never_imports_the_users_modules(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    # A project that shadows a stdlib module the probes use; it must never be imported, whether
    # the project is the current directory or on PYTHONPATH.
    project = tmp_path / "project"
    project.mkdir()
    touched = tmp_path / "imported"
    for name in ("resource", "ddp_lsp_user_train"):
        (project / f"{name}.py").write_text(
            f"open({str(touched)!r}, 'w').write('{name}')\nraise SystemExit(3)\n"
        )
    monkeypatch.chdir(project)
    env = {**os.environ, "PYTHONPATH": str(project)}
    report = run_preflight_sync(
        sys.executable, PreflightOptions(probes=("limits",)), env=env, timeout_s=60
    )
    assert report.error is None, report.error
    limits = report.probe("limits")
    assert limits is not None and limits.status is not Status.FAIL
    assert not touched.exists()


@pytest.mark.torch
def test_hang_in_the_probes_that_overlap_the_torch_import() -> None:
    # With torch probes selected, torch-free probes run in a helper forked before the import.
    pytest.importorskip("torch")
    marker = new_marker()
    before = _hang_files()
    options = PreflightOptions(probes=("limits", "env.lint", "env.versions"), timeout_scale=0.4)
    streamed: list[str] = []
    report = run_preflight_sync(
        sys.executable,
        options,
        lambda r: streamed.append(r.id),
        env=_env(marker, "hang:limits"),
        timeout_s=60,
    )
    assert report.error is None
    statuses = {p.id: p.status for p in report.probes}
    assert statuses == {"limits": Status.FAIL, "env.lint": Status.PASS, "env.versions": Status.PASS}
    assert streamed == ["limits", "env.lint", "env.versions"]
    assert report.torch is not None
    assert processes_with_marker(marker) == []
    assert _hang_files() - before == set()
