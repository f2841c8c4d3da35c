"""Benchmark the language server over stdio, against a bare pygls server and ``ruff server``.

Run: .venv/bin/python bench/bench_lsp.py [--quick] [--edits N] [--no-ruff] [--workspace N]
     .venv/bin/python bench/bench_lsp.py --index-only [--workspace 500]

Measures, per server, in the same run on the same generated DDP-style files (bench/gen.py):

- cold start: spawn to the ``initialize`` result (median of several starts; the bare pygls
  server that registers nothing is the floor ddp-lsp is held to);
- first diagnostics: ``didOpen`` of a 1,500-line file to its ``publishDiagnostics``;
- edit latency: each ``didChange`` to the diagnostics *for that version* (p50/p95/max), for
  the edits people make (``bench/edits.py``, the same seed for every server): ``char`` (a
  character typed into an identifier anywhere in the file's functions, then deleted),
  ``rename`` (an identifier renamed, then back), ``type`` (a statement typed key by key on a
  new line of a function body, then the line deleted), at 1,500 and 20,000 lines;
- code action latency (p50/p95) on a line with a finding;
- RSS of the server process with the 20,000-line file open.

With ``--workspace N`` the edited file sits in a workspace folder of N generated modules
(``bench/bench_index.py``'s project) that the server starts indexing at ``initialized``, with an
empty index cache: the edits are timed while the workspace is being indexed (the table says how
many of them fell before the index's ``$/progress`` end). Every run also times the server's
indexing of such a workspace, initialized to the end of its ``$/progress``, with an empty
cache (cold) and again with the cache the first run wrote (warm); ``--index-only`` runs only
that.

Prints a Markdown table; docs/performance.md records a run and this command.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.edits import KINDS, plan  # noqa: E402
from bench.gen import module  # noqa: E402

BARE_PYGLS = "from pygls.lsp.server import LanguageServer\nLanguageServer('bare', '0').start_io()\n"
PUBLISH = "textDocument/publishDiagnostics"
CAPABILITIES: dict[str, Any] = {
    # No textDocument.diagnostic: both servers push, so both are timed the same way.
    "general": {"positionEncodings": ["utf-16"]},
    "textDocument": {
        "synchronization": {"didSave": True},
        "publishDiagnostics": {"versionSupport": True, "relatedInformation": True},
        "codeAction": {
            "codeActionLiteralSupport": {"codeActionKind": {"valueSet": ["quickfix", "source"]}},
            "isPreferredSupport": True,
        },
    },
    "workspace": {"workspaceEdit": {"documentChanges": True}, "configuration": False},
    "window": {"workDoneProgress": True},  # the index's $/progress (times its end)
}


def pct(values: list[float], p: float) -> float:
    values = sorted(values)
    k = min(len(values) - 1, max(0, round(p / 100 * (len(values) - 1))))
    return values[k]


class Client:
    """A minimal stdio JSON-RPC client; a reader thread timestamps every message on arrival."""

    def __init__(self, cmd: list[str], cwd: Path, cache: Path | None = None) -> None:
        self.t_spawn = time.perf_counter()
        env = dict(os.environ)
        if cache is not None:
            env["XDG_CACHE_HOME"] = str(cache)  # the server's index cache: cold when empty
        self.proc = subprocess.Popen(
            cmd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            cwd=cwd,
            env=env,
        )
        self.index_end: float | None = None  # when the project index's $/progress ended
        self.lock = threading.Lock()
        self.inbox: queue.Queue[tuple[float, dict[str, Any]] | None] = queue.Queue()
        self.backlog: list[tuple[float, dict[str, Any]]] = []
        self.next_id = 0
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        out = self.proc.stdout
        assert out is not None
        while True:
            length = 0
            while True:
                line = out.readline()
                if not line:
                    self.inbox.put(None)
                    return
                if line == b"\r\n":
                    break
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":", 1)[1])
            body = out.read(length)
            t, msg = time.perf_counter(), json.loads(body)
            if msg.get("method") == "$/progress" and str(msg["params"]["token"]).startswith(
                "ddp-lsp-index-"
            ):
                if msg["params"]["value"].get("kind") == "end":
                    self.index_end = t
                continue
            if "method" in msg and "id" in msg:  # server -> client request: accept at once
                self.send({"jsonrpc": "2.0", "id": msg["id"], "result": None})
                continue
            self.inbox.put((t, msg))

    def send(self, msg: dict[str, Any]) -> float:
        body = json.dumps(msg).encode()
        assert self.proc.stdin is not None
        with self.lock:  # the reader thread answers the server's requests
            t = time.perf_counter()
            self.proc.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
            self.proc.stdin.flush()
        return t

    def notify(self, method: str, params: Any) -> float:
        return self.send({"jsonrpc": "2.0", "method": method, "params": params})

    def request(self, method: str, params: Any) -> tuple[float, float, Any]:
        """(sent, answered, result)."""
        self.next_id += 1
        rid = self.next_id
        t0 = self.send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        t1, msg = self.wait(lambda m: m.get("id") == rid and "method" not in m)
        return t0, t1, msg.get("result", msg.get("error"))

    def wait(self, pred: Any, timeout: float = 120.0) -> tuple[float, dict[str, Any]]:
        for item in self.backlog:
            if pred(item[1]):
                self.backlog.remove(item)
                return item
        deadline = time.monotonic() + timeout
        while True:
            item = self.inbox.get(timeout=max(0.1, deadline - time.monotonic()))
            if item is None:
                raise RuntimeError("server exited")
            t, msg = item
            if "method" in msg and "id" in msg:  # server -> client request: accept
                self.send({"jsonrpc": "2.0", "id": msg["id"], "result": None})
                continue
            if pred(msg):
                return item
            if msg.get("method") == PUBLISH or "id" in msg:
                self.backlog.append(item)
                del self.backlog[:-200]

    def initialize(self, root: Path) -> float:
        self.t_initialized = time.perf_counter()
        _, t1, _ = self.request(
            "initialize",
            {
                "processId": os.getpid(),
                "rootUri": root.as_uri(),
                "capabilities": CAPABILITIES,
                "workspaceFolders": [{"uri": root.as_uri(), "name": "bench"}],
            },
        )
        self.t_initialized = self.notify("initialized", {})
        return t1 - self.t_spawn

    def close(self) -> None:
        try:
            self.request("shutdown", None)
            self.notify("exit", None)
            self.proc.wait(timeout=10)
        except Exception:
            self.proc.kill()
            self.proc.wait()


def published(uri: str, version: int | None = None) -> Any:
    def pred(m: dict[str, Any]) -> bool:
        if m.get("method") != PUBLISH or m["params"]["uri"] != uri:
            return False
        return version is None or m["params"].get("version") == version

    return pred


def edit_target(text: str) -> tuple[int, int]:
    """(line, column) just after ``running`` in a statement in the middle of the file."""
    lines = text.splitlines()
    mid = len(lines) // 2
    for i in range(mid, len(lines)):
        if "running += loss.item()" in lines[i]:
            return i, lines[i].index("running") + len("running")
    raise RuntimeError("no edit target in the generated module")


def measure_file(
    cmd: list[str],
    root: Path,
    name: str,
    text: str,
    edits: int,
    actions: bool,
    cache: Path | None = None,
    seed: int = 2,
) -> dict[str, Any]:
    path = root / name
    path.write_text(text)
    uri = path.as_uri()
    c = Client(cmd, root, cache)
    out: dict[str, Any] = {}
    try:
        c.initialize(root)
        t0 = c.notify(
            "textDocument/didOpen",
            {"textDocument": {"uri": uri, "languageId": "python", "version": 1, "text": text}},
        )
        t1, first = c.wait(published(uri))
        out["first"] = t1 - t0
        diags = first["params"]["diagnostics"]
        out["findings"] = len(diags)
        line, col = edit_target(text)
        times: dict[str, list[float]] = {}
        version = 1
        # The same edits (same seed) for every server: char, rename and type, over the file.
        for kind in KINDS:
            for _, e in plan(text, edits, seed, (kind,)):
                version += 1
                change = {
                    "range": {
                        "start": {"line": e.line, "character": e.col},
                        "end": {"line": e.end_line, "character": e.end_col},
                    },
                    "text": e.text,
                }
                t0 = c.notify(
                    "textDocument/didChange",
                    {"textDocument": {"uri": uri, "version": version}, "contentChanges": [change]},
                )
                t1, _ = c.wait(published(uri, version))
                times.setdefault(kind, []).append(t1 - t0)
                if c.index_end is None:
                    out["during_index"] = out.get("during_index", 0) + 1
        out["edit"] = times
        if actions:
            rng = (
                diags[0]["range"]
                if diags
                else {
                    "start": {"line": line, "character": 0},
                    "end": {"line": line, "character": 0},
                }
            )
            ctx = {"diagnostics": diags[:1]}
            at = []
            for _ in range(max(edits, 20)):
                s, e, result = c.request(
                    "textDocument/codeAction",
                    {"textDocument": {"uri": uri}, "range": rng, "context": ctx},
                )
                at.append(e - s)
            out["action"] = at
            out["actions_returned"] = len(result or [])
        try:
            import psutil

            out["rss"] = psutil.Process(c.proc.pid).memory_info().rss
        except Exception:
            out["rss"] = None
    finally:
        c.close()
    return out


def index_time(cmd: list[str], root: Path, cache: Path) -> float:
    """initialized -> the end of the project index's $/progress, in seconds."""
    c = Client(cmd, root, cache)
    try:
        c.initialize(root)
        deadline = time.monotonic() + 600
        while c.index_end is None:
            if time.monotonic() > deadline or c.proc.poll() is not None:
                raise RuntimeError("the index did not finish")
            time.sleep(0.01)
        return c.index_end - c.t_initialized
    finally:
        c.close()


