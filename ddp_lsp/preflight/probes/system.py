"""Probes that need neither torch nor a GPU: /dev/shm, rlimits, CPUs, NICs, the port, env vars.

These are the facts behind most failed launches that are not code bugs: Docker's 64 MB
/dev/shm kills DataLoader workers with "Bus error", a 1024 ``nofile`` limit ends in "Too many
open files" once workers share tensors by file descriptor, NCCL picks ``docker0`` or ``lo``,
and a stale rank still holds MASTER_PORT.
"""

from __future__ import annotations

import difflib
import errno
import math
import os
import re
import resource
import socket
from collections.abc import Mapping

from ddp_lsp.preflight.probes.base import (
    Outcome,
    Probe,
    ProbeContext,
    fmt_bytes,
    ok,
    read_text,
    skip,
)
from ddp_lsp.preflight.schema import Status

MiB = 1 << 20
GiB = 1 << 30
#: NCCL's SHM transport and proxy buffers live in /dev/shm too (nccl-tests#166).
NCCL_SHM_BYTES = 64 * MiB
#: A DataLoader keeps ``prefetch_factor`` (default 2) batches per worker in flight.
PREFETCH_FACTOR = 2
#: Assumed batch when none is given: 32 images 3x224x224 float32 is ~18 MiB.
DEFAULT_BATCH_BYTES = 16 * MiB


def effective_cpus(ctx: ProbeContext) -> tuple[int, dict[str, int | None]]:
    """CPUs this process may use: its affinity mask, capped by a cgroup v2 ``cpu.max`` quota
    (a container with ``--cpus=4`` still sees every host CPU in its affinity)."""
    try:
        affinity: int | None = len(ctx.hooks.cpu_affinity())
    except (AttributeError, OSError):
        affinity = None
    quota_cpus: int | None = None
    text = read_text(ctx.hooks.path("sys/fs/cgroup/cpu.max"))
    if text:
        parts = text.split()
        if len(parts) == 2 and parts[0] != "max":
            try:
                quota_cpus = max(1, math.ceil(int(parts[0]) / int(parts[1])))
            except (ValueError, ZeroDivisionError):
                quota_cpus = None
    candidates = [c for c in (affinity, quota_cpus) if c]
    cpus = min(candidates) if candidates else (ctx.hooks.cpu_count() or 1)
    return cpus, {
        "affinity_cpus": affinity,
        "cgroup_cpus": quota_cpus,
        "host_cpus": ctx.hooks.cpu_count(),
    }


