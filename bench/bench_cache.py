"""Benchmark the index cache's disk format: JSON entries (now) against pickle (before issue 12).

Run: .venv/bin/python bench/bench_cache.py [--files 300] [--lines 300] [--repeat 3] [--check]
Generates the project of bench/bench_index.py, summarises every file once, then times, per
format, writing every summary as one entry file and reading them all back (the warm start's
share of a ``ddp-lsp check``), plus a whole warm ``ProjectIndex.build`` from the JSON cache.
``--check`` also times a warm ``ddp-lsp check ONE_FILE`` process (CPU seconds of the child;
run it with ``PYTHONPATH`` set to another checkout's root to time that version's format).
Times are CPU seconds (best of ``--repeat``). Prints a Markdown table; docs/performance.md ("Index cache format") records the results.
"""

from __future__ import annotations

import argparse
import gc
import os
import pickle
import resource
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.bench_index import make_project  # noqa: E402
from ddp_lsp.project import ProjectIndex  # noqa: E402
from ddp_lsp.project.index import CACHE_VERSION, SummaryCache  # noqa: E402


def best(fn, repeat: int) -> float:  # type: ignore[no-untyped-def]
    """The fastest of ``repeat`` runs, in CPU seconds of this process (the machine's other jobs
    stretch wall time; file writes add some system time, counted too)."""
    times = []
    for _ in range(repeat):
        gc.collect()
        t0 = time.process_time()
        fn()
        times.append(time.process_time() - t0)
    return min(times)


def warm_check(root: Path, cache_home: Path, repeat: int) -> float:
    """CPU seconds of a ``ddp-lsp check`` of one file whose project is in a warm cache."""
    env = {**os.environ, "XDG_CACHE_HOME": str(cache_home)}
    argv = [sys.executable, "-m", "ddp_lsp", "check", "-q"]
    run = partial(subprocess.run, env=env, cwd=root.parent, capture_output=True, check=False)
    run([*argv, str(root)])  # fill the cache
    times = []
    for _ in range(repeat):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        run([*argv, str(root / "pkg0" / "m1.py")])
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        times.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, default=300)
    ap.add_argument("--lines", type=int, default=300)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--check", action="store_true", help="also a warm `ddp-lsp check ONE_FILE`")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "proj"
        root.mkdir()
        make_project(root, args.files, args.lines)
        index = ProjectIndex(root, cache_dir=False).build()
        summaries = {s.digest: s for s in index.summaries.values()}
        n = len(summaries)

        jdir = Path(tmp) / "json"
        jcache = SummaryCache(jdir)

        def json_store() -> None:
            for key, s in summaries.items():
                jcache.put(key, s)

        def json_load() -> None:
            fresh = SummaryCache(jdir)
            for key in summaries:
                assert fresh.get(key) is not None

        pdir = Path(tmp) / "pickle"

        def pickle_store() -> None:
            # What SummaryCache.put did before: one pickle per entry, written atomically.
            for key, s in summaries.items():
                f = pdir / key[:2] / f"{key}.pickle"
                f.parent.mkdir(parents=True, exist_ok=True)
                fd, t = tempfile.mkstemp(dir=f.parent, prefix=".tmp-")
                with os.fdopen(fd, "wb") as fh:
                    pickle.dump((CACHE_VERSION, s), fh, protocol=pickle.HIGHEST_PROTOCOL)
                os.replace(t, f)

        def pickle_load() -> None:
            share = SummaryCache(None).share  # the sharing SummaryCache.get did after loading
            for key in summaries:
                obj = pickle.loads((pdir / key[:2] / f"{key}.pickle").read_bytes())
                share(obj[1])

        rows = []
        for name, store, load, d, pattern in (
            ("pickle (before)", pickle_store, pickle_load, pdir, "*.pickle"),
            ("JSON, checked (now)", json_store, json_load, jdir, "*.json"),
        ):
            t_store = best(store, args.repeat)
            t_load = best(load, args.repeat)
            size = sum(p.stat().st_size for p in d.rglob(pattern))
            rows.append(
                (
                    name,
                    f"{t_store * 1000:.0f} ms",
                    f"{t_load * 1000:.0f} ms",
                    f"{t_load / n * 1e6:.0f} us",
                    f"{size / 1024:.0f} KiB",
                )
            )

        def warm_build() -> None:
            warm = ProjectIndex(root, cache_dir=jdir).build()
            assert warm.cache.misses == 0

        t_warm = best(warm_build, args.repeat)
        t_check = warm_check(root, Path(tmp) / "xdg", args.repeat) if args.check else None

    print(f"{n} summaries of {args.files} generated files ({args.lines} lines each)\n")
    print("| format | store all | load all | load per entry | on disk |")
    print("|---|---|---|---|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    print(
        f"\nwarm ProjectIndex.build from the JSON cache (read, hash, load, share): {t_warm:.2f} s"
    )
    if t_check is not None:
        where = subprocess.run(
            [sys.executable, "-c", "import ddp_lsp; print(ddp_lsp.__file__)"],
            cwd=tempfile.gettempdir(),
            capture_output=True,
            text=True,
        ).stdout.strip()
        print(f"warm `ddp-lsp check pkg0/m1.py` (the code in {where}): {t_check:.2f} CPU s")


if __name__ == "__main__":
    main()
