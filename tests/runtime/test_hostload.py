"""The host's other load (ddp_lsp.runtime.hostload): a fake /proc, injected samples, this host."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from ddp_lsp.runtime.hostload import host_runnable, other_load, runnable_threads, sample


def fake_proc(tmp_path: Path, running: int, tasks: dict[int, list[str]]) -> Path:
    (tmp_path / "loadavg").write_text(f"3.10 2.00 1.00 {running}/321 4242\n")
    for pid, states in tasks.items():
        for i, state in enumerate(states):
            task = tmp_path / str(pid) / "task" / str(pid + i)
            task.mkdir(parents=True)
            # A command name with a space and a ')' must not shift the state field.
            (task / "stat").write_text(f"{pid + i} (py t) R) {state} 1 2 3 4\n")
    return tmp_path


def test_the_jobs_own_runnable_threads_are_not_other_load(tmp_path: Path) -> None:
    proc = fake_proc(tmp_path, 9, {100: ["R", "S", "R"], 200: ["R"], 300: ["S", "D"]})
    assert host_runnable(proc) == 9
    assert runnable_threads([100, 200, 300, 999], proc) == 3  # 999: gone, counts none
    point = sample([100, 200], proc)
    assert point is not None and point[1:] == (9, 3)


def test_no_loadavg_means_no_sample(tmp_path: Path) -> None:
    assert host_runnable(tmp_path) is None
    assert sample([1], tmp_path) is None
    (tmp_path / "loadavg").write_text("garbage\n")
    assert host_runnable(tmp_path) is None


def test_other_load_is_the_mean_over_the_phase_window() -> None:
    # (time, host runnable, the job's runnable); the sampler itself is one more.
    samples = [(0.0, 20, 2), (1.0, 8, 2), (2.0, 6, 2), (3.0, 4, 2), (9.0, 30, 0)]
    assert other_load(samples, 1.0, 3.0) == pytest.approx(((8 - 3) + (6 - 3) + (4 - 3)) / 3)
    assert other_load(samples, 4.0, 8.0) is None  # no sample inside
    assert other_load([(1.0, 1, 3)], 0.0, 2.0) == 0  # never negative


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_this_host() -> None:
    point = sample([os.getpid()])
    assert point is not None
    _, total, ours = point
    assert total >= 1 and 0 <= ours <= total
