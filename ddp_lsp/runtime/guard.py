"""``guard_distributed()``: one rank's exception ends the whole job promptly, naming that rank.

Without it, a rank that raises leaves its peers inside a collective. On gloo they notice
only when its sockets close (its process has to exit: a non-daemon thread, a hung finaliser
or a framework's error handling can keep it alive) and otherwise wait out the process-group
timeout (30 min by default); on NCCL they spin in the kernel until the watchdog fires
(10 min by default). Either way the error they finally print does not say which rank failed.

What the guard does, around a worker's body:

1. On an exception in this rank, it writes a failure record (rank, host, pid, exception,
   traceback) to the rendezvous store under ``ddp_lsp/guard/`` -- the record is written
   *before* anything else, so every peer that wakes up can read it.
2. It aborts (``ProcessGroup.abort()``: ``ncclCommAbort`` on NCCL) and then destroys this
   rank's process groups. On gloo the destroy is what closes the rank's TCP pairs (torch 2.13:
   ``abort()`` and ``shutdown()`` leave them open), so a peer blocked in ``barrier()`` or
   ``all_reduce`` gets "Connection closed by peer" at once.
3. On NCCL a watcher thread on every rank polls the store for a failure record and aborts the
   local communicators, because a peer's abort does not wake an NCCL kernel that is waiting
   for data (``ncclCommAbort`` from another thread is the documented way out). On gloo a local
   abort does not interrupt a pending wait (measured), so there the closed sockets of step 2
   do the work, and the watcher (``watch="auto"``) only caches the store and exits.
4. A surviving rank whose collective then fails raises :class:`RankFailureError` naming the
   failed rank, with its traceback, chained to the collective's own error, and acknowledges;
   the failed rank waits (briefly, ``linger_s``) for those acknowledgements before it
   re-raises, because the store may live in its process.

Not covered: a rank that dies without running Python (SIGKILL, OOM killer, segfault) writes
no record; peers then still fail fast on gloo (closed sockets) and the guard says that no
rank recorded an exception. ``ddp-lsp smallrun`` covers those cases from outside.
"""

from __future__ import annotations

import functools
import json
import os
import socket
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import timedelta
from types import TracebackType
from typing import Any, Literal, TypeVar, cast

F = TypeVar("F", bound=Callable[..., Any])

KEY_PREFIX = "ddp_lsp/guard"
#: Substrings of errors raised by a collective whose peer went away or was aborted.
_COLLECTIVE_MARKERS = (
    "Connection closed by peer",
    "Connection reset",
    "Broken pipe",
    "gloo",
    "NCCL",
    "nccl",
    "ProcessGroup",
    "process group",
    "aborted",
    "Timed out",
    "timed out",
    "c10d",
)


@dataclass(frozen=True)
class FailureRecord:
    """What the failed rank left for the others (and for ``ddp-lsp smallrun``)."""

    rank: int
    world_size: int
    host: str
    pid: int
    exc_type: str
    message: str
    traceback: str
    time: float
    #: True when this rank only saw a collective fail and no other rank recorded a cause.
    secondary: bool = False

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str | bytes) -> FailureRecord:
        data = json.loads(text)
        return cls(**data)

    def headline(self) -> str:
        return f"rank {self.rank} (pid {self.pid} on {self.host}) failed: {self.exc_type}: {self.message}"


class RankFailureError(RuntimeError):
    """Raised on a surviving rank: another rank failed and the collective was abandoned."""

    def __init__(self, record: FailureRecord | None, this_rank: int, detail: str = "") -> None:
        self.record = record
        self.failed_rank = record.rank if record is not None else None
        self.this_rank = this_rank
        if record is not None:
            text = (
                f"{record.headline()}; rank {this_rank} left its collective because the "
                f"ddp-lsp guard aborted the process group"
            )
            if record.secondary:
                text += " (that rank only saw a collective fail: a peer may have been killed)"
            text += f"\n--- traceback of rank {record.rank} ---\n{record.traceback.rstrip()}"
        else:
            text = (
                f"a peer of rank {this_rank} went away and no rank recorded an exception "
                "(killed by a signal or the OOM killer?)"
            )
        if detail:
            text += f"\n{detail}"
        super().__init__(text)


