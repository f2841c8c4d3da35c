"""The server's keystroke path in process: where each edit's time goes, and what grows.

Run: .venv/bin/python bench/bench_keystroke.py FILE [--edits 500] [--seed 2] [--every 100]

Drives :class:`~ddp_lsp.lsp.state.ServerState` on an asyncio loop exactly as the server's
stdio loop does (``didChange`` -> the flush callback: analyse, render, publish, settle the
heap), with the edits of ``bench/edits.py`` (``char``, ``rename``, ``type``, the shared
harness's kinds and seeds). The publication is serialised as the server writes it
(``PublicationEncoder``: each diagnostic's JSON encoded once while it stays). Per edit, in thread CPU time (the stable figure on a shared machine):
applying the change, the flush (analysis + diagnostics + publication + heap settle), the JSON
serialisation within it, and the cyclic collections within both; and "to publish", from the
change until the publication is serialised (what the client waits for: the heap settle that
ends the flush comes after it). Every ``--every`` edits:
RSS, the frozen heap's size, and the sizes of the per-document caches, so growth across a
long run shows. Prints p50 / p95 / max and the slowest edits with their split.

No wall-clock time here: the stdio harness (``../shared/bench/lsp_latency.py``) and
``bench/bench_lsp.py`` time the whole path; this says which part of it an edit spent.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import sys
import time
from pathlib import Path
from types import SimpleNamespace as NS
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.edits import KINDS, plan  # noqa: E402
from ddp_lsp.core.document import Document  # noqa: E402
from ddp_lsp.lsp.diagnostics import PublicationEncoder  # noqa: E402
from ddp_lsp.lsp.state import ServerState  # noqa: E402


def rss_mb() -> float:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


def pct(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, max(0, round(p / 100 * (len(values) - 1))))]


async def run(path: Path, edits: int, seed: int, every: int, kinds: tuple[str, ...]) -> None:
    text = path.read_text()
    serialise: list[float] = []
    published: list[float] = []  # thread CPU time when each publication was serialised

    encoder = PublicationEncoder()  # the server's: each diagnostic encoded once while it stays

    def publish(uri: str, version: int | None, diagnostics: list[dict[str, Any]]) -> None:
        t = time.thread_time()
        encoder.encode(uri, version, diagnostics).encode("utf-8")
        published.append(time.thread_time())
        serialise.append(published[-1] - t)

    state = ServerState(publish, lambda message, is_error: None)
    uri = path.resolve().as_uri()
    t = time.thread_time()
    unit = state.open(uri, text, 1, "python")
    await asyncio.sleep(0)  # the flush callback
    doc = unit.doc
    assert isinstance(doc, Document), "over the size limit: not analysed"
    print(
        f"{path.name}: {len(text.splitlines()):,} lines, first analysis "
        f"{(time.thread_time() - t) * 1e3:.0f} ms CPU, {len(unit.findings)} findings"
    )
    collected: list[tuple[int, float]] = []
    started: list[float] = []

    def on_gc(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            started.append(time.thread_time())
        elif started:
            collected.append((info["generation"], time.thread_time() - started.pop()))

    gc.callbacks.append(on_gc)
    rows: list[dict[str, Any]] = []
    version = 1
    try:
        for kind, e in plan(text, edits, seed, kinds):
            version += 1
            change = NS(
                range=NS(
                    start=NS(line=e.line, character=e.col),
                    end=NS(line=e.end_line, character=e.end_col),
                ),
                text=e.text,
            )
            collected.clear()
            t0 = time.thread_time()
            state.change(uri, version, [change])
            t1 = time.thread_time()
            await asyncio.sleep(0)  # analyse, render, publish, settle the heap
            t2 = time.thread_time()
            assert unit.analysed_version == version
            rows.append(
                {
                    "edit": version - 1,
                    "kind": kind,
                    "change": (t1 - t0) * 1e3,
                    "flush": (t2 - t1) * 1e3,
                    # What the client waits for: the heap settle comes after the publication.
                    "to publish": (published[-1] - t0) * 1e3,
                    "json": serialise[-1] * 1e3,
                    "gc": sum(d for _, d in collected) * 1e3,
                    "chunks rerun": doc.rules_ran,
                }
            )
            if every and (version - 1) % every == 0:
                results = sum(len(pc.cache.results) for _, pc in doc.chunks())
                heap = getattr(state, "heap", None)  # (older servers: before heap.py)
                settled = (
                    f", heap settles {heap.settles}, full collections {heap.full_collections}"
                    if heap is not None
                    else ""
                )
                print(
                    f"  after {version - 1} edits: RSS {rss_mb():.0f} MB, frozen objects "
                    f"{gc.get_freeze_count():,}, diagnostics cached {len(unit.rendered)}, chunk "
                    f"results {results}{settled}"
                )
    finally:
        gc.callbacks.remove(on_gc)
    total = [r["change"] + r["flush"] for r in rows]
    print(
        f"CPU per edit ({len(rows)} edits): p50 {pct(total, 50):.1f} / p95 {pct(total, 95):.1f}"
        f" / max {max(total):.1f} ms"
    )
    for key in ("to publish", "change", "flush", "json", "gc"):
        vals = [r[key] for r in rows]
        print(
            f"  {key:10}: p50 {pct(vals, 50):.2f} / p95 {pct(vals, 95):.2f} / max {max(vals):.2f} ms"
        )
    print("slowest edits:")
    for r in sorted(rows, key=lambda r: -(r["change"] + r["flush"]))[:8]:
        print(
            "  "
            + ", ".join(
                f"{k} {v:.1f}" if isinstance(v, float) else f"{k} {v}" for k, v in r.items()
            )
        )
    # What the frozen heap holds that is garbage (cycles frozen before a collection saw them).
    gc.unfreeze()
    print(f"garbage left in the heap after the run: {gc.collect():,} objects")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("file", type=Path)
    ap.add_argument("--edits", type=int, default=500)
    ap.add_argument("--seed", type=int, default=2)
    ap.add_argument("--every", type=int, default=100, help="report growth every N edits")
    ap.add_argument("--kinds", default=",".join(KINDS))
    args = ap.parse_args()
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"load average {load} on {os.cpu_count()} CPUs")
    asyncio.run(run(args.file, args.edits, args.seed, args.every, tuple(args.kinds.split(","))))


if __name__ == "__main__":
    main()
