"""Real torch.distributed on 127.0.0.1 with gloo, 2 ranks: handshake, all_reduce correctness,
the busbw sweep, and ranks that never arrive or hang before the barrier.

The probes run through ``run_isolated`` (a forked worker under a timeout), as in the child.
"""

from __future__ import annotations

import math

import pytest

from ddp_lsp.preflight.probes import PROBES_BY_ID
from ddp_lsp.preflight.probes.base import ProbeContext
from ddp_lsp.preflight.probes.dist import (
    bus_factor,
    busbw_at,
    missing_from_barrier,
    verdict,
)
from ddp_lsp.preflight.probes.ranks import INJECT_ENV
from ddp_lsp.preflight.runner import run_isolated
from ddp_lsp.preflight.schema import PreflightOptions, Status

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch


def run_probe(probe_id: str, env: dict[str, str] | None = None, **opts: object):
    options = PreflightOptions(backend="gloo", world_size=2, **opts)  # type: ignore[arg-type]
    ctx = ProbeContext(options=options, env={"PATH": "", **(env or {})})
    return run_isolated(PROBES_BY_ID[probe_id], ctx, 60)


def test_two_rank_gloo_handshake_and_all_reduce_are_correct() -> None:
    result = run_probe("dist.handshake")
    assert result.status is Status.PASS, result.message
    assert result.values["world_size"] == 2 and result.values["backend"] == "gloo"
    assert "all_reduce correct" in result.message


def test_rank_that_never_arrives_is_named_by_the_store() -> None:
    result = run_probe("dist.handshake", {INJECT_ENV: "absent:1"}, handshake_timeout_s=1.5)
    assert result.status is Status.FAIL
    assert result.values["never_arrived"] == [1]
    assert "rank(s) 1 never reached the rendezvous" in result.message
    assert "MASTER_ADDR" in (result.fix or "")


def test_rank_that_hangs_after_init_is_named_by_monitored_barrier() -> None:
    result = run_probe("dist.handshake", {INJECT_ENV: "stall:1"}, handshake_timeout_s=1.5)
    assert result.status is Status.FAIL, result.message
    assert result.values["missing_at_barrier"] == [1]
    assert "monitored_barrier: rank(s) 1 failed to arrive" in result.message


def test_busbw_sweep_follows_the_nccl_tests_definition() -> None:
    result = run_probe("dist.busbw")
    assert result.status is Status.PASS, result.message
    rows = result.values["sweep"]
    sizes = [r["bytes"] for r in rows]
    assert sizes[0] == 64 * 1024 and 25 * (1 << 20) in sizes and sizes == sorted(sizes)
    for row in rows:
        algbw = row["bytes"] / (row["time_us"] / 1e6) / 1e9
        assert row["algbw_gbps"] == pytest.approx(algbw, rel=0.01, abs=2e-3)
        assert row["busbw_gbps"] == pytest.approx(row["algbw_gbps"] * bus_factor(2), rel=1e-6)
        assert row["busbw_gbps"] > 0
    assert result.values["busbw_at_bucket_gbps"] == next(
        r["busbw_gbps"] for r in rows if r["bytes"] == 25 << 20
    )
    assert result.values["link_class"] == "CPU"


def test_barrier_message_parser() -> None:
    assert missing_from_barrier(
        "[Rank 0]: Ranks 1, 3 failed to pass monitoredBarrier in 2000 ms"
    ) == [1, 3]
    assert missing_from_barrier("Rank 2 failed to pass monitoredBarrier in 10 ms") == [2]
    assert missing_from_barrier("Connection closed by peer") == []


def test_feasibility_maths() -> None:
    # 1 B bf16 params (S = 2 GB) on 8 ranks at 276 GB/s busbw: t_ar = 2*7/8 * 2e9 / 276e9 = 12.7 ms
    t_ar = bus_factor(8) * 2e9 / 276e9
    assert t_ar == pytest.approx(0.01268, rel=1e-3)
    v = verdict(t_ar, t_c=0.340, t_bwd=0.220, world=8)
    assert v.label == "worth it" and v.speedup == pytest.approx(8.0)
    assert verdict(0.2, 0.4, 0.25, 2).label == "marginal"
    slow = verdict(1.0, 0.4, 0.25, 2)
    assert slow.label == "communication-bound" and slow.speedup == pytest.approx(
        2 * 0.4 / (0.4 + 0.75)
    )
    rows = [{"bytes": 1 << 20, "busbw_gbps": 1.0}, {"bytes": 4 << 20, "busbw_gbps": 3.0}]
    assert busbw_at(rows, 2 << 20) == pytest.approx(2.0)
    assert busbw_at(rows, 1) == 1.0 and busbw_at(rows, 1 << 30) == 3.0
    assert math.isnan(busbw_at([], 10))


def test_feasibility_measures_a_stand_in_and_scales_to_the_given_model() -> None:
    result = run_probe("feasibility", params=100_000_000)
    assert result.status in (Status.PASS, Status.WARN), result.message
    v = result.values
    assert v["estimate"] and result.message.startswith("estimate:")
    assert v["params_source"] == "given" and v["grad_bytes"] == 400_000_000
    # 400 MB of gradients: 15 full 25 MiB buckets and a remainder, each paying the latency.
    assert v["buckets"] == 16
    latency = 16 * 2 * v["latency_us_per_hop"] / 1e6
    assert v["t_allreduce_s"] == pytest.approx(
        latency + bus_factor(2) * 4e8 / (v["busbw_gbps"] * 1e9), rel=0.01
    )
    assert v["ratio"] == pytest.approx(v["t_allreduce_s"] / v["t_compute_s"], rel=0.02)
    assert v["standin"]["t_step_s"] > 0 and v["standin"]["t_ddp_step_s"] > 0
    assert v["verdict"] in result.message


def test_feasibility_without_a_model_size_gives_no_verdict() -> None:
    result = run_probe("feasibility")
    assert result.status is Status.PASS, result.message
    assert result.values["verdict"] is None and result.values["params_source"] == "stand-in"
    assert "no verdict" in result.message and "ddp-lsp feasibility --" in result.message
