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
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ddp_lsp import proctree
from ddp_lsp.cliutil import positive_seconds, unwritable_reason
from ddp_lsp.runtime import flight as flight_recorder
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
from ddp_lsp.runtime.memory import (
    BYTES_WARMUP_STEPS,
    Census,
    GrowthReport,
    TensorGroup,
    build_report,
    format_bytes,
)

SCHEMA = "ddp-lsp-smallrun/1"
SHIM_DIR = Path(__file__).resolve().parent / "_shim"
PACKAGE_ROOT = Path(__file__).resolve().parents[2]

EXIT_PASS, EXIT_FAIL, EXIT_INCONCLUSIVE = 0, 1, 2


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


@dataclass(frozen=True)
class RunFinding:
    """One thing a small run found (not a lint ``Finding``: no span, no fix)."""

    kind: str  # crash | hang | mismatch | leak | suspect | inconclusive | no-data | leftover | error
    rank: int | None
    message: str


@dataclass(frozen=True)
class RankSummary:
    rank: int | None
    pid: int
    steps: int
    last_step: int | None
    exited: bool
    crashed: dict[str, Any] | None = None
    stuck_in: str | None = None
    memory: dict[str, Any] | None = None
    #: DDP's own timers (the reducer's averages) against the step time measured here.
    communication: dict[str, Any] | None = None


@dataclass(frozen=True)
class SmallRunResult:
    status: str  # pass | suspect | mismatch | crash | hang | leak | inconclusive | error
    exit_code: int
    command: tuple[str, ...]
    duration_s: float
    timeout_s: float
    returncode: int | None
    findings: tuple[RunFinding, ...]
    ranks: tuple[RankSummary, ...]
    killed: tuple[dict[str, Any], ...] = ()
    workdir: str | None = None
    schema: str = SCHEMA
    #: Per rank, the flight recorder's view on a hang: the last collectives it enqueued and
    #: completed, and its newest entries (op, sizes, state, the user frame that issued it).
    flight_recorder: dict[str, Any] = field(default_factory=dict)
    notes: tuple[str, ...] = field(default_factory=tuple)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# -- reading what the ranks wrote ------------------------------------------------------------


def _load_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


#: Helper processes that multiprocessing starts with the parent's environment (``RANK``
#: included, when a launcher sets it before starting its ranks): never ranks.
_HELPERS = ("multiprocessing.resource_tracker", "multiprocessing.forkserver")


def _records(workdir: Path, prefix: str) -> dict[int, dict[str, Any]]:
    out: dict[int, dict[str, Any]] = {}
    for path in workdir.glob(f"{prefix}-*.json"):
        data = _load_json(path)
        if data is not None and isinstance(data.get("pid"), int):
            if prefix == "proc":
                words = " ".join(map(str, [*data.get("argv", []), *data.get("cmdline", [])]))
                if any(h in words for h in _HELPERS):
                    data = {**data, "rank": None, "helper": True}
            out[data["pid"]] = data
    if prefix == "proc":
        # A process started by a rank (a DataLoader worker under the spawn start method
        # inherits RANK) is that rank's helper, not a rank of its own.
        ranked = {pid for pid, rec in out.items() if rec.get("rank") is not None}
        for pid, rec in list(out.items()):
            if rec.get("ppid") in ranked and rec.get("rank") is not None:
                out[pid] = {**rec, "rank": None, "helper": True}
    return out


@dataclass
class _Series:
    pid: int
    rank: int | None = None
    steps: list[int] = field(default_factory=list)
    values: dict[str, list[int]] = field(default_factory=dict)
    censuses: list[Census] = field(default_factory=list)
    times: list[float] = field(default_factory=list)
    #: The monitor's own time after each sample (census, readings): not the job's.
    overheads: list[float] = field(default_factory=list)
    #: Per sample, DDP's latest timed iteration: [iteration, comm, overlap, fwd, bwd] ns.
    ddp: list[list[int] | None] = field(default_factory=list)


