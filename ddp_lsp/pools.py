"""Process pools: when one pays off, how its workers start, how many CPUs are free.

Two pools use this policy: the CLI's analysis of many files (:mod:`ddp_lsp.cli.jobs`) and the
project index's cold-cache summaries (:mod:`ddp_lsp.project.build`). Below
:data:`PARALLEL_MIN_FILES` files or :data:`PARALLEL_MIN_BYTES` of source both stay in this
process, where the pool's start-up would cost more than it saves.
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from multiprocessing.context import BaseContext

# Below this much source in total, analysing in this process beats starting a pool: forked
# workers cost tens of milliseconds to start and to return their results, while the analysis
# runs at roughly 0.25-0.5 MB/s per core (bench/bench_cli.py; docs/performance.md).
PARALLEL_MIN_FILES = 8
PARALLEL_MIN_BYTES = 256 * 1024


def worker_init() -> None:
    # A rule's crash is logged by the engine; without a handler Python's last-resort handler
    # would print its traceback. The parent reports it (with --verbose) from the result.
    logging.getLogger("ddp_lsp").addHandler(logging.NullHandler())
    logging.getLogger("ddp_lsp").propagate = False


def pool_worker_init() -> None:
    worker_init()
    # Ctrl-C is the parent's to handle: it cancels what is queued and exits; a worker that
    # died of SIGINT would look like a crash and trigger the crash recovery below.
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)


def pool_context() -> BaseContext:
    import multiprocessing
    import threading

    # fork shares what this process has imported (no re-import per worker); it is unsafe
    # only with other threads alive, and then (or where there is no fork) workers spawn.
    methods = multiprocessing.get_all_start_methods()
    method = "fork" if "fork" in methods and threading.active_count() == 1 else "spawn"
    return multiprocessing.get_context(method)


def idle_cpus(cpus: int) -> int:
    """CPUs not already busy (by the 1-minute load average). Workers cost ~15% more CPU
    than one process (fork, pickled results, cold caches); on CPUs that other jobs keep
    busy they only add contention, so a loaded machine gets fewer of them, or none."""
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):
        return cpus
    return max(1, min(cpus, int(cpus - load + 0.5)))


def cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1
