"""What the processes of a small run wrote into its directory, read back.

Every Python process of a ``ddp-lsp smallrun`` registers itself in the run's directory
through the shim (:mod:`ddp_lsp.runtime._autoattach`): ``proc-<pid>.json`` at start,
``crash-``, ``guard-`` and ``exit-<pid>.json`` at the end, ``series-<pid>.jsonl`` (a line per
step, a line per census) and ``stack-<pid>.txt`` (faulthandler's dumps). This module only
reads them; the supervisor (:mod:`ddp_lsp.runtime.smallrun`) watches them while the job runs
and the judge (:mod:`ddp_lsp.runtime.smallrun_judge`) decides from them afterwards. It never
imports torch.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ddp_lsp.runtime.memory_verdict import Census, TensorGroup


def load_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


#: Helper processes that multiprocessing starts with the parent's environment (``RANK``
#: included, when a launcher sets it before starting its ranks): never ranks.
_HELPERS = ("multiprocessing.resource_tracker", "multiprocessing.forkserver")


def records(workdir: Path, prefix: str) -> dict[int, dict[str, Any]]:
    out: dict[int, dict[str, Any]] = {}
    for path in workdir.glob(f"{prefix}-*.json"):
        data = load_json(path)
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
class Series:
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


def read_series(path: Path) -> Series | None:
    match = re.match(r"series-(\d+)\.jsonl$", path.name)
    if not match:
        return None
    series = Series(pid=int(match.group(1)))
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


def rank_pids(workdir: Path, root_pid: int) -> set[int]:
    series = {
        int(m.group(1))
        for p in workdir.glob("series-*.jsonl")
        if (m := re.match(r"series-(\d+)", p.name))
    }
    procs = records(workdir, "proc")
    ranks = {pid for pid, rec in procs.items() if rec.get("rank") is not None} | series
    ranks.discard(root_pid)
    return ranks


def series_bytes(workdir: Path) -> int:
    total = 0
    for path in workdir.glob("series-*.jsonl"):
        try:
            total += path.stat().st_size
        except OSError:
            pass
    return total


def fatal_location(workdir: Path, pid: int) -> str | None:
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
