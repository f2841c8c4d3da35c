"""Probes that start real ranks: dist.handshake, dist.busbw, feasibility.

The ranks are forked and collected by :mod:`ddp_lsp.preflight.probes.ranks` (the rank harness,
shared with dist.correctness); this module is what each probe runs in them and how it judges
the results.
"""

from __future__ import annotations

import glob
import math
import os
import re
import tempfile
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from ddp_lsp.preflight.commmodel import fit_alpha_beta
from ddp_lsp.preflight.probes.base import Outcome, Probe, ProbeContext, fmt_bytes, ok, skip
from ddp_lsp.preflight.probes.ranks import RankEnv, plan_ranks, run_ranks
from ddp_lsp.preflight.schema import Status

MiB = 1 << 20

# --------------------------------------------------------------------------- dist.handshake


def _handshake_body(env: RankEnv) -> dict[str, Any]:
    torch, dist = env.torch, env.dist
    t = torch.full((8,), float(env.rank + 1), device=env.device)
    dist.all_reduce(t)
    expected = env.world_size * (env.world_size + 1) / 2
    correct = bool(torch.all(t == expected).item())
    if env.stall:
        while True:  # joined, reduced, then never reaches the barrier: a hung rank
            time.sleep(3600)
    group = None if env.backend == "gloo" else dist.new_group(backend="gloo")
    t0 = time.perf_counter()
    error = None
    try:
        dist.monitored_barrier(
            group=group, timeout=timedelta(seconds=env.timeout_s), wait_all_ranks=True
        )
    except RuntimeError as exc:
        error = str(exc)
    out: dict[str, Any] = {
        "all_reduce_ok": correct,
        "all_reduce_value": float(t[0].item()),
        "barrier_s": time.perf_counter() - t0,
        "device": str(env.device),
    }
    if error is not None:
        out["barrier_error"] = error[:1000]
    return out


def missing_from_barrier(message: str) -> list[int]:
    """Ranks named by ``monitored_barrier``: 'Ranks 1, 3 failed to pass monitoredBarrier'."""
    m = re.search(r"Ranks?\s+([\d,\s]+?)\s+failed to pass monitoredBarrier", message)
    return [int(x) for x in re.findall(r"\d+", m.group(1))] if m else []


def probe_handshake(ctx: ProbeContext) -> Outcome:
    plan = plan_ranks(ctx)
    if isinstance(plan, Outcome):
        return plan
    _, backend, world = plan
    timeout = ctx.options.handshake_timeout_s
    res = run_ranks(ctx, world, backend, _handshake_body, timeout)
    values: dict[str, Any] = {
        "backend": backend,
        "world_size": world,
        "timeout_s": timeout,
        "wall_s": round(res.wall_s, 3),
    }
    refs = (
        "https://docs.pytorch.org/docs/stable/distributed.html#torch.distributed.monitored_barrier",
    )
    if res.never_arrived:
        names = ", ".join(map(str, res.never_arrived))
        values["never_arrived"] = list(res.never_arrived)
        values["errors"] = {str(k): v for k, v in res.errors().items()}
        return Outcome(
            Status.FAIL,
            f"rank(s) {names} never reached the rendezvous store within {timeout:g} s; "
            f"the others timed out in init_process_group",
            values,
            "check that every rank starts and can reach MASTER_ADDR:MASTER_PORT (firewall, "
            "wrong address); raise timeout= in init_process_group only for slow starts",
            refs,
        )
    named: set[int] = set()
    for r in res.results.values():
        named.update(
            missing_from_barrier(str(r.get("barrier_error", "")) + str(r.get("error", "")))
        )
    if named:
        values["missing_at_barrier"] = sorted(named)
        return Outcome(
            Status.FAIL,
            f"monitored_barrier: rank(s) {', '.join(map(str, sorted(named)))} failed to "
            f"arrive within {timeout:g} s (joined the group, then hung)",
            values,
            "a rank is stuck before its first collective: dump its stack (py-spy dump --pid), "
            "set TORCH_DISTRIBUTED_DEBUG=DETAIL",
            refs,
        )
    errors = res.errors()
    if errors or res.unfinished:
        values["errors"] = {str(k): v for k, v in errors.items()}
        values["unfinished"] = list(res.unfinished)
        first = next(iter(errors.values()), f"rank(s) {list(res.unfinished)} did not finish")
        return Outcome(
            Status.FAIL,
            f"{backend} handshake failed: {first[:300]}",
            values,
            "read the error; for NCCL rerun with NCCL_DEBUG=INFO",
            refs,
        )
    values["init_s"] = round(max(float(r["init_s"]) for r in res.results.values()), 3)
    values["devices"] = [r.get("device") for _, r in sorted(res.results.items())]
    if not all(r.get("all_reduce_ok") for r in res.results.values()):
        got = sorted({r.get("all_reduce_value") for r in res.results.values()}, key=str)
        return Outcome(
            Status.FAIL,
            f"all_reduce returned {got}, expected {world * (world + 1) / 2}",
            values,
            "wrong collective results: check gpu.p2p, try NCCL_P2P_DISABLE=1 / NCCL_SHM_DISABLE=1",
        )
    devices = values["devices"]
    if backend == "nccl" and len(set(devices)) < len(devices):
        return Outcome(
            Status.WARN,
            f"ranks share GPUs: {devices}",
            values,
            "one GPU per rank: torch.cuda.set_device(local_rank) before init_process_group",
        )
    if values["init_s"] > 10:
        return Outcome(
            Status.WARN,
            f"{world} ranks, {backend} init took {values['init_s']:.1f} s",
            values,
            "slow init: check DNS/hostname resolution and NCCL_SOCKET_IFNAME",
        )
    return ok(
        f"{world} ranks, {backend} init {values['init_s']:.2f} s, all_reduce correct, "
        "monitored_barrier passed",
        **values,
    )