def _read_series(path: Path) -> _Series | None:
    match = re.match(r"series-(\d+)\.jsonl$", path.name)
    if not match:
        return None
    series = _Series(pid=int(match.group(1)))
    names = ("heap", "rss", "cuda", "tensors", "tensor_bytes")
    for name in names:
        series.values[name] = []
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError:
        return None
    for line in lines:
        try:
            rec = json.loads(line)
        except ValueError:
            continue  # a line cut short by a kill
        kind = rec.get("k")
        if kind == "header":
            series.rank = rec.get("rank")
        elif kind == "s":
            reading = rec.get("ddp")
            series.ddp.append(reading if isinstance(reading, list) and len(reading) == 5 else None)
            series.times.append(float(rec.get("t", 0.0)))
            series.overheads.append(float(rec.get("o", 0.0)))
            series.steps.append(int(rec["step"]))
            for name in names:
                value = rec.get(name)
                series.values[name].append(-1 if value is None else int(value))
        elif kind == "c":
            groups = tuple(
                TensorGroup(g[0], g[1], g[2], g[3], g[4], g[5] if len(g) > 5 else 0)
                for g in rec.get("groups", [])
            )
            series.censuses.append(
                Census(rec["step"], rec["count"], rec["bytes"], groups, int(rec.get("nodes", -1)))
            )
    return series


#: A step whose previous sample took a census (or other monitor work) longer than this is
#: not used for the communication share: the census delays this rank's next all-reduce, and
#: its peer counts that wait as communication.
QUIET_OVERHEAD_S = 0.005


def communication_share(
    steps: list[int],
    times: list[float],
    ddp: list[list[int] | None],
    overheads: list[float],
    min_steps: int = 3,
) -> dict[str, Any] | None:
    """The share of a step spent in DDP's gradient all-reduce, from the steps without a census.

    DDP's reducer reports an iteration's timers at the next forward, so the reading taken
    after step ``n`` describes step ``n - 1``. A step ``j`` counts when the monitor did no
    census after the sample before it (``overheads[j - 1]`` small): its interval is then the
    job's own step time, and its communication time holds no wait for a peer's census.
    """
    index = {s: i for i, s in enumerate(steps)}
    step_ms: list[float] = []
    comm_ms: list[float] = []
    overlap_ms: list[float] = []
    fwd_ms: list[float] = []
    bwd_ms: list[float] = []
    for i, reading in enumerate(ddp):
        if reading is None or i >= len(steps):
            continue
        j = index.get(steps[i] - 1)  # the step this reading describes
        if j is None or j == 0 or steps[j - 1] != steps[j] - 1:
            continue
        if overheads[j - 1] > QUIET_OVERHEAD_S or overheads[j] > QUIET_OVERHEAD_S:
            continue
        interval = times[j] - times[j - 1] - overheads[j - 1]
        if interval <= 0:
            continue
        step_ms.append(interval * 1e3)
        comm_ms.append(reading[1] / 1e6)
        overlap_ms.append(reading[2] / 1e6)
        fwd_ms.append(reading[3] / 1e6)
        bwd_ms.append(reading[4] / 1e6)
    if not any(r is not None for r in ddp):
        return None  # no DDP model in this process
    if len(step_ms) < min_steps:
        return {
            "share": None,
            "steps": len(step_ms),
            "reason": f"{len(step_ms)} steps without a census, need {min_steps}: run more steps "
            "than the censused ones to measure it",
        }

    def med(values: list[float]) -> float:
        ordered = sorted(values)
        return ordered[len(ordered) // 2]

    step, comm, overlap = med(step_ms), med(comm_ms), med(overlap_ms)
    exposed = max(comm - overlap, 0.0)
    return {
        "steps": len(step_ms),
        "step_ms": round(step, 3),
        "allreduce_ms": round(comm, 3),
        "overlapped_ms": round(overlap, 3),
        "exposed_ms": round(exposed, 3),
        "share": round(min(comm / step, 1.0), 4),
        "exposed_share": round(min(exposed / step, 1.0), 4),
        "forward_ms": round(med(fwd_ms), 3),
        "backward_compute_ms": round(med(bwd_ms), 3),
    }


def _fatal_location(workdir: Path, pid: int) -> str | None:
    """ "Fatal Python error: Segmentation fault in train.py:12 in main", from faulthandler."""
    try:
        text = (workdir / f"stack-{pid}.txt").read_text("utf-8", "replace")
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("Fatal Python error"):
            where = stuck_location(text)
            return f"{line.strip()}" + (f" in {where}" if where else "")
    return None


_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+) in (?P<func>\S+)')


