"""The child side of ``ddp-lsp smallrun``: attach the monitor without editing the script.

``smallrun`` puts ``ddp_lsp/runtime/_shim`` first on ``PYTHONPATH`` and sets
``DDP_LSP_SMALLRUN_DIR``. Every Python process of the run (the torchrun agent, each rank,
spawned workers) then imports the shim's ``sitecustomize``, which calls
:func:`install_from_env`. That costs only stdlib work at start-up:

- a process record (pid, rank from the environment, argv) so the supervisor can find the
  ranks even after torchrun put them in sessions of their own;
- ``faulthandler`` on SIGUSR2 (and on fatal signals) into a per-process stack file: on a
  hang the supervisor asks every rank where it is stuck before it kills the tree;
- a ``sys.excepthook`` that records an uncaught exception with the rank;
- an exit record at interpreter exit (a rank with neither was killed by a signal);
- when torch is imported (an import hook; torch is never imported by us), a global
  ``optimizer.step`` post-hook: every training loop that steps an optimizer -- plain,
  Lightning, Accelerate -- is sampled once per step, into ``series-<pid>.jsonl``.

Scripts that never call ``optimizer.step()`` add one line: ``from ddp_lsp.runtime import
monitor_steps`` and ``for batch in monitor_steps(loader):``.
"""

from __future__ import annotations

import atexit
import faulthandler
import json
import os
import signal
import socket
import sys
import threading
import time
import traceback
from pathlib import Path
from types import ModuleType, TracebackType
from typing import Any

from ddp_lsp.runtime._torch_import import after_torch_import

ENV_DIR = "DDP_LSP_SMALLRUN_DIR"
ENV_WARMUP = "DDP_LSP_SMALLRUN_WARMUP"
ENV_CENSUS_BUDGET = "DDP_LSP_SMALLRUN_CENSUS_BUDGET"
ENV_MIN_BYTES = "DDP_LSP_SMALLRUN_MIN_BYTES"
ENV_MIN_CENSUSES = "DDP_LSP_SMALLRUN_MIN_CENSUSES"
#: Set by smallrun when the flight recorder is on: ranks dump it when asked (a hang).
ENV_FLIGHT_RECORDER = "DDP_LSP_SMALLRUN_FLIGHT_RECORDER"
#: The file whose appearance asks every rank for a flight-recorder dump.
FR_REQUEST = "fr-request"
#: Where the supervisor asks for a stack dump on a hang (POSIX; None on Windows).
STACK_SIGNAL: signal.Signals | None = getattr(signal, "SIGUSR2", None)

_session: _Session | None = None


def _env_rank() -> int | None:
    value = os.environ.get("RANK")
    return int(value) if value and value.lstrip("-").isdigit() else None


def _dist_rank() -> int | None:
    dist = sys.modules.get("torch.distributed")
    try:
        if dist is not None and dist.is_available() and dist.is_initialized():
            return int(dist.get_rank())
    except Exception:
        pass
    return _env_rank()


def _cmdline() -> list[str]:
    try:
        with open("/proc/self/cmdline", "rb") as fh:
            return [a.decode("utf-8", "replace") for a in fh.read().split(b"\0") if a][:12]
    except OSError:
        return []


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) else None


