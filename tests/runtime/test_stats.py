"""Properties of the trend statistics that decide "memory grows with the step count" (no torch)."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from ddp_lsp.runtime.stats import analyze_series, mann_kendall_z, theil_sen_slope

WARMUP = 5


def _noise(seed: int, n: int, amplitude: float) -> list[float]:
    # A small deterministic generator: hypothesis varies the seed, the test stays replayable.
    out, x = [], seed or 1
    for _ in range(n):
        x = (1103515245 * x + 12345) % (2**31)
        out.append((x / 2**31 - 0.5) * 2 * amplitude)
    return out


@settings(max_examples=60, deadline=None)
@given(
    slope=st.floats(min_value=4_096, max_value=500_000),
    n=st.integers(min_value=20, max_value=150),
    rel_noise=st.floats(min_value=0.0, max_value=2.0),
    seed=st.integers(min_value=0, max_value=10_000),
    base=st.floats(min_value=0, max_value=1e9),
)
def test_a_linear_leak_is_flagged_with_its_slope(
    slope: float, n: int, rel_noise: float, seed: int, base: float
) -> None:
    # At least 4x the threshold, with noise up to 2 steps' worth of growth each way: closer
    # to the threshold in a 20-step run, a leak and a noisy plateau cannot be told apart.
    noise = _noise(seed, n, rel_noise * slope)
    ys = [base + slope * i + e for i, e in enumerate(noise)]
    r = analyze_series(list(range(n)), ys, warmup_steps=WARMUP, min_slope=1024)
    assert r.grows, r.reason
    assert math.isclose(r.slope_per_step, slope, rel_tol=0.25)


@settings(max_examples=60, deadline=None)
@given(
    period=st.integers(min_value=2, max_value=25),
    amplitude=st.floats(min_value=1e3, max_value=1e8),
    cycles=st.integers(min_value=4, max_value=8),
    phase=st.integers(min_value=0, max_value=24),
)
def test_periodic_memory_is_not_growth(
    period: int, amplitude: float, cycles: int, phase: int
) -> None:
    # e.g. outputs accumulated between evaluations and cleared at each one: a sawtooth.
    n = WARMUP + period * cycles
    ys = [amplitude * ((i + phase) % period) / period for i in range(n)]
    r = analyze_series(list(range(n)), ys, warmup_steps=WARMUP, min_slope=1024)
    assert not r.grows, r


@settings(max_examples=60, deadline=None)
@given(
    fill=st.integers(min_value=1, max_value=40),
    flat=st.integers(min_value=40, max_value=120),
    cap=st.floats(min_value=1e4, max_value=1e9),
    seed=st.integers(min_value=0, max_value=10_000),
)
def test_a_cache_that_fills_then_plateaus_is_not_growth(
    fill: int, flat: int, cap: float, seed: int
) -> None:
    # A caching allocator or a shape-keyed kernel cache: rises, then stays. The plateau is at
    # least as long as the rise, as in any run long enough to judge.
    flat = max(flat, fill + 10)
    noise = _noise(seed, WARMUP + fill + flat, cap * 0.01)
    ys = [cap * min(i, fill) / fill + e for i, e in enumerate(noise)]
    r = analyze_series(list(range(len(ys))), ys, warmup_steps=WARMUP, min_slope=1024)
    assert not r.grows, r


def test_growth_start_is_found_after_a_flat_stretch() -> None:
    ys = [1e6 + (0 if i < 40 else 65536 * (i - 40)) for i in range(100)]
    r = analyze_series(list(range(100)), ys, warmup_steps=WARMUP, min_slope=1024)
    assert r.grows
    assert 38 <= (r.start_step or 0) <= 42
    assert math.isclose(r.slope_per_step, 65536, rel_tol=0.01)


def test_small_growth_below_the_threshold_is_not_flagged() -> None:
    # 8 bytes a step: a Python list of losses as floats, not something to fail a run for.
    ys = [1e6 + 8 * i for i in range(100)]
    r = analyze_series(list(range(100)), ys, warmup_steps=WARMUP, min_slope=1024)
    assert not r.grows and "slope" in r.reason


def test_too_few_steps_is_inconclusive_not_a_pass_in_disguise() -> None:
    r = analyze_series(
        list(range(8)), [float(i * 1e6) for i in range(8)], warmup_steps=WARMUP, min_slope=1
    )
    assert r.inconclusive and not r.grows


def test_warmup_is_excluded() -> None:
    # A big allocation during warm-up (optimizer state on the first step) then flat.
    ys = [0, 5e8, 5e8, 5e8, 5e8] + [5e8] * 30
    r = analyze_series(list(range(len(ys))), ys, warmup_steps=WARMUP, min_slope=1024)
    assert not r.grows and not r.inconclusive


def test_building_blocks() -> None:
    ys = [2.0 * i for i in range(10)]
    ys[7] = 1e6  # one spike (an eval batch) does not move the median slope
    assert theil_sen_slope(list(range(10)), ys) == 2.0
    assert mann_kendall_z(list(range(30))) > 5
    assert mann_kendall_z(list(range(30, 0, -1))) < -5
    assert abs(mann_kendall_z([1.0] * 30)) == 0.0