def stuck_location(stack_text: str) -> str | None:
    """From a faulthandler dump, where the main thread is: the user frame and the call it is in."""
    blocks: list[list[tuple[str, int, str]]] = []
    for line in stack_text.splitlines():
        if line.startswith(("Thread ", "Current thread ")):
            blocks.append([])
            continue
        m = _FRAME.match(line)
        if m and blocks:
            blocks[-1].append((m["file"], int(m["line"]), m["func"]))
    # The latest dump's main thread: its outermost frame is the script's <module>.
    main = [b for b in blocks if b and b[-1][2] == "<module>"]
    if not main:
        return None
    frames = main[-1]
    user = [f for f in frames if "site-packages" not in f[0] and "/lib/python" not in f[0]]
    if not user:
        return None
    inner = frames[0]
    where = f"{os.path.basename(user[0][0])}:{user[0][1]} in {user[0][2]}"
    if inner != user[0]:
        return f"{inner[2]}() called from {where}"
    return where


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


def _rank_pids(workdir: Path, root_pid: int) -> set[int]:
    series = {
        int(m.group(1))
        for p in workdir.glob("series-*.jsonl")
        if (m := re.match(r"series-(\d+)", p.name))
    }
    procs = _records(workdir, "proc")
    ranks = {pid for pid, rec in procs.items() if rec.get("rank") is not None} | series
    ranks.discard(root_pid)
    return ranks


def _live_ranks(workdir: Path, seen: dict[int, int], root_pid: int) -> list[int]:
    known = [(pid, seen[pid]) for pid in _rank_pids(workdir, root_pid) if pid in seen]
    return [info.pid for info in proctree.alive(known)]


def _dead_rank(workdir: Path, seen: dict[int, int], root_pid: int) -> tuple[int, str] | None:
    """A rank of this run that has died while the command still runs: (pid, how).

    A rank is a process with a rank (``RANK``, or the process group's) or a step series. It
    died when it recorded an uncaught exception (the shim's excepthook, or the failure
    record of ``guard_distributed``) or when its process is gone without an exit record (a
    signal, the OOM killer, a native crash).
    """
    ranks = _rank_pids(workdir, root_pid)
    for prefix in ("guard", "crash"):
        for pid, rec in _records(workdir, prefix).items():
            if pid in ranks or (
                prefix == "crash" and rec.get("rank") is not None and pid != root_pid
            ):
                return pid, f"{rec.get('exc_type')}: {str(rec.get('message'))[:120]}"
    if not ranks:
        return None
    exits = _records(workdir, "exit")
    for pid in sorted(ranks):
        start = seen.get(pid)
        if pid in exits or start is None:
            continue
        if not proctree.alive([(pid, start)]):
            return pid, "ended without an exception or an exit (a signal?)"
    return None


def _series_bytes(workdir: Path) -> int:
    total = 0
    for path in workdir.glob("series-*.jsonl"):
        try:
            total += path.stat().st_size
        except OSError:
            pass
    return total


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
                for pid in _records(workdir, "proc"):
                    if pid not in seen and (stat := proctree._read_stat(pid)) is not None:
                        seen[pid] = stat.start
                next_scan = now + 0.25
                if dead_at is None:
                    dead = _dead_rank(workdir, seen, proc.pid)
                    if dead is not None:
                        dead_at = now
                if cfg.stall_timeout_s is not None:
                    size = _series_bytes(workdir)
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
    procs = _records(workdir, "proc")
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
            ranks_live = [p for p in _rank_pids(workdir, proc.pid) if p in live]
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
    result = _judge(
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


# -- judging ------------------------------------------------------------------------------------

_PY_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>\S+)')
_EXC_LINE = re.compile(r"^(?P<type>[A-Za-z_][\w.]*)(?::\s?(?P<msg>.*))?$")


_FINGERPRINT = (
    r"Rank (?P<{p}rank>\d+) is running collective: CollectiveFingerPrint\("
    r"SequenceNumber=(?P<{p}seq>\d+), OpType=(?P<{p}op>\w+), TensorShape=(?P<{p}shape>\[[^\]]*\]), "
    r"TensorDtypes=(?P<{p}dtype>\w+)"
)
_MISMATCH = re.compile(_FINGERPRINT.format(p="a") + r".*?but " + _FINGERPRINT.format(p="b"), re.S)


