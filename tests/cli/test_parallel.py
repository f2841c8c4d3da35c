"""Many files run in a process pool; results must equal the sequential run, in order, and a
worker that dies costs only the file it was on."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ddp_lsp import config
from ddp_lsp.cli import jobs as cli_jobs
from tests.cli.conftest import BUGGY, write

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="the pool test forks")


def _tree(project: Path, n: int = 12) -> None:
    for i in range(n):
        code = BUGGY if i % 3 else "x = 1\n"
        write(project / f"pkg{i % 4}" / f"m{i}.py", code + f"\nVALUE_{i} = {i}\n")


def test_pool_equals_sequential(cli_run, project: Path) -> None:
    _tree(project)
    seq = cli_run("check", ".", "--jobs", "1", "--format", "json", "--select", "DDP201")
    par = cli_run("check", ".", "--jobs", "2", "--format", "json", "--select", "DDP201")
    assert seq.rc == par.rc == 1
    assert par.out == seq.out and seq.out.count('"DDP201"') == 8


def test_pool_fix_writes_every_file(cli_run, project: Path) -> None:
    _tree(project)
    r = cli_run("fix", ".", "--jobs", "2", "--select", "DDP201")
    assert r.rc == 0 and "Fixed 8 findings." in r.out
    assert cli_run("check", ".", "--jobs", "1", "--select", "DDP201").rc == 0


def test_automatic_choice_is_sequential_for_small_inputs(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _tree(project, 3)
    jobs = [
        cli_jobs.Job(p.name, str(p), config.Settings(), "check", False)
        for p in sorted(project.rglob("*.py"))
    ]

    def no_pool(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise AssertionError("small inputs must not start a pool")

    monkeypatch.setattr(cli_jobs, "_run_pool", no_pool)
    assert len(cli_jobs.run_jobs(jobs)) == 3


@pytest.mark.parametrize("files", [8, 40])  # 40: enough left over to retry in a fresh pool
def test_dead_worker_costs_one_file(
    project: Path, monkeypatch: pytest.MonkeyPatch, files: int
) -> None:
    _tree(project, files)
    write(project / "kills.py", "x = 1\n")
    real = cli_jobs.check_job

    def crash_on_kills(job):  # type: ignore[no-untyped-def]
        if job.path.endswith("kills.py") and os.getpid() != parent:
            os._exit(70)  # what a segfault in native code looks like to the pool
        return real(job)

    parent = os.getpid()
    monkeypatch.setattr(cli_jobs, "check_job", crash_on_kills)
    paths = sorted(project.rglob("*.py"))
    jobs = [
        cli_jobs.Job(p.name, str(p), config.Settings(select=("DDP201",)), "check", False)
        for p in paths
    ]
    outcomes = cli_jobs.run_jobs(jobs, workers=2)
    by_name = {o.report.path: o.report for o in outcomes}
    assert by_name["kills.py"].error == "the analysis crashed the worker process"
    others = [r for name, r in by_name.items() if name != "kills.py"]
    assert all(r.error is None for r in others)
    assert sum(len(r.findings) for r in others) == sum(1 for i in range(files) if i % 3)


@pytest.mark.parametrize(("load", "expected"), [(0.0, 4), (1.2, 3), (3.6, 1), (9.0, 1)])
def test_workers_follow_idle_cpus(
    project: Path, monkeypatch: pytest.MonkeyPatch, load: float, expected: int
) -> None:
    """Enough input for the pool: as many workers as CPUs the load average leaves idle."""
    _tree(project, 12)
    for p in project.rglob("*.py"):
        p.write_text(p.read_text() + "PAD = 0\n" * 3000)  # past PARALLEL_MIN_BYTES
    jobs = [
        cli_jobs.Job(p.name, str(p), config.Settings(), "check", False)
        for p in project.rglob("*.py")
    ]
    seen: list[int] = []
    monkeypatch.setattr(cli_jobs.os, "getloadavg", lambda: (load, load, load))
    monkeypatch.setattr(cli_jobs, "_cpu_count", lambda: 4)
    monkeypatch.setattr(cli_jobs, "_run_pool", lambda jobs, workers: seen.append(workers) or [])
    monkeypatch.setattr(cli_jobs, "check_job", lambda job: seen.append(1) or None)
    cli_jobs.run_jobs(jobs)
    if expected > 1:
        assert seen == [expected]  # one pool of that many workers
    else:
        assert seen == [1] * len(jobs)  # every file checked in this process
