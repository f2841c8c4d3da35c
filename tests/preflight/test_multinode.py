"""Two torchrun "nodes" on 127.0.0.1: each runs the probes, rank 0 gathers every report."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from ddp_lsp.preflight.schema import PreflightReport, Status

pytestmark = [pytest.mark.torch, pytest.mark.slow]
REPO = Path(__file__).resolve().parents[2]


def test_two_torchrun_nodes_gather_to_rank_0(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    procs = []
    for node in (0, 1):
        cmd = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nnodes=2",
            f"--node-rank={node}",
            "--nproc-per-node=1",
            "--master-addr=127.0.0.1",
            f"--master-port={port}",
            "-m",
            "ddp_lsp.preflight",
            "--torchrun",
            "--backend",
            "gloo",
            "--probe",
            "limits",
            "env.versions",
            "rdzv.port",
            "dist.handshake",
            "--json",
            str(tmp_path / f"node{node}.json"),
        ]
        procs.append(
            subprocess.Popen(
                cmd,
                cwd=tmp_path,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    # Only rank 0 writes the combined report.
    assert not (tmp_path / "node1.json").exists()
    report = PreflightReport.from_json(json.loads((tmp_path / "node0.json").read_text()))
    assert report.node_rank == 0
    assert len(report.nodes) == 1 and report.nodes[0].node_rank == 1
    assert {p.id for p in report.nodes[0].probes} >= {
        "limits",
        "env.versions",
        "rdzv.port",
        "dist.handshake",
    }
    statuses = {p.id: p.status for p in report.probes}
    assert statuses["multinode.handshake"] is Status.PASS
    assert statuses["multinode.versions"] is Status.PASS
    assert statuses["rdzv.port"] is Status.PASS  # torchrun's store is reachable, not "busy"
    assert "node 1" in outs[0][0]