def collective_mismatch(text: str) -> dict[str, Any] | None:
    """The two sides of a mismatch TORCH_DISTRIBUTED_DEBUG=DETAIL detected, from its error.

    ``Detected mismatch between collectives on ranks. Rank 0 is running collective:
    CollectiveFingerPrint(SequenceNumber=1, OpType=ALLREDUCE, TensorShape=[4], ...), but
    Rank 1 is running collective: CollectiveFingerPrint(...)`` (ProcessGroupWrapper).
    """
    m = _MISMATCH.search(text)
    if m is None:
        return None
    sides = []
    for p in ("a", "b"):
        sides.append(
            {
                "rank": int(m[p + "rank"]),
                "sequence": int(m[p + "seq"]),
                "op": m[p + "op"],
                "shape": m[p + "shape"],
                "dtype": m[p + "dtype"],
            }
        )
    return {"sides": sides}


def _spawn_child_crash(rec: dict[str, Any], child: int, rank: int | None) -> dict[str, Any]:
    """The child's crash, from its parent's ProcessRaisedException (the child's traceback)."""
    text = str(rec.get("child_error") or "")
    exc_type, message, where = rec.get("exc_type"), str(rec.get("message") or ""), None
    lines = [line for line in text.splitlines() if line.strip()]
    frames = [m for line in lines if (m := _PY_FRAME.match(line))]
    user = [
        m for m in frames if "site-packages" not in m["file"] and "/lib/python" not in m["file"]
    ]
    if user:
        m = user[-1]
        where = f"{os.path.basename(m['file'])}:{m['line']} in {m['func']}"
    if frames and lines:
        last = _EXC_LINE.match(lines[-1].strip())
        if last:
            exc_type, message = last["type"].rsplit(".", 1)[-1], (last["msg"] or "")[:500]
    elif text.strip():
        message = text.strip().splitlines()[0][:500]  # "process 1 terminated with signal ..."
    index = rec.get("error_index")
    return {
        "pid": child,
        "rank": rank if rank is not None else index,
        "exc_type": exc_type,
        "message": message,
        "where": where,
        "traceback": text,
        "time": rec.get("time", 0.0) - 1e-3,  # before the parent's report of it
        "spawned": True,
        "error_index": index,
    }


def _label(rank: int | None, pid: int) -> str:
    return f"rank {rank}" if rank is not None else f"pid {pid}"


