"""Shared helpers for the runtime tests: free ports, launching ranks, finding leftovers."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
WORKERS = Path(__file__).resolve().parent / "workers"
PYTHON = sys.executable


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def child_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env.setdefault("OMP_NUM_THREADS", "1")  # two cores: keep ranks from oversubscribing
    env.update(extra)
    return env


@dataclass(frozen=True)
class RankRun:
    rank: int
    returncode: int
    ended_at: float  # time.time() when the parent saw the process exit
    result: dict[str, object]
    stderr: str


def run_ranks(
    script: Path, args: Sequence[str], world: int = 2, timeout: float = 60.0
) -> list[RankRun]:
    """Start ``world`` plain processes with env:// rendezvous and wait for all of them."""
    port = free_port()
    procs = []
    for rank in range(world):
        env = child_env(
            RANK=str(rank),
            LOCAL_RANK=str(rank),
            WORLD_SIZE=str(world),
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(port),
        )
        procs.append(
            subprocess.Popen(
                [PYTHON, str(script), *args],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    ended: dict[int, float] = {}
    deadline = time.monotonic() + timeout
    try:
        while len(ended) < world:
            for rank, p in enumerate(procs):
                if rank not in ended and p.poll() is not None:
                    ended[rank] = time.time()
            if time.monotonic() > deadline:
                raise AssertionError(f"ranks still running after {timeout} s")
            time.sleep(0.02)  # polling exit status; the test waits for exits, not a duration
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    runs = []
    for rank, p in enumerate(procs):
        out, err = p.communicate()
        result: dict[str, object] = {}
        for line in out.splitlines():
            if line.startswith("RESULT "):
                result = json.loads(line[len("RESULT ") :])
        runs.append(RankRun(rank, p.returncode, ended[rank], result, err))
    return runs


@pytest.fixture
def torch_mod():  # type: ignore[no-untyped-def]
    return pytest.importorskip("torch")
