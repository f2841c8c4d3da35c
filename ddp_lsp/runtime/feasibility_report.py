"""What ``ddp-lsp feasibility`` says: the advice, the report as text, the JSON document."""

from __future__ import annotations

import shlex
from typing import Any

from ddp_lsp.preflight.commmodel import (
    Projection,
    StepParts,
    verdict_label,
)
from ddp_lsp.runtime.feasibility_analysis import Analysis, fmt_bytes, fmt_ms


def render(a: Analysis) -> str:
    lines: list[str] = []
    batch = a.batch
    e = a.entry
    cmd = " ".join(shlex.quote(x) for x in (*(["-m"] if e.module else []), e.target, *e.args))
    lines.append(f"DDP feasibility  {cmd}  (1 process, then {a.nproc} ranks under torchrun)")
    ddp = (a.multi or a.single).get("ddp") or {}
    params = ddp.get("params")
    grad = (
        f"gradients {fmt_bytes(a.grad_bytes)} in {len(a.buckets)} bucket(s)"
        f" ({', '.join(fmt_bytes(b.nbytes) for b in a.buckets[:6])}{'...' if len(a.buckets) > 6 else ''})"
        if a.buckets
        else "gradient buckets: not seen"
    )
    lines.append(f"  model: {params:,} trainable parameters, {grad}" if params else f"  {grad}")

    def sps(t: float, ranks: int) -> str:
        return f"{ranks * batch / t:.1f} samples/s" if batch else f"{ranks / t:.2f} steps/s"

    def split(p: StepParts) -> str:
        return (
            f"data {fmt_ms(p.data)} | forward {fmt_ms(p.forward)} | backward {fmt_ms(p.backward)} | "
            f"exposed all-reduce {fmt_ms(p.comm)} | optimizer {fmt_ms(p.optimizer)}"
        )

    threads = a.single.get("threads")
    lines.append(
        f"  1 process : step {fmt_ms(a.t1)}, {sps(a.t1, 1)}"
        + (
            f" ({threads} thread{'s' if threads != 1 else ''})"
            if a.device == "CPU" and threads
            else ""
        )
    )
    lines.append(f"              {split(a.parts1)}")
    if a.t_n is not None and a.parts_n is not None:
        backend = (a.multi or {}).get("backend", "?")
        lines.append(
            f"  {a.nproc} ranks   : step {fmt_ms(a.t_n)}, {sps(a.t_n, a.nproc)} ({backend}, "
            f"{a.device}) -> measured speed-up x{a.measured_speedup:.2f}"
        )
        lines.append(f"              {split(a.parts_n)}")
        name, value = a.parts_n.dominant()
        lines.append(f"  dominant cost per rank: {name}, {fmt_ms(value)} of {fmt_ms(a.t_n)}")
    if a.multi is not None and a.device == "GPU":
        util = a.multi.get("gpu_util")
        h2d = a.multi.get("h2d_gbps")
        lines.append(
            "  GPU: "
            + (f"utilisation {util:.0f}%" if util is not None else "utilisation n/a (no NVML)")
            + (f", host-to-device {h2d:.1f} GB/s pinned" if h2d else "")
        )
    if a.model is not None:
        lines.append(
            f"  all-reduce model: {a.model.alpha_s * 1e6:.0f} us/hop + "
            f"busbw {a.model.busbw_Bps / 1e9:.2f} GB/s near the buckets [{a.model_source}]"
        )
    if a.predicted is not None:
        overlap = (
            "overlapped with backward"
            if a.device == "GPU"
            else "not hidden (ranks share the cores)"
        )
        pred = a.predicted
        line = (
            f"  model check: predicted x{pred.speedup:.2f} on {a.nproc} ranks from the one-process "
            f"run (rank compute {fmt_ms(pred.step_s - pred.exposed_s)}, all-reduce {fmt_ms(pred.comm_s)}, "
            f"{overlap})"
        )
        if a.measured_speedup:
            err = pred.speedup / a.measured_speedup - 1
            line += f"; measured x{a.measured_speedup:.2f} ({err:+.0%})"
        lines.append(line)
    if a.projections:
        where = "GPUs on one node" if a.device == "GPU" else "CPU ranks, each with cores of its own"
        cells = ", ".join(
            f"{p.ranks}: x{p.speedup:.1f} ({p.efficiency:.0%})" for p in a.projections
        )
        lines.append(f"  projection, {where}: {cells}")
    if a.node_projections:
        cells = ", ".join(
            f"{p.nodes} nodes ({p.ranks} ranks): x{p.speedup:.1f} ({p.efficiency:.0%})"
            for p in a.node_projections
        )
        lines.append(f"  projection across nodes: {cells}")
    elif a.projections:
        lines.append(
            "  projection across nodes: give --inter-node-gbps (busbw of `ddp-lsp preflight "
            "--torchrun` across the nodes) to get one"
        )
    lines.append("  verdict: " + verdict_line(a))
    for item in a.advice:
        lines.append(f"  -> {item}")
    for note in a.notes:
        lines.append(f"  note: {note}")
    return "\n".join(lines) + "\n"


