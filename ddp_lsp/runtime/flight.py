"""Read the c10d flight recorder's per-rank dumps after a hang: which collective each rank is in.

The flight recorder (``TORCH_FR_BUFFER_SIZE`` > 0; ``TORCH_NCCL_TRACE_BUFFER_SIZE`` before it
was made backend-neutral) keeps the last collectives of every process group in a ring buffer:
sequence number, op (``nccl:all_reduce``), sizes, dtypes, state, and the Python frames that
issued it. On a hang ``ddp-lsp smallrun`` asks each rank for a JSON dump
(``_dump_fr_trace_json``) and this module compares them, the way PyTorch's ``fr_trace``
analyser does, in small:

- a rank whose last enqueued collective is behind the others' never called the next one (the
  classic: a collective inside ``if rank == 0:``): it is named, with where it last was;
- ranks at the same sequence number whose ops or sizes differ ran mismatched collectives;
- all ranks in the same collective, none completed: the transport is stuck, not the code.

stdlib only (the supervisor never imports torch); the dumps are JSON, never unpickled.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class RankTrace:
    rank: int
    pg: str
    last_enqueued: int
    last_completed: int
    #: The newest entries of that group, oldest first: seq, op, sizes, dtypes, state, where.
    recent: tuple[dict[str, Any], ...] = ()
    error: str | None = None


@dataclass(frozen=True)
class FlightReport:
    ranks: tuple[RankTrace, ...]
    findings: tuple[str, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "ranks": {
                str(r.rank): {
                    "process_group": r.pg,
                    "last_enqueued": r.last_enqueued,
                    "last_completed": r.last_completed,
                    "recent": list(r.recent),
                    **({"error": r.error} if r.error else {}),
                }
                for r in self.ranks
            },
            "findings": list(self.findings),
        }


def _user_frame(frames: list[dict[str, Any]] | None) -> str | None:
    for f in frames or []:
        name = str(f.get("filename", ""))
        if "site-packages" in name or "/lib/python" in name or not name:
            continue
        return f"{os.path.basename(name)}:{f.get('line')} in {f.get('name')}"
    return None


def _describe(entry: dict[str, Any]) -> str:
    op = str(entry.get("op") or entry.get("profiling_name") or "?")
    sizes = entry.get("input_sizes")
    dtypes = entry.get("input_dtypes")
    text = f"{op} {sizes} {','.join(map(str, dtypes or []))}".rstrip()
    where = entry.get("where")
    return f"{text} from {where}" if where else text


def _default_pg(dump: dict[str, Any]) -> str | None:
    status = dump.get("pg_status") or {}
    if "0" in status:
        return "0"
    busiest = max(
        status.items(), key=lambda kv: kv[1].get("last_enqueued_collective", -1), default=None
    )
    return busiest[0] if busiest else None


def rank_trace(rank: int, dump: dict[str, Any], keep: int = 4) -> RankTrace:
    pg = _default_pg(dump)
    status = (dump.get("pg_status") or {}).get(pg or "", {})
    entries = [
        e for e in dump.get("entries") or [] if str(e.get("pg_id")) == pg and not e.get("is_p2p")
    ]
    entries.sort(key=lambda e: int(e.get("collective_seq_id", 0)))
    recent = tuple(
        {
            "seq": int(e.get("collective_seq_id", 0)),
            "op": e.get("profiling_name"),
            "input_sizes": e.get("input_sizes"),
            "input_dtypes": e.get("input_dtypes"),
            "state": e.get("state"),
            "where": _user_frame(e.get("frames")),
        }
        for e in entries[-keep:]
    )
    return RankTrace(
        rank=rank,
        pg=pg or "?",
        last_enqueued=int(status.get("last_enqueued_collective", -1)),
        last_completed=int(status.get("last_completed_collective", -1)),
        recent=recent,
    )


def summarize(
    dumps: dict[int, dict[str, Any]], errors: dict[int, str] | None = None
) -> FlightReport:
    """Compare the ranks' dumps (``rank -> the JSON dump``) and say what the hang looks like."""
    traces = [rank_trace(rank, dump) for rank, dump in sorted(dumps.items())]
    for rank, error in sorted((errors or {}).items()):
        traces.append(RankTrace(rank, "?", -1, -1, (), error))
    usable = [t for t in traces if t.error is None and t.last_enqueued >= 0]
    findings: list[str] = []
    if len(usable) >= 2:
        front = max(t.last_enqueued for t in usable)
        behind = [t for t in usable if t.last_enqueued < front]
        ahead = [t for t in usable if t.last_enqueued == front]
        if behind:
            lead = ahead[0]
            pending = next((e for e in lead.recent if e["seq"] == front), None)
            what = f" ({_describe(pending)})" if pending else ""
            for t in behind:
                last = next((e for e in reversed(t.recent) if e["seq"] == t.last_enqueued), None)
                was = f"; its last was #{t.last_enqueued} {_describe(last)}" if last else ""
                findings.append(
                    f"flight recorder: rank {t.rank} never entered collective #{front} that "
                    f"rank {lead.rank} is waiting in{what}{was}"
                )
        else:
            ops = {}
            for t in usable:
                entry = next((e for e in t.recent if e["seq"] == front), None)
                if entry is not None:
                    ops[t.rank] = entry
            kinds = {(e["op"], str(e["input_sizes"]), str(e["input_dtypes"])) for e in ops.values()}
            if len(kinds) > 1:
                findings.append(
                    f"flight recorder: mismatched collective #{front}: "
                    + "; ".join(f"rank {r} ran {_describe(e)}" for r, e in sorted(ops.items()))
                )
            elif all(t.last_completed < front for t in usable):
                entry = next(iter(ops.values()), None)
                what = f" ({_describe(entry)})" if entry else ""
                findings.append(
                    f"flight recorder: every rank entered collective #{front}{what} and none "
                    "completed it: the transport (network, NCCL) is stuck, not the code"
                )
    for t in traces:
        if t.error:
            findings.append(f"flight recorder: rank {t.rank} could not dump: {t.error}")
    return FlightReport(ranks=tuple(traces), findings=tuple(findings))
