"""Issue 15's server Must-hold lines in one run, side by side with ruff's server.

Run (from the checkout, the big files made by ``../shared/bench/make_big_file.py --seed 0``):

    python3 bench/must_hold.py --small big1500.py --big big20000.py \\
        [--seeds 0-6] [--rounds 2] [--edits-small 300] [--edits-big 500] [--starts 7] \\
        [--server ".venv/bin/ddp-lsp serve"] [--ruff ".venv/bin/ruff server"] [--json out.json]

Every measurement is the shared harness (``lsp_latency.py``, through ``bench/harness_gc.py``
so that each run also says how much of its slowest edit was the harness's own collection),
and ddp-lsp and ruff's server run alternately on the same file, seed and edits (``char``,
``rename``, ``type``), the order swapped every round, so that both see the same minutes of
this shared machine:

- 1,500 lines: for each seed, each server's edit p95 in every round; the line holds for a
  seed when ddp-lsp's median p95 is <= 30 ms and <= ruff's median p95;
- 20,000 lines (seed 2): p50 / p95 / max, first diagnostics and peak RSS of each server;
  p95 <= 50 ms and <= ruff's, max <= 250 ms, first diagnostics <= 1.5 s, RSS <= 250 MB;
- cold start: ``--starts`` interleaved starts of ddp-lsp and of a bare pygls server
  (``bench/bare_pygls_server.py``); the medians within 100 ms.

The table goes to stdout, with "holds" / "does not hold" per line; ``--json`` keeps every run.
Compile the package's bytecode first (``python -m compileall -q ddp_lsp``) where
``PYTHONDONTWRITEBYTECODE`` is set, or every start recompiles it.
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
HARNESS_GC = ROOT / "bench" / "harness_gc.py"
BARE = ROOT / "bench" / "bare_pygls_server.py"
KINDS = "char,rename,type"


def seeds_of(text: str) -> list[int]:
    """``"0-6"`` or ``"0,2,5"`` as a list of seeds."""
    out: list[int] = []
    for part in text.split(","):
        first, _, last = part.partition("-")
        out.extend(range(int(first), int(last or first) + 1))
    return out


def harness(server: str, file: Path, edits: int, seed: int) -> dict[str, Any]:
    """One harness run of ``server`` (a command line); its JSON, plus the GC share on stderr."""
    cmd = [sys.executable, str(HARNESS_GC), "--", "--file", str(file), "--edits", str(edits)]
    cmd += ["--seed", str(seed), "--edit-kinds", KINDS, "--", *shlex.split(server)]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    try:
        result: dict[str, Any] = json.loads(done.stdout)
    except json.JSONDecodeError:
        sys.exit(f"the harness printed no JSON for {server!r}:\n{done.stderr[-2000:]}")
    if result.get("error"):
        sys.exit(f"the harness failed for {server!r}: {result['error']}")
    result["harness_gc"] = [line for line in done.stderr.splitlines() if "without" in line]
    return result


def verdict(ok: bool) -> str:
    return "holds" if ok else "does not hold"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--small", type=Path, required=True, help="the 1,500-line file")
    ap.add_argument("--big", type=Path, required=True, help="the 20,000-line file")
    ap.add_argument("--seeds", default="0-6")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--edits-small", type=int, default=300)
    ap.add_argument("--edits-big", type=int, default=500)
    ap.add_argument("--starts", type=int, default=7)
    ap.add_argument("--server", default=f"{ROOT / '.venv/bin/ddp-lsp'} serve")
    ap.add_argument("--ruff", default=f"{ROOT / '.venv/bin/ruff'} server")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    servers = {"ddp-lsp": args.server, "ruff": args.ruff}
    runs: list[dict[str, Any]] = []
    rows: list[tuple[str, str, str, str]] = []

    def both(file: Path, edits: int, seed: int, round_: int) -> dict[str, dict[str, Any]]:
        order = list(servers) if round_ % 2 == 0 else list(reversed(servers))
        got = {}
        for name in order:
            got[name] = harness(servers[name], file, edits, seed)
            runs.append({"server": name, "file": str(file), "seed": seed, **got[name]})
            print(
                f"  {name} {file.name} seed {seed}: p95 {got[name]['edit_ms']['p95']} ms",
                file=sys.stderr,
            )
        return got

    all_small = True
    for seed in seeds_of(args.seeds):
        p95: dict[str, list[float]] = {name: [] for name in servers}
        for round_ in range(args.rounds):
            for name, result in both(args.small, args.edits_small, seed, round_ + seed).items():
                p95[name].append(result["edit_ms"]["p95"])
        ours, theirs = statistics.median(p95["ddp-lsp"]), statistics.median(p95["ruff"])
        ok = ours <= 30 and ours <= theirs
        all_small &= ok
        rows.append(
            (
                f"1,500 lines, seed {seed}: edit p95 (median of {args.rounds})",
                f"{ours:.2f} ({', '.join(map(str, p95['ddp-lsp']))})",
                f"{theirs:.2f} ({', '.join(map(str, p95['ruff']))})",
                verdict(ok),
            )
        )

    big = [both(args.big, args.edits_big, 2, round_) for round_ in range(args.rounds)]
    for i, got in enumerate(big):
        ours, theirs = got["ddp-lsp"], got["ruff"]
        e, r = ours["edit_ms"], theirs["edit_ms"]
        ok = e["p95"] <= 50 and e["p95"] <= r["p95"] and e["max"] <= 250
        rows.append(
            (
                f"20,000 lines, run {i + 1}: edit p50 / p95 / max ms",
                f"{e['p50']} / {e['p95']} / {e['max']}",
                f"{r['p50']} / {r['p95']} / {r['max']}",
                verdict(ok),
            )
        )
        rows.append(
            (
                f"20,000 lines, run {i + 1}: without the harness's GC",
                "; ".join(ours["harness_gc"]),
                "; ".join(theirs["harness_gc"]),
                "",
            )
        )
        first, rss = ours["first_diag_ms"], ours["peak_rss_mb"]
        rows.append(
            (
                f"20,000 lines, run {i + 1}: first diagnostics ms, peak RSS MB",
                f"{first} / {rss}",
                f"{theirs['first_diag_ms']} / {theirs['peak_rss_mb']}",
                verdict(first <= 1500 and rss <= 250),
            )
        )

    starts: dict[str, list[float]] = {"ddp-lsp": [], "bare pygls": []}
    bare = f"{ROOT / '.venv/bin/python'} {BARE}"
    for i in range(args.starts):
        pair = [("ddp-lsp", args.server), ("bare pygls", bare)]
        for name, cmd in pair if i % 2 == 0 else reversed(pair):
            result = harness(cmd, args.small, 2, 0)
            starts[name].append(result["cold_start_ms"])
            runs.append({"server": name, "cold_start": True, **result})
    ours, theirs = statistics.median(starts["ddp-lsp"]), statistics.median(starts["bare pygls"])
    rows.append(
        (
            f"cold start ms (median of {args.starts}), vs a bare pygls server",
            f"{ours:.0f}",
            f"{theirs:.0f} (bare pygls)",
            verdict(ours - theirs <= 100),
        )
    )

    print("| line | ddp-lsp | ruff's server | |")
    print("| --- | --- | --- | --- |")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    print(f"\n1,500 lines, every seed: {verdict(all_small)}")
    if args.json:
        args.json.write_text(json.dumps(runs, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
