"""The rank harness of the probes that start real ranks (dist.*, dist.correctness, feasibility).

Ranks are forked from the probe's worker process, which already imported torch, so the 2 s
torch import is paid once rather than once per rank (spawn would re-import serially on a
2-CPU box). The worker holds the TCPStore server itself: ranks connect as clients and mark
``arrived/<rank>`` before ``init_process_group``, so when a rank never shows up the worker can
name it, whatever error the other ranks raise. Every rank gets ``PR_SET_PDEATHSIG`` so a killed
worker takes its ranks with it.

Fault injection for tests (``DDP_LSP_PREFLIGHT_INJECT``, comma list): ``absent:<rank>`` (the rank
never connects), ``stall:<rank>`` (the rank joins, then never reaches ``monitored_barrier``).
"""

from __future__ import annotations

import ctypes
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from ddp_lsp.preflight.probes.base import Outcome, ProbeContext
from ddp_lsp.preflight.schema import Status

INJECT_ENV = "DDP_LSP_PREFLIGHT_INJECT"


def injected(env: Any, kind: str) -> set[int]:
    out = set()
    for item in str(env.get(INJECT_ENV, "")).split(","):
        name, _, arg = item.strip().partition(":")
        if name == kind and arg.isdigit():
            out.add(int(arg))
    return out


