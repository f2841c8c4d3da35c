"""The small run's verdict: crashes, hangs, mismatched collectives and memory growth, per rank.

After the job ended (or was killed), :func:`judge` reads what its processes wrote
(:mod:`ddp_lsp.runtime.smallrun_files`) and decides: the first crash that is not a
consequence of another rank's failure (an ``mp.spawn`` child's named by its rank), the ranks
still running after a rank died or past the timeout and where they were stuck, a collective
mismatch that ``TORCH_DISTRIBUTED_DEBUG=DETAIL`` detected, the flight recorder's view of a
hang, and each rank's memory series (:func:`ddp_lsp.runtime.memory.build_report`). It never
imports torch.
"""

from __future__ import annotations

import os
import re
import signal
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ddp_lsp import proctree
from ddp_lsp.runtime import flight as flight_recorder
from ddp_lsp.runtime.memory_verdict import BYTES_WARMUP_STEPS, GrowthReport, build_report
from ddp_lsp.runtime.smallrun_files import (
    fatal_location,
    read_series,
    records,
    stuck_location,
)
from ddp_lsp.runtime.smallrun_report import (
    EXIT_FAIL,
    EXIT_INCONCLUSIVE,
    EXIT_PASS,
    RankSummary,
    RunFinding,
    SmallRunResult,
    label,
)

if TYPE_CHECKING:
    from ddp_lsp.runtime.smallrun import SmallRunConfig

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


def spawn_child_crash(rec: dict[str, Any], child: int, rank: int | None) -> dict[str, Any]:
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


def judge(
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
    procs = records(workdir, "proc")
    crashes = records(workdir, "crash")
    for pid, rec in records(workdir, "guard").items():
        # A rank whose failure the guard recorded but whose exception never reached
        # sys.excepthook (caught above the guard, or os._exit): still a crash, still named.
        crashes.setdefault(pid, {**rec, "where": None})
    if kill_time is not None:
        # Exceptions raised by our own SIGTERM (torchrun's SignalException) are not crashes.
        crashes = {p: c for p, c in crashes.items() if c.get("time", 0.0) < kill_time}
    exits = records(workdir, "exit")
    series = {s.pid: s for s in map(read_series, sorted(workdir.glob("series-*.jsonl"))) if s}
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
            crashes[child] = spawn_child_crash(rec, child, rank_of(child))
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
        who = label(first.get("rank"), first["pid"])
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
                    f"then {label(other.get('rank'), other['pid'])} failed: "
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
            fatal = fatal_location(workdir, pid)
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
                    f"{label(rank_of(pid), pid)} ended without a Python exception or a normal "
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
                    f"{label(summary.rank, summary.pid)} was still running "
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
        for pid, rec in records(workdir, "fr").items():
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
                        f"{label(summary.rank, summary.pid)} was stuck{at}{where}",
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
                RunFinding("leak", rank_of(pid), f"{label(rank_of(pid), pid)}: {report.summary()}")
            )
        elif report.verdict == "suspect":
            findings.append(
                RunFinding(
                    "suspect", rank_of(pid), f"{label(rank_of(pid), pid)}: {report.summary()}"
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
