"""Benchmark the analysis core: first analysis, the edits people make, memory.

Run: .venv/bin/python bench/bench_core.py [--quick] [--edits N] [--file PATH ...]

Times ``Document.apply_edit`` + ``analyze`` for random edits of three kinds over the whole
file (``bench/edits.py``), freezing the heap after each analysis as the server does: ``char``
(a character typed into an identifier, then deleted),
``rename`` (an identifier renamed, then back) and ``type`` (a statement typed key by key on a
new line of a function body, then the line deleted). Identifiers are drawn from the whole
file, fact-bearing names included. Reports p50 / p95 / max per kind, and how many chunks ran
their rules per edit (1 is the edited chunk alone). Files: bench/gen.py's modules of 1,500 and
20,000 lines, or the ``--file`` paths given (e.g. the shared harness's ``make_big_file.py``
output). Wall-clock times, and the process's CPU time beside them (on a shared machine the CPU
time is the stable number); the load average is printed with them.
Prints a Markdown table; docs/performance.md records the results and this command.
"""

from __future__ import annotations

import argparse
import gc
import os
import resource
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.edits import KINDS, plan  # noqa: E402
from bench.gen import module  # noqa: E402
from ddp_lsp.core.document import Document  # noqa: E402
from ddp_lsp.core.engine import analyze  # noqa: E402
from ddp_lsp.core.registry import all_rules  # noqa: E402
from ddp_lsp.core.settings import Settings  # noqa: E402
from ddp_lsp.core.types import Pos  # noqa: E402


def print_table(rows: list[tuple[str, str, str]]) -> None:
    """The load average, then ``rows`` as a Markdown table (measurement, result, note)."""
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"load average (1, 5, 15 min) at the end: {load} on {os.cpu_count()} CPUs\n")
    print("| measurement | result | note |\n| --- | --- | --- |")
    for r in rows:
        print("| " + " | ".join(r) + " |")


def pct(values: list[float], p: float) -> float:
    values = sorted(values)
    k = min(len(values) - 1, max(0, round(p / 100 * (len(values) - 1))))
    return values[k]


def timed(fn, repeat: int = 5) -> float:
    best = float("inf")
    for _ in range(repeat):
        gc.collect()
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def edit_rows(name: str, text: str, edits: int, seed: int) -> list[tuple[str, str, str]]:
    settings = Settings()
    doc = Document(text, settings.rank_model)
    analyze(doc, settings)
    chunks = len(doc.chunks())
    rows = []
    for kind in KINDS:
        times: list[float] = []
        cpu: list[float] = []
        reran: list[int] = []
        for _, e in plan(text, edits, seed, (kind,)):
            t = time.perf_counter()
            c = time.process_time()
            doc.apply_edit(Pos(e.line, e.col), Pos(e.end_line, e.end_col), e.text)
            analyze(doc, settings)
            gc.freeze()  # as the server does after each analysis (see docs/server.md)
            times.append(time.perf_counter() - t)
            cpu.append(time.process_time() - c)
            reran.append(doc.rules_ran)
        assert doc.text == text
        gc.unfreeze()
        rows.append(
            (
                f"`{kind}` edit + re-analysis, {name}",
                f"p50 {statistics.median(times) * 1000:.1f} / p95 {pct(times, 95) * 1000:.1f}"
                f" / max {max(times) * 1000:.0f} ms (CPU p50 {statistics.median(cpu) * 1000:.1f}"
                f" / p95 {pct(cpu, 95) * 1000:.1f} / max {max(cpu) * 1000:.0f} ms)",
                f"{len(times)} edits; chunks re-run per edit: mean {statistics.mean(reran):.2f},"
                f" max {max(reran)} of {chunks}",
            )
        )
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="1,500 lines only, fewer edits")
    ap.add_argument("--edits", type=int, default=200, help="edits per kind")
    ap.add_argument("--seed", type=int, default=2)
    ap.add_argument("--file", action="append", default=[], help="time edits of this file")
    args = ap.parse_args()
    all_rules()  # import the rule modules once, as a running server has
    settings = Settings()
    import libcst

    rows = []
    src1500 = module(1500)
    n1500 = src1500.count("\n")
    t_cst = timed(lambda: libcst.parse_module(src1500), 3)
    t_first = timed(lambda: analyze(src1500, settings), 3)
    rows.append(
        (
            f"first analysis, {n1500} lines",
            f"{t_first * 1000:.0f} ms",
            f"libcst.parse_module: {t_cst * 1000:.0f} ms (ratio {t_first / t_cst:.2f}x)",
        )
    )
    edits = 40 if args.quick else args.edits
    if args.file:
        files = [(Path(f).name, Path(f).read_text(encoding="utf-8")) for f in args.file]
    else:
        files = [
            (f"{n} lines (bench/gen.py)", module(n))
            for n in ([1500] if args.quick else [1500, 20000])
        ]
    for name, text in files:
        rows.extend(edit_rows(name, text, edits, args.seed))
    if not args.quick:
        src = module(20000)
        t20 = timed(lambda: analyze(src, settings), 1)
        rows.append(("first analysis, 20,000 lines", f"{t20 * 1000:.0f} ms", "budget <= 1,500 ms"))
        gc.collect()
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        doc = Document(src, settings.rank_model)
        analyze(doc, settings)
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        rows.append(
            (
                "peak RSS analysing a 20,000-line file",
                f"{peak / 1024:.0f} MB",
                f"(before: {before / 1024:.0f} MB; budget <= 250 MB)",
            )
        )
    print_table(rows)


if __name__ == "__main__":
    main()