def recommended_workers(cpus: int, local_world_size: int) -> int:
    """Lightning's bound: leave one CPU per rank for the training loop itself."""
    return max(1, cpus // max(1, local_world_size) - 1)


# --------------------------------------------------------------------------- shm.capacity


def _shm_need(ctx: ProbeContext, cpus: int) -> tuple[int, dict[str, object]]:
    lws = ctx.local_world_size()
    workers = ctx.options.num_workers
    assumed = []
    if workers is None:
        workers = recommended_workers(cpus, lws)
        assumed.append("num_workers")
    batch = ctx.options.batch_bytes
    if batch is None:
        batch = DEFAULT_BATCH_BYTES
        assumed.append("batch_bytes")
    # Before torch is imported the backend is only known if given: assume NCCL where a driver is.
    uses_nccl = ctx.options.backend == "nccl" or (
        ctx.options.backend is None and ctx.which("nvidia-smi")
    )
    nccl = NCCL_SHM_BYTES if uses_nccl else 0
    need = int(lws * workers * PREFETCH_FACTOR * batch * 1.25) + nccl
    return need, {
        "local_world_size": lws,
        "num_workers": workers,
        "batch_bytes": batch,
        "prefetch_factor": PREFETCH_FACTOR,
        "nccl_bytes": nccl,
        "assumed": assumed,
    }


def _fallocate_test(ctx: ProbeContext, directory: str, nbytes: int) -> str | None:
    """Reserve ``nbytes`` for real: ``df`` on an overlay or a size-limited tmpfs can report space
    that a write then does not get (the DataLoader's "No space left on device (28)")."""
    path = os.path.join(directory, f"{ctx.shm_prefix}-{os.getpid()}-fallocate")
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
    except OSError as exc:
        return f"cannot create a file in {directory}: {exc.strerror}"
    try:
        os.posix_fallocate(fd, 0, nbytes)
        return None
    except OSError as exc:
        return f"posix_fallocate({fmt_bytes(nbytes)}) failed: {exc.strerror}"
    finally:
        os.close(fd)
        try:
            os.unlink(path)
        except OSError:
            pass


def probe_shm(ctx: ProbeContext) -> Outcome:
    directory = ctx.hooks.path("dev/shm")
    try:
        usage = ctx.hooks.disk_usage(directory)
    except OSError as exc:
        return Outcome(
            Status.FAIL,
            f"/dev/shm is not usable: {exc.strerror}",
            {"error": str(exc)},
            fix="mount a tmpfs at /dev/shm (docker run --shm-size=16g, or --ipc=host)",
        )
    cpus, _ = effective_cpus(ctx)
    need, detail = _shm_need(ctx, cpus)
    values: dict[str, object] = {
        "total_bytes": int(usage.total),
        "free_bytes": int(usage.free),
        "required_bytes": need,
        **detail,
    }
    suggest_gib = max(1, math.ceil(2 * need / GiB))
    fix = (
        f"give the container more shared memory: docker run --shm-size={suggest_gib}g "
        "(or --ipc=host); on Kubernetes mount an emptyDir with medium: Memory at /dev/shm; "
        "or lower num_workers / batch size"
    )
    formula = (
        f"{detail['local_world_size']} ranks x {detail['num_workers']} workers x "
        f"{PREFETCH_FACTOR} x {fmt_bytes(int(str(detail['batch_bytes'])))} x 1.25"
        + (" + 64 MiB NCCL" if detail["nccl_bytes"] else "")
    )
    if detail["assumed"]:
        formula += f" (assumed {', '.join(detail['assumed'])})"  # type: ignore[arg-type]
    refs = ("pytorch/pytorch#5040", "pytorch/pytorch#10396", "NVIDIA/nccl-tests#166")
    if usage.free < need:
        return Outcome(
            Status.FAIL,
            f"/dev/shm {fmt_bytes(usage.free)} free of {fmt_bytes(usage.total)}, need "
            f"~{fmt_bytes(need)} ({formula}): DataLoader workers die with 'Bus error'",
            values,
            fix,
            refs,
        )
    failure = _fallocate_test(ctx, directory, min(need, 256 * MiB))
    values["fallocate_bytes"] = min(need, 256 * MiB)
    if failure:
        values["fallocate_error"] = failure
        return Outcome(
            Status.FAIL,
            f"/dev/shm reports {fmt_bytes(usage.free)} free but {failure}",
            values,
            fix,
            refs,
        )
    if usage.free < 2 * need:
        return Outcome(
            Status.WARN,
            f"/dev/shm {fmt_bytes(usage.free)} free, need ~{fmt_bytes(need)} ({formula}): little headroom",
            values,
            fix,
            refs,
        )
    return Outcome(
        Status.PASS,
        f"/dev/shm {fmt_bytes(usage.free)} free, need ~{fmt_bytes(need)} ({formula})",
        values,
    )


# --------------------------------------------------------------------------- limits


def _limit_text(value: int, unit: int = 1) -> str:
    if value == resource.RLIM_INFINITY:
        return "unlimited"
    return f"{value // 1024} KiB" if unit == 1024 else str(value)


def has_infiniband(ctx: ProbeContext) -> bool:
    try:
        return bool(os.listdir(ctx.hooks.path("sys/class/infiniband")))
    except OSError:
        return False


def probe_limits(ctx: ProbeContext) -> Outcome:
    inf = resource.RLIM_INFINITY
    nofile_soft, nofile_hard = ctx.hooks.getrlimit(resource.RLIMIT_NOFILE)
    memlock_soft, memlock_hard = ctx.hooks.getrlimit(resource.RLIMIT_MEMLOCK)
    nproc_soft, nproc_hard = ctx.hooks.getrlimit(resource.RLIMIT_NPROC)
    lws = ctx.local_world_size()
    workers = ctx.options.num_workers if ctx.options.num_workers is not None else 4
    # Every tensor a worker hands over with the default file_descriptor sharing strategy holds
    # an fd until the main process frees it; 64 per worker covers a prefetch queue comfortably.
    nofile_need = max(4096, 64 * lws * max(1, workers))
    ib = has_infiniband(ctx)
    values = {
        "nofile_soft": _limit_text(nofile_soft),
        "nofile_hard": _limit_text(nofile_hard),
        "nofile_required": nofile_need,
        "memlock_soft": _limit_text(memlock_soft, 1024),
        "memlock_hard": _limit_text(memlock_hard, 1024),
        "nproc_soft": _limit_text(nproc_soft),
        "infiniband": ib,
    }
    problems: list[tuple[Status, str, str]] = []
    if nofile_soft != inf and nofile_soft < nofile_need:
        raise_to = nofile_hard if nofile_hard == inf or nofile_hard >= nofile_need else nofile_need
        problems.append(
            (
                Status.WARN,
                f"open files limit {nofile_soft} < {nofile_need}: workers sharing tensors hit "
                "'Too many open files' / 'received 0 items of ancdata'",
                f"ulimit -n {_limit_text(raise_to) if raise_to != inf else 65535} before launching "
                "(docker: --ulimit nofile=65535:65535), or "
                "torch.multiprocessing.set_sharing_strategy('file_system')",
            )
        )
    if ib and memlock_soft != inf:
        problems.append(
            (
                Status.FAIL,
                f"locked-memory limit {memlock_soft // 1024} KiB with InfiniBand present: NCCL's "
                "ibv_reg_mr fails with 'Cannot allocate memory'",
                "set memlock unlimited: docker run --ulimit memlock=-1; on hosts "
                "'* - memlock unlimited' in /etc/security/limits.conf (and slurmd's own limit)",
            )
        )
    nproc_need = 64 * lws * (1 + max(1, workers))
    if nproc_soft != inf and nproc_soft < nproc_need:
        problems.append(
            (
                Status.WARN,
                f"process/thread limit {nproc_soft} < {nproc_need}: each rank and worker starts "
                "dozens of threads (OpenMP, gloo, NCCL); thread creation fails past the limit",
                f"ulimit -u {max(nproc_need, 65535)}",
            )
        )
    refs = ("pytorch/pytorch#11201", "pytorch/pytorch#14768", "NVIDIA/nccl-tests#206")
    if not problems:
        memlock_note = (
            "" if ib else f"; memlock {_limit_text(memlock_soft, 1024)} (no InfiniBand, so unused)"
        )
        return Outcome(
            Status.PASS,
            f"nofile {_limit_text(nofile_soft)}, nproc {_limit_text(nproc_soft)}{memlock_note}",
            values,
        )
    worst = Status.FAIL if any(p[0] is Status.FAIL for p in problems) else Status.WARN
    return Outcome(
        worst, "; ".join(p[1] for p in problems), values, "; ".join(p[2] for p in problems), refs
    )


# --------------------------------------------------------------------------- cpu.workers


def probe_cpu_workers(ctx: ProbeContext) -> Outcome:
    cpus, detail = effective_cpus(ctx)
    lws = ctx.local_world_size()
    rec = recommended_workers(cpus, lws)
    values: dict[str, object] = {
        "cpus": cpus,
        **detail,
        "local_world_size": lws,
        "recommended_num_workers": rec,
    }
    workers = ctx.options.num_workers
    if workers is None:
        return ok(f"{cpus} CPUs for {lws} ranks: num_workers <= {rec} per DataLoader", **values)
    total = workers * lws
    values["num_workers"] = workers
    values["total_workers"] = total
    if total > cpus:
        # PyTorch itself only warns here (check_worker_number_rationality), and so do we:
        # oversubscription slows the run, it does not break it.
        return Outcome(
            Status.WARN,
            f"num_workers={workers} x {lws} ranks = {total} workers > {cpus} CPUs",
            values,
            f"num_workers={rec} (max(1, CPUs // ranks - 1))",
            ("Lightning-AI/pytorch-lightning src/lightning/fabric/utilities/data.py",),
        )
    return ok(f"num_workers={workers} x {lws} ranks = {total} workers <= {cpus} CPUs", **values)


# --------------------------------------------------------------------------- net.iface

_VIRTUAL = re.compile(
    r"^(lo|docker\d*|veth.*|br-.*|virbr.*|cni.*|flannel.*|cali.*|tun.*|tap.*|ifb.*|dummy.*)$"
)


def list_interfaces(ctx: ProbeContext) -> list[dict[str, object]]:
    base = ctx.hooks.path("sys/class/net")
    try:
        names = sorted(os.listdir(base))
    except OSError:
        return []
    out = []
    for name in names:
        flags_text = read_text(os.path.join(base, name, "flags")) or "0x0"
        try:
            flags = int(flags_text.strip(), 16)
        except ValueError:
            flags = 0
        oper = (read_text(os.path.join(base, name, "operstate")) or "unknown").strip()
        # IFF_UP is bit 0; loopback reports operstate "unknown" while being perfectly up.
        up = bool(flags & 0x1) and oper in ("up", "unknown")
        out.append(
            {"name": name, "up": up, "operstate": oper, "virtual": bool(_VIRTUAL.match(name))}
        )
    return out


def ifname_matches(spec: str, name: str) -> bool:
    """NCCL_SOCKET_IFNAME syntax: comma list of prefixes; ``^`` excludes; ``=`` exact."""
    exclude = spec.startswith("^")
    body = spec[1:] if exclude else spec
    exact = body.startswith("=")
    body = body[1:] if exact else body
    hit = any((name == p if exact else name.startswith(p)) for p in body.split(",") if p)
    return not hit if exclude else hit


def is_multinode(ctx: ProbeContext) -> bool:
    env = ctx.env
    if ctx.options.torchrun:
        try:
            return int(env.get("WORLD_SIZE", "1")) > int(env.get("LOCAL_WORLD_SIZE", "1"))
        except ValueError:
            return True
    for key in ("SLURM_NNODES", "NNODES", "PET_NNODES"):
        value = env.get(key, "")
        if value.isdigit() and int(value) > 1:
            return True
    return False


def probe_net_iface(ctx: ProbeContext) -> Outcome:
    ifaces = list_interfaces(ctx)
    if not ifaces:
        return skip("no /sys/class/net to read")
    up = [i for i in ifaces if i["up"]]
    physical = [str(i["name"]) for i in up if not i["virtual"]]
    multi = is_multinode(ctx)
    values: dict[str, object] = {
        "interfaces": ifaces,
        "up_physical": physical,
        "multinode": multi,
        "infiniband": has_infiniband(ctx),
    }
    refs = ("pytorch/pytorch#68893", "NVIDIA/nccl#286")
    for var in ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"):
        spec = ctx.env.get(var)
        if spec:
            matches = [str(i["name"]) for i in up if ifname_matches(spec, str(i["name"]))]
            values[var] = spec
            if not matches:
                return Outcome(
                    Status.FAIL,
                    f"{var}={spec} matches no interface that is up ({', '.join(str(i['name']) for i in up) or 'none'})",
                    values,
                    f"export {var}={physical[0] if physical else '<nic>'}",
                    refs,
                )
    if not physical:
        status = Status.FAIL if multi else Status.WARN
        where = (
            "other nodes cannot reach this host"
            if multi
            else "fine on one node; other nodes could not reach it"
        )
        return Outcome(
            status,
            f"only loopback/virtual interfaces are up ({', '.join(str(i['name']) for i in up)}): {where}",
            values,
            "attach a real network (docker: --network=host) and set NCCL_SOCKET_IFNAME / "
            "GLOO_SOCKET_IFNAME to it",
            refs,
        )
    hint = ""
    if multi and "NCCL_SOCKET_IFNAME" not in ctx.env and len(physical) > 1:
        return Outcome(
            Status.WARN,
            f"several NICs up ({', '.join(physical)}) and NCCL_SOCKET_IFNAME unset: NCCL may pick "
            "one the other nodes cannot reach",
            values,
            f"export NCCL_SOCKET_IFNAME={physical[0]} GLOO_SOCKET_IFNAME={physical[0]} (the NIC on the nodes' shared network)",
            refs,
        )
    return ok(f"up: {', '.join(physical)}{hint}", **values)


# --------------------------------------------------------------------------- rdzv.port


def _port_owners(ctx: ProbeContext, port: int) -> list[str]:
    """Who listens on ``port``: /proc/net/tcp inode -> /proc/<pid>/fd (our own processes only)."""
    inodes = set()
    for table in ("proc/net/tcp", "proc/net/tcp6"):
        text = read_text(ctx.hooks.path(table)) or ""
        for line in text.splitlines()[1:]:
            cols = line.split()
            if len(cols) > 9 and cols[3] == "0A" and int(cols[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(cols[9])
    owners: list[str] = []
    if not inodes:
        return owners
    proc = ctx.hooks.path("proc")
    for pid in filter(str.isdigit, os.listdir(proc)):
        try:
            for fd in os.listdir(os.path.join(proc, pid, "fd")):
                link = os.readlink(os.path.join(proc, pid, "fd", fd))
                if link.startswith("socket:[") and link[8:-1] in inodes:
                    cmd = (
                        (read_text(os.path.join(proc, pid, "cmdline")) or "")
                        .replace("\0", " ")
                        .strip()
                    )
                    owners.append(f"pid {pid} ({cmd[:80]})")
                    break
        except OSError:
            continue
    return owners


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def _is_local(addr: str) -> bool:
    try:
        infos = socket.getaddrinfo(addr, None)
    except OSError:
        return False
    for info in infos:
        ip = str(info[4][0])
        if ip.startswith("127.") or ip == "::1":
            return True
        try:
            with socket.socket(info[0], socket.SOCK_DGRAM) as sock:
                sock.bind((ip, 0))
                return True
        except OSError:
            continue
    return False


def probe_rdzv_port(ctx: ProbeContext) -> Outcome:
    addr = ctx.env.get("MASTER_ADDR", "127.0.0.1")
    port_text = ctx.env.get("MASTER_PORT", "29500")
    if not port_text.isdigit() or not (0 < int(port_text) < 65536):
        return Outcome(
            Status.FAIL,
            f"MASTER_PORT={port_text!r} is not a port",
            {"master_port": port_text},
            "export MASTER_PORT=29500",
        )
    port = int(port_text)
    values: dict[str, object] = {"master_addr": addr, "master_port": port}
    try:
        resolved = sorted(
            {str(i[4][0]) for i in socket.getaddrinfo(addr, port, type=socket.SOCK_STREAM)}
        )
    except OSError as exc:
        return Outcome(
            Status.FAIL,
            f"MASTER_ADDR={addr} does not resolve: {exc}",
            values,
            "set MASTER_ADDR to the rank-0 host's address reachable from every node",
        )
    values["resolved"] = resolved
    if "TORCHELASTIC_RUN_ID" in ctx.env or ctx.options.torchrun:
        # Under torchrun the port belongs to the rendezvous store already; a live connection is
        # the pass condition, a bind would (correctly) fail.
        try:
            with socket.create_connection((addr, port), timeout=2):
                return ok(f"torchrun store at {addr}:{port} reachable", **values)
        except OSError as exc:
            return Outcome(
                Status.FAIL,
                f"torchrun store {addr}:{port} unreachable: {exc}",
                values,
                "check MASTER_ADDR/MASTER_PORT and firewalls between nodes",
            )
    if not _is_local(addr):
        return ok(
            f"MASTER_ADDR={addr} resolves to {', '.join(resolved)} (not this host: "
            "its port is checked on that host)",
            **values,
        )
    with socket.socket(
        socket.AF_INET6 if ":" in resolved[0] else socket.AF_INET, socket.SOCK_STREAM
    ) as sock:
        try:
            sock.bind((resolved[0], port))
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE:
                return Outcome(
                    Status.FAIL,
                    f"cannot bind {addr}:{port}: {exc.strerror}",
                    values,
                    "pick another MASTER_PORT",
                )
            owners = _port_owners(ctx, port)
            values["owners"] = owners
            alt = free_port()
            held = f" by {'; '.join(owners)}" if owners else ""
            return Outcome(
                Status.FAIL,
                f"MASTER_PORT {port} is already in use{held}: init fails with "
                "'errno: 98 - Address already in use'",
                values,
                f"export MASTER_PORT={alt} (free now), or stop the stale ranks{held}",
                ("pytorch/pytorch#85604", "pytorch/pytorch#126510"),
            )
    return ok(f"{addr}:{port} free", **values)


# --------------------------------------------------------------------------- env.lint

#: NCCL and PyTorch-NCCL variables we recognise, to catch typos such as NCCL_SOCKET_IFACE.
KNOWN_VARS = frozenset(
    """NCCL_DEBUG NCCL_DEBUG_SUBSYS NCCL_DEBUG_FILE NCCL_SOCKET_IFNAME NCCL_SOCKET_FAMILY
    NCCL_SOCKET_NTHREADS NCCL_NSOCKS_PERTHREAD NCCL_IB_DISABLE NCCL_IB_HCA NCCL_IB_GID_INDEX
    NCCL_IB_TIMEOUT NCCL_IB_RETRY_CNT NCCL_IB_SL NCCL_IB_TC NCCL_IB_QPS_PER_CONNECTION
    NCCL_IB_PCI_RELAXED_ORDERING NCCL_IB_ADAPTIVE_ROUTING NCCL_P2P_DISABLE NCCL_P2P_LEVEL
    NCCL_P2P_NET_CHUNKSIZE NCCL_P2P_USE_CUDA_MEMCPY NCCL_SHM_DISABLE NCCL_NET_GDR_LEVEL
    NCCL_NET_GDR_READ NCCL_NET NCCL_NET_PLUGIN NCCL_TOPO_FILE NCCL_TOPO_DUMP_FILE NCCL_ALGO
    NCCL_PROTO NCCL_MIN_NCHANNELS NCCL_MAX_NCHANNELS NCCL_BUFFSIZE NCCL_NTHREADS
    NCCL_LAUNCH_MODE NCCL_CROSS_NIC NCCL_CHECKS_DISABLE NCCL_COLLNET_ENABLE NCCL_NVLS_ENABLE
    NCCL_CUMEM_ENABLE NCCL_IGNORE_CPU_AFFINITY NCCL_ASYNC_ERROR_HANDLING NCCL_BLOCKING_WAIT
    NCCL_NVB_DISABLE NCCL_PXN_DISABLE NCCL_GRAPH_DUMP_FILE NCCL_SET_THREAD_NAME NCCL_HOSTID
    NCCL_MAX_CTAS NCCL_MIN_CTAS NCCL_CONNECT_TIMEOUT NCCL_RUNTIME_CONNECT NCCL_IB_ROCE_VERSION_NUM
    TORCH_NCCL_ASYNC_ERROR_HANDLING TORCH_NCCL_BLOCKING_WAIT TORCH_NCCL_DUMP_ON_TIMEOUT
    TORCH_NCCL_TRACE_BUFFER_SIZE TORCH_FR_BUFFER_SIZE TORCH_NCCL_DESYNC_DEBUG
    TORCH_NCCL_ENABLE_TIMING TORCH_NCCL_ENABLE_MONITORING TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC
    TORCH_NCCL_TRACE_CPP_STACK TORCH_NCCL_DEBUG_INFO_TEMP_FILE TORCH_NCCL_DEBUG_INFO_PIPE_FILE
    TORCH_NCCL_COORD_CHECK_MILSEC TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC TORCH_NCCL_USE_COMM_NONBLOCKING
    TORCH_NCCL_AVOID_RECORD_STREAMS TORCH_NCCL_NAN_CHECK TORCH_NCCL_USE_TENSOR_REGISTER_ALLOCATOR_HOOK
    TORCH_NCCL_HIGH_PRIORITY TORCH_NCCL_CUDA_EVENT_CACHE TORCH_NCCL_LOG_CPP_STACK_ON_UNCLEAN_SHUTDOWN
    TORCH_NCCL_RETHROW_CUDA_ERRORS TORCH_NCCL_PROPAGATE_ERROR TORCH_NCCL_EXTRA_DUMP_ON_EXEC
    TORCH_NCCL_DUMP_ON_TIMEOUT_DELAY TORCH_NCCL_ENABLE_NAN_CHECK""".split()
)


def lint_env(env: Mapping[str, str], infiniband: bool = False) -> list[tuple[Status, str, str]]:
    """Pure: (status, finding, fix) for each NCCL_* / TORCH_NCCL_* setting worth a word."""
    out: list[tuple[Status, str, str]] = []

    def is_on(name: str) -> bool:
        return env.get(name, "").strip().lower() in ("1", "true", "yes", "on")

    if is_on("NCCL_P2P_DISABLE"):
        out.append(
            (
                Status.WARN,
                "NCCL_P2P_DISABLE=1: GPU-to-GPU traffic goes through host memory (several times slower)",
                "unset it unless gpu.p2p shows broken P2P on this host",
            )
        )
    if is_on("NCCL_SHM_DISABLE"):
        out.append(
            (
                Status.WARN,
                "NCCL_SHM_DISABLE=1: intra-node traffic falls back to sockets",
                "unset NCCL_SHM_DISABLE (give the container a real /dev/shm instead)",
            )
        )
    if is_on("NCCL_IB_DISABLE") and infiniband:
        out.append(
            (
                Status.WARN,
                "NCCL_IB_DISABLE=1 with InfiniBand present: inter-node traffic uses TCP",
                "unset NCCL_IB_DISABLE",
            )
        )
    for name in ("TORCH_NCCL_ASYNC_ERROR_HANDLING", "NCCL_ASYNC_ERROR_HANDLING"):
        if env.get(name, "").strip() == "0":
            out.append(
                (
                    Status.WARN,
                    f"{name}=0: a failed or timed-out collective no longer tears the job down, so ranks hang",
                    f"unset {name} (default 3: tear down on error)",
                )
            )
    dump = is_on("TORCH_NCCL_DUMP_ON_TIMEOUT")
    buf = env.get("TORCH_NCCL_TRACE_BUFFER_SIZE") or env.get("TORCH_FR_BUFFER_SIZE") or "0"
    if dump and (not buf.strip().isdigit() or int(buf) <= 0):
        out.append(
            (
                Status.WARN,
                "TORCH_NCCL_DUMP_ON_TIMEOUT=1 without a trace buffer: the flight recorder records nothing",
                "export TORCH_NCCL_TRACE_BUFFER_SIZE=2000",
            )
        )
    for name in ("TORCH_NCCL_BLOCKING_WAIT", "NCCL_BLOCKING_WAIT"):
        if is_on(name):
            out.append(
                (
                    Status.WARN,
                    f"{name}=1: the host blocks on every collective (debugging only; slows training)",
                    f"unset {name}",
                )
            )
    for legacy in ("NCCL_ASYNC_ERROR_HANDLING", "NCCL_BLOCKING_WAIT"):
        if legacy in env:
            out.append(
                (
                    Status.WARN,
                    f"{legacy} is the pre-2.2 name; PyTorch reads TORCH_{legacy}",
                    f"rename to TORCH_{legacy}",
                )
            )
    if is_on("CUDA_LAUNCH_BLOCKING"):
        out.append(
            (
                Status.WARN,
                "CUDA_LAUNCH_BLOCKING=1 serialises every kernel (debugging only)",
                "unset CUDA_LAUNCH_BLOCKING",
            )
        )
    if env.get("TORCH_DISTRIBUTED_DEBUG", "").upper() == "DETAIL":
        out.append(
            (
                Status.PASS,
                "TORCH_DISTRIBUTED_DEBUG=DETAIL checks every collective (slower; good for a first run)",
                "",
            )
        )
    if env.get("NCCL_DEBUG", "").upper() in ("INFO", "TRACE"):
        out.append((Status.PASS, f"NCCL_DEBUG={env['NCCL_DEBUG']}: verbose logs", ""))
    for name in sorted(env):
        if (name.startswith("NCCL_") or name.startswith("TORCH_NCCL_")) and name not in KNOWN_VARS:
            close = difflib.get_close_matches(name, KNOWN_VARS, n=1, cutoff=0.85)
            if close:
                out.append(
                    (
                        Status.WARN,
                        f"{name} is not a variable NCCL or PyTorch reads; did you mean {close[0]}?",
                        f"rename {name} to {close[0]}",
                    )
                )
    return out


def probe_env_lint(ctx: ProbeContext) -> Outcome:
    findings = lint_env(ctx.env, has_infiniband(ctx))
    seen = {
        k: v
        for k, v in sorted(ctx.env.items())
        if k.startswith(("NCCL_", "TORCH_NCCL_", "TORCH_DISTRIBUTED", "GLOO_"))
    }
    values = {"variables": seen, "findings": [f[1] for f in findings]}
    warns = [f for f in findings if f[0] is Status.WARN]
    if warns:
        return Outcome(
            Status.WARN,
            "; ".join(f[1] for f in warns),
            values,
            "; ".join(f[2] for f in warns),
            ("https://docs.pytorch.org/docs/stable/torch_nccl_environment_variables.html",),
        )
    if findings:
        return ok("; ".join(f[1] for f in findings), **values)
    return ok(f"{len(seen)} NCCL/TORCH_NCCL variables set, none risky", **values)


SYSTEM_PROBES: tuple[Probe, ...] = (
    Probe("shm.capacity", "/dev/shm capacity", 5.0, probe_shm),
    Probe("limits", "Resource limits", 3.0, probe_limits),
    Probe("cpu.workers", "CPUs and DataLoader workers", 3.0, probe_cpu_workers),
    Probe("net.iface", "Network interfaces", 3.0, probe_net_iface),
    Probe("rdzv.port", "Rendezvous address and port", 5.0, probe_rdzv_port),
    Probe("env.lint", "NCCL / TORCH_NCCL variables", 3.0, probe_env_lint),
)
