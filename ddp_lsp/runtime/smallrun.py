"""``ddp-lsp smallrun``: run a short training command under supervision, as a merge gate.

    ddp-lsp smallrun [--timeout S] [--json FILE] -- torchrun --nproc-per-node 2 train.py ...

The command runs in a session of its own with the monitor attached to every rank through a
``sitecustomize`` shim (see :mod:`ddp_lsp.runtime._autoattach`); nothing in the script
changes unless it never calls ``optimizer.step()``. Exit status:

- 0: the run finished, and no rank's memory grows with the step count;
- 1: a rank crashed (the first one is named, with its exception and line), the run hung past
  ``--timeout`` (every process of the tree is killed; each rank's stack says where it was
  stuck), or a rank's memory grows step after step (bytes per step, first step, likely cause);
- 2: nothing to judge (no steps seen, or too few) or a usage error.

This module never imports torch: the supervisor judges the ranks' series files.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ddp_lsp import proctree
from ddp_lsp.cliutil import positive_seconds, unwritable_reason
from ddp_lsp.runtime._autoattach import (
    ENV_CENSUS_BUDGET,
    ENV_DIR,
    ENV_FLIGHT_RECORDER,
    ENV_MIN_BYTES,
    ENV_MIN_CENSUSES,
    ENV_WARMUP,
    FR_REQUEST,
    STACK_SIGNAL,
)
from ddp_lsp.runtime.smallrun_files import rank_pids, records, series_bytes
from ddp_lsp.runtime.smallrun_judge import collective_mismatch, communication_share, judge
from ddp_lsp.runtime.smallrun_report import (
    EXIT_FAIL,
    EXIT_INCONCLUSIVE,
    EXIT_PASS,
    SCHEMA,
    RankSummary,
    RunFinding,
    SmallRunResult,
    render_text,
)

__all__ = [
    "EXIT_FAIL",
    "EXIT_INCONCLUSIVE",
    "EXIT_PASS",
    "PACKAGE_ROOT",
    "SCHEMA",
    "SHIM_DIR",
    "RankSummary",
    "RunFinding",
    "SmallRunConfig",
    "SmallRunResult",
    "collective_mismatch",
    "communication_share",
    "main",
    "render_text",
    "run_smallrun",
]

SHIM_DIR = Path(__file__).resolve().parent / "_shim"
PACKAGE_ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class SmallRunConfig:
    command: tuple[str, ...]
    timeout_s: float = 600.0
    #: Steps before the census series are judged (the first step allocates gradients and
    #: optimizer state); the byte series wait BYTES_WARMUP_STEPS at least.
    warmup_steps: int = 2
    #: Censuses taken at every step after warm-up before the time budget applies: a small
    #: run of the method's size (2 epochs of 10 samples, 10 steps) is censused at every step;
    #: a longer one gets these 12, then as many as half its time affords.
    min_censuses: int = 12
    min_bytes_per_step: float = 1024.0
    census_budget: float = 0.5
    kill_grace_s: float = 3.0
    workdir: Path | None = None
    keep_workdir: bool = False
    #: Allocator caches are turned off in the run by default so they are not taken for a
    #: leak: MKL's per-size matmul buffers (MKL_DISABLE_FAST_MM=1) and glibc's per-thread
    #: tcache (counted as in use by mallinfo2; it fills during a DDP job's first ~15 steps).
    keep_caches: bool = False
    #: A hang is also "no rank recorded a step for this long" (after the first step).
    stall_timeout_s: float | None = None
    #: When a rank has died (an exception, a signal), the rest of the job gets this long to
    #: end on its own; then its stacks are taken and the tree is killed (the dead-rank guard
    #: from outside: peers stuck in a rendezvous or a collective would wait for its timeout).
    dead_rank_grace_s: float = 5.0
    #: TORCH_DISTRIBUTED_DEBUG=DETAIL in the run: every collective is checked against the
    #: other ranks' first, so a mismatch (op, shape, dtype) fails naming both sides.
    debug_collectives: bool = False
    #: The c10d flight recorder (a ring buffer of the last collectives, per rank), dumped
    #: on a hang and attached to the report: ``on``, ``off``, or ``auto`` (on where an NVIDIA
    #: driver is present, i.e. where the job runs NCCL; it costs heap per collective, which
    #: a CPU gloo gate does not need).
    flight_recorder: str = "auto"


# -- supervision ------------------------------------------------------------------------------


def _child_env(cfg: SmallRunConfig, workdir: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(SHIM_DIR), env.get("PYTHONPATH", "")) if p)
    env[ENV_DIR] = str(workdir)
    env["DDP_LSP_PACKAGE_ROOT"] = str(PACKAGE_ROOT)
    env[ENV_WARMUP] = str(cfg.warmup_steps)
    env[ENV_MIN_BYTES] = str(cfg.min_bytes_per_step)
    env[ENV_CENSUS_BUDGET] = str(cfg.census_budget)
    env[ENV_MIN_CENSUSES] = str(cfg.min_censuses)
    if cfg.debug_collectives:
        env["TORCH_DISTRIBUTED_DEBUG"] = "DETAIL"
    if flight_recorder_enabled(cfg.flight_recorder):
        env[ENV_FLIGHT_RECORDER] = "1"
        for name in ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE"):
            env.setdefault(name, "2000")
        # NCCL's own dump on a watchdog timeout (pickle, per rank) lands in the run's dir.
        for name in ("TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE"):
            env.setdefault(name, str(workdir / "fr-native-rank-"))
        env.setdefault("TORCH_NCCL_DUMP_ON_TIMEOUT", "1")
    if not cfg.keep_caches:
        env.setdefault("MKL_DISABLE_FAST_MM", "1")
        tunables = [t for t in env.get("GLIBC_TUNABLES", "").split(":") if t]
        if not any(t.startswith("glibc.malloc.tcache_count=") for t in tunables):
            tunables.append("glibc.malloc.tcache_count=0")
        env["GLIBC_TUNABLES"] = ":".join(tunables)
    return env


def flight_recorder_enabled(mode: str) -> bool:
    if mode in ("on", "off"):
        return mode == "on"
    return os.path.exists("/dev/nvidiactl") or os.path.isdir("/proc/driver/nvidia")


def _request_flight_recorder(workdir: Path, pids: list[int], wait_s: float = 3.0) -> None:
    """Ask the live ranks for their flight-recorder dumps and wait for them (bounded)."""
    try:
        (workdir / FR_REQUEST).write_text("dump\n", encoding="utf-8")
    except OSError:
        return
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        if all((workdir / f"fr-{pid}.json").exists() for pid in pids):
            return
        time.sleep(0.05)


def _request_stacks(workdir: Path, pids: list[int], wait_s: float = 3.0) -> None:
    sizes = {}
    for pid in pids:
        path = workdir / f"stack-{pid}.txt"
        try:
            sizes[pid] = path.stat().st_size
        except OSError:
            continue
        try:
            if STACK_SIGNAL is None:
                raise OSError("no stack-dump signal on this platform")
            os.kill(pid, STACK_SIGNAL)
        except OSError:
            sizes.pop(pid, None)
    deadline = time.monotonic() + wait_s
    pending = set(sizes)
    while pending and time.monotonic() < deadline:
        for pid in list(pending):
            try:
                if (workdir / f"stack-{pid}.txt").stat().st_size > sizes[pid]:
                    pending.discard(pid)
            except OSError:
                pending.discard(pid)
        time.sleep(0.05)


class _Interrupted(Exception):
    pass


def _live_ranks(workdir: Path, seen: dict[int, int], root_pid: int) -> list[int]:
    known = [(pid, seen[pid]) for pid in rank_pids(workdir, root_pid) if pid in seen]
    return [info.pid for info in proctree.alive(known)]


def _dead_rank(workdir: Path, seen: dict[int, int], root_pid: int) -> tuple[int, str] | None:
    """A rank of this run that has died while the command still runs: (pid, how).

    A rank is a process with a rank (``RANK``, or the process group's) or a step series. It
    died when it recorded an uncaught exception (the shim's excepthook, or the failure
    record of ``guard_distributed``) or when its process is gone without an exit record (a
    signal, the OOM killer, a native crash).
    """
    ranks = rank_pids(workdir, root_pid)
    for prefix in ("guard", "crash"):
        for pid, rec in records(workdir, prefix).items():
            if pid in ranks or (
                prefix == "crash" and rec.get("rank") is not None and pid != root_pid
            ):
                return pid, f"{rec.get('exc_type')}: {str(rec.get('message'))[:120]}"
    if not ranks:
        return None
    exits = records(workdir, "exit")
    for pid in sorted(ranks):
        start = seen.get(pid)
        if pid in exits or start is None:
            continue
        if not proctree.alive([(pid, start)]):
            return pid, "ended without an exception or an exit (a signal?)"
    return None


def run_smallrun(cfg: SmallRunConfig) -> SmallRunResult:
    own_dir = cfg.workdir is None
    workdir = cfg.workdir or Path(tempfile.mkdtemp(prefix="ddp-lsp-smallrun-"))
    workdir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    proctree.set_child_subreaper()
    try:
        proc = subprocess.Popen(
            list(cfg.command), env=_child_env(cfg, workdir), start_new_session=True
        )
    except OSError as exc:
        return SmallRunResult(
            status="error",
            exit_code=EXIT_INCONCLUSIVE,
            command=cfg.command,
            duration_s=0.0,
            timeout_s=cfg.timeout_s,
            returncode=None,
            findings=(RunFinding("error", None, f"cannot start {cfg.command[0]!r}: {exc}"),),
            ranks=(),
        )
    seen: dict[int, int] = {}
    root_info = proctree._read_stat(proc.pid)
    if root_info is not None:
        seen[proc.pid] = root_info.start
    hung = False
    stalled = False
    interrupted = False
    progress_size = 0
    progress_time: float | None = None
    previous = signal.getsignal(signal.SIGTERM)

    def on_term(_sig: int, _frame: Any) -> None:
        raise _Interrupted

    if hasattr(signal, "SIGTERM"):
        try:
            signal.signal(signal.SIGTERM, on_term)
        except ValueError:  # not the main thread
            pass
    next_scan = 0.0
    dead: tuple[int, str] | None = None
    dead_at: float | None = None
    dead_kill = False
    try:
        while proc.poll() is None:
            now = time.monotonic()
            if now - started > cfg.timeout_s:
                hung = True
                break
            if dead_at is not None and now - dead_at > cfg.dead_rank_grace_s:
                # Ranks still running: stuck (in a rendezvous, a collective). Only the
                # launcher left: it is tearing down; give it longer before killing it.
                if _live_ranks(workdir, seen, proc.pid) or now - dead_at > max(
                    30.0, 6 * cfg.dead_rank_grace_s
                ):
                    dead_kill = True
                    break
            if now >= next_scan:
                # Remember every descendant while the tree is intact: a rank orphaned by a
                # dying agent must still be found at kill time.
                for info in proctree.descendants(proc.pid).values():
                    seen.setdefault(info.pid, info.start)
                for pid in records(workdir, "proc"):
                    if pid not in seen and (stat := proctree._read_stat(pid)) is not None:
                        seen[pid] = stat.start
                next_scan = now + 0.25
                if dead_at is None:
                    dead = _dead_rank(workdir, seen, proc.pid)
                    if dead is not None:
                        dead_at = now
                if cfg.stall_timeout_s is not None:
                    size = series_bytes(workdir)
                    if size != progress_size:
                        progress_size, progress_time = size, now
                    elif progress_time is not None and now - progress_time > cfg.stall_timeout_s:
                        hung = stalled = True
                        break
            time.sleep(0.05)
    except (KeyboardInterrupt, _Interrupted):
        interrupted = True
    finally:
        try:
            signal.signal(signal.SIGTERM, previous)
        except (ValueError, TypeError):
            pass
    for info in proctree.marked(ENV_DIR, str(workdir)):
        seen.setdefault(info.pid, info.start)
    procs = records(workdir, "proc")
    for pid in procs:
        # Every Python process of this run registered itself in this run's own directory:
        # keep it even if it left the tree (a rank in a session of its own, reparented).
        registered = proctree._read_stat(pid)
        if registered is not None and pid not in seen:
            seen[pid] = registered.start
    killed: list[proctree.ProcInfo] = []
    stacks_requested: list[int] = []
    kill_time: float | None = None
    if hung or interrupted or dead_kill:
        kill_time = time.time()
        live = {i.pid for i in proctree.alive(seen.items())}
        stacks_requested = [pid for pid in procs if pid in live]
        if flight_recorder_enabled(cfg.flight_recorder):
            ranks_live = [p for p in rank_pids(workdir, proc.pid) if p in live]
            _request_flight_recorder(workdir, ranks_live)
        _request_stacks(workdir, stacks_requested)
        killed = proctree.kill_tree(
            proc.pid, seen, cfg.kill_grace_s, marker=(ENV_DIR, str(workdir))
        )
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
    else:
        leftovers = proctree.alive(seen.items())
        # Helpers that end when their parent does (multiprocessing's resource tracker sees
        # its pipe close) get a moment to do so before they count as left behind.
        settle = time.monotonic() + 1.0
        while leftovers and time.monotonic() < settle:
            time.sleep(0.05)
            proctree.reap_children()
            leftovers = proctree.alive(seen.items())
        if leftovers:
            killed = proctree.kill_tree(
                proc.pid, seen, cfg.kill_grace_s, marker=(ENV_DIR, str(workdir))
            )
    proctree.reap_children()
    duration = time.monotonic() - started
    result = judge(
        cfg,
        workdir,
        proc.returncode,
        duration,
        hung=hung,
        interrupted=interrupted,
        killed=killed,
        root_pid=proc.pid,
        stacks_requested=stacks_requested,
        kill_time=kill_time,
        stalled=stalled,
        dead_kill=dead_kill,
    )
    if own_dir and not cfg.keep_workdir:
        shutil.rmtree(workdir, ignore_errors=True)
    return result


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="ddp-lsp smallrun",
        description="Run a short training command under supervision and fail on memory growth "
        "per step, a crashed rank or a hang.",
        epilog="example: ddp-lsp smallrun --timeout 300 --json smallrun.json -- "
        "torchrun --nproc-per-node 2 train.py --epochs 2 --limit-batches 10",
    )
    p.add_argument(
        "--timeout",
        type=positive_seconds,
        default=600.0,
        help="seconds before the run counts as hung (600)",
    )
    p.add_argument("--json", metavar="FILE", help="write the result as JSON ('-' for stdout)")
    p.add_argument(
        "--warmup",
        type=int,
        default=2,
        help="steps excluded from the growth test (2; the heap waits 5 at least)",
    )
    p.add_argument(
        "--min-growth",
        type=float,
        default=1024.0,
        metavar="BYTES",
        help="smallest growth per step that fails the run (1024)",
    )
    p.add_argument(
        "--census-budget",
        type=float,
        default=0.5,
        help="fraction of run time the live-tensor census may take (0.5)",
    )
    p.add_argument(
        "--stall-timeout",
        type=positive_seconds,
        metavar="S",
        help="also a hang: no rank finished a step for S seconds (off)",
    )
    p.add_argument(
        "--kill-grace", type=float, default=3.0, help="seconds between SIGTERM and SIGKILL (3)"
    )
    p.add_argument(
        "--dead-rank-grace",
        type=positive_seconds,
        default=5.0,
        metavar="S",
        help="once a rank died, seconds the others get to end before they are killed (5)",
    )
    p.add_argument(
        "--debug-collectives",
        action="store_true",
        help="run with TORCH_DISTRIBUTED_DEBUG=DETAIL: a mismatched collective is named",
    )
    p.add_argument(
        "--flight-recorder",
        choices=("auto", "on", "off"),
        default="auto",
        help="record the ranks' collectives and attach them to a hang's report "
        "(auto: on where an NVIDIA driver is present)",
    )
    p.add_argument("--dir", type=Path, help="keep the ranks' series and stack files in DIR")
    p.add_argument(
        "--keep-caches",
        action="store_true",
        help="keep MKL's and glibc's allocator caches on in the run",
    )
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command")
    return p


def main(argv: Sequence[str]) -> int:
    args = _parser().parse_args(list(argv))
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        sys.stderr.write("ddp-lsp smallrun: no command given (put it after --)\n")
        return EXIT_INCONCLUSIVE
    if args.json:
        problem = unwritable_reason(args.json)
        if problem is not None:
            sys.stderr.write(f"ddp-lsp smallrun: cannot write --json {args.json}: {problem}\n")
            return EXIT_INCONCLUSIVE
    cfg = SmallRunConfig(
        command=tuple(command),
        timeout_s=args.timeout,
        warmup_steps=args.warmup,
        min_bytes_per_step=args.min_growth,
        census_budget=args.census_budget,
        kill_grace_s=args.kill_grace,
        workdir=args.dir,
        keep_workdir=args.dir is not None,
        keep_caches=args.keep_caches,
        stall_timeout_s=args.stall_timeout,
        dead_rank_grace_s=args.dead_rank_grace,
        debug_collectives=args.debug_collectives,
        flight_recorder=args.flight_recorder,
    )
    result = run_smallrun(cfg)
    sys.stdout.flush()
    text = render_text(result)
    if args.json == "-":
        sys.stderr.write(text + "\n")
        sys.stdout.write(json.dumps(result.to_dict(), indent=1, default=str) + "\n")
    else:
        sys.stdout.write(text + "\n")
        if args.json:
            Path(args.json).write_text(json.dumps(result.to_dict(), indent=1, default=str), "utf-8")
    return result.exit_code
