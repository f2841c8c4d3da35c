"""The rank side of ``ddp-lsp feasibility``: time the user's own training steps, then stop.

``ddp-lsp feasibility`` runs the user's entry point under ``torchrun`` with
``ddp_lsp/runtime/_shim`` first on ``PYTHONPATH`` and ``DDP_LSP_FEAS_DIR`` set; the shim's
``sitecustomize`` calls :func:`install_from_env` in every Python process (stdlib only; torch
is never imported by us). In a rank (``RANK`` in the environment), once the script imports
torch, this module patches, without touching the user's code:

- ``torch.optim`` global step pre/post hooks: a *step* is one ``optimizer.step()`` of the
  first optimizer that steps (GAN/multi-task loops step several), and the stop signal;
- ``torch.autograd.backward`` (``loss.backward()`` and ``scaler.scale(loss).backward()`` go
  through it): backward time, and how many backward passes one step has (accumulation);
- ``DataLoader`` iterators' ``__next__``: the time the loop waited for data, and the batch size;
- ``DistributedDataParallel``: at its first backward, a comm hook that runs the default
  all-reduce (or the user's own hook, wrapped) and records each bucket's size and the moment
  its gradients were ready; the step's *exposed* all-reduce is the time from the last bucket's
  ready to the end of backward (what DDP could not hide behind backward compute). With one
  rank the hook reduces nothing (a one-process baseline with DDP's bucketing cost only).

After ``DDP_LSP_FEAS_WARMUP`` warm-up steps it times ``DDP_LSP_FEAS_STEPS`` steps; a
one-process CPU run then times a few more steps with the thread count one of N CPU ranks
would get (the ranks share the host's cores). A multi-rank run finishes with an all-reduce
sweep at the real bucket sizes on the job's own process group. The rank writes
``rank-<r>.json`` into the run directory, waits for the other ranks, and leaves with
``os._exit(0)`` so the rest of the script (checkpoints, evaluation) never runs.
"""

from __future__ import annotations

import json
import os
import sys
import time
import weakref
from pathlib import Path
from types import ModuleType
from typing import Any

from ddp_lsp.runtime._torch_import import after_torch_import

ENV_DIR = "DDP_LSP_FEAS_DIR"
ENV_STEPS = "DDP_LSP_FEAS_STEPS"
ENV_WARMUP = "DDP_LSP_FEAS_WARMUP"
#: One-process CPU run: time this many extra steps with ENV_SHARED_THREADS threads.
ENV_SHARED_STEPS = "DDP_LSP_FEAS_SHARED_STEPS"
ENV_SHARED_THREADS = "DDP_LSP_FEAS_SHARED_THREADS"
#: Comma list of byte sizes to sweep after the steps (multi-rank runs); empty = none.
ENV_SWEEP = "DDP_LSP_FEAS_SWEEP"

_session: _Session | None = None


def _now() -> float:
    return time.perf_counter()


class _Step:
    __slots__ = (
        "backward",
        "backward_calls",
        "bwd_end",
        "bwd_start",
        "buckets",
        "comm_rounds",
        "data",
        "ev",
        "optimizer",
        "opt_start",
    )

    def __init__(self) -> None:
        self.data = 0.0
        self.backward = 0.0
        self.backward_calls = 0
        self.optimizer = 0.0
        self.opt_start: float | None = None
        self.bwd_start: float | None = None
        self.bwd_end: float | None = None
        # (bucket index, nbytes, ready time, done time or None) per comm hook call
        self.buckets: list[list[Any]] = []
        self.comm_rounds = 0
        # GPU: CUDA events (bwd_start, bwd_end, [last ready]) read after the phase's sync
        self.ev: dict[str, Any] = {}


