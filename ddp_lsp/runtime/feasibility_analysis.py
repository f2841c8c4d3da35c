"""The analysis of ``ddp-lsp feasibility``'s two runs: the step split, the model, the projection.

From the ranks' results (:mod:`ddp_lsp.runtime.feasibility_hook`): each rank's mean step split
into data wait, forward, backward compute, exposed all-reduce and optimizer; DDP's buckets
with their ready times; on CPU, what one rank's step becomes when the ranks share the host's
cores; and the all-reduce cost model (:mod:`ddp_lsp.preflight.commmodel`) fitted on the sweep,
which predicts the measured speed-up from the one-process run and projects to more ranks and
nodes. It reads only the results it is given, a preflight report when one is named, and
``OMP_NUM_THREADS``; it never runs anything.
"""

from __future__ import annotations

import json
import os
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ddp_lsp.preflight.commmodel import (
    AlphaBeta,
    Bucket,
    Projection,
    StepParts,
    fit_alpha_beta,
    project,
    straggler_wait,
)
from ddp_lsp.runtime.feasibility_entry import CommandError, Entry

MiB = 1 << 20


# -- analysis -----------------------------------------------------------------------------------


def mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def step_parts(rank: dict[str, Any], phase: str = "main") -> StepParts:
    """The mean step of one rank, split: the step time is the phase's wall time over its steps
    (true throughput, pauses included); data, backward and optimizer are measured; exposed
    all-reduce is the tail of backward after the last bucket was ready; the rest is forward."""
    recs = rank["records"][phase]
    step = rank["wall"][phase] / rank["steps"][phase]
    data = mean([r["data"] for r in recs])
    exposed = mean([r["exposed"] or 0.0 for r in recs])
    if rank.get("cuda") and any("backward_gpu" in r for r in recs):
        backward = mean([r.get("backward_gpu", r["backward"]) for r in recs])
    else:
        backward = mean([r["backward"] for r in recs])
    optimizer = mean([r["optimizer"] for r in recs])
    bwd_compute = max(0.0, backward - exposed)
    forward = max(0.0, step - data - backward - optimizer)
    return StepParts(data, forward, bwd_compute, exposed, optimizer)


def step_stdev(rank: dict[str, Any], phase: str = "main") -> float:
    """Standard deviation of the step time (consecutive optimizer steps' end times)."""
    ends = [r["t_end"] for r in rank["records"][phase] if "t_end" in r]
    steps = [b - a for a, b in zip(ends, ends[1:], strict=False)]
    return statistics.stdev(steps) if len(steps) >= 3 else 0.0


def cpu_rank_step(
    single: dict[str, Any], nproc: int, t_phase: float, other_now: float | None = None
) -> tuple[float, str]:
    """One CPU rank's step when ``nproc`` ranks share the host's cores, from the one-process
    run at a rank's thread count (``t_phase``).

    The rank's main process computed with ``k`` threads and got ``s`` cores on average (its CPU
    seconds over wall time). If ``s < k`` something else was runnable: with a fair scheduler
    ``s = k*C/(L+k)`` gives the other load ``L`` on ``C`` cores (none when it got ``k``). ``nproc`` ranks of ``k``
    threads then get ``k*C/(L+nproc*k)`` cores each (at most ``k``), and a step takes longer in
    proportion. The ranks' DataLoader workers count too: all of them together cannot use more
    than the ``C`` cores (``nproc`` times the run's CPU seconds per step, workers included).

    ``L`` is the load of the one-process run's time. When the host's other load was measured
    in both runs (``other_load`` of the phase, and ``other_now`` over the DDP run's measured
    steps: :mod:`ddp_lsp.runtime.hostload`) and moved by half a task or more, the note says so:
    on a shared host the neighbours' load moves between the two runs, and the prediction is
    only as good as the assumption that it did not.
    """
    phase = "shared" if single["steps"].get("shared") else "main"
    steps = single["steps"][phase]
    wall = single["wall"][phase]
    cores = int(single.get("cpus") or 0)
    own = (single.get("own_cpu_s") or {}).get(phase)
    total = (single.get("cpu_s") or {}).get(phase)
    k = int(single.get("shared_threads") or single.get("threads") or 1)
    if not cores or not own or wall <= 0:
        return t_phase, ""
    got = min(float(k), own / wall)
    # A process that got all the cores it asked for tells nothing about other load: take none.
    other = max(0.0, cores * k / got - k) if 0 < got < 0.98 * k else 0.0
    share = k * min(1.0, cores / (other + nproc * k))
    t = t_phase * max(1.0, got / share) if share > 0 else t_phase
    why = ""
    if t > t_phase * 1.02:
        why = (
            f"one process got {got:.2f} of {cores} cores at {k} thread(s) (other load ~{other:.1f}"
            f" runnable); {nproc} ranks get ~{share:.2f} each: a rank steps in ~{fmt_ms(t)}"
        )
    if total and steps:
        bound = nproc * (total / steps) / cores
        if bound > t:
            why = (
                f"{nproc} ranks need {nproc * total / steps * 1e3:.0f} ms of CPU per step (their "
                f"DataLoader workers included) from {cores} cores: a rank steps in >= {fmt_ms(bound)}"
            )
            t = bound
    then = (single.get("other_load") or {}).get(phase)
    if then is not None and other_now is not None and abs(other_now - then) >= 0.5:
        # Said, not modelled: scaling the ranks' share by the measured change moved the
        # prediction the right way in two of four runs on the shared 2-CPU host and the wrong
        # way in two; a runnable count is not the weight the scheduler gives those tasks.
        moved = (
            f"the host's other load went from ~{then:.1f} to ~{other_now:.1f} runnable tasks "
            "between the one-process run and the DDP run (measured): the prediction assumes "
            "the first"
        )
        why = f"{why}; {moved}" if why else moved
    return t, why