def set_pdeathsig() -> None:
    """Die with the parent: PR_SET_PDEATHSIG(SIGKILL). Linux only; a no-op elsewhere."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass


@dataclass
class RankEnv:
    rank: int
    world_size: int
    backend: str
    torch: Any
    dist: Any
    device: Any
    timeout_s: float
    stall: bool
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class RanksOutcome:
    results: dict[int, dict[str, Any]]
    never_arrived: tuple[int, ...]
    unfinished: tuple[int, ...]
    wall_s: float

    def errors(self) -> dict[int, str]:
        return {r: str(v.get("error")) for r, v in self.results.items() if not v.get("ok")}


def _rank_main(
    rank: int,
    world: int,
    backend: str,
    conn: Any,
    body: Callable[[RankEnv], dict[str, Any]],
    timeout_s: float,
    absent: bool,
    stall: bool,
    rank_env: dict[str, str],
) -> None:
    set_pdeathsig()
    os.environ.update(rank_env)
    try:
        port = conn.recv()
        if absent:
            # A rank that never arrives: alive but never connects, like a node that did not start.
            while True:
                time.sleep(3600)
        import torch
        import torch.distributed as dist

        store = dist.TCPStore("127.0.0.1", port, world, False, timedelta(seconds=timeout_s))  # type: ignore[attr-defined]
        store.set(f"arrived/{rank}", "1")
        device = None
        kwargs: dict[str, Any] = {}
        if backend == "nccl":
            # One GPU per rank, chosen before init: every rank on cuda:0 is the classic mistake.
            local = rank % torch.cuda.device_count()
            torch.cuda.set_device(local)
            device = torch.device("cuda", local)
            kwargs["device_id"] = device  # makes NCCL init eager: errors surface here, not later
        t0 = time.perf_counter()
        prefixed = dist.PrefixStore("pg", store)  # type: ignore[attr-defined]
        dist.init_process_group(
            backend,
            store=prefixed,
            rank=rank,
            world_size=world,
            timeout=timedelta(seconds=timeout_s),
            **kwargs,
        )
        init_s = time.perf_counter() - t0
        env = RankEnv(
            rank, world, backend, torch, dist, device or torch.device("cpu"), timeout_s, stall
        )
        result = body(env)
        # Report before tearing down: destroy_process_group can block on a peer that hung.
        conn.send({"ok": True, "init_s": init_s, **result})
        if "barrier_error" not in result:
            dist.destroy_process_group()
    except BaseException as exc:  # noqa: BLE001 - every failure is a finding to report
        try:
            conn.send({"ok": False, "error": f"{type(exc).__name__}: {exc}".strip()[:2000]})
        except Exception:
            pass
    finally:
        os._exit(0)


def run_ranks(
    ctx: ProbeContext,
    world: int,
    backend: str,
    body: Callable[[RankEnv], dict[str, Any]],
    timeout_s: float,
    rank_env: dict[str, str] | None = None,
) -> RanksOutcome:
    """Fork ``world`` ranks on 127.0.0.1, run ``body`` in each after init, collect the results."""
    import multiprocessing as mp
    from multiprocessing.connection import wait

    import torch.distributed as dist

    ctx_mp = mp.get_context("fork")
    absent = injected(ctx.env, "absent")
    stall = injected(ctx.env, "stall")
    env = {"GLOO_SOCKET_IFNAME": "lo", **(rank_env or {})}
    conns, procs = [], []
    t_start = time.perf_counter()
    for rank in range(world):
        parent_conn, child_conn = ctx_mp.Pipe()
        proc = ctx_mp.Process(
            target=_rank_main,
            args=(
                rank,
                world,
                backend,
                child_conn,
                body,
                timeout_s,
                rank in absent,
                rank in stall,
                env,
            ),
            daemon=True,
        )
        proc.start()
        child_conn.close()
        conns.append(parent_conn)
        procs.append(proc)
    # The store server lives here, in the probe's worker, so arrivals stay visible even when
    # rank 0 itself hangs; port 0 lets the OS pick a free port (no race with other jobs).
    tcp_store = dist.TCPStore  # type: ignore[attr-defined]
    store = tcp_store(
        "127.0.0.1", 0, world, True, timedelta(seconds=timeout_s), wait_for_workers=False
    )
    for conn in conns:
        conn.send(store.port)
    results: dict[int, dict[str, Any]] = {}
    deadline = time.monotonic() + 2 * timeout_s + 5
    pending = dict(enumerate(conns))
    while pending and time.monotonic() < deadline:
        ready = wait(list(pending.values()), timeout=max(0.0, deadline - time.monotonic()))
        for ready_conn in ready:
            rank = next(r for r, c in pending.items() if c is ready_conn)
            try:
                results[rank] = conns[rank].recv()
            except EOFError:
                results[rank] = {"ok": False, "error": "rank exited without a result"}
            del pending[rank]
            if not results[rank].get("ok") or "barrier_error" in results[rank]:
                # One rank failed: the rest either fail within their own timeout or hang;
                # give them a moment to report their side, then stop waiting.
                deadline = min(deadline, time.monotonic() + min(3.0, timeout_s))
    never = tuple(r for r in range(world) if not store.check([f"arrived/{r}"]))
    for proc in procs:
        if proc.is_alive():
            proc.kill()
    for proc in procs:
        proc.join(5)
    return RanksOutcome(results, never, tuple(sorted(pending)), time.perf_counter() - t_start)


def plan_ranks(ctx: ProbeContext) -> tuple[Any, str, int] | Outcome:
    # This worker forks the ranks after counting GPUs. Counting through the CUDA runtime would
    # cuInit here, and a CUDA driver initialised before fork fails in every child
    # ("CUDA initialization error"); NVML-based counting leaves the driver untouched.
    os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")
    torch = ctx.torch()
    if not torch.distributed.is_available():
        return Outcome(Status.FAIL, "torch.distributed is not available in this build", {})
    backend = ctx.backend(torch)
    gpus = torch.cuda.device_count() if backend == "nccl" else 0
    world = ctx.local_world_size(gpus or None)
    if backend == "nccl":
        # Where the request came from: the training script's init_process_group, or --backend.
        where = (
            f"init_process_group('nccl') at {ctx.options.backend_source}"
            if ctx.options.backend_source
            else "backend nccl requested"
        )
        if not torch.distributed.is_nccl_available():
            return Outcome(
                Status.FAIL,
                f"{where}, but this torch has no NCCL: the job fails at start-up",
                {"backend": backend, "backend_source": ctx.options.backend_source},
                "install a CUDA build of torch, or use backend='gloo'",
            )
        if gpus < 1:
            return Outcome(
                Status.FAIL,
                f"{where}, but no CUDA device is visible: the job fails at start-up",
                {"backend": backend, "backend_source": ctx.options.backend_source},
                "use backend='gloo' on CPU, or fix CUDA (see cuda.basic)",
            )
    elif not torch.distributed.is_gloo_available():
        return Outcome(
            Status.FAIL, "gloo is not available in this torch build", {"backend": backend}
        )
    return torch, backend, world
