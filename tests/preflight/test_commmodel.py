"""The all-reduce cost model of "is DDP worth it": alpha-beta fit, overlap, projection."""

from __future__ import annotations

import math

import pytest

from ddp_lsp.preflight.commmodel import (
    AlphaBeta,
    Bucket,
    StepParts,
    bus_factor,
    exposed_comm,
    fit_alpha_beta,
    project,
    verdict_label,
)


def test_fit_recovers_latency_and_bandwidth_of_a_ring() -> None:
    truth = AlphaBeta(50e-6, 2e9)
    sizes = [4096 * 4**i for i in range(8)]
    points = [(s, truth.time(s, 4)) for s in sizes]
    fit = fit_alpha_beta(points, 4)
    assert fit.alpha_s == pytest.approx(50e-6, rel=1e-6)
    assert fit.busbw_Bps == pytest.approx(2e9, rel=1e-6)
    # The same link priced for 8 ranks: more hops, the 2(n-1)/n bus factor.
    assert fit.time(1 << 20, 8) == pytest.approx(14 * 50e-6 + bus_factor(8) * (1 << 20) / 2e9)


def test_fit_keeps_the_latency_term_that_bandwidth_alone_misses() -> None:
    # The case: 25 MiB-message bandwidth applied to 37 KiB of gradients, no latency.
    truth = AlphaBeta(100e-6, 1e9)
    points = [(s, truth.time(s, 2)) for s in (16 << 10, 64 << 10, 256 << 10, 25 << 20)]
    fit = fit_alpha_beta(points, 2, around=[37 << 10])
    small = 37 << 10
    bandwidth_only = bus_factor(2) * small / (1e9)
    assert fit.time(small, 2) == pytest.approx(truth.time(small, 2), rel=1e-3)
    assert fit.time(small, 2) > 3 * bandwidth_only


def test_fit_uses_the_points_near_the_buckets() -> None:
    # A CPU all-reduce gets slower per byte past the caches: the fit near 1 MiB buckets must
    # not be dragged by a 64 MiB point.
    near = AlphaBeta(20e-6, 1.0e9)
    points = [(s, near.time(s, 2)) for s in (64 << 10, 256 << 10, 1 << 20, 4 << 20)]
    points.append((64 << 20, 10 * near.time(64 << 20, 2)))
    fit = fit_alpha_beta(points, 2, around=[1 << 20])
    assert fit.busbw_Bps == pytest.approx(1.0e9, rel=0.01)


def test_fit_rejects_nonsense() -> None:
    with pytest.raises(ValueError):
        fit_alpha_beta([(1024, 1e-4)], 1)
    with pytest.raises(ValueError):
        fit_alpha_beta([(0, 1.0), (1024, math.nan)], 2)


def test_overlap_hides_early_buckets_behind_backward() -> None:
    model = AlphaBeta(0.0, 1e9)  # 2 ranks: bus factor 1, so t = bytes / 1e9
    buckets = [Bucket(10_000_000, 0.2), Bucket(10_000_000, 1.0)]  # 10 ms each
    # backward 100 ms: the first bucket runs at 20-30 ms, the last starts at 100 ms.
    assert exposed_comm(buckets, 0.1, model, 2, overlap=True) == pytest.approx(0.01)
    # Ranks that share the cores hide nothing.
    assert exposed_comm(buckets, 0.1, model, 2, overlap=False) == pytest.approx(0.02)
    # A backward shorter than the queue: the tail is exposed.
    assert exposed_comm([Bucket(50_000_000, 0.0)], 0.01, model, 2, overlap=True) == pytest.approx(
        0.04
    )
    assert exposed_comm(buckets, 0.1, model, 1, overlap=False) == 0.0


def test_projection_and_verdict() -> None:
    model = AlphaBeta(0.0, 1e9)
    p = project(0.1, 0.1, 0.05, [Bucket(20_000_000, 1.0)], model, 2, overlap=False)
    assert p.exposed_s == pytest.approx(0.02)
    assert p.speedup == pytest.approx(2 * 0.1 / 0.12)
    assert verdict_label(p.efficiency) == "worth it"
    assert verdict_label(0.6) == "marginal"
    assert verdict_label(0.3) == "communication-bound"


def test_step_parts_dominant() -> None:
    parts = StepParts(data=0.01, forward=0.02, backward=0.03, comm=0.05, optimizer=0.001)
    assert parts.dominant() == ("exposed all-reduce", 0.05)
    assert parts.total == pytest.approx(0.111)


def test_ranks_wait_for_the_slowest_one() -> None:
    from ddp_lsp.preflight.commmodel import straggler_wait

    assert straggler_wait(0.010, 1) == 0.0
    # Two ranks with independent steps of sd 10 ms: E[max] - mean = 10 ms / sqrt(pi).
    assert straggler_wait(0.010, 2) == pytest.approx(0.010 / math.sqrt(math.pi), rel=1e-3)
    assert straggler_wait(0.010, 64) == pytest.approx(0.010 * math.sqrt(2 * math.log(64)))
    base = project(0.1, 0.1, 0.05, [], AlphaBeta(0.0, 1e9), 2, overlap=False)
    noisy = project(0.1, 0.1, 0.05, [], AlphaBeta(0.0, 1e9), 2, overlap=False, step_stdev_s=0.01)
    assert noisy.step_s == pytest.approx(base.step_s + straggler_wait(0.01, 2))