def _judge(
    cfg: SmallRunConfig,
    workdir: Path,
    returncode: int | None,
    duration: float,
    *,
    hung: bool,
    interrupted: bool,
    killed: list[proctree.ProcInfo],
    root_pid: int,
    stacks_requested: list[int],
    kill_time: float | None = None,
    stalled: bool = False,
    dead_kill: bool = False,
) -> SmallRunResult:
    procs = _records(workdir, "proc")
    crashes = _records(workdir, "crash")
    for pid, rec in _records(workdir, "guard").items():
        # A rank whose failure the guard recorded but whose exception never reached
        # sys.excepthook (caught above the guard, or os._exit): still a crash, still named.
        crashes.setdefault(pid, {**rec, "where": None})
    if kill_time is not None:
        # Exceptions raised by our own SIGTERM (torchrun's SignalException) are not crashes.
        crashes = {p: c for p, c in crashes.items() if c.get("time", 0.0) < kill_time}
    exits = _records(workdir, "exit")
    series = {s.pid: s for s in map(_read_series, sorted(workdir.glob("series-*.jsonl"))) if s}
    killed_pids = {k.pid for k in killed}

    def rank_of(pid: int) -> int | None:
        if procs.get(pid, {}).get("helper"):
            return None
        if pid in series and series[pid].rank is not None:
            return series[pid].rank
        if pid in crashes and crashes[pid].get("rank") is not None:
            return int(crashes[pid]["rank"])
        if pid in exits and exits[pid].get("rank") is not None:
            return int(exits[pid]["rank"])
        rec = procs.get(pid)
        return rec.get("rank") if rec else None

    # An mp.spawn parent reports its child's failure (ProcessRaisedException): the crash is
    # the child's, named by its rank, with the child's own exception and line.
    for pid, rec in list(crashes.items()):
        child = rec.get("error_pid")
        if isinstance(child, int) and child not in crashes:
            crashes[child] = _spawn_child_crash(rec, child, rank_of(child))
            crashes[pid] = {**rec, "consequence": True}

    # The processes that matter: ranks (a RANK, or a series) and the command itself.
    relevant = sorted(
        {pid for pid in procs if rank_of(pid) is not None or pid in series or pid == root_pid}
        | {pid for pid, c in crashes.items() if c.get("spawned")}
    )
    findings: list[RunFinding] = []
    ranks: list[RankSummary] = []
    reports: dict[int, GrowthReport] = {}
    for pid in relevant:
        s = series.get(pid)
        report = None
        if s is not None and s.steps:
            report = build_report(
                steps=s.steps,
                series=s.values,
                censuses=s.censuses,
                warmup_steps=cfg.warmup_steps,
                min_bytes_per_step=cfg.min_bytes_per_step,
                min_tensors_per_step=0.5,
                bytes_warmup_steps=max(cfg.warmup_steps, BYTES_WARMUP_STEPS),
            )
            reports[pid] = report
        stuck = None
        if pid in stacks_requested:
            try:
                stuck = stuck_location((workdir / f"stack-{pid}.txt").read_text("utf-8", "replace"))
            except OSError:
                stuck = None
        memory = None
        if report is not None:
            memory = report.to_dict()
            memory["summary"] = report.summary()
        ranks.append(
            RankSummary(
                rank=rank_of(pid),
                pid=pid,
                steps=len(s.steps) if s else 0,
                last_step=s.steps[-1] if s and s.steps else None,
                exited=pid in exits,
                crashed=crashes.get(pid),
                stuck_in=stuck,
                memory=memory,
                communication=communication_share(s.steps, s.times, s.ddp, s.overheads)
                if s is not None and s.steps
                else None,
            )
        )

    # Crashes: the first exception that is not a consequence of another rank's failure.
    crash_list = sorted(
        (c for pid, c in crashes.items() if pid in relevant), key=lambda c: c.get("time", 0.0)
    )
    roots = [
        c
        for c in crash_list
        if c.get("exc_type") != "RankFailureError" and not c.get("consequence")
    ]
    if crash_list:
        first = roots[0] if roots else crash_list[0]
        if first.get("exc_type") == "RankFailureError" and first.get("failed_rank") is not None:
            first = {**first, "rank": first["failed_rank"]}
        where = f" at {first['where']}" if first.get("where") else ""
        who = _label(first.get("rank"), first["pid"])
        if first.get("spawned"):
            who += f" (mp.spawn process {first['error_index']}, pid {first['pid']})"
        findings.append(
            RunFinding(
                "crash",
                first.get("rank"),
                f"{who} crashed: {first.get('exc_type')}: {first.get('message')}{where}",
            )
        )
        for other in crash_list:
            if other is first or other.get("pid") == first.get("pid"):
                continue
            if other.get("rank") is None or other.get("consequence"):
                continue  # the launcher reporting its child's failure (ChildFailedError)
            findings.append(
                RunFinding(
                    "crash",
                    other.get("rank"),
                    f"then {_label(other.get('rank'), other['pid'])} failed: "
                    f"{other.get('exc_type')}: {str(other.get('message'))[:160]}",
                )
            )
    # TORCH_DISTRIBUTED_DEBUG=DETAIL: ranks that ran different collectives, named.
    mismatch = None
    for c in crash_list:
        mismatch = collective_mismatch(str(c.get("traceback") or c.get("message") or ""))
        if mismatch is not None:
            break
    if mismatch is not None:
        lines_at = {
            c.get("rank"): c.get("where")
            for c in crash_list
            if c.get("rank") is not None and c.get("where")
        }
        parts = []
        for side in mismatch["sides"]:
            at = f" at {lines_at[side['rank']]}" if lines_at.get(side["rank"]) else ""
            parts.append(
                f"rank {side['rank']} ran {side['op']} of {side['shape']} {side['dtype']}{at}"
            )
        findings.insert(
            0,
            RunFinding(
                "mismatch",
                mismatch["sides"][0]["rank"],
                f"mismatched collectives at collective #{mismatch['sides'][0]['sequence']} "
                f"(TORCH_DISTRIBUTED_DEBUG=DETAIL): " + "; ".join(parts),
            ),
        )
    # Ranks that vanished without an exception or a normal exit: a signal (OOM killer?), or
    # a crash in native code, whose Python stack faulthandler left in the stack file.
    for pid in relevant:
        if pid not in exits and pid not in crashes and pid not in killed_pids:
            fatal = _fatal_location(workdir, pid)
            if pid == root_pid and fatal is None:
                continue  # reported below from the exit status
            detail = (
                f": {fatal}"
                if fatal
                else ": killed by a signal (the OOM killer?) or a crash in native code"
            )
            findings.append(
                RunFinding(
                    "crash",
                    rank_of(pid),
                    f"{_label(rank_of(pid), pid)} ended without a Python exception or a normal "
                    f"exit{detail}",
                )
            )
    if dead_kill:
        alive_ranks = [r for r in ranks if r.rank is not None and r.pid in killed_pids]
        dead_label = next(
            (f.message.split(" crashed")[0] for f in findings if f.kind == "crash"), "a rank"
        )
        for summary in alive_ranks:
            at = f" after step {summary.last_step}" if summary.last_step is not None else ""
            where = f", stuck in {summary.stuck_in}" if summary.stuck_in else ""
            findings.append(
                RunFinding(
                    "hang",
                    summary.rank,
                    f"{_label(summary.rank, summary.pid)} was still running "
                    f"{cfg.dead_rank_grace_s:g} s after {dead_label} died{at}{where}",
                )
            )
        findings.append(
            RunFinding(
                "hang",
                None,
                f"the job did not end within {cfg.dead_rank_grace_s:g} s of a rank's death: "
                f"killed {len(killed)} processes (the whole tree)",
            )
        )
    flight: dict[str, Any] = {}
    if hung or interrupted or dead_kill:
        dumps: dict[int, dict[str, Any]] = {}
        errors: dict[int, str] = {}
        for pid, rec in _records(workdir, "fr").items():
            rank = rank_of(pid) if rec.get("rank") is None else int(rec["rank"])
            if rank is None:
                continue
            if isinstance(rec.get("dump"), dict):
                dumps[rank] = rec["dump"]
            else:
                errors[rank] = str(rec.get("error") or "no dump")
        if dumps or errors:
            fr_report = flight_recorder.summarize(dumps, errors)
            flight = fr_report.to_dict()
            findings.extend(RunFinding("hang", None, text) for text in fr_report.findings)
        native = sorted(p.name for p in workdir.glob("fr-native-rank-*"))
        if native:
            flight["native_dumps"] = native  # NCCL's own, on its watchdog timeout (pickle)
    if hung or interrupted:
        what = (
            "interrupted"
            if interrupted
            else f"no rank finished a step for {cfg.stall_timeout_s:g} s"
            if stalled
            else f"still running after {cfg.timeout_s:g} s"
        )
        findings.append(
            RunFinding("hang", None, f"{what}: killed {len(killed)} processes (the whole tree)")
        )
        rank_summaries = [r for r in ranks if r.rank is not None] or ranks
        for summary in rank_summaries:
            if summary.stuck_in or summary.pid in killed_pids:
                at = f" after step {summary.last_step}" if summary.last_step is not None else ""
                where = f", in {summary.stuck_in}" if summary.stuck_in else ""
                findings.append(
                    RunFinding(
                        "hang",
                        summary.rank,
                        f"{_label(summary.rank, summary.pid)} was stuck{at}{where}",
                    )
                )
    if (
        not any(f.kind == "crash" for f in findings)
        and not hung
        and not interrupted
        and returncode not in (0, None)
    ):
        how = (
            f"killed by {signal.Signals(-returncode).name}"
            if returncode < 0 and -returncode in {s.value for s in signal.Signals}
            else f"exit code {returncode}"
        )
        findings.append(
            RunFinding("crash", None, f"the command failed ({how}) without a Python traceback")
        )
    if killed and not hung and not interrupted and not dead_kill:
        names = ", ".join(f"{k.pid} ({k.cmdline[:60]})" for k in killed[:5])
        findings.append(
            RunFinding("leftover", None, f"processes left behind after exit, killed: {names}")
        )
    for pid, report in reports.items():
        if report.grows:
            findings.append(
                RunFinding("leak", rank_of(pid), f"{_label(rank_of(pid), pid)}: {report.summary()}")
            )
        elif report.verdict == "suspect":
            findings.append(
                RunFinding(
                    "suspect", rank_of(pid), f"{_label(rank_of(pid), pid)}: {report.summary()}"
                )
            )
    if not any(f.kind in ("crash", "hang", "leak") for f in findings):
        if not reports:
            findings.append(
                RunFinding(
                    "no-data",
                    None,
                    "no training step seen: the monitor samples after optimizer.step(). If the "
                    "script does not call it, add one line: `from ddp_lsp.runtime import "
                    "monitor_steps` and loop `for batch in monitor_steps(loader):`",
                )
            )
        elif all(r.inconclusive for r in reports.values()):
            note = next(iter(reports.values())).notes
            findings.append(
                RunFinding(
                    "inconclusive",
                    None,
                    f"too few steps to judge memory growth ({'; '.join(note)}); run at least "
                    f"{cfg.warmup_steps + 5} steps per rank (the {cfg.warmup_steps} warm-up "
                    "steps plus 5 censused ones)",
                )
            )
    kinds = {f.kind for f in findings}
    status = "pass"
    for kind in ("mismatch", "crash", "hang", "leak", "no-data", "inconclusive", "suspect"):
        if kind in kinds:
            status = "inconclusive" if kind == "no-data" else kind
            break
    exit_code = (
        EXIT_FAIL
        if status in ("crash", "hang", "leak", "mismatch")
        else EXIT_INCONCLUSIVE
        if status == "inconclusive"
        else EXIT_PASS
    )
    return SmallRunResult(
        status=status,
        exit_code=exit_code,
        command=cfg.command,
        duration_s=round(duration, 3),
        timeout_s=cfg.timeout_s,
        returncode=returncode,
        findings=tuple(findings),
        ranks=tuple(ranks),
        killed=tuple({"pid": k.pid, "cmdline": k.cmdline} for k in killed),
        workdir=str(workdir) if (cfg.keep_workdir or cfg.workdir) else None,
        flight_recorder=flight,
    )


