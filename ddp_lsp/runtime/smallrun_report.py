"""What a small run reports: its findings, each rank's summary, the verdict, as text.

The result of ``ddp-lsp smallrun`` (:mod:`ddp_lsp.runtime.smallrun`), built by the judge
(:mod:`ddp_lsp.runtime.smallrun_judge`); ``to_dict`` is the ``--json`` document.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from ddp_lsp.runtime.memory_verdict import format_bytes

SCHEMA = "ddp-lsp-smallrun/1"

EXIT_PASS, EXIT_FAIL, EXIT_INCONCLUSIVE = 0, 1, 2


@dataclass(frozen=True)
class RunFinding:
    """One thing a small run found (not a lint ``Finding``: no span, no fix)."""

    #: crash | hang | mismatch | leak | suspect | inconclusive | no-data | leftover | error
    kind: str
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
            f"    {label(r.rank, r.pid)}: {r.steps} steps, memory {state}{detail}{judged}{talk}"
        )
    return "\n".join(lines)


def label(rank: int | None, pid: int) -> str:
    return f"rank {rank}" if rank is not None else f"pid {pid}"
