"""Benchmark checking one file of a large project: the cost as the project grows.

Run: .venv/bin/python bench/bench_project.py [--source DIR] [--sizes 8,4,2,1] [--file REL]
     [--generated N,...] [--workdir DIR]

``--source`` (default: the ``torch`` package of the running interpreter) is copied into
``--workdir`` (default: a temporary directory, never the repository) as 4 projects of 1/8,
2/8, 4/8 and 8/8 of its ``.py`` files (picked by a hash of the path, so each is a subset of
the next, ``--file`` always included), each with a pyproject.toml. ``--generated N,...``
measures generated projects of N files instead (``bench_index.make_project``). For each size,
``ddp-lsp check FILE`` runs as a subprocess with its own index cache directory:

- cold: empty cache (every file parsed and summarised; ``--jobs 1``);
- another file changed, unseen: a comment appended to another file (its summary says what
  it said: the stored facts stand, early cutoff; one file parsed);
- a function added that nothing calls: a function appended to another file, named nowhere
  else and calling nothing of the project (the stored facts stand; that file's
  single-process functions are patched: build._isolated_change);
- a call added to a function body of another file (the first with a top-level function, at
  the top of its body: its facts change and every line below moves; the update state stored
  with the snapshot is updated with those lines moved, ``project/flowstate.py``, reading only
  the summaries the update reaches);
- the kinds changed: in the first file (in path order) that imports
  ``DistributedDataParallel`` from ``torch.nn.parallel`` at its top level, the first
  top-level function with a parameter that is distributed code already (it spells
  ``dist.``: a training function) gets that parameter rebound to the wrapped model at the
  top of its body (``model = DDP(model)``; in a generated project ``train_epoch_0`` of
  ``pkg0/m0.py``, whose ``model`` was a DDP model from ``main``'s call: now a seed of the
  module, with another provenance); then the edit is undone (the kinds change back). Both
  update the stored state, replaying the kinds' rounds for what the edit reaches
  (``flowstages._replay_kinds`` over the rounds the state keeps); the column gives the edit
  / its undo;
- unchanged: nothing changed since the last run (the snapshot answers).

CPU seconds of the child (user + system) are the figure: the 2-CPU development machine is
shared, and wall time moves with the load; the load average is printed with the table.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.bench_index import make_project  # noqa: E402

DDP_LSP = [sys.executable, "-m", "ddp_lsp"]


def subsets(source: Path, work: Path, eighths: list[int], keep: str) -> list[tuple[Path, int]]:
    files = sorted(source.rglob("*.py"))
    out = []
    for k in eighths:
        root = work / f"part{k}"
        if root.exists():
            shutil.rmtree(root)
        root.mkdir(parents=True)
        (root / "pyproject.toml").write_text("[project]\nname = 'bench'\n")
        n = 0
        for p in files:
            rel = p.relative_to(source.parent).as_posix()
            h = int(hashlib.md5(rel.encode()).hexdigest(), 16) % 8
            if h < k or rel == keep:
                dest = root / rel
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(p, dest)
                n += 1
        out.append((root, n))
    return out


def check(root: Path, rel: str, cache: Path) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of ``ddp-lsp check rel`` in ``root``."""
    env = dict(os.environ, XDG_CACHE_HOME=str(cache))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(
        [*DDP_LSP, "check", "-q", "--exit-zero", "--jobs", "1", rel],
        cwd=root,
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
    )
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, wall


def rebind_edit(root: Path, rel: str) -> tuple[Path, bytes, bytes]:
    """(file, its bytes, its bytes edited) of the kind-changing edit (see the docstring)."""
    for path in sorted(root.rglob("*.py")):
        if path.as_posix() == (root / rel).as_posix():
            continue
        original = path.read_bytes()
        if b"DistributedDataParallel" not in original:
            continue
        try:
            tree = ast.parse(original)
        except (SyntaxError, ValueError):
            continue
        ddp = next(
            (
                a.asname or a.name
                for n in tree.body
                if isinstance(n, ast.ImportFrom)
                and n.module in ("torch.nn.parallel", "torch.nn.parallel.distributed")
                for a in n.names
                if a.name == "DistributedDataParallel"
            ),
            None,
        )
        if ddp is None:
            continue
        text = original.decode("utf-8", errors="replace")
        found = next(
            (
                n
                for n in tree.body
                if isinstance(n, ast.FunctionDef)
                and n.args.args
                and n.args.args[0].arg not in ("self", "cls")
                and n.body[0].lineno > n.lineno
                and n.body[0].col_offset > 0
                and "dist." in (ast.get_source_segment(text, n) or "")
            ),
            None,
        )
        if found is None:
            continue
        lines = original.splitlines(keepends=True)
        first = found.body[0]
        p = found.args.args[0].arg
        line = " " * first.col_offset + f"{p} = {ddp}({p})\n"
        at = first.lineno - 1
        return path, original, b"".join([*lines[:at], line.encode(), *lines[at:]])
    raise AssertionError("no file imports DistributedDataParallel and has distributed code")


