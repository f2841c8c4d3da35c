"""Benchmark the project index: cold indexing speed, warm start from the disk cache, memory.

Run: .venv/bin/python bench/bench_index.py [--files 500] [--memory-files 2000] [--lines 300]
Generates a project in a temporary directory (packages of DDP-style modules that import each
other), prints a Markdown table; docs/performance.md ("Project index") records the results.

``--server DIR --edit REL`` measures the server's indexer instead (``ddp_lsp.lsp.indexer``,
in this process, with the user's index cache): it indexes the project at DIR, then lays four
kinds of edits of REL over it, each 3 times, and prints the CPU seconds (and wall seconds) of
each ``Indexer.update`` (summary, ``compute`` when needed, the facts message), and of the
update that puts the disk's text back after each: an edit the project cannot see (a comment
appended: early cutoff, nothing computed), lines moved (blank lines on top: the facts' lines
in REL moved, nothing computed), a statement added in a function body, an import added, a
function added that nothing calls (each: every stage reused, flowupdate._update) and a DDP
model passed to a new helper (the kinds change: their rounds replayed for what the change
reaches, the call graph's walks continued: flowstages._replay_kinds, reachupdate.extend_walks).
The open files get the facts ``EDIT_PAUSE_S`` (lsp/project.py) after typing stops plus the
wall time of the update, which the last column adds up.

``--session N --server DIR --edit REL`` measures the indexer's heap over a long editing
session instead: N updates (each kind of edit above in turn, each ``k``-th edit a new text,
each followed by its undo), printing the process's RSS and ``gc.get_freeze_count()`` after
indexing and every 50 updates (the messages go to a sink that keeps nothing).
"""

from __future__ import annotations

import argparse
import ast
import gc
import os
import re
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.gen import module  # noqa: E402
from ddp_lsp.project import ProjectIndex, compute  # noqa: E402

_RENAME = re.compile(
    r"\b(model|loader|optimizer|scaler|inputs|targets|outputs|loss|step|epoch|running|"
    r"accum_steps|log_every|evaluate_\d+|main)\b"
)


def make_project(root: Path, files: int, lines: int) -> int:
    """``files`` modules in packages of 50, each importing its neighbour; returns total lines."""
    (root / "pyproject.toml").write_text("[project]\nname = 'bench'\n")
    total = 0
    for i in range(files):
        pkg = root / f"pkg{i // 50}"
        pkg.mkdir(exist_ok=True)
        (pkg / "__init__.py").touch()
        other = (i + 1) % files
        # Distinct content per file (content-hash cache) and cross-module calls to resolve.
        head = (
            f"# module {i}\nfrom pkg{other // 50} import m{other} as neighbour\n"
            f"from .m{i} import train_epoch_0 as local_alias\n"
        )
        # Local names differ per file, as in a real project: the index shares equal strings
        # and facts between files, and identical generated files would flatter its memory.
        body = _RENAME.sub(rf"\g<0>_{i}", module(lines - 3))
        body += f"\n\ndef entry_{i}(model):\n    neighbour.train_epoch_0(model)\n"
        text = head + body
        (pkg / f"m{i}.py").write_text(text)
        total += text.count("\n") + 1
    return total