def _looks_collective(exc: BaseException) -> bool:
    torch_dist = sys.modules.get("torch.distributed")
    dist_error = getattr(torch_dist, "DistError", None) if torch_dist is not None else None
    if dist_error is not None and isinstance(exc, dist_error):
        return True
    text = f"{type(exc).__name__}: {exc}"
    return isinstance(exc, RuntimeError) and any(m in text for m in _COLLECTIVE_MARKERS)


def _unwrap_store(store: Any) -> Any:
    seen = 0
    while hasattr(store, "underlying_store") and seen < 8:
        store = store.underlying_store
        seen += 1
    return store


def _run_prefix() -> str:
    # A restarted elastic job reuses the agent's store: keep each attempt's records apart.
    run = os.environ.get("TORCHELASTIC_RUN_ID", "")
    restart = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    return f"{KEY_PREFIX}/{run}/{restart}"


class DistributedGuard:
    """The object ``guard_distributed()`` returns: a context manager and a decorator."""

    def __init__(
        self,
        *,
        grace_s: float = 3.0,
        linger_s: float = 5.0,
        poll_s: float = 0.2,
        watch: bool | str = "auto",
        abort: bool = True,
    ) -> None:
        self.grace_s = grace_s
        self.linger_s = linger_s
        self.poll_s = poll_s
        self.watch = watch
        self.abort = abort
        self._stop = threading.Event()
        self._seen: FailureRecord | None = None
        self._seen_lock = threading.Lock()
        self._watcher: threading.Thread | None = None
        self._aborted = False
        self._depth = 0
        self._ctx: tuple[int, int, Any] | None = None

    # -- decorator / context manager ------------------------------------------------------

    def __call__(self, fn: F) -> F:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with self:
                return fn(*args, **kwargs)

        return cast(F, wrapper)

    def __enter__(self) -> DistributedGuard:
        self._depth += 1
        if self._depth == 1:
            self._stop.clear()
            self._seen = None
            self._aborted = False
            self._ctx = None
            self._capture()
            if self.watch:
                self._watcher = threading.Thread(
                    target=self._watch, name="ddp-lsp-guard-watcher", daemon=True
                )
                self._watcher.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> Literal[False]:
        self._depth -= 1
        if self._depth > 0:
            return False
        try:
            if exc is None or exc_type is GeneratorExit:
                return False
            if isinstance(exc, SystemExit) and exc.code in (None, 0):
                return False
            if isinstance(exc, RankFailureError):
                return False  # an inner guard already handled it
            self._handle_failure(exc)
        finally:
            self._stop.set()
        return False  # _handle_failure raises RankFailureError on survivors

    # -- the failure path -----------------------------------------------------------------

    def _dist(self) -> Any | None:
        dist = sys.modules.get("torch.distributed")
        if dist is None or not dist.is_available() or not dist.is_initialized():
            return None
        return dist

    def _handle_failure(self, exc: BaseException) -> None:
        ctx = self._capture()
        if ctx is None:
            return  # no process group: nobody is waiting on us in a collective
        rank, world, store = ctx
        prefix = _run_prefix()
        record = self._seen or self._read(store, prefix)
        if record is None and _looks_collective(exc):
            # Our collective failed: most likely a peer failed first and is writing its
            # record right now (it writes before it aborts). Give it a moment.
            record = self._wait_record(store, prefix, self.grace_s)
        if record is not None and record.rank != rank:
            self._abort_groups()
            self._ack(store, prefix)
            _log(f"rank {rank}: leaving because {record.headline()}")
            raise RankFailureError(record, rank) from exc
        # This rank is the root cause (or nobody else recorded anything).
        own = FailureRecord(
            rank=rank,
            world_size=world,
            host=socket.gethostname(),
            pid=os.getpid(),
            exc_type=type(exc).__name__,
            message=str(exc).splitlines()[0][:500] if str(exc) else "",
            traceback="".join(traceback.format_exception(type(exc), exc, exc.__traceback__)),
            time=time.time(),
            secondary=_looks_collective(exc),
        )
        winner = self._publish(store, prefix, own)
        _write_smallrun_record(own)
        if winner is not None and winner.rank != rank:
            self._abort_groups()
            self._ack(store, prefix)
            raise RankFailureError(winner, rank) from exc
        _log(
            f"rank {rank} failed ({own.exc_type}: {own.message}); recorded it for the other "
            "ranks and aborted the process group"
        )
        self._abort_groups()
        self._linger(store, prefix, world)

    def _store(self, dist: Any) -> Any | None:
        try:
            return dist.distributed_c10d._get_default_store()
        except Exception:
            return None

    def _read(self, store: Any, prefix: str) -> FailureRecord | None:
        if store is None:
            return None
        try:
            if store.check([f"{prefix}/failed"]):
                return FailureRecord.from_json(store.get(f"{prefix}/failed"))
        except Exception:
            return None
        return None

    def _wait_record(self, store: Any, prefix: str, timeout: float) -> FailureRecord | None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._seen_lock:
                if self._seen is not None:
                    return self._seen
            record = self._read(store, prefix)
            if record is not None:
                return record
            self._stop.wait(0.05)
        return None

    def _publish(self, store: Any, prefix: str, own: FailureRecord) -> FailureRecord | None:
        """Write our record; return the record that won (the first failure), if readable."""
        if store is None:
            return None
        try:
            store.set(f"{prefix}/rank/{own.rank}", own.to_json())
            # compare_set is atomic on the store server: only the first failure becomes
            # "the" failure every survivor names.
            current = store.compare_set(f"{prefix}/failed", "", own.to_json())
            return FailureRecord.from_json(current)
        except Exception:
            return None

    def _ack(self, store: Any, prefix: str) -> None:
        if store is None:
            return
        try:
            store.add(f"{prefix}/acks", 1)
        except Exception:
            pass

    def _linger(self, store: Any, prefix: str, world: int) -> None:
        # The store may live in this process (rank 0 without torchrun's agent store): stay
        # until every peer has read the record, or linger_s at most.
        if store is None or world <= 1:
            return
        deadline = time.monotonic() + self.linger_s
        while time.monotonic() < deadline:
            try:
                if store.add(f"{prefix}/acks", 0) >= world - 1:
                    return
            except Exception:
                return
            time.sleep(0.05)

    def _abort_groups(self) -> None:
        if not self.abort or self._aborted:
            return
        self._aborted = True
        dist = self._dist()
        if dist is not None:
            teardown_process_groups(dist)

    def _capture(self) -> tuple[int, int, Any] | None:
        """Rank, world size and store, cached the first time the process group is up.

        Cached because user code often destroys the group in a ``finally`` *inside* the
        guarded function, before the guard sees the exception; the store object we keep a
        reference to stays usable (and, on rank 0 without torchrun, keeps serving).
        """
        with self._seen_lock:
            if self._ctx is not None:
                return self._ctx
        dist = self._dist()
        if dist is None:
            return None
        try:
            ctx = (int(dist.get_rank()), int(dist.get_world_size()), self._store(dist))
        except Exception:
            return None
        with self._seen_lock:
            if self._ctx is None:
                self._ctx = ctx
            return self._ctx

    # -- the watcher ----------------------------------------------------------------------

    def _watch(self) -> None:
        dist = None
        while not self._stop.is_set():
            dist = self._dist()
            if dist is not None:
                break
            self._stop.wait(self.poll_s)  # the body may call init_process_group itself
        if dist is None:
            return
        ctx = self._capture()  # cache rank and store now, before any cleanup can destroy them
        if ctx is None:
            return
        if self.watch == "auto" and not _is_nccl(dist):
            # On gloo the failed rank's teardown closes the sockets its peers wait on; a
            # watcher would only add store traffic (one request per rank per poll_s).
            return
        rank = ctx[0]
        try:
            store = self._watch_store(ctx[2])
        except Exception:
            return
        if store is None:
            return
        key = f"{_run_prefix()}/failed"
        while not self._stop.is_set():
            # Poll with check() rather than a timed wait(): a wait that times out logs a
            # c10d warning each time, and check() costs one round trip per poll_s.
            try:
                if not store.check([key]):
                    self._stop.wait(self.poll_s)
                    continue
            except Exception:  # the store went away (its host process exited)
                return
            try:
                record = FailureRecord.from_json(store.get(key))
            except Exception:
                return
            if record.rank == rank:
                return
            with self._seen_lock:
                self._seen = record
            if _is_nccl(dist):
                # A peer's ncclCommAbort does not wake our kernels; abort ours so the
                # collective this rank is stuck in returns with an error.
                _log(f"rank {rank}: {record.headline()}; aborting NCCL communicators")
                if self.abort:
                    abort_process_groups(dist)
            return

    def _watch_store(self, store: Any) -> Any | None:
        base = _unwrap_store(store)
        # A TCPStore client serialises its requests: a blocking wait on the training
        # thread's client would stall it. Open a second connection for the watcher.
        if type(base).__name__ == "TCPStore":
            try:
                from torch.distributed import TCPStore  # type: ignore[attr-defined]

                return TCPStore(
                    base.host, base.port, is_master=False, timeout=timedelta(seconds=30)
                )
            except Exception:
                return None
        return None


