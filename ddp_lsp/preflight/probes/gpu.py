"""Versions and GPU probes: env.versions, cuda.basic, gpu.p2p, gpu.topo, dcgm.quick.

CUDA is reached through :class:`CudaOps`, a thin seam over ``torch.cuda`` that tests replace
with a fake (two GPUs whose P2P copies return zeros). ``nvidia-smi`` and ``dcgmi`` are found
on ``PATH`` from the probe context, so a fake script on PATH exercises the parsers for real.
Nothing here initialises CUDA in the runner itself: each probe runs in a forked worker, and a
CUDA context created before a fork is unusable in the children (the dist probes fork ranks).
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass
from typing import Any, Protocol

from ddp_lsp.preflight.probes.base import (
    Outcome,
    Probe,
    ProbeContext,
    fmt_bytes,
    ok,
    read_text,
    skip,
    skip_needed,
)
from ddp_lsp.preflight.schema import Status

MiB = 1 << 20


class CudaOps(Protocol):
    """The CUDA facts and operations the GPU probes need."""

    def build(self) -> str | None: ...
    def is_available(self) -> bool: ...
    def device_count(self) -> int: ...
    def name(self, index: int) -> str: ...
    def mem_info(self, index: int) -> tuple[int, int]: ...
    def can_access_peer(self, src: int, dst: int) -> bool: ...
    def pattern(self, index: int, nbytes: int) -> Any: ...
    def copy_to(self, buf: Any, index: int) -> Any: ...
    def to_host(self, buf: Any) -> bytes: ...
    def synchronize(self, index: int) -> None: ...


class TorchCudaOps:
    """The real thing, over ``torch.cuda``."""

    def __init__(self, torch: Any) -> None:
        self.torch = torch

    def build(self) -> str | None:
        return self.torch.version.cuda  # type: ignore[no-any-return]

    def is_available(self) -> bool:
        return bool(self.torch.cuda.is_available())

    def device_count(self) -> int:
        return int(self.torch.cuda.device_count())

    def name(self, index: int) -> str:
        return str(self.torch.cuda.get_device_name(index))

    def mem_info(self, index: int) -> tuple[int, int]:
        free, total = self.torch.cuda.mem_get_info(index)
        return int(free), int(total)

    def can_access_peer(self, src: int, dst: int) -> bool:
        return bool(self.torch.cuda.can_device_access_peer(src, dst))

    def pattern(self, index: int, nbytes: int) -> Any:
        # A non-constant pattern: a copy that returns zeros, stale data or a shifted buffer
        # all differ from it (NVIDIA/nccl-tests#117: RTX 4090 P2P copies gave zeros).
        n = nbytes // 4
        t = self.torch
        return (t.arange(n, dtype=t.int32, device=f"cuda:{index}") * 2654435761) ^ 0x5BD1E995

    def copy_to(self, buf: Any, index: int) -> Any:
        return buf.to(f"cuda:{index}", non_blocking=False)

    def to_host(self, buf: Any) -> bytes:
        # Through the storage, not numpy: numpy is not a dependency of torch, and a training
        # environment without it must still run this probe.
        # clone(): a storage holding exactly these elements, even for a view of a larger one.
        return bytes(buf.detach().cpu().clone().untyped_storage())

    def synchronize(self, index: int) -> None:
        self.torch.cuda.synchronize(index)


def cuda_ops(ctx: ProbeContext) -> CudaOps:
    factory = getattr(ctx.hooks, "cuda_ops", None)
    if factory is not None:
        return factory()  # type: ignore[no-any-return]
    return TorchCudaOps(ctx.torch())


# --------------------------------------------------------------------------- nvidia-smi


@dataclass(frozen=True)
class SmiInfo:
    driver: str | None
    cuda: str | None
    gpus: tuple[str, ...]
    bus_ids: tuple[str, ...]


def query_smi(ctx: ProbeContext) -> SmiInfo | None:
    exe = ctx.which("nvidia-smi")
    if exe is None:
        return None
    res = ctx.run([exe, "--query-gpu=driver_version,name,pci.bus_id", "--format=csv,noheader"], 10)
    driver, gpus, bus = None, [], []
    if res.returncode == 0:
        for line in res.stdout.splitlines():
            cols = [c.strip() for c in line.split(",")]
            if len(cols) >= 3:
                driver = cols[0]
                gpus.append(cols[1])
                bus.append(cols[2])
    head = ctx.run([exe], 10)
    match = re.search(r"CUDA Version:\s*([0-9.]+)", head.stdout)
    return SmiInfo(driver, match.group(1) if match else None, tuple(gpus), tuple(bus))


def _major_minor(text: str | None) -> tuple[int, int] | None:
    if not text:
        return None
    m = re.match(r"(\d+)\.(\d+)", text)
    return (int(m.group(1)), int(m.group(2))) if m else None


# --------------------------------------------------------------------------- env.versions


def probe_env_versions(ctx: ProbeContext) -> Outcome:
    import platform
    import sys

    values: dict[str, object] = {"python": sys.version.split()[0], "platform": platform.platform()}
    try:
        torch = ctx.torch()
    except Exception as exc:  # ImportError, or a broken install raising OSError on a .so
        return Outcome(
            Status.FAIL,
            f"torch is not importable in {sys.executable}: {exc}",
            values,
            f"{sys.executable} -m pip install torch (or point --python / ddp-lsp.preflight.python "
            "at the interpreter you train with)",
        )
    values["torch"] = torch.__version__
    values["cuda_build"] = torch.version.cuda
    values["distributed"] = bool(torch.distributed.is_available())
    values["gloo"] = bool(
        torch.distributed.is_available() and torch.distributed.is_gloo_available()
    )
    values["nccl_available"] = bool(
        torch.distributed.is_available() and torch.distributed.is_nccl_available()
    )
    try:
        if values["nccl_available"]:
            v = torch.cuda.nccl.version()
            values["nccl"] = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
    except Exception:
        values["nccl"] = None
    try:
        values["cudnn"] = torch.backends.cudnn.version()
    except Exception:
        values["cudnn"] = None
    smi = query_smi(ctx)
    if smi is not None:
        values.update(driver=smi.driver, driver_cuda=smi.cuda, gpus=list(smi.gpus))
    if not values["distributed"]:
        return Outcome(
            Status.FAIL,
            f"torch {torch.__version__} was built without torch.distributed",
            values,
            "install an official torch wheel (macOS/Windows builds may lack distributed)",
        )
    build = _major_minor(torch.version.cuda)
    driver = _major_minor(smi.cuda if smi else None)
    desc = f"torch {torch.__version__}" + (
        f", CUDA {torch.version.cuda}" if torch.version.cuda else ", CPU build"
    )
    if values.get("nccl"):
        desc += f", NCCL {values['nccl']}"
    if smi and smi.driver:
        desc += f", driver {smi.driver} (CUDA {smi.cuda})"
    if build and driver:
        # Since CUDA 11, minor-version compatibility lets a 12.x runtime run on any 12.y driver;
        # a driver for an older major is the "driver on your system is too old" failure.
        if driver[0] < build[0]:
            return Outcome(
                Status.FAIL,
                f"{desc}: the driver supports CUDA {smi.cuda if smi else '?'} but torch needs CUDA {build[0]}.x",
                values,
                f"upgrade the NVIDIA driver, or install a torch wheel built for CUDA {driver[0]}.x",
                ("pytorch/pytorch#4546", "pytorch/pytorch#28195"),
            )
        if driver < build:
            return Outcome(
                Status.WARN,
                f"{desc}: driver CUDA {smi.cuda if smi else '?'} is older than the build's {torch.version.cuda}; "
                "minor-version compatibility covers most kernels but not PTX JIT",
                values,
                "upgrade the NVIDIA driver to one for CUDA >= " + str(torch.version.cuda),
            )
    return ok(desc, **values)


# --------------------------------------------------------------------------- cuda.basic


def parse_visible_devices(text: str | None) -> tuple[list[str] | None, str | None]:
    """CUDA_VISIBLE_DEVICES as a list, and a problem with it if any (duplicates, holes)."""
    if text is None:
        return None, None
    items = [t.strip() for t in text.split(",")]
    if text.strip() == "":
        return [], "CUDA_VISIBLE_DEVICES is empty: CUDA sees no GPU"
    if len(set(items)) != len(items):
        return items, f"CUDA_VISIBLE_DEVICES={text} lists a device twice"
    return items, None


def probe_cuda_basic(ctx: ProbeContext) -> Outcome:
    ops = cuda_ops(ctx)
    visible, vis_problem = parse_visible_devices(ctx.env.get("CUDA_VISIBLE_DEVICES"))
    values: dict[str, object] = {"cuda_build": ops.build(), "cuda_visible_devices": visible}
    want_nccl = ctx.options.backend == "nccl"
    where = (
        f"init_process_group('nccl') at {ctx.options.backend_source}"
        if ctx.options.backend_source
        else "backend nccl requested"
    )
    if ops.build() is None:
        if want_nccl:
            return Outcome(
                Status.FAIL,
                f"{where} but torch is a CPU-only build",
                values,
                "install a CUDA build of torch, or use backend='gloo'",
            )
        return skip("CPU-only torch build: no CUDA to probe", **values)
    if not ops.is_available():
        smi = ctx.which("nvidia-smi")
        if smi is None and not want_nccl:
            return skip("no NVIDIA driver (nvidia-smi not found) on this host", **values)
        return Outcome(
            Status.FAIL,
            "torch.cuda.is_available() is False"
            + (f" ({vis_problem})" if vis_problem else "")
            + (
                " although nvidia-smi exists (driver/runtime mismatch or no device permission)"
                if smi
                else ""
            ),
            values,
            "compare `nvidia-smi` with torch.version.cuda; check CUDA_VISIBLE_DEVICES and /dev/nvidia* permissions",
        )
    count = ops.device_count()
    lws = ctx.local_world_size(count)
    gpus = []
    busy = []
    for i in range(count):
        free, total = ops.mem_info(i)
        gpus.append({"index": i, "name": ops.name(i), "free_bytes": free, "total_bytes": total})
        if total and free < 0.5 * total:
            busy.append(f"cuda:{i} has {fmt_bytes(total - free)} in use by other processes")
    values.update(device_count=count, local_world_size=lws, gpus=gpus)
    if vis_problem:
        return Outcome(
            Status.FAIL, vis_problem, values, "list each GPU once in CUDA_VISIBLE_DEVICES"
        )
    if count < lws:
        return Outcome(
            Status.FAIL,
            f"{count} GPU(s) visible but {lws} ranks per node"
            + (f" ({ctx.options.world_size_source})" if ctx.options.world_size_source else "")
            + f": rank {count} would ask for cuda:{count} "
            "('invalid device ordinal') or share a GPU",
            values,
            f"torchrun --nproc-per-node={count}, or make more GPUs visible (CUDA_VISIBLE_DEVICES)",
            ("pytorch/pytorch#82153",),
        )
    names = sorted({str(g["name"]) for g in gpus})
    msg = f"{count} GPU(s) ({', '.join(names)}) for {lws} ranks"
    if busy:
        return Outcome(
            Status.WARN,
            msg + "; " + "; ".join(busy),
            values,
            "another job (or a stale rank on cuda:0) holds GPU memory: check nvidia-smi; call "
            "torch.cuda.set_device(local_rank) before init_process_group",
            ("pytorch/pytorch#135279",),
        )
    return ok(msg, **values)


# --------------------------------------------------------------------------- gpu.p2p


def probe_gpu_p2p(ctx: ProbeContext) -> Outcome:
    ops = cuda_ops(ctx)
    if ops.build() is None or not ops.is_available():
        # Not checked; if the job asked for NCCL it needed these copies to work.
        return skip_needed("no CUDA device", ctx.options.backend == "nccl")
    count = ops.device_count()
    if count < 2:
        return skip(f"{count} GPU: no pair to test")
    nbytes = 64 * MiB
    pairs = []
    mismatched = []
    slow = []
    for src in range(count):
        a = ops.pattern(src, nbytes)
        expected = ops.to_host(a)
        for dst in range(count):
            if dst == src:
                continue
            peer = ops.can_access_peer(src, dst)
            # The first copy to a GPU pays for its context, its allocator and enabling peer
            # access: it is the one compared, but not timed. The rate is the median of three.
            ops.synchronize(src)
            b = ops.copy_to(a, dst)
            ops.synchronize(dst)
            got = ops.to_host(b)
            times = []
            for _ in range(3):
                ops.synchronize(src)
                t0 = time.perf_counter()
                ops.copy_to(a, dst)
                ops.synchronize(dst)
                times.append(max(time.perf_counter() - t0, 1e-9))
            dt = sorted(times)[1]
            same = got == expected
            gbps = nbytes / dt / 1e9
            pairs.append(
                {
                    "src": src,
                    "dst": dst,
                    "peer_access": peer,
                    "match": same,
                    "gb_per_s": round(gbps, 2),
                }
            )
            if not same:
                zeros = not any(got[: 1 << 16])
                mismatched.append(
                    f"GPU{src}->GPU{dst}"
                    + (" returned zeros" if zeros else " corrupted data")
                    + (" (P2P enabled)" if peer else "")
                )
            elif gbps < 1.0:
                slow.append(f"GPU{src}->GPU{dst} {gbps:.2f} GB/s")
    values = {"pairs": pairs, "bytes": nbytes}
    if mismatched:
        return Outcome(
            Status.FAIL,
            "copy mismatch: " + ", ".join(mismatched) + ": gradients would be silently wrong",
            values,
            "export NCCL_P2P_DISABLE=1 for now; then disable PCIe ACS / IOMMU passthrough issues in "
            "the BIOS/kernel (iommu=pt) or update the driver",
            ("NVIDIA/nccl-tests#117", "NVIDIA/nccl#199", "Lightning-AI/pytorch-lightning#19425"),
        )
    if slow:
        return Outcome(
            Status.WARN,
            "slow GPU copies: " + ", ".join(slow),
            values,
            "check `nvidia-smi topo -m` (SYS pairs) and PCIe ACS settings",
            ("NVIDIA/nccl#199",),
        )
    peer_pairs = sum(1 for p in pairs if p["peer_access"])
    return ok(
        f"{len(pairs)} GPU pairs copy correctly ({peer_pairs} with peer access), "
        f"min {min(float(p['gb_per_s']) for p in pairs):.1f} GB/s",
        **values,
    )


# --------------------------------------------------------------------------- gpu.topo

LINK_RANK = {"NV": 0, "PIX": 1, "PXB": 2, "PHB": 3, "NODE": 4, "SYS": 5}


def parse_cpulist(text: str) -> set[int]:
    cpus: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        if not part or not part[0].isdigit():
            continue
        if "-" in part:
            lo, hi = part.split("-", 1)
            cpus.update(range(int(lo), int(hi) + 1))
        else:
            cpus.add(int(part))
    return cpus


@dataclass(frozen=True)
class Topology:
    gpus: tuple[str, ...]
    links: dict[tuple[int, int], str]
    cpu_affinity: dict[int, str]
    numa_affinity: dict[int, str]


def parse_topo(text: str) -> Topology:
    """Parse ``nvidia-smi topo -m``: a tab-separated matrix, GPU rows first, then NIC rows, then a
    legend. Columns after the device columns are CPU Affinity, NUMA Affinity, GPU NUMA ID."""
    lines = [ln.rstrip() for ln in text.splitlines() if ln.strip()]
    header_idx = next((i for i, ln in enumerate(lines) if re.search(r"\bGPU0\b", ln)), None)
    if header_idx is None:
        return Topology((), {}, {}, {})
    header = [h.strip() for h in re.split(r"\t+", lines[header_idx].strip())]
    devices = [h for h in header if re.fullmatch(r"(GPU|NIC)\d+|mlx\S+", h)]
    gpus = tuple(h for h in devices if h.startswith("GPU"))
    rest = header[len(devices) :]
    links: dict[tuple[int, int], str] = {}
    cpu_aff: dict[int, str] = {}
    numa_aff: dict[int, str] = {}
    for ln in lines[header_idx + 1 :]:
        cells = [c.strip() for c in re.split(r"\t+", ln.strip())]
        if not cells or not re.fullmatch(r"GPU\d+", cells[0]):
            continue
        i = int(cells[0][3:])
        for col, dev in enumerate(devices, start=1):
            if col < len(cells) and dev.startswith("GPU"):
                j = int(dev[3:])
                if i != j:
                    links[(i, j)] = cells[col]
        extra = cells[1 + len(devices) :]
        for name, value in zip(rest, extra, strict=False):
            if name.lower().startswith("cpu affinity"):
                cpu_aff[i] = value
            elif name.lower().startswith("numa affinity"):
                numa_aff[i] = value
    return Topology(gpus, links, cpu_aff, numa_aff)


def link_class(link: str) -> str:
    if link.startswith("NV"):
        return "NVLink"
    if link in ("PIX", "PXB", "PHB"):
        return "PCIe"
    if link in ("NODE", "SYS"):
        return "PCIe across CPU"
    return link


def probe_gpu_topo(ctx: ProbeContext) -> Outcome:
    exe = ctx.which("nvidia-smi")
    if exe is None:
        return skip("nvidia-smi not found")
    res = ctx.run([exe, "topo", "-m"], 10)
    if res.returncode != 0:
        return Outcome(
            Status.WARN,
            f"nvidia-smi topo -m failed: {(res.stderr or res.stdout).strip()[:200]}",
            {},
            "run nvidia-smi topo -m by hand; check the driver",
        )
    topo = parse_topo(res.stdout)
    if not topo.gpus:
        return skip("nvidia-smi topo -m listed no GPUs")
    smi = query_smi(ctx)
    numa_nodes: dict[str, int | None] = {}
    for idx, bus in enumerate(smi.bus_ids if smi else ()):
        # sysfs wants the 4-digit PCI domain in lower case: 00000000:17:00.0 -> 0000:17:00.0
        dom, _, rest = bus.lower().partition(":")
        text = read_text(ctx.hooks.path("sys/bus/pci/devices", f"{dom[-4:]}:{rest}", "numa_node"))
        numa_nodes[f"GPU{idx}"] = int(text) if text and text.strip().lstrip("-").isdigit() else None
    pairs = {f"GPU{i}-GPU{j}": link for (i, j), link in sorted(topo.links.items()) if i < j}
    worst = max(
        topo.links.values(), key=lambda lk: LINK_RANK.get(re.sub(r"\d+$", "", lk), 0), default=""
    )
    values: dict[str, object] = {
        "gpus": len(topo.gpus),
        "links": pairs,
        "cpu_affinity": {f"GPU{k}": v for k, v in topo.cpu_affinity.items()},
        "numa_affinity": {f"GPU{k}": v for k, v in topo.numa_affinity.items()},
        "numa_node": numa_nodes,
        "interconnect": link_class(worst) if worst else None,
    }
    problems: list[str] = []
    fixes: list[str] = []
    sys_pairs = [p for p, lk in pairs.items() if lk == "SYS"]
    if sys_pairs:
        problems.append(
            f"{len(sys_pairs)} GPU pair(s) connect across the CPU socket link (SYS: {', '.join(sys_pairs[:4])}): "
            "NCCL disables P2P there and bandwidth drops"
        )
        fixes.append(
            "place communicating ranks on GPUs under one socket, or accept the slower path"
        )
    try:
        mine = ctx.hooks.cpu_affinity()
    except OSError:
        mine = set()
    disjoint = [
        f"GPU{i}"
        for i, text in topo.cpu_affinity.items()
        if mine and text and not (parse_cpulist(text) & mine)
    ]
    if disjoint:
        problems.append(
            f"this process may only run on CPUs outside the affinity of {', '.join(disjoint)}"
        )
        fixes.append(
            "torchrun --numa-binding=node (torch >= 2.8), or bind each rank with numactl --cpunodebind"
        )
    link_summary = ", ".join(sorted({link_class(lk) for lk in pairs.values()})) or "single GPU"
    if problems:
        return Outcome(
            Status.WARN,
            "; ".join(problems),
            values,
            "; ".join(fixes),
            ("NCCL docs NCCL_P2P_LEVEL", "pytorch/pytorch#115305"),
        )
    return ok(f"{len(topo.gpus)} GPUs, links: {link_summary}", **values)


# --------------------------------------------------------------------------- dcgm.quick


def _info(node: dict[str, Any]) -> str:
    info = node.get("info") or node.get("warnings") or ""
    return (info if isinstance(info, str) else json.dumps(info))[:200]


def _walk_tests(node: Any, out: list[tuple[str, str, str]]) -> None:
    # dcgmi -j nests {"name": test, "results": [{"status": "Pass", "info": ...}, ...]} under
    # test_categories; older versions put "status" next to "name". Accept both shapes.
    if isinstance(node, dict):
        name = node.get("name") or node.get("test_name")
        results = node.get("results")
        if isinstance(name, str) and isinstance(results, list):
            for res in results:
                if isinstance(res, dict) and isinstance(res.get("status"), str):
                    out.append((name, res["status"], _info(res)))
            return
        if isinstance(name, str) and isinstance(node.get("status"), str):
            out.append((name, node["status"], _info(node)))
            return
        for value in node.values():
            _walk_tests(value, out)
    elif isinstance(node, list):
        for value in node:
            _walk_tests(value, out)


def parse_dcgm(data: Any) -> list[tuple[str, str, str]]:
    """(test, status, info) for every result ``dcgmi diag -r 1 -j`` reports."""
    out: list[tuple[str, str, str]] = []
    _walk_tests(data, out)
    return out


def probe_dcgm(ctx: ProbeContext) -> Outcome:
    exe = ctx.which("dcgmi")
    if exe is None:
        return skip("dcgmi not found (DCGM not installed)")
    res = ctx.run([exe, "diag", "-r", "1", "-j"], 55)
    try:
        data = json.loads(res.stdout)
    except ValueError:
        return Outcome(
            Status.WARN,
            f"dcgmi diag gave no JSON (exit {res.returncode}): {(res.stderr or res.stdout).strip()[:200]}",
            {},
            "is nv-hostengine running? try `dcgmi diag -r 1` by hand",
        )
    tests = parse_dcgm(data)
    values = {"tests": [{"name": n, "status": s} for n, s, _ in tests]}
    failed = [
        f"{n}: {i}".rstrip(": ") for n, s, i in tests if s.lower() in ("fail", "failed", "error")
    ]
    warned = [n for n, s, _ in tests if s.lower() in ("warn", "warning")]
    if failed:
        return Outcome(
            Status.FAIL,
            "DCGM level 1 failed: " + "; ".join(failed),
            values,
            "see `dcgmi diag -r 1` for details; fix the driver/permissions issue it names",
            ("https://docs.nvidia.com/datacenter/dcgm/latest/user-guide/dcgm-diagnostics.html",),
        )
    if warned:
        return Outcome(
            Status.WARN,
            "DCGM level 1 warnings: " + ", ".join(warned),
            values,
            "see `dcgmi diag -r 1`",
        )
    if not tests:
        return Outcome(
            Status.WARN,
            "dcgmi diag -r 1 returned no test results we could read",
            values,
            "run `dcgmi diag -r 1` by hand",
        )
    return ok(f"DCGM level 1: {len(tests)} checks passed", **values)


GPU_PROBES: tuple[Probe, ...] = (
    Probe("env.versions", "Versions", 20.0, probe_env_versions, needs_torch=True),
    Probe("cuda.basic", "CUDA devices", 30.0, probe_cuda_basic, needs_torch=True),
    Probe("gpu.p2p", "GPU peer-to-peer copies", 30.0, probe_gpu_p2p, needs_torch=True),
    Probe("gpu.topo", "GPU topology and NUMA", 10.0, probe_gpu_topo),
    Probe("dcgm.quick", "DCGM quick diagnostic", 60.0, probe_dcgm),
)