def measure(root: Path, files: int, rel: str, cache: Path) -> str:
    lines = sum(p.read_bytes().count(b"\n") for p in root.rglob("*.py"))
    cold = check(root, rel, cache)
    # Another file's bytes change (put back afterwards, and the state measured next stored).
    other = next(p for p in sorted(root.rglob("*.py")) if p.as_posix() != (root / rel).as_posix())
    text = other.read_bytes()
    other.write_bytes(text + b"\n# edited\n")
    unseen = check(root, rel, cache)
    other.write_bytes(text)
    check(root, rel, cache)
    other.write_bytes(text + b"\n\ndef _bench_edited():\n    return 0\n")
    seen = check(root, rel, cache)
    other.write_bytes(text)
    check(root, rel, cache)
    # A call added at the top of the first function body of the first file that has a
    # one-line `def` at the top level: its facts change (computed).
    for edited in sorted(root.rglob("*.py")):
        if edited.as_posix() == (root / rel).as_posix():
            continue
        original = edited.read_bytes()
        lines_of = original.splitlines(keepends=True)
        at = next(
            (
                i
                for i, line in enumerate(lines_of)
                if line.startswith(b"def ") and line.rstrip().endswith(b":")
            ),
            None,
        )
        if at is not None:
            break
    assert at is not None, "no file with a top-level function"
    edited.write_bytes(b"".join([*lines_of[: at + 1], b"    _bench_call()\n", *lines_of[at + 1 :]]))
    call = check(root, rel, cache)
    edited.write_bytes(original)
    check(root, rel, cache)
    # The kinds changed, and back.
    rebound, before, after = rebind_edit(root, rel)
    rebound.write_bytes(after)
    kinds = check(root, rel, cache)
    rebound.write_bytes(before)
    kinds_back = check(root, rel, cache)
    same = check(root, rel, cache)
    return (
        f"| {files:,} | {lines:,} | {cold[0]:.2f} ({cold[1]:.1f}) "
        f"| {unseen[0]:.2f} ({unseen[1]:.1f}) | {seen[0]:.2f} ({seen[1]:.1f}) "
        f"| {call[0]:.2f} ({call[1]:.1f}) "
        f"| {kinds[0]:.2f} ({kinds[1]:.1f}) / {kinds_back[0]:.2f} ({kinds_back[1]:.1f}) "
        f"| {same[0]:.2f} ({same[1]:.1f}) |"
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--source", type=Path, default=None)
    ap.add_argument("--sizes", default="1,2,4,8", help="eighths of --source's files")
    ap.add_argument("--file", default="torch/distributed/run.py")
    ap.add_argument("--generated", default="", help="generated projects of these file counts")
    ap.add_argument("--workdir", type=Path, default=None)
    a = ap.parse_args()
    tmp = None
    if a.workdir is None:
        tmp = tempfile.TemporaryDirectory()
        a.workdir = Path(tmp.name)
    try:
        print(
            "| files | lines | cold CPU s (wall) | another file changed, unseen "
            "| a function added that nothing calls | a call added to a function body "
            "| the kinds changed (a parameter rebound to DDP) / undone | unchanged |"
        )
        print("| --- | --- | --- | --- | --- | --- | --- | --- |")
        if a.generated:
            for n in (int(x) for x in a.generated.split(",")):
                root = a.workdir / f"gen{n}"
                root.mkdir(parents=True)
                make_project(root, n, 300)
                files = len(list(root.rglob("*.py")))
                print(measure(root, files, "pkg0/m1.py", a.workdir / f"cache-gen{n}"), flush=True)
        else:
            if a.source is None:
                import importlib.util

                spec = importlib.util.find_spec("torch")  # found, not imported
                assert spec is not None and spec.origin is not None, "torch is not installed"
                a.source = Path(spec.origin).parent
            eighths = [int(x) for x in a.sizes.split(",")]
            for root, n in subsets(a.source, a.workdir, eighths, a.file):
                print(measure(root, n, a.file, a.workdir / f"cache-{root.name}"), flush=True)
        print(
            f"\nload average {os.getloadavg()[0]:.1f}, {time.strftime('%H:%M UTC', time.gmtime())}"
        )
    finally:
        if tmp is not None:
            tmp.cleanup()


if __name__ == "__main__":
    main()
