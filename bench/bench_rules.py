"""Benchmark the rules themselves: a first analysis split into its parts, the CPU each rule
takes over all chunks, and what re-running one chunk's rules costs (an edit's share).

Run: .venv/bin/python bench/bench_rules.py [--file PATH ...] [--repeat N] [--top N]
     .venv/bin/python bench/bench_rules.py --edits 300 [--seeds 0,1,...] [--file PATH] [--repeat N]

For each file (default: bench/gen.py's modules of 1,500 and 20,000 lines; the shared
harness's /tmp/ws20/big20000.py is the issue-15 figure): the process CPU time of a first
analysis (``analyze`` of the text, a fresh ``Document``), of which the rules' part (every
chunk's ``engine._run_rules``: the chunk's traversal, trigger checks and every enabled rule)
and the rest (split, parse, facts); the median of ``--repeat`` runs. Then, on a freshly
parsed document, each chunk's rules run alone (``_run_rules``, as an edit runs the edited
chunk's on its new parse): mean / p50 / p95 / max per chunk, and the ``--top`` rules by CPU over all chunks
(each rule's ``triggers`` + ``check``, measured around the calls, so a rule that builds a
shared analysis first, e.g. the uniformity analysis, carries its cost).
CPU times, not wall-clock: the machine is shared; the load average is printed with them.
docs/performance.md ("First analysis") records the results and this command.

``--edits N --seeds 0,1,...``: the keystroke's share instead. Each seed's ``N`` edits of
``bench/edits.py`` (the shared harness's ``char``, ``rename``, ``type`` plans) are applied to
a ``Document`` and analysed as the server does, and every chunk whose rules an edit re-ran is
kept (its text and the facts it ran with). Then, ``--repeat`` times, each such chunk is parsed
afresh (untimed: a keystroke's rules meet a new tree, whose per-tree tables are not built yet)
and its rules run, alone and then with each rule timed: per chunk the least of the runs; CPU
p50 / p95 / max over the chunks, and per rule the sum over all chunks and over the slowest 5 %
(the keystrokes of the harness's p95).
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.bench_core import pct, print_table  # noqa: E402
from bench.edits import KINDS, plan  # noqa: E402
from bench.gen import module  # noqa: E402
from ddp_lsp.core import engine  # noqa: E402
from ddp_lsp.core.document import Document, parse_chunk  # noqa: E402
from ddp_lsp.core.registry import all_rules  # noqa: E402
from ddp_lsp.core.settings import Settings  # noqa: E402
from ddp_lsp.core.types import Pos  # noqa: E402


def first_analysis(text: str, settings: Settings) -> tuple[float, float]:
    """(CPU of a first analysis, CPU of its rules) in seconds."""
    rules_cpu = 0.0
    original = engine._run_rules

    def timed(*args: Any, **kwargs: Any) -> Any:
        nonlocal rules_cpu
        c = time.process_time()
        try:
            return original(*args, **kwargs)
        finally:
            rules_cpu += time.process_time() - c

    engine._run_rules = timed  # type: ignore[assignment]
    try:
        gc.collect()
        c = time.process_time()
        engine.analyze(text, settings)
        total = time.process_time() - c
    finally:
        engine._run_rules = original  # type: ignore[assignment]
    return total, rules_cpu


def _parsed(text: str, settings: Settings) -> tuple[Any, ...]:
    """A fresh document's chunks, facts and rules, no rule run yet: each chunk's trees are
    as an edit leaves the edited chunk (parsed, facts extracted, walked by no rule)."""
    doc = Document(text, settings.rank_model)
    facts = doc.module_facts(settings.assume_distributed, None)
    rules = engine._enabled_rules(settings)
    if not facts.distributed:
        rules = engine._any_module_rules(rules)
    ranks = settings.rank_model.with_extra(facts.rank_vars, facts.rank_predicates)
    chunks = [c for _, c in doc.chunks() if c.tree is not None]
    return doc, chunks, facts, rules, ranks


def per_chunk(text: str, settings: Settings) -> tuple[list[float], Counter[str]]:
    """Each chunk's rules run alone, as an edit runs the edited chunk's: CPU per chunk, and
    (on another fresh document) CPU per rule over all chunks."""
    _doc, chunks, facts, rules, ranks = _parsed(text, settings)
    times: list[float] = []
    gc.collect()
    for chunk in chunks:
        c = time.process_time()
        engine._run_rules(chunk, facts, settings, ranks, None, rules)
        times.append(time.process_time() - c)
    _doc, chunks, facts, rules, ranks = _parsed(text, settings)
    # The same again with each rule's two entry points timed (instance attributes shadow the
    # class's methods; removed afterwards).
    by_rule: Counter[str] = Counter()

    for rule in rules:
        rule.check = _timed(rule.check, by_rule, rule.meta.id)  # type: ignore[method-assign]
        rule.triggers = _timed(rule.triggers, by_rule, rule.meta.id)  # type: ignore[method-assign]
    try:
        for chunk in chunks:
            engine._run_rules(chunk, facts, settings, ranks, None, rules)
    finally:
        for rule in rules:
            del rule.check
            del rule.triggers
    del _doc
    return times, by_rule


def _timed(fn: Callable[..., Any], totals: dict[str, float], key: str) -> Callable[..., Any]:
    """``fn`` (a rule's ``check`` or ``triggers``) adding its CPU time to ``totals[key]``; a
    generator it returns is consumed inside the timing."""

    def timed(ctx: Any) -> Any:
        c = time.process_time()
        try:
            out = fn(ctx)
            return list(out) if hasattr(out, "__next__") else out
        finally:
            totals[key] = totals.get(key, 0.0) + time.process_time() - c

    return timed


def edited_chunks(text: str, settings: Settings, seeds: list[int], edits: int) -> list[Any]:
    """(text, member_of, facts, ranks, env, rules) of every chunk an edit re-ran the rules of."""
    out: list[Any] = []
    original = engine._run_rules

    def record(chunk: Any, facts: Any, s: Settings, ranks: Any, env: Any, rules: Any) -> Any:
        out.append((chunk.text, chunk.member_of, facts, ranks, env, rules))
        return original(chunk, facts, s, ranks, env, rules)

    for seed in seeds:
        doc = Document(text, settings.rank_model)
        engine.analyze(doc, settings)
        engine._run_rules = record  # type: ignore[assignment]
        try:
            for _kind, e in plan(text, edits, seed, KINDS):
                doc.apply_edit(Pos(e.line, e.col), Pos(e.end_line, e.end_col), e.text)
                engine.analyze(doc, settings)
        finally:
            engine._run_rules = original  # type: ignore[assignment]
    return out


def keystrokes(
    items: list[Any], settings: Settings, repeat: int
) -> tuple[list[float], list[dict[str, float]]]:
    """Per chunk the least CPU of its rules over ``repeat`` runs on a fresh parse, and per
    chunk and rule the least CPU of that rule (``triggers`` + ``check``)."""
    best = [float("inf")] * len(items)
    per_rule: list[dict[str, float]] = [{} for _ in items]
    rules_of = {id(r): r for it in items for r in it[5]}.values()
    current: dict[str, float] = {}

    gc.collect()
    for run in range(2 * repeat):
        timed_rules = run % 2 == 1
        if timed_rules:
            for rule in rules_of:
                rule.check = _timed(rule.check, current, rule.meta.id)  # type: ignore[method-assign]
                rule.triggers = _timed(rule.triggers, current, rule.meta.id)  # type: ignore[method-assign]
        try:
            for k, (text, member_of, facts, ranks, env, rules) in enumerate(items):
                chunk = parse_chunk(text, member_of, settings.rank_model)
                current.clear()
                c = time.process_time()
                engine._run_rules(chunk, facts, settings, ranks, env, rules)
                spent = time.process_time() - c
                if timed_rules:
                    mine = per_rule[k]
                    for rule_id, cpu in current.items():
                        mine[rule_id] = min(mine.get(rule_id, cpu), cpu)
                else:
                    best[k] = min(best[k], spent)
        finally:
            if timed_rules:
                for rule in rules_of:
                    del rule.check
                    del rule.triggers
    return best, per_rule


def keystroke_rows(
    path: Path, settings: Settings, seeds: list[int], edits: int, repeat: int, top: int
) -> list[tuple[str, str, str]]:
    items = edited_chunks(path.read_text(encoding="utf-8"), settings, seeds, edits)
    best, per_rule = keystrokes(items, settings, repeat)
    slowest = sorted(range(len(items)), key=lambda k: -best[k])[: max(1, len(items) // 20)]
    rows = [
        (
            f"an edit's chunk rules, {path.name}, seeds {','.join(map(str, seeds))}",
            f"CPU p50 {pct(best, 50) * 1000:.2f} / p95 {pct(best, 95) * 1000:.2f} / max "
            f"{max(best) * 1000:.2f} ms; sum {sum(best) * 1000:.0f} ms",
            f"{len(items)} chunk re-runs over {len(seeds)} x {edits} edits, least of {repeat}",
        )
    ]
    for label, which in (("all", range(len(items))), ("slowest 5 %", slowest)):
        by_rule: Counter[str] = Counter()
        for k in which:
            by_rule.update(per_rule[k])
        rows.append(
            (
                f"  per rule, {label} ({len(which)} chunks)",
                ", ".join(f"{rid} {cpu * 1000:.1f}" for rid, cpu in by_rule.most_common(top)),
                f"sum of the rules {sum(by_rule.values()) * 1000:.0f} ms",
            )
        )
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--file", action="append", default=[], help="a Python file to analyse")
    ap.add_argument("--repeat", type=int, default=5, help="first analyses per file (median)")
    ap.add_argument("--top", type=int, default=8, help="rules listed by CPU")
    ap.add_argument("--edits", type=int, default=0, help="per seed: the keystroke mode")
    ap.add_argument("--seeds", default="0,1,2,3,4,5,6", help="the edit plans' seeds")
    args = ap.parse_args()
    all_rules()  # import the rule modules once, as a running server has
    settings = Settings()
    print(f"load average {', '.join(f'{x:.1f}' for x in os.getloadavg())}")
    if args.edits:
        seeds = [int(s) for s in args.seeds.split(",")]
        edit_rows: list[tuple[str, str, str]] = []
        for f in args.file or ["/tmp/ws15/big1500.py"]:
            edit_rows.extend(
                keystroke_rows(Path(f), settings, seeds, args.edits, args.repeat, args.top)
            )
        print_table(edit_rows)
        return
    if args.file:
        files = [(Path(f).name, Path(f).read_text(encoding="utf-8")) for f in args.file]
    else:
        files = [(f"{n} lines (bench/gen.py)", module(n)) for n in (1500, 20000)]
    engine.analyze(files[0][1][:4000], settings)  # warm the lazily built tables
    rows: list[tuple[str, str, str]] = []
    for name, text in files:
        runs = sorted(
            (first_analysis(text, settings) for _ in range(args.repeat)), key=lambda r: r[0]
        )
        total, rules_cpu = runs[len(runs) // 2]
        rows.append(
            (
                f"first analysis, {name}",
                f"CPU {total * 1000:.0f} ms (rules {rules_cpu * 1000:.0f} ms, the rest "
                f"{(total - rules_cpu) * 1000:.0f} ms)",
                f"median of {len(runs)}: " + ", ".join(f"{r[0] * 1000:.0f}" for r in runs),
            )
        )
        times, by_rule = per_chunk(text, settings)
        top = ", ".join(f"{rid} {cpu * 1000:.0f}" for rid, cpu in by_rule.most_common(args.top))
        rows.append(
            (
                f"one chunk's rules re-run, {name}",
                f"CPU mean {statistics.mean(times) * 1000:.2f} / p50 "
                f"{statistics.median(times) * 1000:.2f} / p95 {pct(times, 95) * 1000:.2f} / max "
                f"{max(times) * 1000:.1f} ms",
                f"{len(times)} chunks; rules over all chunks (ms): {top}",
            )
        )
    print_table(rows)


if __name__ == "__main__":
    main()
