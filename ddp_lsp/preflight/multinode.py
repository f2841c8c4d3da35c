"""The same probes on every node, under torchrun: its rendezvous, every report gathered to rank 0.

Start one preflight process per node (``--nproc-per-node=1``) with ``--torchrun``. Each runs
the local probes exactly as a single-node run would (its own ranks on 127.0.0.1 for the local
handshake), then a forked worker joins torchrun's group over gloo (``init_method="env://"``)
with a timeout, checks a cross-node all_reduce, times one at DDP's bucket size (full runs), and
``all_gather_object``s the reports. Rank 0 returns its own report with the other nodes under
``nodes`` and adds ``multinode.handshake`` / ``multinode.versions`` / ``multinode.busbw``.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import replace
from datetime import timedelta
from typing import Any

from ddp_lsp.preflight.probes.base import Outcome, Probe, ProbeContext, ok
from ddp_lsp.preflight.schema import PreflightOptions, PreflightReport, ProbeResult, Status

MiB = 1 << 20


def _gather(payload: str, timeout: float) -> Any:
    def body(ctx: ProbeContext) -> Outcome:
        import torch
        import torch.distributed as dist

        t0 = time.perf_counter()
        dist.init_process_group("gloo", init_method="env://", timeout=timedelta(seconds=timeout))
        init_s = time.perf_counter() - t0
        rank, world = dist.get_rank(), dist.get_world_size()
        t = torch.ones(4)
        dist.all_reduce(t)
        correct = bool(torch.all(t == world).item())
        bucket = int(ctx.options.bucket_cap_mb * MiB)
        t_bucket = None
        if not ctx.options.quick and world > 1:
            buf = torch.zeros(bucket // 4)
            dist.all_reduce(buf)
            dist.barrier()
            t1 = time.perf_counter()
            for _ in range(3):
                dist.all_reduce(buf)
            t_bucket = (time.perf_counter() - t1) / 3
        gathered: list[Any] = [None] * world
        dist.all_gather_object(gathered, payload)
        dist.destroy_process_group()
        return ok(
            "gathered",
            rank=rank,
            world=world,
            init_s=init_s,
            correct=correct,
            t_bucket=t_bucket,
            bucket_bytes=bucket,
            reports=gathered if rank == 0 else [],
        )

    return body


def version_mismatches(reports: list[PreflightReport]) -> dict[str, dict[str, str]]:
    """{field: {host: value}} for every version that differs across nodes."""
    out: dict[str, dict[str, str]] = {}
    for name in ("torch", "cuda", "nccl", "driver", "python_version"):
        seen = {f"{r.host}#{r.node_rank}": str(getattr(r, name)) for r in reports}
        if len(set(seen.values())) > 1:
            out[name] = seen
    return out


def local_rank(env: Any) -> int:
    """torchrun's LOCAL_RANK: several preflight processes on one host (``--nproc-per-node`` > 1)
    are one node; only local rank 0 probes it, the others only join the cross-node group."""
    value = str(env.get("LOCAL_RANK", "0"))
    return int(value) if value.isdigit() else 0


def writes_report(options: PreflightOptions, env: Any) -> bool:
    """One writer for --json and the full report: global rank 0 (or the only process)."""
    value = str(env.get("RANK", "0"))
    return not options.torchrun or not value.isdigit() or int(value) == 0


def _idle_report(options: PreflightOptions, env: Any) -> PreflightReport:
    import platform
    import socket
    import sys
    from datetime import datetime, timezone

    from ddp_lsp.preflight.runner import _node_rank

    return PreflightReport(
        host=socket.gethostname(),
        python=sys.executable,
        python_version=platform.python_version(),
        platform=platform.platform(),
        created=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        duration_s=0.0,
        probes=(),
        options=options.to_json(),
        node_rank=_node_rank(options, env),
    )


def run_torchrun(options: PreflightOptions, emit: Any) -> PreflightReport:
    from ddp_lsp.preflight.runner import probe_timeout, run, run_isolated, select_probes, shm_prefix

    env = dict(os.environ)
    lrank = local_rank(env)
    timeout = options.handshake_timeout_s * 3
    if lrank == 0:
        local = run(options, emit)
    else:
        local = _idle_report(options, env)
        # This process waits in the group for its node's local rank 0 to finish every probe.
        timeout += sum(probe_timeout(p, options) for p in select_probes(options))
    payload = json.dumps({"local_rank": lrank, "report": local.to_json()})
    probe = Probe("multinode.handshake", "Cross-node handshake", 0.0, _gather(payload, timeout))
    ctx = ProbeContext(options=options, env=env, shm_prefix=shm_prefix())
    gathered = run_isolated(probe, ctx, (timeout + 30) * options.timeout_scale)
    values = dict(gathered.values)
    payloads = [json.loads(text) for text in values.pop("reports", [])]
    # One report per node: its local rank 0's (the others ran no probes).
    reports_json = [p["report"] for p in payloads if p.get("local_rank", 0) == 0]
    extra: list[ProbeResult] = []
    if gathered.status is not Status.PASS:
        extra.append(
            replace(
                gathered,
                fix=gathered.fix
                or "check MASTER_ADDR/MASTER_PORT reachability between "
                "nodes, NCCL_SOCKET_IFNAME/GLOO_SOCKET_IFNAME (see net.iface on each node)",
            )
        )
        report = replace(local, probes=local.probes + tuple(extra))
        emit({"event": "probe", "result": extra[0].to_json()})
        return report
    world = int(values["world"])
    nodes_count = len(reports_json) if int(values["rank"]) == 0 else None
    joined = (
        f"{world} processes on {nodes_count} node(s)"
        if nodes_count is not None and nodes_count != world
        else f"{world} nodes"
    )
    if values.get("correct"):
        extra.append(
            ProbeResult(
                "multinode.handshake",
                "Cross-node handshake",
                Status.PASS,
                f"{joined} joined torchrun's group in {values['init_s']:.2f} s; all_reduce correct",
                {
                    **{k: values[k] for k in ("world", "init_s")},
                    "nodes": nodes_count,
                },
                None,
                (),
                gathered.duration_s,
            )
        )
    else:
        extra.append(
            ProbeResult(
                "multinode.handshake",
                "Cross-node handshake",
                Status.FAIL,
                "cross-node all_reduce returned wrong values",
                {"world": world},
                "check NIC/driver; rerun with NCCL_DEBUG=INFO",
                (),
                gathered.duration_s,
            )
        )
    if values.get("t_bucket"):
        from ddp_lsp.preflight.probes.dist import bus_factor

        bw = values["bucket_bytes"] / values["t_bucket"] / 1e9 * bus_factor(world)
        extra.append(
            ProbeResult(
                "multinode.busbw",
                "Cross-node all_reduce bandwidth",
                Status.PASS,
                f"gloo busbw {bw:.2f} GB/s at the {values['bucket_bytes'] // MiB} MiB bucket across "
                f"{joined}",
                {"busbw_at_bucket_gbps": round(bw, 3), "world": world},
                None,
                (),
                0.0,
            )
        )
    if int(values["rank"]) != 0:
        for result in extra:
            emit({"event": "probe", "result": result.to_json()})
        return replace(local, probes=local.probes + tuple(extra))
    nodes = [PreflightReport.from_json(data) for data in reports_json]
    others = tuple(n for n in nodes if n.node_rank != local.node_rank)
    mismatch = version_mismatches(nodes)
    if mismatch:
        extra.append(
            ProbeResult(
                "multinode.versions",
                "Versions across nodes",
                Status.FAIL,
                "versions differ across nodes: "
                + "; ".join(
                    f"{k}: {', '.join(sorted(set(v.values())))}" for k, v in mismatch.items()
                ),
                {"mismatch": mismatch},
                "install the same torch/CUDA/NCCL/driver on every node",
                ("NVIDIA/nccl#286",),
                0.0,
            )
        )
    else:
        extra.append(
            ProbeResult(
                "multinode.versions",
                "Versions across nodes",
                Status.PASS,
                f"torch {local.torch}, NCCL {local.nccl or '-'} on all {len(nodes)} nodes",
                {"nodes": len(nodes)},
                None,
                (),
                0.0,
            )
        )
    failing = [
        f"node {n.node_rank} ({n.host}): {', '.join(p.id for p in n.probes if p.status is Status.FAIL)}"
        for n in others
        if any(p.status is Status.FAIL for p in n.probes)
    ]
    if failing:
        extra.append(
            ProbeResult(
                "multinode.nodes",
                "Other nodes",
                Status.FAIL,
                "failures on " + "; ".join(failing),
                {},
                "see each node's report under `nodes`",
                (),
                0.0,
            )
        )
    for result in extra:
        emit({"event": "probe", "result": result.to_json()})
    return replace(
        local,
        probes=local.probes + tuple(extra),
        nodes=others,
        duration_s=local.duration_s + gathered.duration_s,
    )