class _Session:
    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.pid = os.getpid()
        self.rank = int(os.environ.get("RANK", "0"))
        self.world = int(os.environ.get("WORLD_SIZE", "1"))
        self.warmup = int(os.environ.get(ENV_WARMUP, "5"))
        self.steps = int(os.environ.get(ENV_STEPS, "50"))
        self.shared_steps = int(os.environ.get(ENV_SHARED_STEPS, "0"))
        self.shared_threads = int(os.environ.get(ENV_SHARED_THREADS, "0"))
        self.sweep_sizes = [int(s) for s in os.environ.get(ENV_SWEEP, "").split(",") if s]
        self.torch: Any = None
        self.leader: int | None = None
        self.count = 0  # optimizer steps seen (leader only)
        self.phase = "warmup"
        self.cur = _Step()
        self.records: dict[str, list[dict[str, Any]]] = {"main": [], "shared": []}
        self.phase_start: dict[str, float] = {}
        self.phase_end: dict[str, float] = {}
        #: Each phase's [start, end] on the host's monotonic clock: the supervisor's samples
        #: of the host's other load (:mod:`ddp_lsp.runtime.hostload`) are taken on it.
        self.phase_mono: dict[str, list[float]] = {}
        self.phase_steps: dict[str, int] = {}
        self.phase_cpu: dict[str, float] = {}
        self.phase_own_cpu: dict[str, float] = {}
        self.batch: int | None = None
        self.batch_shape: list[int] | None = None
        self.ddp: list[Any] = []
        self.hooked: set[int] = set()
        self._register: Any = None
        self.user_hook: str | None = None
        self.cuda = False
        self.iters: weakref.WeakSet[Any] = weakref.WeakSet()
        self.gpu_util: list[float] = []
        self.threads_main: int | None = None
        self.stopping = False

    # -- installation ----------------------------------------------------------------------

    def on_torch(self, torch: ModuleType) -> None:
        self.torch = torch
        from torch.optim.optimizer import (
            register_optimizer_step_post_hook,
            register_optimizer_step_pre_hook,
        )

        register_optimizer_step_pre_hook(self._opt_pre)
        register_optimizer_step_post_hook(self._opt_post)
        self._patch_backward(torch)
        self._patch_dataloader(torch)
        self._patch_ddp(torch)

    def _patch_backward(self, torch: Any) -> None:
        original = torch.autograd.backward
        session = self

        def backward(*args: Any, **kwargs: Any) -> Any:
            if os.getpid() != session.pid:
                return original(*args, **kwargs)
            step = session.cur
            step.backward_calls += 1
            session._hook_ddps()
            if session.cuda:
                ev = torch.cuda.Event(enable_timing=True)
                ev.record()
                step.ev.setdefault("bwd_start", ev)
            t0 = _now()
            if step.bwd_start is None:
                step.bwd_start = t0
            try:
                return original(*args, **kwargs)
            finally:
                t1 = _now()
                step.backward += t1 - t0
                step.bwd_end = t1
                if session.cuda:
                    ev = torch.cuda.Event(enable_timing=True)
                    ev.record()
                    step.ev["bwd_end"] = ev

        backward.__wrapped__ = original  # type: ignore[attr-defined]
        torch.autograd.backward = backward

    def _patch_dataloader(self, torch: Any) -> None:
        try:
            from torch.utils.data import dataloader
        except ImportError:
            return
        cls = dataloader._BaseDataLoaderIter
        original = cls.__next__
        session = self

        def __next__(it: Any) -> Any:  # noqa: N807
            if os.getpid() != session.pid:
                return original(it)
            session.iters.add(it)
            t0 = _now()
            batch = original(it)
            session.cur.data += _now() - t0
            if session.batch is None:
                session._note_batch(batch)
            return batch

        cls.__next__ = __next__  # type: ignore[method-assign,assignment]

    def _note_batch(self, batch: Any) -> None:
        torch = self.torch
        todo = [batch]
        while todo:
            item = todo.pop(0)
            if torch is not None and isinstance(item, torch.Tensor):
                if item.dim() >= 1:
                    self.batch = int(item.shape[0])
                    self.batch_shape = [int(s) for s in item.shape]
                return
            if isinstance(item, (list, tuple)):
                todo.extend(item)
            elif isinstance(item, dict):
                todo.extend(item.values())

    def _patch_ddp(self, torch: Any) -> None:
        cls = torch.nn.parallel.DistributedDataParallel
        init, forward, register = cls.__init__, cls.forward, cls.register_comm_hook
        session = self

        def __init__(ddp: Any, *args: Any, **kwargs: Any) -> None:  # noqa: N807
            init(ddp, *args, **kwargs)
            if os.getpid() == session.pid:
                session.ddp.append(ddp)
                session.cuda = session.cuda or ddp.device_type == "cuda"

        self._register = register

        def forward_(ddp: Any, *args: Any, **kwargs: Any) -> Any:
            if session.batch is None and args:
                session._note_batch(args[0])
            return forward(ddp, *args, **kwargs)

        def register_comm_hook(ddp: Any, state: object, hook: Any) -> None:
            if os.getpid() != session.pid or id(ddp) in session.hooked:
                register(ddp, state, hook)
                return
            session.hooked.add(id(ddp))
            session.user_hook = getattr(hook, "__qualname__", repr(hook))
            register(ddp, state, session._make_hook(ddp, hook))

        cls.__init__ = __init__
        cls.forward = forward_
        cls.register_comm_hook = register_comm_hook

    def _hook_ddps(self) -> None:
        """Our timing hook on every DDP that has none, at its first backward: the user had
        until then to register a hook of their own (which we wrap instead)."""
        for ddp in self.ddp:
            if id(ddp) not in self.hooked:
                self.hooked.add(id(ddp))
                try:
                    self._register(ddp, None, self._make_hook(ddp, None))
                except RuntimeError:
                    # A built-in hook (register_builtin_comm_hook) is already there: the job
                    # runs as it is, without bucket timings.
                    self.user_hook = "a built-in comm hook (not timed)"

    def _make_hook(self, ddp: Any, user_hook: Any) -> Any:
        torch = self.torch
        dist = torch.distributed
        session = self
        group = ddp.process_group
        size = dist.get_world_size(group)

        def hook(state: object, bucket: Any) -> Any:
            buf = bucket.buffer()
            rec = [int(bucket.index()), int(buf.numel() * buf.element_size()), _now(), None]
            step = session.cur
            step.buckets.append(rec)
            if bucket.is_last():
                step.comm_rounds += 1
            if session.cuda:
                ev = torch.cuda.Event(enable_timing=True)
                ev.record()
                step.ev["last_ready"] = ev
            if user_hook is not None:
                fut = user_hook(state, bucket)
            elif size == 1:
                # One rank: nothing to reduce. A finished future keeps DDP's bucketing (the
                # copy into buckets and back) in the baseline, as a one-process job has it.
                # A future holding CUDA tensors must name their devices at construction.
                fut = torch.futures.Future(devices=[buf.device] if buf.is_cuda else None)
                fut.set_result(buf)
                return fut
            else:
                buf.div_(size)
                fut = dist.all_reduce(buf, group=group, async_op=True).get_future()

                def first(f: Any) -> Any:
                    value = f.value()
                    return value[0] if isinstance(value, list) else value

                fut = fut.then(first)

            def done(f: Any) -> Any:
                rec[3] = _now()
                return f.value()

            return fut.then(done)

        # DDP checks the hook's annotations against the real classes; ours are strings
        # (postponed annotations), so the wrapper carries none. It keeps the user's hook's
        # name, which DDP reads (bf16_compress_hook's backend check).
        hook.__annotations__ = {}
        if user_hook is not None:
            hook.__name__ = getattr(user_hook, "__name__", hook.__name__)
        return hook

    # -- steps -----------------------------------------------------------------------------

    def _opt_pre(self, optimizer: Any, _args: Any, _kwargs: Any) -> None:
        if os.getpid() != self.pid:
            return
        if self.leader is None:
            self.leader = id(optimizer)
        if id(optimizer) == self.leader:
            self.cur.opt_start = _now()

    def _opt_post(self, optimizer: Any, _args: Any, _kwargs: Any) -> None:
        if os.getpid() != self.pid or id(optimizer) != self.leader or self.stopping:
            return
        t = _now()
        step = self.cur
        if step.opt_start is not None:
            step.optimizer = t - step.opt_start
        self.count += 1
        if self.phase in ("main", "shared"):
            self.records[self.phase].append(self._record(step, t))
        self.cur = _Step()
        self._advance(t)

    def _cpu(self) -> float:
        """CPU seconds used so far by this rank (all its threads) and its DataLoader workers:
        what N ranks will ask of the host's cores."""
        t = os.times()
        total = t.user + t.system
        tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
        for it in list(self.iters):
            for worker in getattr(it, "_workers", None) or []:
                try:
                    with open(f"/proc/{worker.pid}/stat", "rb") as fh:
                        data = fh.read().decode("ascii", "replace")
                    fields = data[data.rfind(")") + 2 :].split()
                    total += (int(fields[11]) + int(fields[12])) / tick
                except (OSError, ValueError, IndexError, AttributeError):
                    continue
        return total

    @staticmethod
    def _own_cpu() -> float:
        t = os.times()
        return t.user + t.system

    def _start_phase(self, phase: str) -> None:
        self.phase = phase
        self.phase_steps[phase] = 0
        self.phase_cpu[phase] = -self._cpu()
        self.phase_own_cpu[phase] = -self._own_cpu()
        self.phase_start[phase] = _now()
        self.phase_mono[phase] = [time.monotonic()]

    def _end_phase(self, phase: str) -> None:
        self.phase_end[phase] = _now()
        self.phase_mono[phase].append(time.monotonic())
        self.phase_cpu[phase] += self._cpu()
        self.phase_own_cpu[phase] += self._own_cpu()

    def _sync(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize()

    def _advance(self, t: float) -> None:
        if self.phase == "warmup" and self.count >= self.warmup:
            cuda = getattr(self.torch, "cuda", None)
            if not self.cuda and cuda is not None and cuda.is_available() and cuda.is_initialized():
                self.cuda = True  # a GPU job without DDP (the one-process run of some scripts)
            self._sync()
            self.threads_main = int(self.torch.get_num_threads())
            self._start_phase("main")
            return
        if self.phase in ("main", "shared"):
            self.phase_steps[self.phase] = self.phase_steps.get(self.phase, 0) + 1
            if self.cuda and self.phase == "main":
                self._gpu_util()
            if self.phase == "main" and self.phase_steps["main"] >= self.steps:
                self._sync()
                self._end_phase("main")
                self._resolve_events("main")
                if self.shared_steps > 0 and self.shared_threads > 0 and not self.cuda:
                    self.torch.set_num_threads(self.shared_threads)
                    self.phase = "shared-warmup"
                    self.phase_steps["shared-warmup"] = 0
                    return
                self._finish()
            elif self.phase == "shared" and self.phase_steps["shared"] >= self.shared_steps:
                self._end_phase("shared")
                self._finish()
            return
        if self.phase == "shared-warmup":
            self.phase_steps["shared-warmup"] += 1
            if self.phase_steps["shared-warmup"] >= 2:
                self._start_phase("shared")

    def _record(self, step: _Step, t_end: float) -> dict[str, Any]:
        buckets = []
        last_ready = None
        for index, nbytes, ready, done in step.buckets:
            rel = None
            if step.bwd_start is not None:
                rel = ready - step.bwd_start
            buckets.append([index, nbytes, rel, None if done is None else done - ready])
            last_ready = ready if last_ready is None else max(last_ready, ready)
        exposed = None
        if self.world == 1:
            exposed = 0.0  # nothing was reduced: the tail after the last bucket is backward
        elif last_ready is not None and step.bwd_end is not None and step.bwd_end >= last_ready:
            exposed = step.bwd_end - last_ready
        return {
            "t_end": t_end,
            "data": step.data,
            "backward": step.backward,
            "backward_calls": step.backward_calls,
            "optimizer": step.optimizer,
            "buckets": buckets,
            "comm_rounds": step.comm_rounds,
            "exposed": exposed,
            "_ev": step.ev if self.cuda else None,
        }

    def _resolve_events(self, phase: str) -> None:
        """GPU: replace host-clock backward/exposed times by CUDA event times (the host
        returns before the kernels finish)."""
        for rec in self.records[phase]:
            ev = rec.pop("_ev", None)
            if not ev:
                continue
            try:
                if "bwd_start" in ev and "bwd_end" in ev:
                    rec["backward_gpu"] = ev["bwd_start"].elapsed_time(ev["bwd_end"]) / 1e3
                if "last_ready" in ev and "bwd_end" in ev and self.world > 1:
                    rec["exposed"] = max(0.0, ev["last_ready"].elapsed_time(ev["bwd_end"]) / 1e3)
                    if "bwd_start" in ev:
                        rec["backward_compute_gpu"] = (
                            ev["bwd_start"].elapsed_time(ev["last_ready"]) / 1e3
                        )
            except RuntimeError:
                pass

    def _gpu_util(self) -> None:
        try:
            self.gpu_util.append(float(self.torch.cuda.utilization()))
        except Exception:  # pynvml missing, or no NVML: no utilisation figure
            pass

    # -- the end ---------------------------------------------------------------------------

    def _h2d(self) -> float | None:
        torch = self.torch
        try:
            host = torch.empty(64 << 20, dtype=torch.uint8).pin_memory()
            dev = torch.empty_like(host, device="cuda")
            dev.copy_(host, non_blocking=True)
            torch.cuda.synchronize()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(3):
                dev.copy_(host, non_blocking=True)
            end.record()
            torch.cuda.synchronize()
            return float(3 * host.numel() / (start.elapsed_time(end) / 1e3) / 1e9)
        except Exception:
            return None

    def _sweep(self) -> list[list[float]]:
        """Mean seconds per all_reduce at each size: five rounds over all sizes, the median
        round per size. Rounds interleave the sizes so that a neighbour's burst on a shared
        host lands on every size alike rather than on one (which would bend the fit)."""
        torch, dist = self.torch, self.torch.distributed
        group = self.ddp[0].process_group if self.ddp else None
        device = "cuda" if self.cuda else "cpu"
        bufs = {
            n: torch.zeros(max(1, n // 4), dtype=torch.float32, device=device)
            for n in self.sweep_sizes
        }
        for buf in bufs.values():
            dist.all_reduce(buf, group=group)
        times: dict[int, list[float]] = {n: [] for n in bufs}
        for _ in range(5):
            for nbytes, buf in bufs.items():
                iters = 3 if nbytes >= 8 << 20 else 10
                dist.barrier(group=group)
                self._sync()
                t0 = _now()
                for _ in range(iters):
                    dist.all_reduce(buf, group=group)
                self._sync()
                times[nbytes].append((_now() - t0) / iters)
        out = []
        for nbytes, ts in times.items():
            t = torch.tensor([sorted(ts)[len(ts) // 2]], dtype=torch.float64, device=device)
            dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
            out.append([nbytes, float(t.item())])
        return out

    def _finish(self) -> None:
        self.stopping = True
        self.phase = "done"
        torch = self.torch
        dist = torch.distributed
        result: dict[str, Any] = {
            "rank": self.rank,
            "world_size": self.world,
            "pid": self.pid,
            "warmup": self.warmup,
            "steps": {k: v for k, v in self.phase_steps.items() if k in ("main", "shared")},
            "wall": {
                k: self.phase_end[k] - self.phase_start[k]
                for k in self.phase_end
                if k in self.phase_start
            },
            "records": {k: [dict(r) for r in v] for k, v in self.records.items()},
            "cpu_s": {k: v for k, v in self.phase_cpu.items() if k in self.phase_end},
            "own_cpu_s": {k: v for k, v in self.phase_own_cpu.items() if k in self.phase_end},
            "mono": {k: v for k, v in self.phase_mono.items() if len(v) == 2},
            "batch": self.batch,
            "batch_shape": self.batch_shape,
            "threads": self.threads_main,
            "shared_threads": self.shared_threads if self.records["shared"] else None,
            "cuda": self.cuda,
            "device_count": torch.cuda.device_count() if torch.cuda.is_available() else 0,
            "device_name": torch.cuda.get_device_name() if self.cuda else None,
            "gpu_util": (sum(self.gpu_util) / len(self.gpu_util)) if self.gpu_util else None,
            "user_comm_hook": self.user_hook,
            "cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
            "ended": "steps",
        }
        if self.ddp:
            ddp = self.ddp[0]
            result["ddp"] = {
                "count": len(self.ddp),
                "bucket_cap_bytes": int(getattr(ddp, "bucket_bytes_cap", 0)),
                "gradient_as_bucket_view": bool(getattr(ddp, "gradient_as_bucket_view", False)),
                "find_unused_parameters": bool(getattr(ddp, "find_unused_parameters", False)),
                "static_graph": bool(getattr(ddp, "static_graph", False)),
                "params": int(sum(p.numel() for p in ddp.module.parameters() if p.requires_grad)),
                "grad_dtype": str(next(iter(ddp.module.parameters())).dtype).replace("torch.", ""),
            }
        if dist.is_available() and dist.is_initialized():
            result["backend"] = str(dist.get_backend())
        try:
            if self.cuda:
                result["h2d_gbps"] = self._h2d()
            if self.sweep_sizes and self.world > 1 and dist.is_initialized():
                result["sweep"] = self._sweep()
        except Exception as exc:  # report what was measured; the sweep is an extra
            result["sweep_error"] = f"{type(exc).__name__}: {exc}"[:300]
        self._write(result)
        self._leave(dist)

    def _write(self, result: dict[str, Any]) -> None:
        path = self.dir / f"rank-{self.rank}.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(result), encoding="utf-8")
        os.replace(tmp, path)

    def _leave(self, dist: Any) -> None:
        try:
            if dist.is_available() and dist.is_initialized() and self.world > 1:
                # Every rank stops at the same step: wait until all wrote their results, so
                # that no rank leaves while a peer's last collective still reads its socket.
                dist.barrier()
        except Exception:
            pass
        for it in list(self.iters):
            shutdown = getattr(it, "_shutdown_workers", None)
            if shutdown is not None:
                try:
                    shutdown()
                except Exception:
                    pass
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)

    def at_exit(self) -> None:
        """The script ended on its own before the steps were done: say so, with what it has."""
        if os.getpid() != self.pid or self.stopping or self.torch is None:
            return
        if self.count == 0 and not self.ddp:
            return  # not a training process (a DataLoader worker started by spawn)
        self._write(
            {
                "rank": self.rank,
                "world_size": self.world,
                "ended": "script",
                "count": self.count,
                "phase": self.phase,
                "ddp": bool(self.ddp),
            }
        )


def install_from_env() -> None:
    """Called by the shim's ``sitecustomize``: only in a rank (torchrun sets ``RANK``), not in
    the torchrun agent or in DataLoader workers started by spawn (they have no ``RANK``...
    but inherit it: they never step an optimizer, so they never write anything)."""
    global _session
    directory = os.environ.get(ENV_DIR)
    if not directory or _session is not None or "RANK" not in os.environ:
        return
    path = Path(directory)
    if not path.is_dir():
        return
    _session = _Session(path)
    import atexit

    atexit.register(_session.at_exit)
    after_torch_import(_session.on_torch, _hooks_not_attached)


def _hooks_not_attached(exc: Exception) -> None:
    sys.stderr.write(f"ddp-lsp feasibility: hooks not attached: {exc!r}\n")