def _write_json(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    try:
        tmp.write_text(json.dumps(data), encoding="utf-8")
        os.replace(tmp, path)  # the supervisor never reads half a record
    except OSError:
        pass


class _Session:
    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.pid = os.getpid()
        self.monitor: Any = None
        self.manual = False
        self._series: Any = None
        self._leader: int | None = None
        self._hook: Any = None
        self._stack_file: Any = None
        #: The process-group rank once seen (kept for the exit record: the group may be
        #: destroyed by then).
        self.rank: int | None = None
        self._ddp_ref: Any = None
        self._ddp_searched = False

    # -- start-up (stdlib only) -------------------------------------------------------------

    def start(self) -> None:
        _write_json(
            self.dir / f"proc-{self.pid}.json",
            {
                "pid": self.pid,
                "ppid": os.getppid(),
                "rank": _env_rank(),
                "local_rank": os.environ.get("LOCAL_RANK"),
                "argv": list(sys.argv) if hasattr(sys, "argv") else [],
                "cmdline": _cmdline(),
                "executable": sys.executable,
                "host": socket.gethostname(),
                "time": time.time(),
            },
        )
        try:
            self._stack_file = open(self.dir / f"stack-{self.pid}.txt", "w", encoding="utf-8")  # noqa: SIM115
            if STACK_SIGNAL is not None:
                faulthandler.register(STACK_SIGNAL, file=self._stack_file, all_threads=True)
            if not faulthandler.is_enabled():
                # A segfault in a rank (a bad kernel, a NCCL bug) leaves its Python stack here.
                faulthandler.enable(file=self._stack_file, all_threads=True)
        except (OSError, RuntimeError, ValueError):
            pass
        previous = sys.excepthook

        def excepthook(
            exc_type: type[BaseException], exc: BaseException, tb: TracebackType | None
        ) -> None:
            self.record_crash(exc_type, exc, tb)
            previous(exc_type, exc, tb)

        sys.excepthook = excepthook
        atexit.register(self.at_exit)
        self._hook_multiprocessing()

    def _hook_multiprocessing(self) -> None:
        """Record an exception that ends a ``multiprocessing.Process`` (a hand-made launcher).

        ``BaseProcess._bootstrap`` catches the target's exception, prints it and exits with
        status 1 through ``sys.exit``: it never reaches ``sys.excepthook``, and the child
        looks like it exited normally. Wrapping the process's ``run`` inside
        ``_bootstrap`` (so that subclasses overriding ``run`` are covered too) records it.
        """
        try:
            from multiprocessing import process
        except ImportError:
            return
        original = process.BaseProcess._bootstrap  # type: ignore[attr-defined]
        if getattr(original, "_ddp_lsp", False):
            return
        session = self

        def _bootstrap(proc: Any, *args: Any, **kwargs: Any) -> Any:
            run = proc.run

            def recorded_run() -> Any:
                try:
                    return run()
                except (SystemExit, KeyboardInterrupt):
                    raise
                except BaseException as exc:
                    session.record_crash(type(exc), exc, exc.__traceback__)
                    raise

            proc.run = recorded_run
            return original(proc, *args, **kwargs)

        _bootstrap._ddp_lsp = True  # type: ignore[attr-defined]
        process.BaseProcess._bootstrap = _bootstrap  # type: ignore[attr-defined]

    def record_crash(
        self, exc_type: type[BaseException], exc: BaseException, tb: TracebackType | None
    ) -> None:
        if os.getpid() != self.pid:
            return
        frames = traceback.extract_tb(tb)
        where = None
        for frame in reversed(frames):
            if "site-packages" not in frame.filename and "/lib/python" not in frame.filename:
                where = f"{os.path.basename(frame.filename)}:{frame.lineno} in {frame.name}"
                break
        _write_json(
            self.dir / f"crash-{self.pid}.json",
            {
                "pid": self.pid,
                "rank": _dist_rank(),
                "exc_type": exc_type.__name__,
                "message": (str(exc).splitlines() or [""])[0][:500],
                "where": where,
                "traceback": "".join(traceback.format_exception(exc_type, exc, tb))[-8000:],
                "failed_rank": getattr(exc, "failed_rank", None),
                # torch.multiprocessing.spawn's ProcessRaisedException / ProcessExitedException:
                # the parent's report of a child (which process, its pid, its traceback).
                "error_index": _int_or_none(getattr(exc, "error_index", None)),
                "error_pid": _int_or_none(getattr(exc, "error_pid", None)),
                "child_error": str(exc)[-8000:]
                if getattr(exc, "error_index", None) is not None
                else None,
                "time": time.time(),
            },
        )

    def at_exit(self) -> None:
        if os.getpid() != self.pid:
            return  # a forked DataLoader worker inherited the handler
        if self.monitor is not None:
            try:
                # The loop's locals are gone by now: no final census, no holder search.
                self.monitor.close(final_census=False)
                self._write({"k": "end"})
            except Exception:
                pass
        if self._series is not None:
            try:
                self._series.close()
            except OSError:
                pass
        # The rank as the process group knew it (an mp.spawn child has no RANK variable).
        _write_json(
            self.dir / f"exit-{self.pid}.json",
            {
                "pid": self.pid,
                "rank": _dist_rank() if self.rank is None else self.rank,
                "time": time.time(),
            },
        )

    # -- once torch is imported -------------------------------------------------------------

    def on_torch(self, torch: ModuleType) -> None:
        try:
            from torch.optim.optimizer import register_optimizer_step_post_hook
        except ImportError:
            return
        self._hook = register_optimizer_step_post_hook(self._on_optimizer_step)
        if os.environ.get(ENV_FLIGHT_RECORDER) == "1":
            threading.Thread(
                target=self._serve_flight_recorder, name="ddp-lsp-fr", daemon=True
            ).start()

    def _serve_flight_recorder(self) -> None:
        """Dump the flight recorder into ``fr-<pid>.json`` when the supervisor asks (a hang).

        A thread of its own: the main thread is the one that is stuck (in a collective's
        wait, which releases the GIL). JSON (``_dump_fr_trace_json``), so that the supervisor
        never unpickles anything; ``_dump_nccl_trace_json`` on torch versions before the
        recorder was made backend-neutral.
        """
        request = self.dir / FR_REQUEST
        while True:
            time.sleep(0.2)
            if os.getpid() != self.pid:
                return
            if not request.exists():
                continue
            c10d = sys.modules.get("torch._C._distributed_c10d")
            dump = getattr(c10d, "_dump_fr_trace_json", None) or getattr(
                c10d, "_dump_nccl_trace_json", None
            )
            record: dict[str, Any] = {"pid": self.pid, "rank": _dist_rank(), "time": time.time()}
            try:
                if dump is None:
                    raise RuntimeError("this torch has no flight recorder dump")
                raw = dump()
                record["dump"] = json.loads(raw.decode("utf-8") if isinstance(raw, bytes) else raw)
            except Exception as exc:
                record["error"] = f"{type(exc).__name__}: {exc}"[:300]
            _write_json(self.dir / f"fr-{self.pid}.json", record)
            return

    def _on_optimizer_step(self, optimizer: Any, _args: Any, _kwargs: Any) -> None:
        if self.manual or os.getpid() != self.pid:
            return
        # With several optimizers (GAN, multi-task) one iteration steps each: count the
        # first one that ever stepped, so a "step" is one training iteration.
        if self._leader is None:
            self._leader = id(optimizer)
        if id(optimizer) == self._leader:
            try:
                self.get_monitor().step()
            except Exception as exc:  # never break the user's training step
                self.manual = True  # stop sampling; the supervisor reports what it has
                sys.stderr.write(f"ddp-lsp smallrun: monitor stopped: {exc!r}\n")

    def get_monitor(self) -> Any:
        if self.monitor is None:
            from ddp_lsp.runtime.memory import MemoryGrowthMonitor

            self.monitor = MemoryGrowthMonitor(
                warmup_steps=int(os.environ.get(ENV_WARMUP, "2")),
                min_bytes_per_step=float(os.environ.get(ENV_MIN_BYTES, "1024")),
                census_budget=float(os.environ.get(ENV_CENSUS_BUDGET, "0.5")),
                min_censuses=int(os.environ.get(ENV_MIN_CENSUSES, "12")),
                # A small run is a diagnosis, not production: read memory at every step.
                sample_budget=1e9,
                sink=self._on_sample,
                census_sink=self._on_census,
                retain_censuses=False,  # the supervisor reads them from the series file
            )
        return self.monitor

    def _write(self, record: dict[str, Any]) -> None:
        if self._series is None:
            self._series = open(self.dir / f"series-{self.pid}.jsonl", "a", encoding="utf-8")  # noqa: SIM115
            self.rank = _dist_rank()
            header = {
                "k": "header",
                "pid": self.pid,
                "rank": self.rank,
                "host": socket.gethostname(),
            }
            self._series.write(json.dumps(header) + "\n")
        # One flushed line per record: a rank killed on a hang still leaves its series.
        self._series.write(json.dumps(record, separators=(",", ":")) + "\n")
        self._series.flush()

    def _on_sample(self, sample: Any) -> None:
        self._write(
            {
                "k": "s",
                "step": sample.step,
                "t": round(sample.time_s, 6),
                "heap": sample.heap,
                "rss": sample.rss,
                "cuda": sample.cuda,
                "tensors": sample.tensors,
                "tensor_bytes": sample.tensor_bytes,
                "o": round(sample.overhead_s, 6),
                "ddp": self._ddp_reading(),
            }
        )

    def _on_census(self, census: Any) -> None:
        self._write(
            {
                "k": "c",
                "step": census.step,
                "count": census.count,
                "bytes": census.bytes,
                "nodes": census.nodes,
                "groups": [
                    [g.kind, g.count, g.bytes, g.grad_fn, g.numel, g.nodes] for g in census.groups
                ],
            }
        )
        self._write_ddp_timing(census.step)

    def _write_ddp_timing(self, step: int) -> None:
        """Find the job's DDP model once (in the census's walk of the heap) and time every step.

        ``DistributedDataParallel._get_ddp_logging_data()`` carries the reducer's own timers
        (backward communication, its overlap with backward compute, forward and backward
        compute, in ns) on every backend. The reducer samples its first 10 iterations, then
        one in 100: the small run asks for every iteration (``_set_ddp_runtime_logging_
        sample_rate(1)``), so that the steps without a census (whose skew between ranks
        would count as communication) can be read. Nothing else of the model is touched.
        """
        if self._ddp_ref is not None or self._ddp_searched:
            return
        ddp = self._ddp()
        if ddp is None:
            return
        try:
            ddp._set_ddp_runtime_logging_sample_rate(1)
        except Exception:
            pass

    def _ddp_reading(self) -> list[int] | None:
        """The latest timed iteration: [iteration, comm, overlap, forward, backward] (ns)."""
        ddp = self._ddp_ref() if self._ddp_ref is not None else None
        if ddp is None:
            return None
        try:
            data = ddp._get_ddp_logging_data()
        except Exception:
            return None
        keys = (
            "iteration",
            "backward_comm_time",
            "backward_compute_comm_overlap_time",
            "forward_compute_time",
            "backward_compute_time",
        )
        values = [data.get(k) for k in keys]
        if not all(isinstance(v, int) for v in values) or not values[1]:
            return None
        return [int(v) for v in values if isinstance(v, int)]

    def _ddp(self) -> Any:
        if self._ddp_searched:
            return None
        self._ddp_searched = True
        nn_parallel = sys.modules.get("torch.nn.parallel")
        cls = getattr(nn_parallel, "DistributedDataParallel", None)
        if cls is None:
            return None
        import gc
        import weakref

        # type() membership, not isinstance(): isinstance on a lazy module object would
        # trigger its import hooks.
        types: set[type] = set()
        todo: list[type] = [cls]
        while todo:
            t = todo.pop()
            if t not in types:
                types.add(t)
                todo.extend(t.__subclasses__())
        for obj in gc.get_objects():
            if type(obj) in types:
                self._ddp_ref = weakref.ref(obj)
                return obj
        return None


def install_from_env() -> None:
    """Called by the shim's ``sitecustomize`` in every Python process of a small run."""
    global _session
    directory = os.environ.get(ENV_DIR)
    if not directory or _session is not None:
        return
    path = Path(directory)
    if not path.is_dir():
        return
    _session = _Session(path)
    _session.start()
    after_torch_import(_session.on_torch)


def session_monitor(*, manual: bool) -> Any:
    """The small run's monitor in this process, or None outside ``ddp-lsp smallrun``.

    ``manual=True`` (from ``monitor_steps``) turns off the optimizer hook so that steps are
    not counted twice.
    """
    if _session is None or os.getpid() != _session.pid:
        return None
    if manual:
        _session.manual = True
    return _session.get_monitor()
