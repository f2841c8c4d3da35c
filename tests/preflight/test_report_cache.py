"""Rendering (text, Markdown, hover facts), MachineFacts, the per-workspace cache and the
static parameter estimate: all stdlib, on synthetic reports."""

from __future__ import annotations

import os
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from ddp_lsp.preflight.client import PreflightCache, cache_dir, cache_key
from ddp_lsp.preflight.paramcount import estimate_params
from ddp_lsp.preflight.report import (
    facts_markdown,
    format_age,
    machine_facts,
    render_markdown,
    render_text,
)
from ddp_lsp.preflight.schema import PreflightReport, ProbeResult, Status

CREATED = datetime(2026, 1, 1, 12, 0, tzinfo=timezone.utc)


def gpu_report() -> PreflightReport:
    probes = (
        ProbeResult(
            "shm.capacity",
            "/dev/shm",
            Status.FAIL,
            "/dev/shm 64.0 MiB free, need ~2.9 GiB",
            {"free_bytes": 64 << 20, "total_bytes": 64 << 20, "required_bytes": 3 << 30},
            "docker run --shm-size=6g",
        ),
        ProbeResult(
            "cpu.workers",
            "CPUs",
            Status.WARN,
            "num_workers=32 x 4 ranks = 128 workers > 16 CPUs",
            {"cpus": 16, "recommended_num_workers": 3, "local_world_size": 4},
            "num_workers=3",
        ),
        ProbeResult(
            "env.versions",
            "Versions",
            Status.PASS,
            "torch 2.13.0",
            {"nccl_available": True, "nccl": "2.27.7"},
        ),
        ProbeResult(
            "cuda.basic",
            "CUDA",
            Status.PASS,
            "4 GPU(s) (NVIDIA L40S) for 4 ranks",
            {"device_count": 4},
        ),
        ProbeResult(
            "gpu.p2p",
            "P2P",
            Status.FAIL,
            "copy mismatch: GPU0->GPU1 returned zeros (P2P enabled)",
            {},
            "export NCCL_P2P_DISABLE=1",
        ),
        ProbeResult(
            "dist.handshake",
            "Handshake",
            Status.PASS,
            "4 ranks, nccl init 2.10 s",
            {"backend": "nccl"},
        ),
        ProbeResult(
            "dist.busbw",
            "busbw",
            Status.PASS,
            "busbw 18.4 GB/s at the 25.0 MiB bucket",
            {"busbw_at_bucket_gbps": 18.4},
        ),
        ProbeResult(
            "feasibility",
            "Feasibility",
            Status.WARN,
            "r=0.31 marginal",
            {"verdict": "marginal"},
            "bf16 grads",
        ),
        ProbeResult("dcgm.quick", "DCGM", Status.SKIP, "dcgmi not found"),
    )
    return PreflightReport(
        host="gpu01",
        python="/venv/bin/python",
        python_version="3.11.9",
        platform="Linux",
        created=CREATED.isoformat(),
        duration_s=41.2,
        probes=probes,
        torch="2.13.0",
        cuda="12.8",
        nccl="2.27.7",
        driver="570.86",
        gpus=("NVIDIA L40S",) * 4,
        backend="nccl",
        world_size=4,
    )


def test_text_report_has_header_marks_and_fixes() -> None:
    text = render_text(gpu_report(), unicode=True)
    first = text.splitlines()[0]
    assert (
        "host=gpu01" in first
        and "NCCL 2.27.7" in first
        and "4xNVIDIA L40S" in first
        and "✗2 ⚠2 ✓4 –1" in first
    )
    assert "✗ shm.capacity" in text and "→ docker run --shm-size=6g" in text
    assert "ok  " in render_text(gpu_report(), unicode=False)


def test_markdown_report() -> None:
    md = render_markdown(gpu_report(), now=CREATED + timedelta(minutes=3))
    assert md.startswith("### DDP preflight: ✗2 ⚠2 ✓4 –1")
    assert (
        "3 min ago" in md
        and "❌ **gpu.p2p**" in md
        and "  - fix: `export NCCL_P2P_DISABLE=1`" in md
    )


def test_machine_facts() -> None:
    facts = machine_facts(gpu_report())
    assert (facts.cpu_count, facts.recommended_num_workers, facts.gpu_count) == (16, 3, 4)
    assert facts.nccl_available is True and facts.cuda_available is True
    assert facts.shm_free_bytes == 64 << 20 and facts.busbw_at_bucket_gbps == 18.4


def test_machine_facts_cpu_only() -> None:
    base = gpu_report()
    report = base.with_probes(
        [
            ProbeResult("cuda.basic", "CUDA", Status.SKIP, "CPU-only torch build"),
            ProbeResult("env.versions", "V", Status.PASS, "", {"nccl_available": False}),
        ]
    )
    facts = machine_facts(report)
    assert facts.gpu_count == 0 and facts.cuda_available is False and facts.nccl_available is False
    assert facts.cpu_count is None


