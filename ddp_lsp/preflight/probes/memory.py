"""host.memory: RAM, the container's memory limit and ``memlock`` against pinned batch buffers.

``DataLoader(pin_memory=True)`` copies every batch into page-locked host memory so the
host-to-GPU copy can use DMA. Page-locked memory cannot be swapped or reclaimed: with many
workers, a deep prefetch queue and big batches on every rank of a node, the pinned buffers
alone can take the host's free memory, and the node OOMs (the seed's checklist item on pinned
memory). The buffers in flight per rank are ``num_workers x prefetch_factor`` batches, and
PyTorch's caching host allocator rounds each pinned block up to a power of two and keeps it
cached, so the need is::

    pinned = ranks x num_workers x prefetch_factor x pow2ceil(batch bytes)

compared with ``MemAvailable`` and, in a container, with the cgroup's ``memory.max`` less its
current use (pinned pages are charged to the cgroup). ``RLIMIT_MEMLOCK`` is reported against
the same bytes: it bounds ``mlock`` and InfiniBand memory registration (``ibv_reg_mr``), not
CUDA's own pinned allocations (``cudaHostAlloc`` pins through the driver), so it only fails
the probe where InfiniBand is present. Torch-free: runs while the runner imports torch.
"""

from __future__ import annotations

import os
import resource

from ddp_lsp.preflight.probes.base import (
    Outcome,
    Probe,
    ProbeContext,
    fmt_bytes,
    ok,
    read_text,
    skip_needed,
)
from ddp_lsp.preflight.probes.system import (
    DEFAULT_BATCH_BYTES,
    PREFETCH_FACTOR,
    effective_cpus,
    has_infiniband,
    recommended_workers,
)
from ddp_lsp.preflight.schema import Status

#: cgroup v2 reports this many bytes (or "max") for "no limit"; v1 a number near 2**63.
_NO_LIMIT = 1 << 60


def read_meminfo(ctx: ProbeContext) -> dict[str, int]:
    """/proc/meminfo in bytes (``MemTotal``, ``MemAvailable``, ...)."""
    out: dict[str, int] = {}
    for line in (read_text(ctx.hooks.path("proc/meminfo")) or "").splitlines():
        name, _, rest = line.partition(":")
        parts = rest.split()
        if parts and parts[0].isdigit():
            out[name.strip()] = int(parts[0]) * (1024 if parts[1:2] == ["kB"] else 1)
    return out


def _number(text: str | None) -> int | None:
    text = (text or "").strip()
    return int(text) if text.isdigit() else None


def cgroup_memory(ctx: ProbeContext) -> tuple[int, int | None] | None:
    """(limit, current use) of this process's memory cgroup, or None when unlimited/unknown.
    cgroup v2 first (``memory.max``), then v1 (``memory.limit_in_bytes``)."""
    for limit_file, usage_file in (
        ("sys/fs/cgroup/memory.max", "sys/fs/cgroup/memory.current"),
        (
            "sys/fs/cgroup/memory/memory.limit_in_bytes",
            "sys/fs/cgroup/memory/memory.usage_in_bytes",
        ),
    ):
        limit = _number(read_text(ctx.hooks.path(limit_file)))
        if limit is not None and limit < _NO_LIMIT:
            return limit, _number(read_text(ctx.hooks.path(usage_file)))
    return None


def pow2ceil(n: int) -> int:
    return 1 << max(0, n - 1).bit_length() if n > 0 else 0


def has_nvidia_driver(ctx: ProbeContext) -> bool:
    """Without importing torch: the driver's /proc entry, a device node, or nvidia-smi."""
    try:
        if os.listdir(ctx.hooks.path("proc/driver/nvidia/gpus")):
            return True
    except OSError:
        pass
    return os.path.exists(ctx.hooks.path("dev/nvidiactl")) or ctx.which("nvidia-smi") is not None


