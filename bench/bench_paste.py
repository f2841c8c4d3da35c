"""A paste that takes an open document over the server's size limit, and its undo.

In-process (``ServerState`` without an event loop, so analysis runs inside ``change``): open a
generated 120-line training script, paste a copy of it repeated past ``MAX_ANALYSED_CHARS``
(2,000,000 characters) at line 10, then delete the paste again. Times each ``change`` call,
median of ``--runs``; the crossing edit should cost what splitting the pasted text into lines
costs, the undo what analysing the small script again costs.

    .venv/bin/python bench/bench_paste.py [--runs 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from lsprotocol import types as T  # noqa: E402

from bench.gen import module  # noqa: E402
from ddp_lsp.lsp.state import MAX_ANALYSED_CHARS, PlainText, ServerState  # noqa: E402


def one_run() -> tuple[float, float]:
    state = ServerState(lambda uri, version, diags: None, lambda message, is_error: None)
    base = module(120)
    uri = "file:///tmp/ddp-lsp-bench/paste.py"
    state.open(uri, base, 1, "python")
    paste = base * (MAX_ANALYSED_CHARS // len(base) + 1)
    at = T.Position(10, 0)
    t0 = time.perf_counter()
    state.change(uri, 2, [T.TextDocumentContentChangePartial(range=T.Range(at, at), text=paste)])
    up = time.perf_counter() - t0
    assert isinstance(state.units[uri].doc, PlainText)
    end = T.Position(10 + paste.count("\n"), 0)
    t0 = time.perf_counter()
    state.change(uri, 3, [T.TextDocumentContentChangePartial(range=T.Range(at, end), text="")])
    down = time.perf_counter() - t0
    assert not isinstance(state.units[uri].doc, PlainText) and state.units[uri].doc.text == base
    return up, down


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    runs = [one_run() for _ in range(args.runs)]
    up = statistics.median(r[0] for r in runs)
    down = statistics.median(r[1] for r in runs)
    print(f"paste over the limit: {up * 1000:.0f} ms; undo (analysed again): {down * 1000:.0f} ms")


if __name__ == "__main__":
    main()
