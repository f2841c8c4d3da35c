"""Acceptance of the small-run leak gate: N clean and N leaking runs of several scripts.

    python bench/leak_gate_acceptance.py --n 10 [--cases graph,list,cache,chain,toy]
        [--json results.json] [--baseline]

Each run is ``ddp-lsp smallrun -- torchrun --standalone --nproc-per-node 2 <script>``: 2 gloo
ranks on CPU, the monitor attached by the shim, nothing in the scripts changed for it.

- ``graph``, ``list``, ``cache``, ``chain``: bench/leak_gate/train.py at the method's size
  (2 epochs of 10 samples per rank, batch 2: 10 steps per rank), leaking and clean variants;
- ``toy``: examples/ci/train_toy.py --limit-batches 17 (34 steps per rank, the run that the
  old gate failed 3 of 3 times), clean and ``--leak``.

Prints a confusion table (expected leak / clean against the verdict) and, per case, the time
from start to verdict. ``--baseline`` also runs each command without the gate right after
the gated run (same load, as far as a shared host allows) and prints what the gate added:
on a busy 2-CPU host most of a run is the command itself (three interpreters importing
torch), not the gate. A false leak is a clean run with exit status 1; a missed leak is a
leaking run without one. Results go in docs/performance.md with this command.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
TRAIN = ROOT / "bench" / "leak_gate" / "train.py"
TOY = ROOT / "examples" / "ci" / "train_toy.py"
CASES = ("graph", "list", "cache", "chain", "toy")


def command(case: str, leak: bool) -> list[str]:
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    torchrun += ["--monitor-interval", "0.2", "--nproc-per-node", "2"]
    if case == "toy":
        return [*torchrun, str(TOY), "--epochs", "2", "--limit-batches", "17"] + (
            ["--leak"] if leak else []
        )
    return [*torchrun, str(TRAIN), case, "leak" if leak else "clean"]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    env.setdefault("OMP_NUM_THREADS", "1")
    return env


def run_plain(case: str, leak: bool) -> float:
    """The same command without the gate: its wall time (the baseline of the gate's cost)."""
    with tempfile.TemporaryDirectory(prefix="leak-gate-plain-") as tmp:
        started = time.monotonic()
        subprocess.run(command(case, leak), cwd=tmp, env=_env(), capture_output=True)
        return round(time.monotonic() - started, 2)


def run_one(case: str, leak: bool, timeout: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="leak-gate-") as tmp:
        out = Path(tmp) / "result.json"
        cmd = [sys.executable, "-m", "ddp_lsp", "smallrun", "--timeout", str(timeout)]
        cmd += ["--json", str(out), "--", *command(case, leak)]
        env = _env()
        started = time.monotonic()
        proc = subprocess.run(cmd, cwd=tmp, env=env, capture_output=True, text=True)
        wall = time.monotonic() - started
        try:
            result = json.loads(out.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            result = {"status": "error", "findings": [{"message": proc.stderr[-500:]}]}
    return {
        "case": case,
        "expected": "leak" if leak else "clean",
        "exit": proc.returncode,
        "status": result.get("status"),
        "wall_s": round(wall, 2),
        "duration_s": result.get("duration_s"),
        "findings": [f.get("message", "")[:200] for f in result.get("findings", [])],
        "load": [round(x, 2) for x in os.getloadavg()],
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=3, help="runs per case and variant (3)")
    p.add_argument("--cases", default=",".join(CASES))
    p.add_argument("--timeout", type=float, default=120.0)
    p.add_argument("--json", type=Path, help="write every run's result here")
    p.add_argument(
        "--baseline",
        action="store_true",
        help="also time each command without the gate, right after the gated run",
    )
    args = p.parse_args()
    cases = [c for c in args.cases.split(",") if c]
    runs: list[dict[str, Any]] = []
    for i in range(args.n):
        for case in cases:
            for leak in (True, False):
                r = run_one(case, leak, args.timeout)
                if args.baseline:
                    r["plain_s"] = run_plain(case, leak)
                runs.append(r)
                plain = f" (without the gate {r['plain_s']:.1f} s)" if args.baseline else ""
                print(
                    f"[{i + 1}/{args.n}] {case:6s} {r['expected']:5s} -> {r['status']!s:12s} "
                    f"exit {r['exit']}  {r['wall_s']:.1f} s{plain}  load {r['load'][0]:.1f}",
                    flush=True,
                )
    verdicts = ("leak", "pass", "suspect", "inconclusive", "other")

    def column(r: dict[str, Any]) -> str:
        return str(r["status"]) if r["status"] in verdicts else "other"

    print("\nconfusion (rows: what the script does; columns: the gate's verdict)")
    print(f"{'':14s}" + "".join(f"{v:>14s}" for v in verdicts))
    for expected in ("leak", "clean"):
        row = [r for r in runs if r["expected"] == expected]
        print(
            f"{expected + ' runs':14s}"
            + "".join(f"{sum(1 for r in row if column(r) == v):>14d}" for v in verdicts)
        )
    false_leaks = [r for r in runs if r["expected"] == "clean" and r["exit"] == 1]
    missed = [r for r in runs if r["expected"] == "leak" and r["status"] != "leak"]
    print(f"\nfalse leaks: {len(false_leaks)}   missed leaks: {len(missed)}   runs: {len(runs)}")
    print("\ntime to verdict per run (s): case, variant: min / median / max")
    for case in cases:
        for expected in ("leak", "clean"):
            times = [
                float(r["wall_s"]) for r in runs if r["case"] == case and r["expected"] == expected
            ]
            if times:
                print(
                    f"  {case:6s} {expected:5s}: {min(times):5.1f} / "
                    f"{statistics.median(times):5.1f} / {max(times):5.1f}"
                )
    if args.baseline:
        added = [float(r["wall_s"]) - float(r["plain_s"]) for r in runs]
        plain_s = [float(r["plain_s"]) for r in runs]
        print(
            f"\nwithout the gate (s): {min(plain_s):5.1f} / {statistics.median(plain_s):5.1f} / "
            f"{max(plain_s):5.1f};  added by the gate (s): {min(added):+5.1f} / "
            f"{statistics.median(added):+5.1f} / {max(added):+5.1f}  (min / median / max)"
        )
    loads = [float(r["load"][0]) for r in runs]
    print(f"load average (1 min) at each verdict: {min(loads):.1f} - {max(loads):.1f}")
    for r in false_leaks + missed:
        print(f"\n{r['case']} {r['expected']} -> {r['status']}: {r['findings']}")
    if args.json:
        args.json.write_text(json.dumps(runs, indent=1), encoding="utf-8")
    return 1 if false_leaks or missed else 0


if __name__ == "__main__":
    sys.exit(main())