def verdict_line(a: Analysis) -> str:
    if a.measured_speedup is not None:
        eff = a.measured_speedup / a.nproc
        label = verdict_label(eff)
        name, value = a.parts_n.dominant() if a.parts_n else ("?", 0.0)
        return (
            f"{label}: x{a.measured_speedup:.2f} on {a.nproc} {a.device} ranks "
            f"({eff:.0%} scaling efficiency); dominant cost {name}"
        )
    if a.predicted is not None:
        label = verdict_label(a.predicted.efficiency)
        return f"{label} (predicted, not measured): x{a.predicted.speedup:.2f} on {a.nproc} ranks"
    return "no verdict: the DDP run did not complete"


def to_json(a: Analysis) -> dict[str, Any]:
    def parts(p: StepParts | None) -> dict[str, Any] | None:
        if p is None:
            return None
        return {
            "data_s": p.data,
            "forward_s": p.forward,
            "backward_s": p.backward,
            "exposed_allreduce_s": p.comm,
            "optimizer_s": p.optimizer,
            "dominant": p.dominant()[0],
        }

    def proj(p: Projection) -> dict[str, Any]:
        return {
            "ranks": p.ranks,
            "nodes": p.nodes,
            "step_s": p.step_s,
            "allreduce_s": p.comm_s,
            "exposed_s": p.exposed_s,
            "speedup": p.speedup,
            "efficiency": p.efficiency,
        }

    return {
        "schema": "ddp-lsp-feasibility/1",
        "command": a.entry.torchrun(a.nproc),
        "device": a.device,
        "ranks": a.nproc,
        "batch_per_rank": a.batch,
        "single": {"step_s": a.t1, "shared_core_step_s": a.t1_shared, "parts": parts(a.parts1)},
        "ddp": {
            "step_s": a.t_n,
            "parts": parts(a.parts_n),
            "backend": (a.multi or {}).get("backend"),
            "gpu_util": (a.multi or {}).get("gpu_util"),
            "h2d_gbps": (a.multi or {}).get("h2d_gbps"),
            "settings": (a.multi or a.single).get("ddp"),
        },
        "measured_speedup": a.measured_speedup,
        "grad_bytes": a.grad_bytes,
        "buckets": [{"bytes": b.nbytes, "ready_frac": b.ready_frac} for b in a.buckets],
        "allreduce_model": (
            {
                "alpha_s": a.model.alpha_s,
                "busbw_gbps": a.model.busbw_Bps / 1e9,
                "source": a.model_source,
            }
            if a.model
            else None
        ),
        "predicted": proj(a.predicted) if a.predicted else None,
        "projections": [proj(p) for p in a.projections],
        "node_projections": [proj(p) for p in a.node_projections],
        "verdict": verdict_line(a),
        "advice": a.advice,
        "notes": a.notes,
    }
