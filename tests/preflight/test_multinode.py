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


def test_several_ranks_of_one_host_are_one_node_with_one_writer(tmp_path: Path) -> None:
    """``torchrun --nproc-per-node=2 ... --torchrun`` on one host: one node, probed once, one
    report and one --json writer (it used to say "2 nodes joined" and both wrote the file)."""
    pytest.importorskip("torch")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    out_file = tmp_path / "preflight.json"
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nnodes=1",
        "--nproc-per-node=2",
        "--master-addr=127.0.0.1",
        f"--master-port={port}",
        "-m",
        "ddp_lsp.preflight",
        "--torchrun",
        "--backend",
        "gloo",
        "--probe",
        "limits",
        "rdzv.port",
        "--json",
        str(out_file),
    ]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    report = PreflightReport.from_json(json.loads(out_file.read_text()))
    assert report.nodes == ()  # no second "node" for the second process
    handshake = report.probe("multinode.handshake")
    assert handshake is not None and handshake.status is Status.PASS
    assert "2 processes on 1 node(s) joined" in handshake.message
    assert handshake.values["nodes"] == 1
    # The node's probes ran once (by local rank 0), and one process (the one that writes the
    # --json file, global rank 0) printed the full report.
    assert [p.id for p in report.probes].count("limits") == 1
    assert proc.stdout.count("DDP preflight") == 1
    assert "local rank 1: this node is probed by its local rank 0" in proc.stdout
