"""Rank view latency: inlay hints for the visible range of a 20,000-line file after an edit.

For each edit of ``bench/edits.py`` (``char``, ``rename``, ``type``: typing into a function
body, renaming, a statement typed key by key) the edit is applied to the server's document
and the hints of a 60-line window around it are asked for, exactly what
``textDocument/inlayHint`` runs (``rankview.hints_in_range``, UTF-16 positions). Two timings:

- *before re-analysis*: the request arrives right after ``didChange``, before the scheduled
  analysis ran (the handler uses the module facts of the last analysis, as the server does
  while ``unit.dirty``);
- *after re-analysis*: the analysis of the new text (``engine.analyze``) ran first, as when
  the editor asks once diagnostics were published.

Chunks the request computed (not from the per-chunk cache) are counted.

    .venv/bin/python bench/rankview_hints.py            # 20,000 lines, 100 edits per kind
    .venv/bin/python bench/rankview_hints.py --quick    # 1,500 lines, 30 edits per kind
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.edits import KINDS, plan  # noqa: E402
from bench.gen import module  # noqa: E402
from ddp_lsp.core.document import Document  # noqa: E402
from ddp_lsp.core.engine import analyze  # noqa: E402
from ddp_lsp.core.registry import all_rules  # noqa: E402
from ddp_lsp.core.settings import Settings  # noqa: E402
from ddp_lsp.core.types import Pos  # noqa: E402
from ddp_lsp.lsp import rankview as R  # noqa: E402
from ddp_lsp.lsp.convert import Codec  # noqa: E402

WINDOW = 60  # lines on screen


def pct(values: list[float], p: float) -> float:
    values = sorted(values)
    k = min(len(values) - 1, max(0, round(p / 100 * (len(values) - 1))))
    return values[k]


def run(
    text: str, edits: int, seed: int, analyse_first: bool
) -> tuple[list[float], list[float], list[int], int]:
    settings = Settings()
    codec = Codec("utf-16")
    doc = Document(text, settings.rank_model)
    analyze(doc, settings)
    an = R.analysis_for(doc, settings, None)
    for _, chunk in doc.chunks():  # the editor has shown the whole file once
        an.view(chunk)
    times: list[float] = []
    cpu: list[float] = []
    computed: list[int] = []
    hints = 0
    for _, e in plan(text, edits, seed, KINDS):
        doc.apply_edit(Pos(e.line, e.col), Pos(e.end_line, e.end_col), e.text)
        if analyse_first:
            analyze(doc, settings)
        gc.freeze()  # as the server does after each analysis (docs/server.md)
        first = max(e.line - WINDOW // 2, 0)
        t = time.perf_counter()
        c = time.thread_time()
        an = R.analysis_for(doc, settings, None, pending=not analyse_first)
        got = R.hints_in_range(an, codec, first, first + WINDOW)
        cpu.append(time.thread_time() - c)
        times.append(time.perf_counter() - t)
        computed.append(an.computed)
        hints += len(got)
    assert doc.text == text
    gc.unfreeze()
    return times, cpu, computed, hints


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="1,500 lines, 30 edits per kind")
    ap.add_argument("--edits", type=int, default=300, help="edits in all (kinds in turn)")
    ap.add_argument("--seed", type=int, default=2)
    args = ap.parse_args()
    all_rules()
    lines = 1500 if args.quick else 20000
    edits = 90 if args.quick else args.edits
    text = module(lines)
    n = text.count("\n")
    print(
        f"| measurement ({n} lines, bench/gen.py, {WINDOW}-line window) | wall p50 / p95 / max "
        "| CPU p50 / p95 / max | chunks computed per request |"
    )
    print("| --- | --- | --- | --- |")
    for label, first in (("before re-analysis", False), ("after re-analysis", True)):
        times, cpu, computed, hints = run(text, edits, args.seed, first)
        ms = [t * 1000 for t in times]
        cms = [t * 1000 for t in cpu]
        print(
            f"| inlay hints after an edit, {label} ({len(ms)} edits, {hints} hints) "
            f"| {statistics.median(ms):.2f} / {pct(ms, 95):.2f} / {max(ms):.1f} ms "
            f"| {statistics.median(cms):.2f} / {pct(cms, 95):.2f} / {max(cms):.1f} ms "
            f"| mean {statistics.mean(computed):.2f}, max {max(computed)} |"
        )


if __name__ == "__main__":
    main()