def _is_nccl(dist: Any) -> bool:
    try:
        return "nccl" in str(dist.get_backend()).lower()
    except Exception:
        return False


def abort_process_groups(dist: Any) -> None:
    """Abort every process group of this rank, keeping them registered.

    ``ProcessGroup.abort()`` (not ``_abort_process_group``, which also unregisters them) so
    that user code that later calls ``dist.destroy_process_group()`` in a ``finally`` still
    works. With NCCL the aborts run inside one NCCL group so that they cannot deadlock each
    other (pytorch/pytorch#119797).
    """
    try:
        c10d = dist.distributed_c10d
        groups = list(getattr(c10d._world, "pg_names", {}).keys()) or [dist.group.WORLD]
    except Exception:
        groups = [getattr(dist.group, "WORLD", None)]
    groups = [g for g in groups if g is not None]
    nccl_backend = None
    if _is_nccl(dist):
        try:
            import torch

            nccl_backend = dist.group.WORLD._get_backend(torch.device("cuda"))
            nccl_backend._group_start()
        except Exception:
            nccl_backend = None
    try:
        for pg in reversed(groups):
            try:
                pg.abort()
            except Exception:
                pass
    finally:
        if nccl_backend is not None:
            try:
                nccl_backend._group_end()
            except Exception:
                pass


