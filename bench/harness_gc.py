"""Run the shared latency harness and say how much of each edit was the harness's own GC.

Run: python3 bench/harness_gc.py [--harness ../shared/bench/lsp_latency.py] [--freeze] \\
         [--tag-support] [--shape] -- --file big20000.py --edits 500 --seed 2 \\
         --edit-kinds char,rename,type -- .venv/bin/ddp-lsp serve

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
``--shape`` also prints, for the last publication received, its JSON containers by place
(``diagnostic``, ``diagnostic.range``, ``diagnostic.relatedInformation[]``...) and how many
of them the client's collector tracks once ``json.loads`` built them (CPython tracks a dict
only once it holds a container, so ``{"line": 1, "character": 2}`` costs a collection
nothing, a ``range`` holding two of them does).
``--tag-support`` adds ``tagSupport`` (Unnecessary, Deprecated) to the ``publishDiagnostics``
capabilities the harness declares, as VS Code, Neovim and Emacs do: the server then sends the
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
    shape = False
    while argv and argv[0] != "--":
        arg = argv.pop(0)
        if arg == "--harness":
            harness = Path(argv.pop(0))
        elif arg == "--freeze":
            freeze = True
        elif arg == "--tag-support":
            tag_support = True
        elif arg == "--shape":
            shape = True
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

    pauses: list[tuple[float, float, float]] = []  # (wall start, wall end, CPU seconds)
    started: list[tuple[float, float]] = []

    def on_gc(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            started.append((time.perf_counter(), time.process_time()))
        elif started:
            t0, c0 = started.pop()
            pauses.append((t0, time.perf_counter(), time.process_time() - c0))

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
    last: list[Any] = []
    if shape:
        handle = lat_mod.LspClient._dispatch

        async def dispatch_kept(self: Any, msg: Any, t: float) -> None:
            if msg.get("method") == "textDocument/publishDiagnostics":
                last[:] = [msg]
            await handle(self, msg, t)

        lat_mod.LspClient._dispatch = dispatch_kept
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
        inside = [(a, b, cpu) for a, b, cpu in pauses if b > t0 and a < t1]
        own = sum(min(b, t1) - max(a, t0) for a, b, _ in inside) * 1e3
        own_cpu = sum(cpu for _, _, cpu in inside) * 1e3
        per_edit.append((i, ms, own, own_cpu))
    if per_edit:
        net = [ms - own for _, ms, own, _ in per_edit]
        worst = sorted(per_edit, key=lambda x: -x[1])[:10]
        sys.stderr.write(
            "slowest edits (index, ms, of which the harness's own GC ms, that GC's CPU ms): "
            + json.dumps([(i, round(ms, 1), round(own, 1), round(c, 1)) for i, ms, own, c in worst])
            + "\n"
            + f"without the harness's GC: p50 {pct(net, 50):.1f} / p95 {pct(net, 95):.1f} / "
            f"max {max(net):.1f} ms over {len(net)} edits\n"
            + f"the harness's longest collection inside an edit: "
            f"{max(own for _, _, own, _ in per_edit):.1f} ms wall, "
            f"{max(c for _, _, _, c in per_edit):.1f} ms CPU\n"
        )
    if last:
        sys.stderr.write(publication_shape(last[0]))
    return rc


def publication_shape(message: Any) -> str:
    """Containers of one publication by place, and those a collector tracks after loading."""
    diagnostics = message["params"]["diagnostics"]
    places: dict[str, int] = {}

    def walk(obj: Any, place: str) -> None:
        if isinstance(obj, dict):
            places[place] = places.get(place, 0) + 1
            for k, v in obj.items():
                walk(v, f"{place}.{k}")
        elif isinstance(obj, list):
            places[place + "[list]"] = places.get(place + "[list]", 0) + 1
            for v in obj:
                walk(v, place + "[]")

    for d in diagnostics:
        walk(d, "diagnostic")
    loaded = json.loads(json.dumps(message, separators=(",", ":")))
    tracked = 0
    stack = [loaded]
    while stack:
        obj = stack.pop()
        if isinstance(obj, (dict, list)):
            tracked += gc.is_tracked(obj)
            stack.extend(obj.values() if isinstance(obj, dict) else obj)
    n = max(len(diagnostics), 1)
    total = sum(places.values())
    lines = [
        f"last publication: {len(diagnostics)} diagnostics, "
        f"{len(json.dumps(message, separators=(',', ':')))} bytes, {total} JSON containers "
        f"({total / n:.2f} a diagnostic), {tracked} tracked by the collector after json.loads "
        f"({tracked / n:.2f} a diagnostic)"
    ]
    lines += [f"  {v:6d} {k}" for k, v in sorted(places.items(), key=lambda kv: -kv[1])]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
