"""The host's other load while a feasibility run runs: runnable tasks that are not the job's.

CPU ranks share the host's cores with whatever else runs there. ``ddp-lsp feasibility``
predicts a rank's step from the one-process run, in which the process got some share of the
cores; when the neighbours' load changes between that run and the DDP run (a shared machine:
other jobs start and end within the minute the two runs take), the same job steps at a
different speed, and a prediction that assumed the first run's load misses by that much
(on a shared 2-CPU host: each rank of the DDP run stepped faster than the one process alone
at the same thread count had a minute before, and the prediction was 32 % low).

So the supervisor samples, every poll, the kernel's count of runnable tasks
(``/proc/loadavg``'s fourth field) and the job's own runnable threads (``/proc/<pid>/task/*``
of every process of the job's tree); the difference, minus the sampling process itself, is
the other load. The analysis takes its mean over each run's measured phase (the ranks report
their phase's start and end on the same monotonic clock) and says when it moved between the
runs; it does not rescale the prediction by it (tried: right in two of four runs here and
wrong in two, a runnable count not being the share the scheduler gives). On a dedicated
machine it is ~0.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from pathlib import Path

#: (monotonic time, runnable tasks on the host, runnable threads of the job's tree)
Sample = tuple[float, int, int]


def host_runnable(proc: Path = Path("/proc")) -> int | None:
    """Runnable tasks on the host now (this one included), or None where /proc has no loadavg."""
    try:
        field = (proc / "loadavg").read_text(encoding="ascii").split()[3]
        return int(field.split("/")[0])
    except (OSError, IndexError, ValueError):
        return None


def runnable_threads(pids: Iterable[int], proc: Path = Path("/proc")) -> int:
    """Threads in state R among the given processes (a process that is gone counts none)."""
    count = 0
    for pid in pids:
        try:
            tasks = list((proc / str(pid) / "task").iterdir())
        except OSError:
            continue
        for task in tasks:
            try:
                data = (task / "stat").read_text(encoding="ascii", errors="replace")
            except OSError:
                continue
            # "pid (comm) S ...": the state follows the last ')' (comm may hold spaces or ')').
            if data[data.rfind(")") + 2 : data.rfind(")") + 3] == "R":
                count += 1
    return count


def sample(pids: Iterable[int], proc: Path = Path("/proc")) -> Sample | None:
    total = host_runnable(proc)
    if total is None:
        return None
    return (time.monotonic(), total, runnable_threads(pids, proc))


def other_load(samples: Sequence[Sample], start: float, end: float) -> float | None:
    """Mean runnable tasks that were neither the job's nor the sampler's, within [start, end].

    None when no sample falls in the window (a phase shorter than the polling interval, or a
    host without /proc): the analysis then infers the load from the share the job got.
    """
    inside = [max(0, total - ours - 1) for t, total, ours in samples if start <= t <= end]
    if not inside:
        return None
    return sum(inside) / len(inside)