def buckets_of(rank: dict[str, Any]) -> list[Bucket]:
    """DDP's buckets as the comm hook saw them in the steady steps (DDP rebuilds its buckets
    after the first iteration), with each bucket's median ready time within backward."""
    recs = rank["records"]["main"]
    by_index: dict[int, list[tuple[int, float]]] = {}
    rounds = max(1, round(mean([r["comm_rounds"] for r in recs]) or 1))
    for r in recs:
        bwd = r["backward"] - (r["exposed"] or 0.0)
        seen: set[int] = set()
        for index, nbytes, ready, _done in r["buckets"]:
            if index in seen:
                continue  # accumulation without no_sync: counted through ``rounds``
            seen.add(index)
            frac = min(1.0, max(0.0, (ready or 0.0) / bwd)) if bwd > 0 else 1.0
            by_index.setdefault(index, []).append((nbytes, frac))
    out = []
    for index in sorted(by_index):
        items = by_index[index]
        out.append(Bucket(items[-1][0], statistics.median(f for _, f in items)))
    return out * rounds


@dataclass
class Analysis:
    entry: Entry
    single: dict[str, Any]
    multi: dict[str, Any] | None
    nproc: int
    device: str
    t1: float
    t1_shared: float
    parts1: StepParts
    parts_n: StepParts | None
    t_n: float | None
    measured_speedup: float | None
    buckets: list[Bucket]
    grad_bytes: int
    model: AlphaBeta | None
    model_source: str
    predicted: Projection | None
    projections: list[Projection]
    node_projections: list[Projection]
    advice: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def batch(self) -> int | None:
        value = self.single.get("batch")
        return int(value) if value else None


def _sweep_points(rank: dict[str, Any]) -> list[tuple[float, float]]:
    return [(float(b), float(t)) for b, t in rank.get("sweep") or []]


def preflight_sweep(path: Path) -> tuple[list[tuple[float, float]], int, str]:
    """The dist.busbw sweep of a ``ddp-lsp preflight --json`` file: (bytes, seconds) points."""
    data = json.loads(path.read_text(encoding="utf-8"))
    for probe in data.get("probes", []):
        if probe.get("id") == "dist.busbw":
            values = probe.get("value") or {}
            rows = values.get("sweep") or []
            points = [(float(r["bytes"]), float(r["time_us"]) / 1e6) for r in rows]
            if points:
                return points, int(values.get("world_size", 2)), str(values.get("backend", "?"))
    raise CommandError(f"{path}: no dist.busbw sweep in this preflight report")


