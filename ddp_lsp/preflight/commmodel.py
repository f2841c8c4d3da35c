"""The all-reduce cost model behind "is DDP worth it": alpha-beta ring timing at DDP's buckets.

Pure (stdlib only): the ``feasibility`` command, the preflight's quick estimate and the tests
share it. The model, in nccl-tests' terms:

- A ring all-reduce of ``b`` bytes over ``n`` ranks takes ``2(n-1)`` latency hops and moves
  ``2(n-1)/n * b`` bytes over each link: ``t(b, n) = 2(n-1)*alpha + 2(n-1)/n * b / B`` where
  ``B`` is the *bus* bandwidth (nccl-tests' busbw) and ``alpha`` the per-hop latency.
- ``alpha`` and ``B`` are fitted on a measured sweep (size -> seconds) by least squares on the
  relative error, over the sizes around the real bucket sizes, so that both the many small
  buckets (latency) and the big ones (bandwidth) are priced from what was measured there,
  not from the peak of the sweep.
- DDP reduces one bucket at a time, each as soon as its gradients are ready during backward.
  Where the ranks own their device (GPUs) that communication overlaps the rest of backward:
  :func:`exposed_comm` replays the buckets' ready times through one communication stream and
  returns what is left after backward ends. Where the ranks share the host's cores (CPU ranks
  with gloo) communication competes with compute for the same cores, and nothing is hidden.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


def bus_factor(world: int) -> float:
    """nccl-tests' all_reduce bus bandwidth factor 2(n-1)/n: what each link actually carries."""
    return 2 * (world - 1) / world


@dataclass(frozen=True)
class AlphaBeta:
    """Ring all-reduce cost: ``alpha_s`` per hop, ``busbw_Bps`` bus bandwidth (bytes/s)."""

    alpha_s: float
    busbw_Bps: float
    #: How the numbers were obtained (for the report): "fit of N sizes on K ranks" ...
    source: str = ""

    def time(self, nbytes: float, world: int) -> float:
        if world < 2 or nbytes <= 0:
            return 0.0
        return 2 * (world - 1) * self.alpha_s + bus_factor(world) * nbytes / self.busbw_Bps


def fit_alpha_beta(
    points: Sequence[tuple[float, float]],
    world: int,
    around: Sequence[float] = (),
    source: str = "",
) -> AlphaBeta:
    """Fit ``t = 2(n-1)*alpha + 2(n-1)/n * b / B`` to measured ``(bytes, seconds)`` points.

    ``around``: the sizes the model will be asked about (the real buckets); points more than
    16x away from all of them are dropped when enough remain, since a CPU all-reduce is not
    linear over four decades (caches), and what matters is the cost near the buckets.
    Least squares on the relative error, so a 64 KiB point counts as much as a 64 MiB one.
    """
    if world < 2:
        raise ValueError("an all-reduce fit needs at least 2 ranks")
    pts = [(float(b), float(t)) for b, t in points if b > 0 and t > 0 and math.isfinite(t)]
    if not pts:
        raise ValueError("no usable sweep points")
    if around:
        near = [p for p in pts if any(a > 0 and 1 / 16 <= p[0] / a <= 16 for a in around)]
        if len(near) >= 2:
            pts = near
    hops = 2 * (world - 1)
    factor = bus_factor(world)
    if len(pts) == 1:
        b, t = pts[0]
        return AlphaBeta(0.0, factor * b / t, source or "one size, no latency term")
    # Weighted linear least squares of t = a + c*b with weights 1/t^2.
    sw = swb = swbb = swt = swbt = 0.0
    for b, t in pts:
        w = 1.0 / (t * t)
        sw += w
        swb += w * b
        swbb += w * b * b
        swt += w * t
        swbt += w * b * t
    det = sw * swbb - swb * swb
    if det <= 0:
        a, c = 0.0, sum(t / b for b, t in pts) / len(pts)
    else:
        a = (swbb * swt - swb * swbt) / det
        c = (sw * swbt - swb * swt) / det
    if c <= 0:
        # Time does not grow with size over these points (noise, or all in the latency
        # regime): take the largest point's bandwidth and the smallest point's latency.
        b_hi, t_hi = max(pts)
        c = t_hi / b_hi
        a = 0.0
    if a < 0:
        # A negative intercept has no meaning: refit through the origin.
        a = 0.0
        c = sum((t / b) for b, t in pts) / len(pts)
    return AlphaBeta(a / hops, factor / c, source or f"fit of {len(pts)} sizes on {world} ranks")