def index_rows(py: str, files: int, lines: int) -> list[tuple[str, ...]]:
    from bench.bench_index import make_project

    cmd = [py, "-m", "ddp_lsp", "serve"]
    with tempfile.TemporaryDirectory(prefix="ddp-lsp-bench-index-") as tmp:
        root = Path(tmp) / "proj"
        root.mkdir()
        total = make_project(root, files, lines)
        cache = Path(tmp) / "cache"
        cold = index_time(cmd, root, cache)
        warm = index_time(cmd, root, cache)
    what = f"{files} files / {total:,} lines"
    return [
        (
            f"server: index a workspace, {what}, cold",
            f"{cold:.2f} s",
            "initialized -> $/progress end",
        ),
        (
            f"server: index a workspace, {what}, warm",
            f"{warm:.2f} s",
            "disk cache from the cold run",
        ),
    ]


def cold_start(cmd: list[str], root: Path, runs: int) -> float:
    times = []
    for _ in range(runs):
        c = Client(cmd, root)
        try:
            times.append(c.initialize(root))
        finally:
            c.close()
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="fewer runs, 1,500 lines only")
    ap.add_argument("--edits", type=int, default=100, help="edits per kind")
    ap.add_argument("--seed", type=int, default=2)
    ap.add_argument("--no-ruff", action="store_true")
    ap.add_argument(
        "--workspace",
        type=int,
        default=0,
        metavar="N",
        help="edit inside a workspace of N generated modules, indexed (cold) during the edits",
    )
    ap.add_argument("--index-only", action="store_true", help="only time the server's indexing")
    args = ap.parse_args()
    py = sys.executable
    if args.index_only:
        rows_only = index_rows(py, args.workspace or 500, 300)
        print("| measurement | result | note |\n| --- | --- | --- |")
        for row in rows_only:
            print("| " + " | ".join(row) + " |")
        return
    servers: dict[str, list[str]] = {"ddp-lsp": [py, "-m", "ddp_lsp", "serve"]}
    ruff = shutil.which("ruff", path=str(Path(py).parent)) or shutil.which("ruff")
    if ruff and not args.no_ruff:
        servers["ruff server"] = [ruff, "server"]
    sizes = [1500] if args.quick else [1500, 20000]
    edits = 20 if args.quick else args.edits
    runs = 3 if args.quick else 7
    rows: list[tuple[str, ...]] = []
    with tempfile.TemporaryDirectory(prefix="ddp-lsp-bench-") as tmp:
        root = Path(tmp)
        ws = root / "ws"
        ws.mkdir()
        if args.workspace:
            from bench.bench_index import make_project

            make_project(ws, args.workspace, 300)
        # Cold starts interleaved so machine load hits every server alike.
        bare_cmd = [py, "-c", BARE_PYGLS]
        starts: dict[str, list[float]] = {"bare pygls": [], **{k: [] for k in servers}}
        for _ in range(runs):
            starts["bare pygls"].append(cold_start(bare_cmd, root, 1))
            for k, cmd in servers.items():
                starts[k].append(cold_start(cmd, root, 1))
        floor = statistics.median(starts["bare pygls"])
        for k, v in starts.items():
            med = statistics.median(v)
            note = "floor" if k == "bare pygls" else f"{(med - floor) * 1000:+.0f} ms vs bare pygls"
            rows.append(
                (f"cold start (spawn to initialize result), {k}", f"{med * 1000:.0f} ms", note)
            )
        results: dict[tuple[str, int], dict[str, Any]] = {}
        for n in sizes:
            text = module(n)
            for k, cmd in servers.items():
                # A fresh, empty index cache per run: the workspace is indexed during the edits.
                cache = Path(tempfile.mkdtemp(dir=tmp, prefix="cache-"))
                results[(k, n)] = measure_file(
                    cmd,
                    ws,
                    f"train_{n}_{k.split()[0]}.py",
                    text,
                    edits,
                    actions=True,
                    cache=cache,
                    seed=args.seed,
                )
        for n in sizes:
            lines = module(n).count("\n")
            for k in servers:
                r = results[(k, n)]
                rows.append(
                    (
                        f"first diagnostics after didOpen, {lines} lines, {k}",
                        f"{r['first'] * 1000:.0f} ms",
                        f"{r['findings']} diagnostics",
                    )
                )
                for kind, e in r["edit"].items():
                    rows.append(
                        (
                            f"`{kind}` edit -> diagnostics for that version, {lines} lines, {k}",
                            f"p50 {statistics.median(e) * 1000:.1f} / p95 {pct(e, 95) * 1000:.1f}"
                            f" / max {max(e) * 1000:.0f} ms",
                            f"{len(e)} edits"
                            + (
                                f", {r.get('during_index', 0)} during the workspace's indexing"
                                if args.workspace and k == "ddp-lsp"
                                else ""
                            ),
                        )
                    )
                a = r["action"]
                rows.append(
                    (
                        f"code action, {lines} lines, {k}",
                        f"p50 {statistics.median(a) * 1000:.1f} ms / p95 {pct(a, 95) * 1000:.1f} ms",
                        f"{r['actions_returned']} actions",
                    )
                )
                if r["rss"]:
                    rows.append(
                        (
                            f"server RSS with the file open, {lines} lines, {k}",
                            f"{r['rss'] / 2**20:.0f} MB",
                            "",
                        )
                    )
            if "ruff server" in servers:
                d, rf = results[("ddp-lsp", n)], results[("ruff server", n)]
                for kind in KINDS:
                    ratio = pct(d["edit"][kind], 95) / pct(rf["edit"][kind], 95)
                    rows.append(
                        (
                            f"`{kind}` edit p95 ratio ddp-lsp / ruff server, {lines} lines",
                            f"{ratio:.2f}x",
                            "",
                        )
                    )
    if not args.quick:
        rows.extend(index_rows(py, args.workspace or 500, 300))
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"load average (1, 5, 15 min) at the end: {load} on {os.cpu_count()} CPUs\n")
    print("| measurement | result | note |\n| --- | --- | --- |")
    for row in rows:
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