def cold_and_warm(files: int, lines: int) -> list[tuple[str, str, str]]:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "proj"
        root.mkdir()
        cache = Path(tmp) / "cache"
        total = make_project(root, files, lines)
        paths = list(ProjectIndex(root, cache_dir=False).files())
        texts = [p.read_text() for p in paths]

        t0 = time.perf_counter()
        for t in texts:
            ast.parse(t)
        t_ast = time.perf_counter() - t0
        rows.append(("`ast.parse` alone", f"{total / t_ast:,.0f} lines/s", "(reference)"))

        t0 = time.perf_counter()
        cold = ProjectIndex(root, cache_dir=cache).build()
        t_cold = time.perf_counter() - t0
        rows.append(
            (
                f"cold index, {len(paths)} files / {total:,} lines (disk cache written)",
                f"{total / t_cold:,.0f} lines/s ({t_cold:.2f} s)",
                ">= 20,000 lines/s",
            )
        )
        t0 = time.perf_counter()
        pf = compute(cold)
        t_flow = time.perf_counter() - t0
        rows.append(
            (f"cross-file facts (`compute`), {len(pf.modules)} modules", f"{t_flow:.2f} s", "-")
        )

        gc.collect()
        t0 = time.perf_counter()
        warm = ProjectIndex(root, cache_dir=cache).build()
        t_warm = time.perf_counter() - t0
        assert warm.cache.misses == 0, warm.cache.misses
        rows.append(
            (f"warm start from the disk cache, {len(paths)} files", f"{t_warm:.2f} s", "<= 1 s")
        )
        # What the server's indexer does after a keystroke pause: one file's new text, then the
        # project's facts again (each other file's own facts, import resolution and resolved
        # call sites are reused from the previous computation).
        previous = compute(warm)
        edited = paths[len(paths) // 2]
        times = []
        for i in range(5):
            t0 = time.perf_counter()
            warm.update(edited, texts[len(paths) // 2] + f"\n# edit {i}\n")
            previous = compute(warm, previous)
            times.append(time.perf_counter() - t0)
        times.sort()
        rows.append(
            (
                f"one file edited: summary + `compute` again, {len(pf.modules)} modules (median of 5)",
                f"{times[2]:.2f} s",
                "-",
            )
        )
    return rows


def memory(files: int, lines: int) -> list[tuple[str, str, str]]:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        total = make_project(root, files, lines)
        gc.collect()
        tracemalloc.start()
        index = ProjectIndex(root, cache_dir=False).build()
        gc.collect()
        current, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        assert len(index.summaries) >= files
    return [
        (
            f"index memory, {files} files / {total:,} lines (retained; peak while building)",
            f"{current / 2**20:.1f} MB ({peak / 2**20:.1f} MB)",
            "<= 150 MB",
        )
    ]


def server_edits(text: str, k: int) -> dict[str, str]:
    """Three edits of ``text``, the ``k``-th of each kind (each differs from the one before)."""
    lines = text.splitlines(keepends=True)
    at = next(
        i for i, line in enumerate(lines) if line.startswith("def ") and line.rstrip().endswith(":")
    )
    body = [*lines[: at + 1], f"    _bench_edit_{k}()\n", *lines[at + 1 :]]
    # A call of the module's second top-level function, added to its first one's body.
    defs = [line[4:].split("(")[0] for line in lines if line.startswith("def ")]
    callee = defs[1] if len(defs) > 1 else defs[0]
    known = [*lines[: at + 1], f"    {callee}()\n" * (k + 1), *lines[at + 1 :]]
    return {
        "unseen (a comment appended)": text + f"# edited {k}\n",
        "lines moved (blank lines added on top)": "\n" * (k + 1) + text,
        "in a function body (a call added)": "".join(body),
        "a call of a function of the module added": "".join(known),
        "an import added": f"import os as _bench_os_{k}\n" + text,
        "a function added that nothing calls": text
        + f"\n\ndef _bench_new_{k}():\n    return {k}\n",
        "a DDP model passed to a new helper": "from torch.nn.parallel import DistributedDataParallel\n"
        + "".join(body)
        + f"\n\ndef _bench_helper_{k}(model):\n    return model\n\n\n"
        f"def _bench_caller_{k}(model):\n    model = DistributedDataParallel(model)\n"
        f"    _bench_helper_{k}(model)\n",
    }


def server(root: Path, rel: str) -> list[tuple[str, str, str]]:
    import io

    from ddp_lsp.config import Settings
    from ddp_lsp.lsp.indexer import Indexer

    ix = Indexer(io.BytesIO())
    t0 = time.process_time()
    ix.open(1, root.resolve(), Settings(), True, {})
    index = ix.folders[1].index
    rows = [
        (
            f"index {len(index.summaries):,} files from the cache + `compute`",
            f"{time.process_time() - t0:.2f} CPU s",
            "-",
        )
    ]
    path = (root / rel).resolve()
    text = path.read_text()
    from ddp_lsp.lsp.project import EDIT_PAUSE_S

    def timed(new: str) -> tuple[float, float]:
        t0, w0 = time.process_time(), time.perf_counter()
        ix.update(1, [(path, new)])
        return time.process_time() - t0, time.perf_counter() - w0

    for kind in server_edits(text, 0):
        times, back = [], []
        for k in range(3):
            times.append(timed(server_edits(text, k)[kind]))
            back.append(timed(text))  # back to the disk's text (an undo)
        rows.append(
            (
                f"edit of {rel}: {kind}",
                " / ".join(f"{c:.2f} ({w:.2f})" for c, w in times)
                + " CPU (wall) s; undone: "
                + " / ".join(f"{c:.2f} ({w:.2f})" for c, w in back)
                + f"; with the {EDIT_PAUSE_S} s pause: "
                + f"{EDIT_PAUSE_S + max(w for _, w in times):.2f} s at most",
                "<= 1 s",
            )
        )
    return rows


def session(root: Path, rel: str, updates: int) -> None:
    import io

    from ddp_lsp.config import Settings
    from ddp_lsp.lsp.indexer import Indexer

    class Sink(io.RawIOBase):
        def writable(self) -> bool:
            return True

        def write(self, b: object) -> int:
            return len(b)  # type: ignore[arg-type]

    def rss() -> float:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20

    ix = Indexer(Sink())
    ix.open(1, root.resolve(), Settings(), True, {})
    path = (root / rel).resolve()
    text = path.read_text()
    kinds = list(server_edits(text, 0))
    print(f"after indexing: RSS {rss():.1f} MB, frozen {gc.get_freeze_count():,}", flush=True)
    t0 = time.process_time()
    for i in range(updates // 2):
        ix.update(1, [(path, server_edits(text, i)[kinds[i % len(kinds)]])])
        ix.update(1, [(path, text)])
        if (2 * (i + 1)) % 50 == 0:
            print(
                f"after {2 * (i + 1)} updates: RSS {rss():.1f} MB, frozen "
                f"{gc.get_freeze_count():,}, {time.process_time() - t0:.1f} CPU s",
                flush=True,
            )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, default=500)
    ap.add_argument("--memory-files", type=int, default=2000)
    ap.add_argument("--lines", type=int, default=300)
    ap.add_argument("--server", type=Path, default=None, help="a project to edit in the indexer")
    ap.add_argument("--edit", default="torch/distributed/run.py", help="the file --server edits")
    ap.add_argument("--session", type=int, default=0, help="updates of --server's heap run")
    a = ap.parse_args()
    if a.server is not None and a.session:
        session(a.server, a.edit, a.session)
        return
    if a.server is not None:
        print("| measurement | result | target |")
        print("|---|---|---|")
        for r in server(a.server, a.edit):
            print(f"| {r[0]} | {r[1]} | {r[2]} |")
        print(f"\nload average {os.getloadavg()[0]:.1f}")
        return
    rows = cold_and_warm(a.files, a.lines) + memory(a.memory_files, a.lines)
    print("| measurement | result | target |")
    print("|---|---|---|")
    for r in rows:
        print(f"| {r[0]} | {r[1]} | {r[2]} |")


if __name__ == "__main__":
    main()