def teardown_process_groups(dist: Any) -> None:
    """Abort, then destroy, this rank's process groups.

    Destroying is what releases gloo's TCP pairs (measured on torch 2.13: ``abort()`` and
    ``shutdown()`` leave them open, so a peer in ``barrier()`` keeps waiting until this
    process exits). After it ``dist.is_initialized()`` is False, so cleanup code written as
    ``if dist.is_initialized(): dist.destroy_process_group()`` keeps working.
    """
    abort_process_groups(dist)
    try:
        if dist.is_initialized():
            dist.destroy_process_group()
    except Exception:
        pass


def _log(text: str) -> None:
    try:
        sys.stderr.write(f"[ddp-lsp guard] {text}\n")
        sys.stderr.flush()
    except Exception:
        pass


def _write_smallrun_record(record: FailureRecord) -> None:
    directory = os.environ.get("DDP_LSP_SMALLRUN_DIR")
    if not directory:
        return
    try:
        path = os.path.join(directory, f"guard-{os.getpid()}.json")
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(record.to_json())
    except OSError:
        pass


def guard_distributed(
    fn: Callable[..., Any] | None = None,
    *,
    grace_s: float = 3.0,
    linger_s: float = 5.0,
    poll_s: float = 0.2,
    watch: bool | str = "auto",
    abort: bool = True,
) -> Any:
    """Guard a worker's body: ``@guard_distributed``, ``@guard_distributed()`` or ``with``.

    - ``grace_s``: how long a rank whose collective failed waits for a peer's record before
      it reports itself as the failure.
    - ``linger_s``: how long the failed rank waits for the others to acknowledge.
    - ``poll_s``: the watcher's store wait granularity.
    - ``watch``: the watcher thread: ``"auto"`` (NCCL only, where it is needed), True, False.
      It polls the store every ``poll_s`` (one small request per rank): raise ``poll_s`` on
      jobs of thousands of ranks.
    - ``abort``: abort the process groups on failure (the point of the guard).
    """
    guard = DistributedGuard(
        grace_s=grace_s, linger_s=linger_s, poll_s=poll_s, watch=watch, abort=abort
    )
    if fn is not None:
        return guard(fn)
    return guard


__all__ = [
    "DistributedGuard",
    "FailureRecord",
    "RankFailureError",
    "abort_process_groups",
    "guard_distributed",
]