def analyse(
    entry: Entry,
    single: dict[str, Any],
    multi: dict[int, dict[str, Any]] | None,
    nproc: int,
    *,
    sweep: tuple[list[tuple[float, float]], int, str] | None = None,
    inter_node: AlphaBeta | None = None,
    project_ranks: Sequence[int] = (2, 4, 8, 16),
    project_nodes: Sequence[int] = (2, 4, 8),
) -> Analysis:
    cuda = bool(single.get("cuda"))
    device = "GPU" if cuda else "CPU"
    t1 = single["wall"]["main"] / single["steps"]["main"]
    t1_shared = (
        single["wall"]["shared"] / single["steps"]["shared"]
        if single["steps"].get("shared")
        else t1
    )
    parts1 = step_parts(single)
    buckets = buckets_of(single)
    notes: list[str] = []
    if not buckets and single.get("ddp"):
        notes.append("DDP's comm hook never ran in the one-process run")
    if not single.get("ddp"):
        notes.append(
            "the one-process run built no DistributedDataParallel: gradient buckets are "
            "taken from the DDP run"
        )
    rank0 = multi.get(0) if multi else None
    if not buckets and rank0 is not None:
        buckets = buckets_of(rank0)
    grad_bytes = sum(b.nbytes for b in buckets)
    model: AlphaBeta | None = None
    model_source = ""
    around = [float(b.nbytes) for b in buckets]
    if sweep is not None:
        points, world, backend = sweep
        model = fit_alpha_beta(
            points, world, around, f"preflight dist.busbw ({backend}, {world} ranks)"
        )
        model_source = model.source
    elif rank0 is not None and _sweep_points(rank0):
        backend = str(rank0.get("backend", "?"))
        model = fit_alpha_beta(
            _sweep_points(rank0),
            nproc,
            around,
            f"all_reduce sweep at the bucket sizes on the job's process group "
            f"({backend}, {nproc} ranks)",
        )
        model_source = model.source
    parts_n = t_n = measured = None
    if multi:
        per_rank = {r: step_parts(d) for r, d in multi.items()}
        # Ranks wait for each other every step: the slowest sets the pace.
        t_n = max(d["wall"]["main"] / d["steps"]["main"] for d in multi.values())
        parts_n = per_rank[0]
        measured = nproc * t1 / t_n
        if measured > nproc * 1.1:
            notes.append(
                f"more than x{nproc}: one process ran slower per sample than one rank does"
                + (
                    f" (its {single.get('threads')} threads contend for the cores; a rank "
                    f"runs {cpu_ranks_threads(nproc)}; compare with OMP_NUM_THREADS set)"
                    if not cuda
                    else ""
                )
            )
        b1, bn = single.get("batch"), rank0.get("batch") if rank0 else None
        if b1 and bn and b1 != bn:
            measured = nproc * t1 * bn / (t_n * b1)
            notes.append(f"per-rank batch {bn} under DDP vs {b1} alone: speed-up in samples/s")
    # CPU ranks share the host's cores: one rank computes at the thread count it gets there
    # (measured in the one-process run's extra phase); a GPU rank owns its device.
    rank_compute = t1_shared if not cuda else t1
    if not cuda:
        # The host's other load over the DDP run's measured steps (not the job's own timing).
        other_now = (rank0.get("other_load") or {}).get("main") if rank0 is not None else None
        rank_compute, why = cpu_rank_step(single, nproc, rank_compute, other_now)
        if why:
            notes.append(why)
    bwd_for_overlap = parts1.backward
    # The spread of the steps a rank will run: at a rank's thread count where that was timed
    # (the full-thread steps of an oversubscribed host spread far more than a rank's).
    sigma = step_stdev(single, "shared" if single["steps"].get("shared") else "main")
    predicted = None
    comm_scale = 1.0
    projections: list[Projection] = []
    node_projections: list[Projection] = []
    if model is not None and buckets:
        predicted = project(
            t1, rank_compute, bwd_for_overlap, buckets, model, nproc, cuda, 1, 1.0, sigma
        )
        # Beyond the local ranks: each rank computes as the measured DDP ranks did (their
        # step without the exposed all-reduce), the all-reduce is the model's. CPU ranks
        # expose all of it, so the model is calibrated to what the job's all-reduce cost
        # (cores shared with compute, waits for the slower rank) against the sweep's.
        base = (t_n - parts_n.comm) if (t_n is not None and parts_n is not None) else rank_compute
        bwd = parts_n.backward if parts_n is not None else bwd_for_overlap
        modelled = predicted.comm_s
        if not cuda and parts_n is not None and modelled > 0:
            comm_scale = parts_n.comm / modelled
            if comm_scale > 1.5 or comm_scale < 0.67:
                notes.append(
                    f"the all-reduce inside the job cost x{comm_scale:.1f} what the sweep "
                    f"measured ({fmt_ms(parts_n.comm)} vs {fmt_ms(modelled)} per step): ranks share "
                    "the cores with compute and wait for the slower rank; projections use "
                    "the job's cost"
                )
        for n in sorted(set(project_ranks) | {nproc}):
            # The measured base already waited for the slower of the local ranks.
            extra = max(0.0, straggler_wait(sigma, n) - straggler_wait(sigma, nproc))
            p = project(t1, base, bwd, buckets, model, n, cuda, 1, comm_scale)
            projections.append(
                Projection(
                    n,
                    1,
                    p.step_s + extra,
                    p.comm_s,
                    p.exposed_s + extra,
                    n * t1 / (p.step_s + extra) if p.step_s + extra > 0 else 0.0,
                )
            )
        if inter_node is not None:
            for m in project_nodes:
                n = m * nproc
                p = project(t1, base, bwd, buckets, inter_node, n, cuda)
                node_projections.append(
                    Projection(n, m, p.step_s, p.comm_s, p.exposed_s, p.speedup)
                )
    analysis = Analysis(
        entry,
        single,
        rank0,
        nproc,
        device,
        t1,
        t1_shared,
        parts1,
        parts_n,
        t_n,
        measured,
        buckets,
        grad_bytes,
        model,
        model_source,
        predicted,
        projections,
        node_projections,
        notes=notes,
    )
    analysis.advice = advise(analysis)
    return analysis


