"""The CPU a server has spent when its ``initialize`` result arrives: cold start on a busy machine.

Run (from the checkout; each NAME=COMMAND started in turn, the order reversed every round)::

    python3 bench/cold_start_cpu.py --starts 21 --root /tmp/ws15 -- \\
        "bare=.venv/bin/python bench/bare_pygls_server.py" "ddp-lsp=.venv/bin/ddp-lsp serve"

The shared harness (``lsp_latency.py``) reports ``cold_start_ms``, spawn to the result, in wall
time: on this shared 2-CPU machine the bare server's own starts vary by a second at load 5.
This sends the harness's ``initialize`` (its client capabilities, ``--root`` as the workspace)
and reads the child's CPU time from ``/proc/PID/task/*/schedstat`` (all threads, ns) as soon as
the result is read; the child is then killed. Medians and minima, in ms. Linux only.

The reading is what the child had run when the client woke up, not when the result was written:
work a server does right after writing the result would race with it (the kernel updates a
running task's figure at its ticks and switches, so a few ms of it at most). It sends nothing
after the result (no ``initialized``), and reads the CPU again ``--after-ms`` later: the
"after" column is the work a server did unprompted once it had answered (ddp-lsp before round
13 loaded its analysis core there, 100-200 ms; it now waits for ``initialized``; a bare server
does nothing), so a figure with work after it can be told from one without.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.harness_gc import _default_harness  # noqa: E402  (shared/bench beside the checkout)

sys.path.insert(0, str(_default_harness().parent))


def cpu_ms(pid: int) -> float:
    total = 0
    for stat in glob.glob(f"/proc/{pid}/task/*/schedstat"):
        try:
            with open(stat) as fh:
                total += int(fh.read().split()[0])
        except (OSError, ValueError, IndexError):
            pass
    return total / 1e6


def start(
    cmd: list[str], root: str, capabilities: dict[str, object], after_ms: float
) -> tuple[float, float, float]:
    """(wall ms, child CPU ms) from spawn to the initialize result, and the child's CPU ms in
    the ``after_ms`` that follow it."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        cmd, cwd=root, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    )
    assert proc.stdin is not None and proc.stdout is not None
    uri = Path(root).as_uri()
    params = {
        "processId": os.getpid(),
        "clientInfo": {"name": "cold_start_cpu", "version": "1"},
        "rootUri": uri,
        "rootPath": root,
        "workspaceFolders": [{"uri": uri, "name": Path(root).name}],
        "capabilities": capabilities,
        "initializationOptions": None,
        "trace": "off",
    }
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": params})
    proc.stdin.write(b"Content-Length: %d\r\n\r\n%s" % (len(body), body.encode()))
    proc.stdin.flush()
    length = 0
    while True:
        line = proc.stdout.readline()
        if line.lower().startswith(b"content-length"):
            length = int(line.split(b":")[1])
        if line in (b"\r\n", b""):
            break
    proc.stdout.read(length)
    wall = (time.perf_counter() - t0) * 1e3
    cpu = cpu_ms(proc.pid)
    time.sleep(after_ms / 1e3)
    after = cpu_ms(proc.pid) - cpu
    proc.kill()
    proc.wait()
    return wall, cpu, after


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--starts", type=int, default=21)
    ap.add_argument("--root", default=os.getcwd(), help="the workspace folder sent")
    ap.add_argument(
        "--after-ms", type=float, default=300.0, help="how long to watch the CPU after the result"
    )
    ap.add_argument("servers", nargs="+", help="NAME=COMMAND")
    args = ap.parse_args()
    from lsp_latency import client_capabilities  # the shared harness's

    capabilities = client_capabilities(False)
    servers = [
        (name, shlex.split(cmd)) for name, _, cmd in (s.partition("=") for s in args.servers)
    ]
    got: dict[str, list[tuple[float, float, float]]] = {name: [] for name, _ in servers}
    for i in range(args.starts):
        for name, cmd in servers if i % 2 == 0 else reversed(servers):
            got[name].append(start(cmd, os.path.abspath(args.root), capabilities, args.after_ms))
    for name, runs in got.items():
        walls, cpus, afters = ([r[k] for r in runs] for k in range(3))
        print(
            f"{name}: CPU median {statistics.median(cpus):.1f} ms (min {min(cpus):.1f}), "
            f"wall median {statistics.median(walls):.1f} ms, {len(runs)} starts; "
            f"CPU in the {args.after_ms:.0f} ms after the result: median "
            f"{statistics.median(afters):.1f} ms (max {max(afters):.1f})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
