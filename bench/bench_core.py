"""Benchmark the analysis core: first analysis, edit re-analysis, memory.

Run: .venv/bin/python bench/bench_core.py [--quick]
Prints a Markdown table; docs/performance.md records the results and this command.
"""

from __future__ import annotations

import gc
import os
import resource
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.gen import module  # noqa: E402
from ddp_lsp.config import Settings  # noqa: E402
from ddp_lsp.core.document import Document  # noqa: E402
from ddp_lsp.core.engine import analyze  # noqa: E402
from ddp_lsp.core.registry import all_rules  # noqa: E402
from ddp_lsp.core.types import Pos  # noqa: E402


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


def main() -> None:
    quick = "--quick" in sys.argv
    all_rules()  # import the rule modules once, as a running server has
    settings = Settings()
    import libcst

    rows = []
    src1500 = module(1500)
    n1500 = src1500.count("\n")
    t_cst = timed(lambda: libcst.parse_module(src1500), 3)
    t_first = timed(lambda: analyze(src1500, settings), 3)
    rows.append(("first analysis, %d lines" % n1500, f"{t_first * 1000:.0f} ms",
                 f"libcst.parse_module: {t_cst * 1000:.0f} ms (ratio {t_first / t_cst:.2f}x, budget <= 2x)"))

    for lines in ([1500, 20000] if not quick else [1500]):
        src = module(lines)
        doc = Document(src, settings.rank_model)
        analyze(doc, settings)
        # Edit inside a function in the middle of the file: type a character, then delete it.
        target = src.count("\n") // 2
        line_no = next(i for i in range(target, target + 200) if "running += loss.item()" in doc.lines[i])
        col = doc.lines[line_no].index("running") + len("running")
        times = []
        for k in range(200 if not quick else 50):
            t = time.perf_counter()
            if k % 2 == 0:
                doc.apply_edit(Pos(line_no, col), Pos(line_no, col), "x")
            else:
                doc.apply_edit(Pos(line_no, col), Pos(line_no, col + 1), "")
            analyze(doc, settings)
            times.append(time.perf_counter() - t)
        rows.append((f"one-character edit + re-analysis, {src.count(chr(10))} lines",
                     f"p50 {statistics.median(times) * 1000:.1f} ms / p95 {pct(times, 95) * 1000:.1f} ms",
                     "budget p50 <= 15 ms, p95 <= 40 ms (20,000 lines)"))
    if not quick:
        src = module(20000)
        gc.collect()
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        doc = Document(src, settings.rank_model)
        analyze(doc, settings)
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        rows.append(("peak RSS analysing a 20,000-line file", f"{peak / 1024:.0f} MB",
                     f"(before: {before / 1024:.0f} MB; budget <= 250 MB)"))
    print("| measurement | result | note |\n| --- | --- | --- |")
    for r in rows:
        print("| " + " | ".join(r) + " |")


if __name__ == "__main__":
    main()