@dataclass(frozen=True)
class Bucket:
    """One DDP bucket as the comm hook saw it: its size and when its gradients were ready,
    as a fraction of the backward pass (0 = backward started, 1 = backward compute ended)."""

    nbytes: int
    ready_frac: float


def comm_time(buckets: Sequence[Bucket], model: AlphaBeta, world: int) -> float:
    """Seconds of all-reduce per step: every bucket, one after another."""
    return sum(model.time(b.nbytes, world) for b in buckets)


def exposed_comm(
    buckets: Sequence[Bucket],
    backward_s: float,
    model: AlphaBeta,
    world: int,
    overlap: bool,
) -> float:
    """The all-reduce time that backward does not hide.

    ``overlap``: whether communication runs beside backward compute (a rank with its own
    device: NCCL on a side stream). DDP launches bucket ``i`` when its gradients are ready,
    and buckets go through one communication queue in order; the step waits for the last.
    """
    if world < 2 or not buckets:
        return 0.0
    if not overlap:
        return comm_time(buckets, model, world)
    free = 0.0
    for b in sorted(buckets, key=lambda x: x.ready_frac):
        start = max(free, b.ready_frac * backward_s)
        free = start + model.time(b.nbytes, world)
    return max(0.0, free - backward_s)


@dataclass(frozen=True)
class StepParts:
    """Seconds per step of one rank, split the way the report shows it."""

    data: float
    forward: float  # forward, loss and the rest of the host loop
    backward: float  # backward compute (all-reduce time excluded)
    comm: float  # exposed all-reduce: what the step waited for after backward
    optimizer: float

    @property
    def total(self) -> float:
        return self.data + self.forward + self.backward + self.comm + self.optimizer

    def dominant(self) -> tuple[str, float]:
        names = {
            "data loading wait": self.data,
            "forward (and the rest of the loop)": self.forward,
            "backward compute": self.backward,
            "exposed all-reduce": self.comm,
            "optimizer step": self.optimizer,
        }
        name = max(names, key=lambda k: names[k])
        return name, names[name]


#: E[max of n standard normals] for small n (order statistics); sqrt(2 ln n) beyond.
_EXPECTED_MAX = {1: 0.0, 2: 0.5642, 3: 0.8463, 4: 1.0294, 8: 1.4236, 16: 1.7660}


def straggler_wait(step_stdev_s: float, ranks: int) -> float:
    """Seconds per step that DDP ranks wait for the slowest one: every step ends with a
    collective, so a step takes the max of n ranks' step times. With independent step times of
    standard deviation sigma, E[max] - mean = sigma * E[max of n standard normals]."""
    if ranks < 2 or step_stdev_s <= 0:
        return 0.0
    factor = _EXPECTED_MAX.get(ranks)
    if factor is None:
        factor = math.sqrt(2 * math.log(ranks))
    return step_stdev_s * factor


@dataclass(frozen=True)
class Projection:
    ranks: int
    nodes: int
    step_s: float
    comm_s: float
    exposed_s: float
    speedup: float

    @property
    def efficiency(self) -> float:
        return self.speedup / self.ranks if self.ranks else 0.0


def project(
    single_step_s: float,
    rank_compute_s: float,
    backward_s: float,
    buckets: Sequence[Bucket],
    model: AlphaBeta,
    ranks: int,
    overlap: bool,
    nodes: int = 1,
    comm_scale: float = 1.0,
    step_stdev_s: float = 0.0,
) -> Projection:
    """Speed-up of ``ranks`` data-parallel ranks over one process, each rank running the same
    per-rank batch: ``ranks * t_single / (t_rank_compute + exposed all-reduce)``.

    ``comm_scale``: what the all-reduce cost inside the real job relative to the sweep (ranks
    that share cores with compute, waits for a slower rank); 1 when not calibrated.
    ``step_stdev_s``: the step-to-step spread of one process; the ranks wait for the slowest
    (:func:`straggler_wait`), counted with the exposed all-reduce where the wait shows up."""
    comm = comm_time(buckets, model, ranks) * comm_scale
    exposed = exposed_comm(buckets, backward_s, model, ranks, overlap) * comm_scale
    exposed += straggler_wait(step_stdev_s, ranks)
    step = rank_compute_s + exposed
    speedup = ranks * single_step_s / step if step > 0 else 0.0
    return Projection(ranks, nodes, step, comm, exposed, speedup)


def verdict_label(efficiency: float) -> str:
    """Scaling efficiency (speed-up / ranks) -> the word the report leads with."""
    if efficiency >= 0.75:
        return "worth it"
    if efficiency >= 0.5:
        return "marginal"
    return "communication-bound" if efficiency > 0 else "no speed-up"
