"""Rendering a preflight report: text for the CLI, Markdown for the report and hovers, the facts
that bear on one line of training code, and :class:`MachineFacts` for the analysis rules.

Stdlib only: the language server calls these on cached reports and never imports torch.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from ddp_lsp.core.env import MachineInfo
from ddp_lsp.preflight.schema import PreflightReport, ProbeResult, Status

TOPICS = ("init_process_group", "DistributedDataParallel", "DataLoader")

_SYMBOLS = {Status.PASS: "✓", Status.WARN: "⚠", Status.FAIL: "✗", Status.SKIP: "–"}
_ASCII = {Status.PASS: "ok  ", Status.WARN: "WARN", Status.FAIL: "FAIL", Status.SKIP: "skip"}
_MD = {Status.PASS: "✅", Status.WARN: "⚠️", Status.FAIL: "❌", Status.SKIP: "⏭️"}


def _unicode_ok(stream: Any = None) -> bool:
    encoding = getattr(stream or sys.stdout, "encoding", None) or ""
    return encoding.lower().replace("-", "") in ("utf8", "utf16", "utf32")


def parse_created(report: PreflightReport) -> datetime | None:
    try:
        created = datetime.fromisoformat(report.created)
    except ValueError:
        return None
    return created if created.tzinfo else created.replace(tzinfo=timezone.utc)


def age_seconds(report: PreflightReport, now: datetime | None = None) -> float | None:
    created = parse_created(report)
    if created is None:
        return None
    return max(0.0, ((now or datetime.now(timezone.utc)) - created).total_seconds())


def format_age(seconds: float | None) -> str:
    if seconds is None:
        return "at an unknown time"
    if seconds < 60:
        return "just now"
    if seconds < 3600:
        return f"{int(seconds // 60)} min ago"
    if seconds < 86400:
        return f"{int(seconds // 3600)} h ago"
    return f"{int(seconds // 86400)} d ago"


def summary_counts(report: PreflightReport, unicode: bool = True) -> str:
    s = report.summary
    needed = sum(1 for p in report.probes if p.status is Status.SKIP and p.needed)
    extra = f" ({needed} needed by the job)" if needed else ""
    if unicode:
        return f"✗{s.failed} ⚠{s.warned} ✓{s.passed} –{s.skipped}{extra}"
    return f"{s.failed} fail, {s.warned} warn, {s.passed} pass, {s.skipped} skip{extra}"


def summary_line(report: PreflightReport, unicode: bool = True) -> str:
    """Environment, counts and duration, and the ids of what was not checked (skips, the job's
    needs first): a clean-looking count must not hide that the GPU path never ran."""
    line = f"{_env_line(report)}  {summary_counts(report, unicode)}  ({report.duration_s:.1f} s)"
    skipped = sorted(
        (p for p in report.probes if p.status is Status.SKIP), key=lambda p: not p.needed
    )
    if skipped:
        line += "  not checked: " + ", ".join(p.id + ("*" if p.needed else "") for p in skipped)
    return line


def not_checked(report: PreflightReport) -> list[str]:
    """What the run did not check, in words: skipped probes (the job's needs first) and probes
    this run did not select (``--quick``, ``--probe``). Empty when everything was checked."""
    skipped = [p for p in report.probes if p.status is Status.SKIP]
    out = []
    needed = [p for p in skipped if p.needed]
    if needed:
        out.append(
            "not checked although the job needs it (*): "
            + "; ".join(f"{p.id} ({p.message})" for p in needed)
        )
    rest = [p for p in skipped if not p.needed]
    if rest:
        out.append("not checked: " + "; ".join(f"{p.id} ({p.message})" for p in rest))
    ran = {p.id for p in report.probes}
    from ddp_lsp.preflight.probes import ALL_PROBES  # torch-free at import

    chosen = report.options.get("probes") or []
    quick = bool(report.options.get("quick"))
    if report.error is None:
        missing = [p.id for p in ALL_PROBES if p.id not in ran]
        if chosen:
            missing = [m for m in missing if m not in chosen]
            why = "not selected with --probe"
        else:
            missing = [m for m in missing if quick]
            why = "--quick"
        if missing:
            out.append(f"not run ({why}): {', '.join(missing)}")
    return out


def _env_line(report: PreflightReport) -> str:
    parts = [f"host={report.host}"]
    if report.torch:
        parts.append(f"torch {report.torch}")
    parts.append(f"CUDA {report.cuda}" if report.cuda else "CPU build")
    if report.nccl:
        parts.append(f"NCCL {report.nccl}")
    if report.driver:
        parts.append(f"driver {report.driver}")
    if report.gpus:
        names = sorted(set(report.gpus))
        parts.append(f"{len(report.gpus)}x{'/'.join(names)}")
    if report.backend:
        parts.append(
            f"{report.backend} x{report.world_size}" if report.world_size else report.backend
        )
    return "  ".join(parts)


def probe_line(probe: ProbeResult, unicode: bool = True) -> str:
    mark = (_SYMBOLS if unicode else _ASCII)[probe.status]
    return f"{mark} {probe.id:15} {probe.message}"


def render_text(report: PreflightReport, unicode: bool | None = None) -> str:
    uni = _unicode_ok() if unicode is None else unicode
    lines = [f"DDP preflight  {summary_line(report, uni)}"]
    if report.error:
        lines.append(f"preflight error: {report.error}")
    for probe in report.probes:
        lines.append(probe_line(probe, uni))
        if probe.fix and probe.status in (Status.WARN, Status.FAIL):
            lines.append(f"  {'→' if uni else '->'} {probe.fix}")
    for node in report.nodes:
        lines.append("")
        lines.append(f"node {node.node_rank} ({node.host}): {summary_counts(node, uni)}")
        for probe in node.probes:
            if probe.status in (Status.WARN, Status.FAIL):
                lines.append("  " + probe_line(probe, uni))
    lines += not_checked(report)
    return "\n".join(lines) + "\n"


def _md_escape(text: str) -> str:
    return text.replace("|", "\\|").replace("*", "\\*").replace("_", "\\_")


def render_markdown(report: PreflightReport, now: datetime | None = None) -> str:
    out = [
        f"### DDP preflight: {summary_counts(report)}",
        f"`{_env_line(report)}` · {format_age(age_seconds(report, now))} · {report.duration_s:.1f} s",
        "",
    ]
    if report.error:
        out += [f"**Preflight error:** {_md_escape(report.error)}", ""]
    for probe in report.probes:
        out.append(f"- {_MD[probe.status]} **{probe.id}**: {_md_escape(probe.message)}")
        if probe.fix and probe.status in (Status.WARN, Status.FAIL):
            out.append(
                f"  - fix: `{probe.fix}`" if "`" not in probe.fix else f"  - fix: {probe.fix}"
            )
    for node in report.nodes:
        out.append(f"- node {node.node_rank} `{node.host}`: {summary_counts(node)}")
    gaps = not_checked(report)
    if gaps:
        out += ["", *(f"_{_md_escape(line)}_" for line in gaps)]
    return "\n".join(out) + "\n"


# --------------------------------------------------------------------------- facts


@dataclass(frozen=True)
class MachineFacts:
    """Measured facts the analysis rules may use (None = not measured)."""

    host: str
    cpu_count: int | None
    recommended_num_workers: int | None
    gpu_count: int | None
    cuda_available: bool | None
    nccl_available: bool | None
    shm_free_bytes: int | None
    shm_total_bytes: int | None
    busbw_at_bucket_gbps: float | None
    local_world_size: int | None
    created: str


def _int(value: Any) -> int | None:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def machine_facts(report: PreflightReport) -> MachineFacts:
    def vals(probe_id: str) -> dict[str, Any]:
        probe = report.probe(probe_id)
        return dict(probe.values) if probe is not None else {}

    cpu = vals("cpu.workers")
    shm = vals("shm.capacity")
    versions = vals("env.versions")
    cuda = report.probe("cuda.basic")
    gpu_count: int | None = None
    cuda_available: bool | None = None
    if cuda is not None:
        if cuda.status is Status.SKIP or (
            cuda.status is Status.FAIL and "device_count" not in cuda.values
        ):
            gpu_count, cuda_available = 0, False
        else:
            gpu_count, cuda_available = _int(cuda.values.get("device_count")), True
    nccl = versions.get("nccl_available")
    busbw = vals("dist.busbw").get("busbw_at_bucket_gbps")
    return MachineFacts(
        host=report.host,
        cpu_count=_int(cpu.get("cpus")),
        recommended_num_workers=_int(cpu.get("recommended_num_workers")),
        gpu_count=gpu_count,
        cuda_available=cuda_available,
        nccl_available=bool(nccl) if isinstance(nccl, bool) else None,
        shm_free_bytes=_int(shm.get("free_bytes")),
        shm_total_bytes=_int(shm.get("total_bytes")),
        busbw_at_bucket_gbps=float(busbw) if isinstance(busbw, (int, float)) else None,
        local_world_size=_int(cpu.get("local_world_size")),
        created=report.created,
    )


def machine_info(report: PreflightReport, where: str = "") -> MachineInfo:
    """The report's facts as the analysis core's ``MachineInfo`` (what rules such as DDP405 use),
    with a source that says where the numbers came from in messages."""
    facts = machine_facts(report)
    label = f"preflight on {facts.host}" + (f" ({where})" if where else "")
    return MachineInfo(
        cpu_count=facts.cpu_count,
        source=label,
        gpu_count=facts.gpu_count,
        cuda_available=facts.cuda_available,
        nccl_available=facts.nccl_available,
        shm_free_bytes=facts.shm_free_bytes,
        local_world_size=facts.local_world_size,
    )


def _gib(n: int | None) -> str:
    if n is None:
        return "?"
    return f"{n / (1 << 30):.2f} GiB" if n >= 1 << 30 else f"{n / (1 << 20):.0f} MiB"


def _fact(report: PreflightReport, probe_id: str, label: str | None = None) -> str | None:
    probe = report.probe(probe_id)
    if probe is None:
        return None
    line = f"- {_MD[probe.status]} {label or probe.id}: {_md_escape(probe.message)}"
    if probe.fix and probe.status in (Status.WARN, Status.FAIL):
        line += f" — fix: {_md_escape(probe.fix)}"
    return line


def facts_markdown(report: PreflightReport, topic: str, now: datetime | None = None) -> str | None:
    """The measured facts that bear on a line calling ``topic``; None when there are none."""
    if topic not in TOPICS:
        raise ValueError(f"topic must be one of {', '.join(TOPICS)}")
    facts = machine_facts(report)
    lines: list[str] = []
    if topic == "init_process_group":
        backends = []
        if facts.nccl_available is not None:
            backends.append(
                f"NCCL {'available' if facts.nccl_available else 'unavailable'}"
                + (f" ({report.nccl})" if report.nccl else "")
            )
        if facts.gpu_count is not None:
            backends.append(f"{facts.gpu_count} GPU(s)")
        if backends:
            lines.append(
                "- " + ", ".join(backends) + ("; gloo always available" if report.torch else "")
            )
        for pid in ("dist.handshake", "rdzv.port", "net.iface", "env.lint", "dist.busbw"):
            fact = _fact(report, pid)
            if fact:
                lines.append(fact)
    elif topic == "DistributedDataParallel":
        for pid in (
            "dist.correctness",
            "feasibility",
            "dist.busbw",
            "cuda.basic",
            "gpu.p2p",
            "gpu.topo",
        ):
            fact = _fact(report, pid)
            if fact:
                lines.append(fact)
        if facts.busbw_at_bucket_gbps is not None:
            lines.append(
                f"- busbw at DDP's bucket size: {facts.busbw_at_bucket_gbps:.2f} GB/s "
                "(raise `bucket_cap_mb` if small buckets are far below peak)"
            )
    else:
        if facts.cpu_count is not None:
            lines.append(
                f"- {facts.cpu_count} CPUs usable for {facts.local_world_size or '?'} rank(s): "
                f"recommended `num_workers` ≤ {facts.recommended_num_workers}"
            )
        if facts.shm_free_bytes is not None:
            lines.append(
                f"- /dev/shm: {_gib(facts.shm_free_bytes)} free of {_gib(facts.shm_total_bytes)}"
            )
        for pid in ("shm.capacity", "host.memory", "cpu.workers", "limits"):
            probe = report.probe(pid)
            if probe is not None and probe.status in (Status.WARN, Status.FAIL):
                fact = _fact(report, pid)
                if fact:
                    lines.append(fact)
        if facts.cuda_available is False:
            lines.append("- no CUDA device: `pin_memory=True` only costs time here")
    if not lines:
        return None
    head = f"**Preflight** on `{report.host}` ({format_age(age_seconds(report, now))})"
    return head + "\n\n" + "\n".join(lines) + "\n"
