"""Wall time of ``ddp-lsp preflight --quick`` and of the full CPU run, as users run them.

    .venv/bin/python bench/bench_preflight.py              # best and median of 3 runs each
    .venv/bin/python bench/bench_preflight.py --repeat 5

Each run is a fresh ``python -m ddp_lsp preflight`` process (CLI start-up, the child process,
the torch import in the child, every probe), timed from outside. Targets on the 2-CPU, no-GPU
machine: --quick <= 6 s, full <= 20 s. Results go in docs/performance.md.
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

ROOT = Path(__file__).resolve().parent.parent
TARGETS = {"quick": 6.0, "full": 20.0}


def run_once(args: list[str]) -> tuple[float, dict[str, float]]:
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "report.json")
        t0 = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, "-m", "ddp_lsp", "preflight", *args, "--json", out],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=False,
        )
        wall = time.perf_counter() - t0
        if proc.returncode == 2:
            raise SystemExit(f"preflight error:\n{proc.stdout}\n{proc.stderr}")
        with open(out, encoding="utf-8") as handle:
            data = json.load(handle)
    return wall, {p["id"]: p["duration_s"] for p in data["probes"]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=3)
    ns = parser.parse_args()
    try:
        load = os.getloadavg()[0]
    except OSError:
        load = float("nan")
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load {load:.2f}")
    ok = True
    for name, args in (("quick", ["--quick"]), ("full", [])):
        walls, probes = [], {}
        for _ in range(ns.repeat):
            wall, probes = run_once(args)
            walls.append(wall)
        best, median = min(walls), statistics.median(walls)
        verdict = "ok" if median <= TARGETS[name] else "OVER TARGET"
        ok = ok and median <= TARGETS[name]
        print(
            f"{name:5}: best {best:.2f} s, median {median:.2f} s over {ns.repeat} runs "
            f"(target <= {TARGETS[name]:g} s: {verdict})"
        )
        slowest = sorted(probes.items(), key=lambda kv: -kv[1])[:4]
        print(
            "       slowest probes (last run): " + ", ".join(f"{k} {v:.2f} s" for k, v in slowest)
        )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
