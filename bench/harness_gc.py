"""Run the shared latency harness and say how much of each edit was the harness's own GC.

Run: python3 bench/harness_gc.py [--harness ../shared/bench/lsp_latency.py] [--freeze] \\
         [--tag-support] -- --file big20000.py --edits 500 --seed 2 --edit-kinds char,rename,type \\
         -- .venv/bin/ddp-lsp serve

``lsp_latency.py`` keeps every ``publishDiagnostics`` it receives (``LspClient.diag_events``)
for the whole run, and takes an edit's end time after ``json.loads`` of the publication. Its
heap therefore grows by the diagnostics of every edit (457 per publication at 20,000 lines for
ddp-lsp, 768 for ruff's server), and CPython's full collections, which come each time that
heap has grown by a quarter, scan all of it inside whichever ``json.loads`` triggers them:
slow edits every few dozen edits that grow through the run, whatever the server does.

This runs the harness unchanged, in this process, with a ``gc.callbacks`` hook: for every
edit, the time the harness spent in its own collections between sending the ``didChange`` and
taking the time of the answer. It prints the harness's JSON on stdout as the harness does, and
on stderr the slowest edits with their GC share and the latency figures without it.
``--freeze`` also calls ``gc.freeze()`` after each message the harness handles (what it keeps
is then never scanned again): the harness's own figures with its GC taken out.
``--tag-support`` adds ``tagSupport`` (Unnecessary, Deprecated) to the ``publishDiagnostics``
capabilities the harness declares, as VS Code, Neovim and Helix do: the server then sends the
``tags`` a real editor gets (the harness as it is declares none, and ddp-lsp sends a client only
the tags it declared), and the figures show what those publications cost a client that keeps
them.
"""

from __future__ import annotations

import gc
import importlib.util
import json
import sys
import time
from pathlib import Path
from typing import Any


def _default_harness() -> Path:
    """``shared/bench/lsp_latency.py`` beside the checkout (or beside a folder holding it)."""
    root = Path(__file__).resolve().parent.parent
    for folder in root.parents:
        found = folder / "shared" / "bench" / "lsp_latency.py"
        if found.is_file():
            return found
    return root.parent / "shared" / "bench" / "lsp_latency.py"


def pct(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, max(0, round(p / 100 * (len(values) - 1))))]


def main(argv: list[str]) -> int:
    harness = _default_harness()
    freeze = False
    tag_support = False
    while argv and argv[0] != "--":
        arg = argv.pop(0)
        if arg == "--harness":
            harness = Path(argv.pop(0))
        elif arg == "--freeze":
            freeze = True
        elif arg == "--tag-support":
            tag_support = True
        else:
            sys.stderr.write(f"unknown option {arg!r}\n{__doc__}")
            return 2
    if argv[:1] == ["--"]:
        argv = argv[1:]
    spec = importlib.util.spec_from_file_location("lsp_latency", harness)
    assert spec is not None and spec.loader is not None
    lat_mod: Any = importlib.util.module_from_spec(spec)
    sys.modules["lsp_latency"] = lat_mod
    spec.loader.exec_module(lat_mod)

    pauses: list[tuple[float, float]] = []
    started: list[float] = []

    def on_gc(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            started.append(time.perf_counter())
        elif started:
            pauses.append((started.pop(), time.perf_counter()))

    if tag_support:
        declared = lat_mod.client_capabilities

        def with_tags(pull: bool) -> Any:
            caps = declared(pull)
            caps["textDocument"]["publishDiagnostics"]["tagSupport"] = {"valueSet": [1, 2]}
            return caps

        lat_mod.client_capabilities = with_tags
    gc.callbacks.append(on_gc)
    sent: list[float] = []
    notify = lat_mod.LspClient.notify

    async def notify_timed(self: Any, method: str, params: Any) -> float:
        t = await notify(self, method, params)
        if method == "textDocument/didChange":
            sent.append(t)
        return float(t)

    lat_mod.LspClient.notify = notify_timed
    if freeze:
        dispatch = lat_mod.LspClient._dispatch

        async def dispatch_frozen(self: Any, msg: Any, t: float) -> None:
            await dispatch(self, msg, t)
            gc.freeze()

        lat_mod.LspClient._dispatch = dispatch_frozen
    latencies: list[float] = []
    summarize = lat_mod.summarize

    def keep(values: list[float]) -> Any:
        if not latencies:
            latencies.extend(values)  # the first call summarises the edits
        return summarize(values)

    lat_mod.summarize = keep
    rc = int(lat_mod.main(argv))
    per_edit = []
    for i, (t0, ms) in enumerate(zip(sent, latencies, strict=False)):
        t1 = t0 + ms / 1e3
        own = sum(min(b, t1) - max(a, t0) for a, b in pauses if b > t0 and a < t1) * 1e3
        per_edit.append((i, ms, own))
    if per_edit:
        net = [ms - own for _, ms, own in per_edit]
        worst = sorted(per_edit, key=lambda x: -x[1])[:10]
        sys.stderr.write(
            "slowest edits (index, ms, of which the harness's own GC ms): "
            + json.dumps([(i, round(ms, 1), round(own, 1)) for i, ms, own in worst])
            + "\n"
            + f"without the harness's GC: p50 {pct(net, 50):.1f} / p95 {pct(net, 95):.1f} / "
            f"max {max(net):.1f} ms over {len(net)} edits\n"
        )
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