def probe_host_memory(ctx: ProbeContext) -> Outcome:
    info = read_meminfo(ctx)
    total, available = info.get("MemTotal"), info.get("MemAvailable", info.get("MemFree"))
    # Pinning needs a CUDA driver on this host, whatever backend the code asks for.
    gpu = has_nvidia_driver(ctx)
    assumed: list[str] = []
    pin = ctx.options.pin_memory
    if pin is None:
        pin = gpu  # GPU jobs pin as a rule; on CPU pin_memory does nothing
        assumed.append("pin_memory")
    if total is None or available is None:
        return skip_needed("no /proc/meminfo to read", bool(pin and gpu))
    cpus, _ = effective_cpus(ctx)
    ranks = ctx.local_world_size()
    workers = ctx.options.num_workers
    if workers is None:
        workers = recommended_workers(cpus, ranks)
        assumed.append("num_workers")
    prefetch = ctx.options.prefetch_factor
    if prefetch is None:
        prefetch = PREFETCH_FACTOR
        if workers:
            assumed.append("prefetch_factor")
    batch = ctx.options.batch_bytes
    if batch is None:
        batch = DEFAULT_BATCH_BYTES
        assumed.append("batch_bytes")
    # num_workers=0: the main process loads and pins one batch at a time.
    in_flight = workers * prefetch if workers else 1
    pinned = ranks * in_flight * pow2ceil(batch) if (pin and gpu) else 0
    cgroup = cgroup_memory(ctx)
    room = available
    where = "MemAvailable"
    if cgroup is not None:
        limit, used = cgroup
        cg_room = max(0, limit - (used or 0))
        if cg_room < room:
            room, where = cg_room, "the container's memory limit"
    memlock_soft, _ = ctx.hooks.getrlimit(resource.RLIMIT_MEMLOCK)
    ib = has_infiniband(ctx)
    values: dict[str, object] = {
        "mem_total_bytes": total,
        "mem_available_bytes": available,
        "swap_total_bytes": info.get("SwapTotal"),
        "cgroup_limit_bytes": cgroup[0] if cgroup else None,
        "cgroup_used_bytes": cgroup[1] if cgroup else None,
        "room_bytes": room,
        "room_from": where,
        "pinned_bytes": pinned,
        "pin_memory": pin,
        "cuda": gpu,
        "local_world_size": ranks,
        "num_workers": workers,
        "prefetch_factor": prefetch,
        "batch_bytes": batch,
        "memlock_bytes": None if memlock_soft == resource.RLIM_INFINITY else memlock_soft,
        "infiniband": ib,
        "assumed": assumed,
    }
    ram = f"{fmt_bytes(room)} free for the job ({where}) of {fmt_bytes(total)} RAM"
    if not gpu:
        note = "no NVIDIA driver: pin_memory pins nothing here" if pin else "pin_memory off"
        return ok(f"{ram}; {note}", **values)
    if not pin:
        return ok(f"{ram}; pin_memory=False: no pinned batch buffers", **values)
    formula = (
        f"{ranks} ranks x {workers} workers x {prefetch} prefetch x {fmt_bytes(pow2ceil(batch))}"
        if workers
        else f"{ranks} ranks x 1 batch of {fmt_bytes(pow2ceil(batch))}"
    )
    if assumed:
        formula += f" (assumed {', '.join(assumed)})"
    what = f"pinned batch buffers ~{fmt_bytes(pinned)} ({formula})"
    fix = (
        "lower num_workers or prefetch_factor (each rank pins num_workers x prefetch_factor "
        "batches), or the batch size; pin_memory=False if the host-to-GPU copy is not the "
        "bottleneck; or give the job more memory"
    )
    refs = ("https://docs.pytorch.org/docs/stable/data.html#memory-pinning",)
    if pinned > room:
        return Outcome(
            Status.FAIL,
            f"{what} exceed {ram}: page-locked memory cannot be swapped, the host OOMs",
            values,
            fix,
            refs,
        )
    if memlock_soft != resource.RLIM_INFINITY and ib and memlock_soft < pinned:
        return Outcome(
            Status.WARN,
            f"{what}; memlock {fmt_bytes(memlock_soft)} is below them with InfiniBand present: "
            "registering host buffers for RDMA fails with 'Cannot allocate memory'",
            values,
            "set memlock unlimited: docker run --ulimit memlock=-1; '* - memlock unlimited' in "
            "/etc/security/limits.conf",
            ("NVIDIA/nccl-tests#206",),
        )
    if pinned > room // 2:
        return Outcome(
            Status.WARN,
            f"{what} take over half of {ram}: little left for the ranks, workers and the dataset",
            values,
            fix,
            refs,
        )
    memlock = (
        "unlimited"
        if memlock_soft == resource.RLIM_INFINITY
        else f"{fmt_bytes(memlock_soft)} (bounds mlock/RDMA registration, not CUDA pinning)"
    )
    return ok(f"{what}; {ram}; memlock {memlock}", **values)


MEMORY_PROBES: tuple[Probe, ...] = (
    Probe("host.memory", "Host RAM and pinned buffers", 3.0, probe_host_memory),
)