def cpu_ranks_threads(nproc: int) -> int:
    """Threads per rank when ``nproc`` CPU ranks run under torchrun: torchrun sets
    OMP_NUM_THREADS=1 for several processes unless the user set it."""
    value = os.environ.get("OMP_NUM_THREADS", "")
    if value.isdigit() and int(value) > 0:
        return int(value)
    return 1 if nproc > 1 else max(1, len(os.sched_getaffinity(0)))


def fmt_ms(seconds: float) -> str:
    return f"{seconds * 1e3:.1f} ms"


def fmt_bytes(n: float) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{int(n)} B"


def advise(a: Analysis) -> list[str]:
    """What to change, each with the number that motivates it."""
    out: list[str] = []
    ddp = (a.multi or a.single).get("ddp") or {}
    parts = a.parts_n or a.parts1
    step = a.t_n or a.t1
    comm_share = parts.comm / step if step else 0.0
    model = a.model
    n = a.nproc
    if model is not None and a.buckets and comm_share >= 0.1:
        modelled = sum(model.time(b.nbytes, n) for b in a.buckets)
        # What the all-reduce costs in this job: measured where there was a DDP run, else
        # the model's price; savings are scaled the same way.
        comm = parts.comm if a.parts_n is not None else modelled
        scale = comm / modelled if modelled > 0 else 1.0
        out.append(
            f"bigger per-rank batch: the all-reduce costs ~{fmt_ms(comm)} per step whatever the "
            f"batch, now {comm_share:.0%} of the step; twice the batch halves that share"
        )
        out.append(
            "gradient accumulation under `with model.no_sync():` for k-1 of every k "
            f"micro-batches: one all-reduce per k (k=4 skips 3 of 4, ~{fmt_ms(comm)} each)"
        )
        if str(ddp.get("grad_dtype", "float32")) == "float32" and a.grad_bytes:
            half = sum(model.time(b.nbytes / 2, n) for b in a.buckets)
            out.append(
                "bf16 gradients on the wire: `model.register_comm_hook(None, "
                "default_hooks.bf16_compress_hook)` (NCCL) halves "
                f"{fmt_bytes(a.grad_bytes)} -> {fmt_bytes(a.grad_bytes / 2)}, "
                f"~{fmt_ms((modelled - half) * scale)} less"
            )
        latency = len(a.buckets) * 2 * (n - 1) * model.alpha_s
        if modelled > 0 and latency / modelled > 0.3:
            out.append(
                f"larger bucket_cap_mb: {len(a.buckets)} buckets pay {fmt_ms(latency)} of latency "
                f"({latency / modelled:.0%} of the all-reduce's price)"
            )
        elif len(a.buckets) == 1 and a.device == "GPU" and a.grad_bytes > 2 * MiB:
            out.append("smaller bucket_cap_mb: one bucket starts reducing only when backward ends")
    if ddp and not ddp.get("gradient_as_bucket_view") and a.grad_bytes:
        out.append(
            "DistributedDataParallel(..., gradient_as_bucket_view=True): saves a copy of "
            f"{fmt_bytes(a.grad_bytes)} of gradients per step and that much memory"
        )
    if ddp.get("find_unused_parameters"):
        out.append(
            "find_unused_parameters=True walks the autograd graph every step: set it False "
            "(or static_graph=True) if every parameter gets a gradient"
        )
    recs = (a.multi or a.single)["records"]["main"]
    calls = mean([r["backward_calls"] for r in recs])
    rounds = mean([r["comm_rounds"] for r in recs])
    if calls > 1.5 and rounds > 1.5:
        out.append(
            f"{calls:.0f} backward passes per optimizer step and {rounds:.0f} all-reduces: "
            "accumulate under `model.no_sync()` so only the last micro-batch reduces"
        )
    if step and parts.data / step >= 0.15:
        out.append(
            f"the loop waits {fmt_ms(parts.data)} per step for data ({parts.data / step:.0%}): "
            "more DataLoader workers, pin_memory=True, persistent_workers=True"
        )
    return out