# --------------------------------------------------------------------------- dist.busbw


def bus_factor(world: int) -> float:
    """nccl-tests' all_reduce bus bandwidth factor 2(n-1)/n: what each link actually carries."""
    return 2 * (world - 1) / world


def sweep_sizes(backend: str, bucket_bytes: int) -> list[int]:
    top = 256 * MiB if backend == "nccl" else 64 * MiB
    sizes = []
    size = 64 * 1024
    while size <= top:
        sizes.append(size)
        size *= 4
    sizes.append(bucket_bytes)  # the size DDP actually reduces: its bucket, not the peak
    return sorted(set(sizes))


def _time_allreduce(
    env: RankEnv, nbytes: int, budget_s: float, warmup: int, max_iters: int
) -> float:
    """Mean seconds per all_reduce of ``nbytes`` (max over ranks). CUDA events on GPU, since the
    host returns before the kernel finishes; a short queue of calls hides launch overhead."""
    torch, dist = env.torch, env.dist
    buf = torch.zeros(max(1, nbytes // 4), dtype=torch.float32, device=env.device)
    for _ in range(warmup):
        dist.all_reduce(buf)
    cuda = env.backend == "nccl"

    def timed(iters: int) -> float:
        dist.barrier()
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(iters):
                dist.all_reduce(buf)
            end.record()
            torch.cuda.synchronize()
            return float(start.elapsed_time(end)) / 1000.0 / iters
        t0 = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(buf)
        return (time.perf_counter() - t0) / iters

    probe_t = torch.tensor([timed(1)], dtype=torch.float64, device=env.device)
    dist.all_reduce(probe_t, op=dist.ReduceOp.MAX)  # every rank must agree on the iteration count
    # Three trials, median: one trial that a neighbour process stalls (shared CPUs, a busy
    # node) must not become the number the feasibility verdict rests on.
    iters = int(min(max_iters, max(1, budget_s / 3 / max(float(probe_t.item()), 1e-6))))
    trials = []
    for _ in range(3):
        t = torch.tensor([timed(iters)], dtype=torch.float64, device=env.device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        trials.append(float(t.item()))
    return sorted(trials)[1]


def _busbw_body(env: RankEnv) -> dict[str, Any]:
    sizes = env.extra["sizes"]
    budget = env.extra["budget_per_size_s"]
    warmup = 5 if env.backend == "nccl" else 1
    times = [_time_allreduce(env, s, budget, warmup, 20) for s in sizes]
    return {"sizes": sizes, "times": times}


_TRANSPORT = re.compile(r"via (P2P/\S+|SHM/\S+|NET/\S+|CollNet\S*|NVLS)")
_NET = re.compile(r"NET/(\w+)\s*:\s*Using \[0\](\S+)")


def parse_nccl_log(text: str) -> dict[str, Any]:
    """What NCCL_DEBUG=INFO says about the chosen path: version, transports, NIC."""
    version = re.search(r"NCCL version ([\d.]+\S*)", text)
    transports = sorted({m.group(1).rstrip(",") for m in _TRANSPORT.finditer(text)})
    net = _NET.search(text)
    return {
        "nccl_version": version.group(1) if version else None,
        "transports": transports,
        "net": f"{net.group(1)}:{net.group(2)}" if net else None,
    }


#: Conservative busbw floors (GB/s) at the top of our sweep, by link class; below 30 % of these
#: something is off (8xH200 NVLink reaches ~276 GB/s at 32 MiB; PCIe 4 x16 ~20 GB/s).
REFERENCE_BUSBW = {"NVLink": 100.0, "PCIe": 10.0, "PCIe across CPU": 6.0}


def busbw_table(sizes: list[int], times: list[float], world: int) -> list[dict[str, float]]:
    rows = []
    for size, t in zip(sizes, times, strict=True):
        algbw = size / t / 1e9
        rows.append(
            {
                "bytes": size,
                "time_us": round(t * 1e6, 1),
                "algbw_gbps": round(algbw, 3),
                "busbw_gbps": round(algbw * bus_factor(world), 3),
            }
        )
    return rows


def busbw_at(rows: list[dict[str, Any]], nbytes: float) -> float:
    """busbw at ``nbytes``, interpolated in log(size) between measured points."""
    pts = sorted((float(r["bytes"]), float(r["busbw_gbps"])) for r in rows)
    if not pts:
        return float("nan")
    if nbytes <= pts[0][0]:
        return pts[0][1]
    for (s0, b0), (s1, b1) in zip(pts, pts[1:], strict=False):
        if s0 <= nbytes <= s1:
            w = (math.log(nbytes) - math.log(s0)) / (math.log(s1) - math.log(s0)) if s1 > s0 else 0
            return b0 + w * (b1 - b0)
    return pts[-1][1]


def probe_busbw(ctx: ProbeContext) -> Outcome:
    plan = plan_ranks(ctx)
    if isinstance(plan, Outcome):
        return plan
    _, backend, world = plan
    if world < 2:
        return skip("one rank: nothing to reduce")
    bucket = int(ctx.options.bucket_cap_mb * MiB)
    sizes = sweep_sizes(backend, bucket)
    rank_env: dict[str, str] = {}
    logdir = None
    if backend == "nccl":
        logdir = tempfile.mkdtemp(prefix="ddp-lsp-nccl-")
        rank_env = {
            "NCCL_DEBUG": "INFO",
            "NCCL_DEBUG_SUBSYS": "INIT,GRAPH,NET",
            "NCCL_DEBUG_FILE": os.path.join(logdir, "nccl.%h.%p.log"),
        }

    def body(env: RankEnv) -> dict[str, Any]:
        env.extra.update(sizes=sizes, budget_per_size_s=0.25 if backend == "gloo" else 0.05)
        return _busbw_body(env)

    res = run_ranks(ctx, world, backend, body, max(ctx.options.handshake_timeout_s, 30.0), rank_env)
    values: dict[str, Any] = {
        "backend": backend,
        "world_size": world,
        "bucket_bytes": bucket,
        "timing": "CUDA events" if backend == "nccl" else "host clock (CPU)",
    }
    if logdir:
        text = ""
        for path in glob.glob(os.path.join(logdir, "*.log")):
            with open(path, encoding="utf-8", errors="replace") as handle:
                text += handle.read()
            os.unlink(path)
        os.rmdir(logdir)
        values["nccl"] = parse_nccl_log(text)
    errors = res.errors()
    if errors or res.unfinished or 0 not in res.results:
        values["errors"] = {str(k): v for k, v in errors.items()}
        return Outcome(
            Status.FAIL,
            "all_reduce sweep failed: "
            + (next(iter(errors.values()), "ranks did not finish")[:300]),
            values,
            "see dist.handshake",
        )
    rows = busbw_table(res.results[0]["sizes"], res.results[0]["times"], world)
    values["sweep"] = rows
    at_bucket = busbw_at(rows, bucket)
    peak = max(r["busbw_gbps"] for r in rows)
    values.update(busbw_at_bucket_gbps=round(at_bucket, 3), busbw_peak_gbps=round(peak, 3))
    label = "CPU" if backend == "gloo" else None
    topo = ctx.previous.get("gpu.topo")
    if topo is not None and topo.values.get("interconnect"):
        label = str(topo.values["interconnect"])
    values["link_class"] = label
    msg = (
        f"busbw {at_bucket:.2f} GB/s at the {fmt_bytes(bucket)} bucket, peak {peak:.2f} GB/s "
        f"({world} ranks, {backend}{', ' + label if label else ''})"
    )
    ref = REFERENCE_BUSBW.get(label or "")
    if ref is not None and peak < 0.3 * ref:
        return Outcome(
            Status.WARN,
            msg + f": below 30% of the ~{ref:g} GB/s expected for {label}",
            values,
            "check gpu.p2p and NCCL transports (NCCL_DEBUG=INFO); unset NCCL_P2P_DISABLE",
            ("NVIDIA/nccl-tests doc/PERFORMANCE.md",),
        )
    return Outcome(Status.PASS, msg, values, None, ("NVIDIA/nccl-tests doc/PERFORMANCE.md",))


# --------------------------------------------------------------------------- feasibility

#: Stand-in: a 3-layer MLP, 8.4 M params (33.6 MB fp32 grads: two 25 MiB DDP buckets' worth).
STANDIN_DIMS = (1024, 2048, 2048, 1024)


def _standin(torch: Any, device: Any) -> Any:
    layers = []
    for a, b in zip(STANDIN_DIMS, STANDIN_DIMS[1:], strict=False):
        layers += [torch.nn.Linear(a, b), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers[:-1]).to(device)


def _feasibility_body(env: RankEnv) -> dict[str, Any]:
    torch, dist = env.torch, env.dist
    cuda = env.backend == "nccl"
    if not cuda:
        # Ranks share the host's CPUs as real DDP ranks would.
        torch.set_num_threads(max(1, (len(os.sched_getaffinity(0)) // env.world_size)))
    torch.manual_seed(0)
    model = _standin(torch, env.device)
    batch = 1024 if cuda else 32
    x = torch.randn(batch, STANDIN_DIMS[0], device=env.device)

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize()

    def step(m: Any) -> tuple[float, float]:
        sync()
        t0 = time.perf_counter()
        loss = m(x).square().mean()
        sync()
        t1 = time.perf_counter()
        loss.backward()
        sync()
        t2 = time.perf_counter()
        m.zero_grad(set_to_none=True)
        return t2 - t0, t2 - t1

    steps = env.extra["steps"]
    # cuBLAS/cuDNN pick kernels on the first GPU steps; the CPU needs one warm-up step only.
    warmup = 2 if cuda else 1
    for _ in range(warmup):
        step(model)
    samples = [step(model) for _ in range(steps)]
    t_c = sorted(s[0] for s in samples)[len(samples) // 2]
    t_bwd = sorted(s[1] for s in samples)[len(samples) // 2]
    ddp = torch.nn.parallel.DistributedDataParallel(
        model,
        device_ids=[env.device.index] if cuda else None,
        bucket_cap_mb=env.extra["bucket_cap_mb"],
    )
    for _ in range(warmup):
        step(ddp)
    ddp_t = sorted(step(ddp)[0] for _ in range(steps))[steps // 2]
    measured = torch.tensor([t_c, t_bwd, ddp_t], dtype=torch.float64, device=env.device)
    dist.all_reduce(measured, op=dist.ReduceOp.MAX)
    out: dict[str, Any] = {
        "t_c": float(measured[0]),
        "t_bwd": float(measured[1]),
        "t_ddp": float(measured[2]),
        "params": sum(p.numel() for p in model.parameters()),
        "batch": batch,
    }
    # The all-reduce at the sizes the estimate will price (its buckets) and smaller, for the
    # alpha-beta fit, when the preflight has no dist.busbw sweep to take them from.
    out["sweep"] = [[n, _time_allreduce(env, n, 0.2, 1, 10)] for n in env.extra["sizes"]]
    return out


@dataclass(frozen=True)
class Verdict:
    ratio: float
    label: str
    speedup: float


def verdict(t_ar: float, t_c: float, t_bwd: float, world: int) -> Verdict:
    """r = t_ar / t_c. DDP overlaps bucket all-reduces with backward, so only the part of t_ar
    that exceeds t_bwd adds to the step: speed-up ~ n*t_c / (t_c + max(0, t_ar - t_bwd))."""
    r = t_ar / t_c if t_c > 0 else math.inf
    speedup = world * t_c / (t_c + max(0.0, t_ar - t_bwd)) if t_c > 0 else 0.0
    if r < 0.3:
        label = "worth it"
    elif r <= 1.0:
        label = "marginal"
    else:
        label = "communication-bound"
    return Verdict(r, label, speedup)


def estimate_buckets(grad_bytes: int, bucket_bytes: int) -> tuple[int, int]:
    """DDP's buckets for ``grad_bytes`` of gradients when only the total is known: how many
    full ``bucket_cap_mb`` buckets, and the remainder's size (0: none)."""
    return divmod(grad_bytes, bucket_bytes)


def probe_feasibility(ctx: ProbeContext) -> Outcome:
    """The quick estimate: a stand-in MLP's step, scaled to a given parameter count, against
    the alpha-beta all-reduce model at the model's buckets. Labelled an estimate; without a
    parameter count it reports the stand-in's numbers and no verdict. ``ddp-lsp feasibility
    -- <training command>`` measures the job itself."""
    plan = plan_ranks(ctx)
    if isinstance(plan, Outcome):
        return plan
    _, backend, world = plan
    if world < 2:
        return skip("one rank: no communication to weigh")
    bucket = int(ctx.options.bucket_cap_mb * MiB)
    prev = ctx.previous.get("dist.busbw")
    sweep = (
        prev.values.get("sweep") if prev is not None and prev.status is not Status.FAIL else None
    )
    standin_params = sum(a * b + b for a, b in zip(STANDIN_DIMS, STANDIN_DIMS[1:], strict=False))
    params = ctx.options.params or standin_params
    grad_bytes = params * ctx.options.grad_bytes_per_param
    full, rest = estimate_buckets(grad_bytes, bucket)
    real_sizes = [b for b in ((bucket if full else 0), rest) if b]
    sizes = sorted({*real_sizes, 64 * 1024, 1 * MiB, max(4096, min(real_sizes) // 16)})

    def body(env: RankEnv) -> dict[str, Any]:
        env.extra.update(
            steps=4,
            bucket_cap_mb=ctx.options.bucket_cap_mb,
            sizes=[] if sweep else sizes,
        )
        return _feasibility_body(env)

    # DistributedDataParallel.__init__ touches torch._dynamo, whose first import pulls in ~800
    # modules (2-7 s here). Import it once in this worker so the forked ranks inherit it instead
    # of each importing it in parallel (every real DDP job pays this once per rank, at
    # construction, not per step, so it is kept out of the measured step times).
    import torch._dynamo  # noqa: F401

    res = run_ranks(ctx, world, backend, body, max(ctx.options.handshake_timeout_s, 60.0))
    if res.errors() or 0 not in res.results:
        return Outcome(
            Status.FAIL,
            "stand-in step failed: "
            + next(iter(res.errors().values()), "ranks did not finish")[:300],
            {"errors": {str(k): v for k, v in res.errors().items()}},
        )
    r0 = res.results[0]
    if sweep:
        points = [(float(r["bytes"]), float(r["time_us"]) / 1e6) for r in sweep]
        model = fit_alpha_beta(points, world, real_sizes, "dist.busbw sweep")
    else:
        model = fit_alpha_beta(
            [(float(b), float(t)) for b, t in r0["sweep"]],
            world,
            real_sizes,
            "all_reduce at the estimate's bucket sizes",
        )
    t_ar = full * model.time(bucket, world) + model.time(rest, world)
    n_buckets = full + (1 if rest else 0)
    # Compute of a dense model at a fixed batch grows with its parameter count.
    scale = params / standin_params
    t_c = float(r0["t_c"]) * scale
    t_bwd = float(r0["t_bwd"]) * scale
    v = verdict(t_ar, t_c, t_bwd, world)
    # Evidence check of the overlap model on the stand-in itself: its real DDP step minus its
    # bare step is the communication DDP failed to hide. On CPU (gloo shares the cores with
    # backward) that is most of t_ar, so the overlap model alone is too optimistic there.
    s_t_c, s_t_ddp = float(r0["t_c"]), float(r0["t_ddp"])
    exposed = max(0.0, s_t_ddp - s_t_c) * grad_bytes / (standin_params * 4)
    measured_speedup = world * t_c / (t_c + exposed) if t_c > 0 else 0.0
    speedup = min(v.speedup, measured_speedup)
    given = bool(ctx.options.params)
    values = {
        "estimate": True,
        "params": params,
        "params_source": "given" if given else "stand-in",
        "grad_bytes": grad_bytes,
        "bucket_bytes": bucket,
        "buckets": n_buckets,
        "busbw_gbps": round(model.busbw_Bps / 1e9, 3),
        "latency_us_per_hop": round(model.alpha_s * 1e6, 1),
        "busbw_source": model.source,
        "t_allreduce_s": round(t_ar, 5),
        "t_compute_s": round(t_c, 5),
        "t_backward_s": round(t_bwd, 5),
        "ratio": round(v.ratio, 3),
        "verdict": v.label if given else None,
        "speedup_overlap_model": round(v.speedup, 2),
        "speedup_measured_overhead": round(measured_speedup, 2),
        "predicted_speedup": round(speedup, 2),
        "world_size": world,
        "backend": backend,
        "standin": {
            "params": standin_params,
            "batch": r0["batch"],
            "t_step_s": round(s_t_c, 5),
            "t_ddp_step_s": round(s_t_ddp, 5),
            "exposed_comm_s": round(max(0.0, s_t_ddp - s_t_c), 5),
        },
        "compute_note": (
            "compute scaled from the stand-in MLP at the same batch"
            if given
            else "no parameter count: the stand-in MLP's own numbers, no verdict"
        ),
        "device": "GPU" if backend == "nccl" else "CPU",
    }
    numbers = (
        f"grads {fmt_bytes(grad_bytes)} in {n_buckets} bucket(s), t_ar {t_ar * 1e3:.1f} ms "
        f"({model.alpha_s * 1e6:.0f} us/hop + {model.busbw_Bps / 1e9:.2f} GB/s) vs step "
        f"{t_c * 1e3:.1f} ms -> r={v.ratio:.2f}"
    )
    measure = "for a measured answer: ddp-lsp feasibility -- python train.py ..."
    if not given:
        return ok(
            f"stand-in MLP only ({standin_params:,} params; no model size given, so no verdict): "
            f"{numbers}; {measure}",
            **values,
        )
    msg = (
        f"estimate: {numbers} {v.label} (x{speedup:.1f} on {world} ranks; "
        f"{values['device']}, compute scaled from a stand-in)"
    )
    if v.label == "worth it":
        return ok(msg, **values)
    return Outcome(
        Status.WARN,
        msg,
        values,
        "larger per-rank batch; gradient accumulation under ddp.no_sync(); bf16 gradients "
        "(register_comm_hook(bf16_compress_hook)); larger bucket_cap_mb; " + measure,
        ("https://docs.pytorch.org/docs/stable/notes/ddp.html",),
    )


DIST_PROBES: tuple[Probe, ...] = (
    Probe("dist.handshake", "Process group handshake", 60.0, probe_handshake, needs_torch=True),
    Probe("dist.busbw", "all_reduce bandwidth", 120.0, probe_busbw, needs_torch=True, quick=False),
    Probe(
        "feasibility", "Is DDP worth it", 300.0, probe_feasibility, needs_torch=True, quick=False
    ),
)