def test_hover_facts_per_topic() -> None:
    now = CREATED + timedelta(hours=2)
    init = facts_markdown(gpu_report(), "init_process_group", now=now)
    assert (
        init is not None
        and "NCCL available (2.27.7)" in init
        and "4 GPU(s)" in init
        and "2 h ago" in init
    )
    assert "dist.handshake" in init and "18.4 GB/s" in init
    ddp = facts_markdown(gpu_report(), "DistributedDataParallel", now=now)
    assert (
        ddp is not None
        and "marginal" in ddp
        and "returned zeros" in ddp
        and "raise `bucket_cap_mb`" in ddp
    )
    loader = facts_markdown(gpu_report(), "DataLoader", now=now)
    assert (
        loader is not None
        and "16 CPUs" in loader
        and "`num_workers` ≤ 3" in loader
        and "64 MiB free" in loader
    )
    assert "shm-size" in loader
    with pytest.raises(ValueError):
        facts_markdown(gpu_report(), "Linear")
    assert facts_markdown(gpu_report().with_probes([]), "DataLoader") is None


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (5, "just now"),
        (180, "3 min ago"),
        (7200, "2 h ago"),
        (200000, "2 d ago"),
        (None, "at an unknown time"),
    ],
)
def test_format_age(seconds: float | None, text: str) -> None:
    assert format_age(seconds) == text


def test_cache_per_workspace_interpreter_and_host(tmp_path: Path) -> None:
    cache = PreflightCache(tmp_path)
    report = gpu_report()
    path = cache.save("/ws/a", "/venv/bin/python", report, host="gpu01")
    assert (
        path.parent == tmp_path
        and path.name == cache_key("/ws/a", "/venv/bin/python", "gpu01") + ".json"
    )
    got = cache.load(
        "/ws/a", "/venv/bin/python", host="gpu01", now=(CREATED + timedelta(seconds=90)).timestamp()
    )
    assert got is not None and got.report == report and got.age_s == pytest.approx(90)
    assert cache.load("/ws/b", "/venv/bin/python", host="gpu01") is None
    assert cache.load("/ws/a", "/other/python", host="gpu01") is None
    assert cache.load("/ws/a", "/venv/bin/python", host="gpu02") is None
    path.write_text("{not json")
    assert cache.load("/ws/a", "/venv/bin/python", host="gpu01") is None


def test_cache_dir_follows_xdg() -> None:
    assert cache_dir({"XDG_CACHE_HOME": "/x"}) == Path("/x/ddp-lsp/preflight")


def test_static_parameter_estimate() -> None:
    src = (
        "import torch.nn as nn\nD = 512\nV = 32000\n"
        "class M(nn.Module):\n"
        "    def __init__(self):\n"
        "        self.emb = nn.Embedding(V, D)\n"
        "        self.conv = nn.Conv2d(3, 64, kernel_size=3, bias=False)\n"
        "        self.norm = nn.LayerNorm(D)\n"
        "        self.attn = nn.MultiheadAttention(D, 8)\n"
        "        self.head = nn.Linear(D, V, bias=False)\n"
        "        self.dyn = nn.Linear(cfg.d, cfg.d)\n"
    )
    est = estimate_params(src)
    assert est is not None
    expected = 32000 * 512 + 3 * 64 * 9 + 2 * 512 + (4 * 512 * 512 + 4 * 512) + 512 * 32000
    assert est.params == expected and est.layers == 5 and est.unresolved == 1
    assert estimate_params("x = 1") is None and estimate_params("def (") is None


def test_validate_python_setting(tmp_path: Path) -> None:
    import sys

    from ddp_lsp.preflight.client import validate_python

    assert validate_python(sys.executable) == os.path.abspath(sys.executable)
    not_exec = tmp_path / "python"
    not_exec.write_text("")
    for bad in (
        "",
        "   ",
        str(tmp_path / "missing"),
        str(not_exec),
        "no-such-python-xyz",
        "py\0thon",
    ):
        with pytest.raises(ValueError):
            validate_python(bad, env={"PATH": str(tmp_path)})


def test_report_header_from_probe_values_without_nvidia_smi() -> None:
    from ddp_lsp.preflight.probes.base import ProbeContext
    from ddp_lsp.preflight.runner import build_report
    from ddp_lsp.preflight.schema import PreflightOptions

    probes = (
        ProbeResult(
            "env.versions",
            "V",
            Status.PASS,
            "",
            {"torch": "2.13.0", "cuda_build": "12.8", "nccl": "2.27.7"},
        ),
        ProbeResult(
            "cuda.basic",
            "C",
            Status.PASS,
            "",
            {"gpus": [{"name": "NVIDIA H200"}, {"name": "NVIDIA H200"}]},
        ),
        ProbeResult("dist.handshake", "H", Status.PASS, "", {"backend": "nccl", "world_size": 2}),
    )
    ctx = ProbeContext(options=PreflightOptions(), env={})
    report = build_report(PreflightOptions(), probes, CREATED.isoformat(), 1.0, None, None, ctx)
    assert report.gpus == ("NVIDIA H200", "NVIDIA H200")
    assert (report.torch, report.cuda, report.nccl, report.backend, report.world_size) == (
        "2.13.0",
        "12.8",
        "2.27.7",
        "nccl",
        2,
    )
    assert "2xNVIDIA H200" in render_text(report, unicode=False)
