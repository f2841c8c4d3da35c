"""Benchmark: MemoryGrowthMonitor's overhead per training step on CPU (target: <= 2 % of 10 ms).

A real torch training step (MLP forward, backward, SGD step), sized to take about 10 ms on one
thread, runs with and without the monitor attached through an ``optimizer.step`` post-hook, in
alternating blocks so that machine noise hits both alike. Reported:

- the per-step readings (``step()`` with the census off) timed around each call: mean, p50,
  p99, and the mean as a percentage of the step;
- the live-tensor census timed on its own: it runs only within its budget (default 1 % of
  the loop's time), so its share of every step is that budget;
- the total (readings + census budget) against ``--limit-pct``, and, for information, the
  end-to-end difference of the step medians with and without the monitor (noisy on a busy
  machine: it includes scheduling, not only the monitor).

usage: python bench/bench_runtime.py [--steps-per-block 500] [--blocks 3] [--target-ms 10]
       [--width N] [--json FILE]
exit 1 if the overhead per step exceeds --limit-pct (2) of a --target-ms (10 ms) step.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from ddp_lsp.runtime.memory import MemoryGrowthMonitor  # noqa: E402


def make_step(width: int, batch: int = 64) -> tuple[Any, Any]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(width, width), torch.nn.ReLU(), torch.nn.Linear(width, width)
    )
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(batch, width)

    def step() -> None:
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()

    return step, opt


def median_step_ms(step: Any, n: int = 30) -> float:
    times = []
    for _ in range(n):
        t = time.perf_counter()
        step()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e3


def calibrate(target_ms: float) -> int:
    """Width whose step takes about ``target_ms`` (step time grows about as width^2).

    The fastest of three medians is used: on a busy machine the slow ones measure the
    neighbours, not the step.
    """
    width = 512
    for _ in range(5):
        step, _ = make_step(width)
        step()
        ms = min(median_step_ms(step, 10) for _ in range(3))
        if abs(ms - target_ms) < 0.05 * target_ms:
            break
        width = max(64, min(8192, int(width * (target_ms / ms) ** 0.5)))
    return width


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps-per-block", type=int, default=500)
    ap.add_argument("--blocks", type=int, default=3)
    ap.add_argument("--target-ms", type=float, default=10.0)
    ap.add_argument("--limit-pct", type=float, default=2.0)
    ap.add_argument("--width", type=int, help="model width (default: calibrated to --target-ms)")
    ap.add_argument("--json", metavar="FILE")
    args = ap.parse_args()
    torch.set_num_threads(1)  # one core per rank, as in a CPU DDP job; steadier timings
    width = args.width or calibrate(args.target_ms)
    step, opt = make_step(width)
    for _ in range(20):
        step()  # warm up allocator and kernels

    # Unmonitored and monitored runs alternate (A B A B ...); each monitored run is one
    # continuous loop with its own monitor, as in a real job. The per-step readings are timed
    # here with the census off; the census is timed on its own below, because its share of
    # the loop is set by its budget (default 1 %), not by the step.
    direct: list[float] = []
    with_times: list[float] = []
    without_times: list[float] = []
    grew = False
    for _ in range(args.blocks):
        for _ in range(args.steps_per_block):
            t = time.perf_counter()
            step()
            without_times.append(time.perf_counter() - t)
        monitor = MemoryGrowthMonitor(census="off")

        def timed_step(_opt: Any, _a: Any, _k: Any, monitor: Any = monitor) -> None:
            t = time.perf_counter()
            monitor.step()
            direct.append(time.perf_counter() - t)

        handle = opt.register_step_post_hook(timed_step)
        for _ in range(args.steps_per_block):
            t = time.perf_counter()
            step()
            with_times.append(time.perf_counter() - t)
        handle.remove()
        grew = grew or monitor.close().grows
        sampled = monitor.steps_recorded

    census_monitor = MemoryGrowthMonitor()
    census_costs = []
    for i in range(3):
        t = time.perf_counter()
        census_monitor._take_census(i)
        census_costs.append(time.perf_counter() - t)
    census_ms = statistics.median(census_costs) * 1e3
    objects = len(gc.get_objects())
    budget = census_monitor.census_budget

    step_ms = statistics.median(without_times) * 1e3
    mean_us = statistics.fmean(direct) * 1e6
    ordered = sorted(direct)
    p50_us = ordered[len(ordered) // 2] * 1e6
    p99_us = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1e6
    e2e_us = (statistics.median(with_times) - statistics.median(without_times)) * 1e6
    readings_pct = 100 * mean_us / (step_ms * 1e3)
    # The requirement is absolute: at most limit_pct of a target_ms step, per step.
    # The census takes `budget` of the loop's time whatever the step: at a target_ms step
    # that is budget * target_ms per step. The readings cost what they cost per call.
    total_us = mean_us + budget * args.target_ms * 1e3
    allowed_us = args.limit_pct / 100 * args.target_ms * 1e3
    result = {
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "width": width,
        "step_ms_median": round(step_ms, 3),
        "monitor_calls": len(direct),
        "samples_last_block": sampled,
        "step_call_mean_us": round(mean_us, 2),
        "step_call_p50_us": round(p50_us, 2),
        "step_call_p99_us": round(p99_us, 2),
        "readings_pct": round(readings_pct, 3),
        "census_ms": round(census_ms, 2),
        "gc_objects": objects,
        "census_budget_pct": 100 * budget,
        "census_every_steps": round(census_ms / (budget * step_ms)),
        "overhead_total_pct_of_target": round(100 * total_us / (args.target_ms * 1e3), 3),
        "overhead_total_us": round(total_us, 2),
        "allowed_us": round(allowed_us, 2),
        "overhead_e2e_median_us": round(e2e_us, 2),
        "limit_pct": args.limit_pct,
        "flagged_growth": grew,
    }
    print(
        f"step {step_ms:.2f} ms (width {width}, 1 thread). monitor.step() readings: mean "
        f"{mean_us:.1f} us (p50 {p50_us:.1f}, p99 {p99_us:.1f}; {sampled} samples in "
        f"{args.steps_per_block} steps) = {readings_pct:.3f} % of the step. Census: "
        f"{census_ms:.1f} ms over {objects} objects, budget {100 * budget:g} % (one every "
        f"~{result['census_every_steps']} steps). Total at a {args.target_ms:g} ms step: "
        f"{total_us:.1f} us = {result['overhead_total_pct_of_target']:.3f} %; allowed "
        f"{allowed_us:.0f} us ({args.limit_pct} %). End-to-end median difference "
        f"{e2e_us:.1f} us (noisy)."
    )
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    return 0 if total_us <= allowed_us else 1


if __name__ == "__main__":
    sys.exit(main())