def render_text(result: SmallRunResult) -> str:
    ranked = [r for r in result.ranks if r.rank is not None or r.steps]
    head = (
        f"ddp-lsp smallrun: {'PASS' if result.exit_code == 0 else 'FAIL' if result.exit_code == 1 else 'INCONCLUSIVE'}"
        f" ({result.status})  {len(ranked)} rank(s), {result.duration_s:.1f} s"
    )
    lines = [head]
    for f in result.findings:
        mark = {
            "crash": "x",
            "hang": "x",
            "leak": "x",
            "mismatch": "x",
            "leftover": "!",
            "suspect": "!",
        }.get(f.kind, "?")
        body = f.message.replace("\n", "\n      ")
        lines.append(f"  {mark} [{f.kind}] {body}")
    for r in ranked:
        mem = r.memory or {}
        per = mem.get("bytes_per_step")
        verdict = mem.get("verdict")
        detail = ""
        if verdict in ("leak", "suspect"):
            if per is not None and per >= 1:
                detail = f", {format_bytes(per)}/step"
            elif mem.get("tensors_per_step"):
                detail = f", {mem['tensors_per_step']:.2f} live tensors/step"
            elif mem.get("nodes_per_step"):
                detail = f", {mem['nodes_per_step']:.2f} graph nodes/step"
        state = {
            "leak": "grows",
            "suspect": "suspect",
            "flat": "flat",
            "inconclusive": "not judged (too few steps)",
        }.get(verdict or "", "no samples")
        censuses = mem.get("censuses")
        judged = f" ({censuses} censuses)" if censuses and verdict in ("flat", "leak") else ""
        comm = r.communication or {}
        talk = ""
        if comm.get("share") is not None:
            talk = (
                f"; all-reduce {comm['share']:.0%} of the step ({comm['allreduce_ms']:.1f} of "
                f"{comm['step_ms']:.1f} ms, {comm['exposed_ms']:.1f} ms not overlapped, "
                f"{comm['steps']} steps)"
            )
        elif comm:
            talk = "; all-reduce share not measured (every step censused)"
        lines.append(
            f"    {_label(r.rank, r.pid)}: {r.steps} steps, memory {state}{detail}{judged}{talk}"
        )
    return "\n".join(lines)


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
