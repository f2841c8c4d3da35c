"""Robust trend statistics for per-step memory series (stdlib only, no torch).

The small-run gate must flag memory that grows *with the step count* (a loss kept with its
autograd graph, a list of tensors that only grows) and stay silent on memory that is merely
noisy: the caching allocator filling up and then plateauing, batches of varying size, a
periodic evaluation that allocates and frees a large buffer. One least-squares line cannot
tell these apart, so a series is judged on the steady state (warm-up excluded) by several
robust, independent criteria that a real leak meets and the healthy patterns do not:

- the Theil-Sen slope (median of pairwise slopes) is at least ``min_slope`` per step: immune
  to spikes and to a plateau that covers most of the run;
- the Mann-Kendall trend statistic is significant (``z >= z_min``): the rise is monotone in
  rank order, not one jump;
- the growth persists: the Theil-Sen slope of the last half is still a good fraction of the
  overall slope, and rises significantly on its own (Mann-Kendall z >= 1.65, and by at
  least three times its residual noise): a cache that filled up early has a flat last half,
  whatever the noise makes of its slope;
- the floor rises: the low quantile and the median of the last third exceed those of the first
  third by about what the slope predicts (a sawtooth from periodic work has a flat floor).

Everything here is plain Python so that it can run in the supervisor, which never imports
torch, and be property-tested quickly.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

#: Analysis cost is O(n^2) in the number of points; longer series are thinned evenly.
MAX_POINTS = 240


@dataclass(frozen=True)
class TrendResult:
    """The verdict on one series, with the evidence that led to it."""

    grows: bool
    #: True when there were too few steady-state points to judge either way.
    inconclusive: bool
    #: Theil-Sen slope over the growing part (from ``start_step``), units per step.
    slope_per_step: float
    #: Theil-Sen slope over the whole steady state.
    steady_slope_per_step: float
    #: Theil-Sen slope over the last half of the steady state.
    late_slope_per_step: float
    mann_kendall_z: float
    #: Rise of the low quantile / median from the first third to the last third.
    floor_gain: float
    median_gain: float
    #: The rise the steady slope predicts between the two thirds.
    expected_gain: float
    #: First step of the growing part (hinge fit), when ``grows``.
    start_step: int | None
    first_steady_step: int | None
    points: int
    reason: str


def median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    n = len(ordered)
    if n == 0:
        raise ValueError("median of an empty sequence")
    mid = n // 2
    return float(ordered[mid]) if n % 2 else (ordered[mid - 1] + ordered[mid]) / 2.0


def quantile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated quantile, ``0 <= q <= 1``."""
    ordered = sorted(values)
    if not ordered:
        raise ValueError("quantile of an empty sequence")
    pos = q * (len(ordered) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def theil_sen_slope(xs: Sequence[float], ys: Sequence[float]) -> float:
    """Median of the slopes of all pairs with distinct x (0.0 when there is none)."""
    slopes: list[float] = []
    n = len(xs)
    for i in range(n):
        xi, yi = xs[i], ys[i]
        for j in range(i + 1, n):
            dx = xs[j] - xi
            if dx != 0:
                slopes.append((ys[j] - yi) / dx)
    return median(slopes) if slopes else 0.0


def mann_kendall_z(ys: Sequence[float]) -> float:
    """Mann-Kendall trend statistic as a z-score (positive: increasing), with tie correction."""
    n = len(ys)
    if n < 3:
        return 0.0
    s = 0
    for i in range(n):
        yi = ys[i]
        for j in range(i + 1, n):
            d = ys[j] - yi
            s += (d > 0) - (d < 0)
    ties: dict[float, int] = {}
    for y in ys:
        ties[y] = ties.get(y, 0) + 1
    total = n * (n - 1) * (2 * n + 5)
    for t in ties.values():
        if t > 1:
            total -= t * (t - 1) * (2 * t + 5)
    var = total / 18.0
    if var <= 0:
        return 0.0
    if s > 0:
        return (s - 1) / math.sqrt(var)
    if s < 0:
        return (s + 1) / math.sqrt(var)
    return 0.0


def hinge_start(xs: Sequence[float], ys: Sequence[float]) -> tuple[int, float, float]:
    """Knot index where a flat-then-linear model fits best, its SSE, and a straight line's SSE.

    The model is ``y = a`` before the knot and ``y = a + b (x - x_k)`` after it; for each
    knot ``a`` and ``b`` have a closed form, so the search is O(n) per candidate. Knot 0 is
    the straight line through all points.
    """
    n = len(xs)
    if n < 4:
        return 0, 0.0, 0.0
    best_k, best_sse, line_sse = 0, math.inf, math.inf
    for k in range(0, n - 2):
        xk = xs[k]
        # Regressor u = max(0, x - x_k); fit y = a + b u by ordinary least squares.
        us = [max(0.0, x - xk) for x in xs]
        mu, my = sum(us) / n, sum(ys) / n
        suu = sum((u - mu) ** 2 for u in us)
        if suu == 0:
            continue
        b = sum((u - mu) * (y - my) for u, y in zip(us, ys, strict=True)) / suu
        a = my - b * mu
        sse = sum((y - a - b * u) ** 2 for u, y in zip(us, ys, strict=True))
        if k == 0:
            line_sse = sse
        # Prefer the earliest knot among (numerically) equal fits.
        if sse < best_sse * (1 - 1e-9):
            best_k, best_sse = k, sse
    return best_k, best_sse, line_sse


def _thin(xs: Sequence[float], ys: Sequence[float], limit: int) -> tuple[list[float], list[float]]:
    n = len(xs)
    if n <= limit:
        return list(xs), list(ys)
    idx = sorted({round(i * (n - 1) / (limit - 1)) for i in range(limit)})
    return [xs[i] for i in idx], [ys[i] for i in idx]


def analyze_series(
    steps: Sequence[int],
    values: Sequence[float],
    *,
    warmup_steps: int,
    min_slope: float,
    z_min: float = 3.0,
    late_z_min: float = 1.65,
    min_points: int = 8,
    first_step: int | None = None,
) -> TrendResult:
    """Decide whether ``values`` grows with ``steps`` after the first ``warmup_steps`` steps.

    ``steps`` are step numbers (increasing, not necessarily contiguous: a census may sample only
    some steps); warm-up excludes samples whose step is below ``first_step + warmup_steps``,
    where ``first_step`` defaults to the first sample's step.
    """
    if len(steps) != len(values):
        raise ValueError("steps and values differ in length")
    pairs = sorted(zip(steps, values, strict=True))
    if pairs:
        cut = (pairs[0][0] if first_step is None else first_step) + warmup_steps
        pairs = [(s, v) for s, v in pairs if s >= cut]
    n = len(pairs)
    first = int(pairs[0][0]) if pairs else None
    if n < min_points:
        return TrendResult(
            grows=False,
            inconclusive=True,
            slope_per_step=0.0,
            steady_slope_per_step=0.0,
            late_slope_per_step=0.0,
            mann_kendall_z=0.0,
            floor_gain=0.0,
            median_gain=0.0,
            expected_gain=0.0,
            start_step=None,
            first_steady_step=first,
            points=n,
            reason=f"{n} steady-state samples, need at least {min_points}",
        )
    xs, ys = _thin([float(s) for s, _ in pairs], [float(v) for _, v in pairs], MAX_POINTS)
    n = len(xs)
    slope = theil_sen_slope(xs, ys)
    z = mann_kendall_z(ys)
    half = n // 2
    late = theil_sen_slope(xs[half:], ys[half:])
    late_z = mann_kendall_z(ys[half:])
    # Signal to noise in the last half: the rise its slope implies against the spread of its
    # residuals (MAD, scaled to a standard deviation). Noise can tilt a flat stretch's slope;
    # it cannot make that tilt add up to several times the noise itself.
    residuals = [y - late * x for x, y in zip(xs[half:], ys[half:], strict=True)]
    centre = median(residuals)
    noise = 1.4826 * median([abs(r - centre) for r in residuals])
    late_rise = late * (xs[-1] - xs[half])
    third = max(n // 3, 2)
    head_x, head_y = xs[:third], ys[:third]
    tail_x, tail_y = xs[-third:], ys[-third:]
    expected = slope * (median(tail_x) - median(head_x))
    floor_gain = quantile(tail_y, 0.1) - quantile(head_y, 0.1)
    median_gain = median(tail_y) - median(head_y)

    failed: list[str] = []
    if slope < min_slope:
        failed.append(f"slope {slope:.4g}/step < {min_slope:.4g}")
    if z < z_min:
        failed.append(f"Mann-Kendall z {z:.2f} < {z_min}")
    if late < max(min_slope, 0.5 * slope) or late_z < late_z_min or late_rise < 3 * noise:
        failed.append(
            f"last-half slope {late:.4g}/step (z {late_z:.2f}, rise {late_rise:.4g} vs noise "
            f"{noise:.4g}): growth does not persist"
        )
    if floor_gain < 0.5 * expected or median_gain < 0.5 * expected:
        failed.append(
            f"floor rose {floor_gain:.4g} and median {median_gain:.4g}, slope predicts {expected:.4g}"
        )
    grows = not failed
    start: int | None = None
    grow_slope = slope
    if grows:
        k, hinge_sse, line_sse = hinge_start(xs, ys)
        # A later start only when a flat stretch really fits better than one straight line:
        # otherwise noise alone would move the start and inflate the slope.
        if k > 0 and n - k >= 3 and hinge_sse < 0.5 * line_sse:
            start = int(xs[k])
            grow_slope = theil_sen_slope(xs[k:], ys[k:])
        else:
            start = int(xs[0])
    return TrendResult(
        grows=grows,
        inconclusive=False,
        slope_per_step=grow_slope,
        steady_slope_per_step=slope,
        late_slope_per_step=late,
        mann_kendall_z=z,
        floor_gain=floor_gain,
        median_gain=median_gain,
        expected_gain=expected,
        start_step=start,
        first_steady_step=first,
        points=n,
        reason="grows: every criterion met" if grows else "; ".join(failed),
    )


@dataclass(frozen=True)
class StepGrowth:
    """Does a census series (live tensors, graph nodes, tensor bytes) grow at every step?

    Census series are exact counts read at the same point of every step (after
    ``optimizer.step()``), so a healthy loop gives the same value step after step and a leak
    adds to it step after step. That makes a short series decisive where a byte series from
    the allocator is not: no fit, no significance test, just the steps themselves.
    """

    grows: bool
    inconclusive: bool
    #: Net change per step over the judged window.
    rate_per_step: float
    #: Intervals (between consecutive judged samples) in which the value rose / fell.
    rising: int
    falling: int
    intervals: int
    first_step: int | None
    last_step: int | None
    reason: str


def step_growth(
    steps: Sequence[int],
    values: Sequence[float],
    *,
    warmup_steps: int,
    min_rate: float,
    first_step: int | None = None,
    min_points: int = 5,
    every: float = 0.75,
) -> StepGrowth:
    """Decide whether ``values`` grows at (nearly) every step after the warm-up.

    Grows when, over the samples from ``first_step + warmup_steps`` on (at least
    ``min_points`` of them):

    - it rose in at least ``every`` of the intervals between consecutive samples;
    - it rose in both halves of the window (a cache that filled early is flat later);
    - what it lost in falling intervals is under a tenth of what it gained (a list cleared
      every few steps is a sawtooth, not a leak);
    - its net change is at least ``min_rate`` per step.
    """
    if len(steps) != len(values):
        raise ValueError("steps and values differ in length")
    pairs = sorted(zip(steps, values, strict=True))
    if pairs:
        cut = (pairs[0][0] if first_step is None else first_step) + warmup_steps
        pairs = [(s, v) for s, v in pairs if s >= cut]
    n = len(pairs)
    if n < min_points:
        return StepGrowth(
            grows=False,
            inconclusive=True,
            rate_per_step=0.0,
            rising=0,
            falling=0,
            intervals=max(n - 1, 0),
            first_step=int(pairs[0][0]) if pairs else None,
            last_step=int(pairs[-1][0]) if pairs else None,
            reason=f"{n} steady-state censuses, need at least {min_points}",
        )
    xs = [int(s) for s, _ in pairs]
    ys = [float(v) for _, v in pairs]
    deltas = [b - a for a, b in zip(ys, ys[1:], strict=False)]
    rising = sum(1 for d in deltas if d > 0)
    falling = sum(1 for d in deltas if d < 0)
    gained = sum(d for d in deltas if d > 0)
    lost = -sum(d for d in deltas if d < 0)
    span = xs[-1] - xs[0]
    rate = (ys[-1] - ys[0]) / span if span > 0 else 0.0
    mid = len(ys) // 2
    failed: list[str] = []
    need = math.ceil(every * len(deltas))
    if rising < need:
        failed.append(f"rose in {rising} of {len(deltas)} intervals, need {need}")
    if not (ys[mid] > ys[0] and ys[-1] > ys[mid]):
        failed.append("did not rise in both halves")
    if lost > 0.1 * gained:
        failed.append(f"fell by {lost:.4g} against a rise of {gained:.4g}")
    if rate < min_rate:
        failed.append(f"net {rate:.4g}/step < {min_rate:.4g}")
    return StepGrowth(
        grows=not failed,
        inconclusive=False,
        rate_per_step=rate,
        rising=rising,
        falling=falling,
        intervals=len(deltas),
        first_step=xs[0],
        last_step=xs[-1],
        reason="grows at every step" if not failed else "; ".join(failed),
    )


def delta_noise_floor(
    steps: Sequence[int], values: Sequence[float], *, sigmas: float = 3.0
) -> float:
    """The per-step growth that noise alone can fake on this series: ``sigmas`` standard errors.

    From the step-to-step changes of the series itself (the allocator's jumps, the run's
    variance): a mean slope over ``k`` intervals whose changes scatter with deviation ``sd``
    is uncertain by ``sd / sqrt(k)``. ``sd`` is estimated robustly (the interquartile range
    / 1.349, or 1.4826 x the median absolute deviation if larger), so one garbage collection
    in the middle of the run does not raise the floor above a real leak, while an allocator
    that grows its arena by a page every few steps (most changes 0, some 4 KiB) does.
    """
    pairs = sorted(zip(steps, values, strict=True))
    rates = []
    for (s0, v0), (s1, v1) in zip(pairs, pairs[1:], strict=False):
        if s1 > s0:
            rates.append((v1 - v0) / (s1 - s0))
    if len(rates) < 2:
        return math.inf
    centre = median(rates)
    mad_sd = 1.4826 * median([abs(r - centre) for r in rates])
    iqr_sd = (quantile(rates, 0.75) - quantile(rates, 0.25)) / 1.349
    sd = max(mad_sd, iqr_sd)
    return sigmas * sd / math.sqrt(len(rates))
