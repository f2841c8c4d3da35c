"""``MemoryGrowthMonitor``: per-step memory readings and a verdict on growth with the step count.

Per step the monitor reads, in this order of authority:

- on GPU (once CUDA is initialised by the training code, never by us):
  ``torch.cuda.memory_allocated`` -- live tensor bytes, not the caching allocator's reserve;
- on CPU: the C heap's in-use bytes (:mod:`ddp_lsp.runtime.probes`), which include the
  activations an autograd graph saved (C++ tensors no Python object points to), plus RSS
  (recorded, but it alone misses small leaks);
- the live tensors' count and bytes, from a census of the Python heap. A census walks every
  GC-tracked object (tens of ms with torch loaded), so it is scheduled to spend at most
  ``census_budget`` of the loop's wall time; it also tells *which kind* of tensor accumulates.

The verdict (:func:`ddp_lsp.runtime.stats.analyze_series`) ignores the warm-up steps (the
first step allocates gradients and optimizer state) and uses robust statistics, so allocator
caching, batch-size noise and periodic evaluation do not raise false alarms.

Attach it any way the loop allows: ``with MemoryGrowthMonitor() as mon: ... mon.step()``,
``mon.attach(optimizer)`` (a step post-hook, which also works for Accelerate and Lightning
since both call ``optimizer.step()``), ``monitor_steps(loader)`` or ``lightning_callback()``.
"""

from __future__ import annotations

import dataclasses
import gc
import itertools
import math
import sys
import time
import warnings
from array import array
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from ddp_lsp.runtime import probes
from ddp_lsp.runtime.memory_verdict import (
    Census,
    Evidence,
    GrowthReport,
    LeakCause,
    MetricTrend,
    TensorGroup,
    build_report,
    census_evidence,
    find_cause,
    format_bytes,
)

#: Assumed cost of the first census, before one has been timed (seconds).
FIRST_CENSUS_ESTIMATE_S = 0.1

#: RSS is read on every RSS_EVERY-th sample (it informs; it does not decide).
RSS_EVERY = 8

#: Series names, in the order the sink receives them.
FIELDS = ("heap", "rss", "cuda", "tensors", "tensor_bytes")


@dataclass(frozen=True)
class MemorySample:
    """One step's readings; a reading that is not available is None."""

    step: int
    time_s: float
    heap: int | None = None
    rss: int | None = None
    cuda: int | None = None
    tensors: int | None = None
    tensor_bytes: int | None = None
    #: Seconds the monitor itself spent in this step (readings and census), after time_s.
    overhead_s: float = 0.0


class MemoryGrowthError(RuntimeError):
    """Raised by a monitor with ``raise_on_growth=True`` when memory grows per step."""

    def __init__(self, report: GrowthReport) -> None:
        super().__init__(report.summary())
        self.report = report


class _Column:
    """An append-only series in preallocated chunks.

    The monitor's own storage lives in the C heap it measures. Growing an ``array`` by
    ``append`` would reallocate it now and then, and those jumps would be subtracted only by
    calling ``sys.getsizeof`` on every array at every step (cache-cold after a training step:
    ~10 us). Fixed chunks make the monitor's own bytes a counter updated once per chunk.
    """

    CHUNK = 2048

    def __init__(self, typecode: str) -> None:
        self._typecode = typecode
        self._chunks: list[array[Any]] = []
        self._n = 0
        self.allocated = 0

    def append(self, value: float) -> None:
        i = self._n % self.CHUNK
        if i == 0:
            chunk = array(self._typecode, bytes(array(self._typecode).itemsize * self.CHUNK))
            self._chunks.append(chunk)
            self.allocated += sys.getsizeof(chunk)
        self._chunks[-1][i] = value
        self._n += 1

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, index: int) -> Any:
        if index < 0:
            index += self._n
        if not 0 <= index < self._n:
            raise IndexError(index)
        return self._chunks[index // self.CHUNK][index % self.CHUNK]

    def __iter__(self) -> Iterator[Any]:
        for i in range(self._n):
            yield self._chunks[i // self.CHUNK][i % self.CHUNK]


class MemoryGrowthMonitor:
    """Record memory once per training step and decide whether it grows with the step count.

    Cheap per step (tens of microseconds: heap, RSS and, on GPU, ``memory_allocated``); the
    tensor census runs only within ``census_budget`` (a fraction of elapsed loop time) after
    ``min_censuses`` unconditional ones, plus once at close; the first and last censuses are
    what name the cause.
    """

    def __init__(
        self,
        *,
        warmup_steps: int = 5,
        min_bytes_per_step: float = 1024.0,
        min_tensors_per_step: float = 0.5,
        census: str = "auto",
        census_budget: float = 0.005,
        min_censuses: int = 8,
        retain_censuses: bool = True,
        sample_budget: float = 0.01,
        max_stride: int = 16,
        raise_on_growth: bool = False,
        sink: Callable[[MemorySample], None] | None = None,
        census_sink: Callable[[Census], None] | None = None,
        use_cuda: bool | None = None,
    ) -> None:
        if census not in ("auto", "every", "off"):
            raise ValueError("census must be 'auto', 'every' or 'off'")
        self.warmup_steps = warmup_steps
        self.min_bytes_per_step = min_bytes_per_step
        self.min_tensors_per_step = min_tensors_per_step
        self.census_mode = census
        self.census_budget = census_budget
        self.min_censuses = min_censuses
        #: False when a census sink stores them (smallrun): keep only the first and the last,
        #: or the kept censuses would themselves grow the heap a little every step.
        self.retain_censuses = retain_censuses
        self._census_count = 0
        self.sample_budget = sample_budget
        self.max_stride = max_stride
        self._stride = 1
        self._calls = 0
        self._interval = 0.0
        self._probe_cost = 0.0
        self._last_call: float | None = None
        self._first_step = 0
        self.raise_on_growth = raise_on_growth
        self._sink = sink
        self._census_sink = census_sink
        self._use_cuda = use_cuda
        self._heap = probes.heap_in_use_bytes
        self._rss = probes.RssReader()
        self._cuda_reader: Callable[[], int] | None = None
        self._steps = _Column("q")
        self._times = _Column("d")
        # One array per reading; -1 marks "not available" (readings are never negative).
        self._series = {name: _Column("q") for name in FIELDS}
        self._censuses: list[Census] = []
        self._census_time = 0.0
        self._census_cost = 0.0
        self._t0: float | None = None
        self._step = 0
        self._closed = False
        self._report: GrowthReport | None = None
        self._handles: list[Any] = []
        self._leader: int | None = None

    # -- recording -------------------------------------------------------------------------

    def _own_bytes(self) -> int:
        # Our own series live in the C heap too: subtract them so that the monitor never
        # reports its own bookkeeping as a leak.
        total = self._steps.allocated + self._times.allocated
        for column in self._series.values():
            total += column.allocated
        return total

    def _cuda(self) -> int | None:
        if self._cuda_reader is not None:
            return self._cuda_reader()
        if self._use_cuda is False:
            return None
        torch = sys.modules.get("torch")
        # Never initialise CUDA ourselves: only read it once the training code has.
        # is_initialized() is a flag read; is_available() would query the driver every step.
        if torch is None or not torch.cuda.is_initialized():
            return None
        cuda = torch.cuda

        def read() -> int:
            return int(cuda.memory_allocated(cuda.current_device()))

        self._cuda_reader = read
        return read()

    def step(self, step: int | None = None) -> None:
        """Record this step's memory. Call it once per step, after ``optimizer.step()``.

        Readings are taken every step while they cost under ``sample_budget`` of the step
        time; when they cost more (a fragmented heap makes ``mallinfo2`` walk many free
        chunks), every k-th step, k chosen to stay within the budget (at most ``max_stride``).
        """
        if self._closed:
            return
        now = time.perf_counter()
        if self._t0 is None:
            self._t0 = now
            self._first_step = self._step if step is None else int(step)
        elif self._last_call is not None:
            interval = now - self._last_call
            self._interval = (
                interval if self._interval == 0.0 else 0.8 * self._interval + 0.2 * interval
            )
        self._last_call = now
        n = self._step if step is None else int(step)
        self._step = n + 1
        self._calls += 1
        if self._calls % self._stride and self._calls > 1:
            return
        heap = self._heap() - self._own_bytes() if self._heap is not None else None
        # RSS only informs (the heap decides on CPU): read it every RSS_EVERY-th sample.
        rss = self._rss() if len(self._steps) % RSS_EVERY == 0 else None
        cuda = self._cuda() if self._cuda_reader is not None or self._calls % 64 == 1 else None
        cost = time.perf_counter() - now
        self._probe_cost = cost if self._probe_cost == 0.0 else 0.8 * self._probe_cost + 0.2 * cost
        if self._interval > 0:
            need = self._probe_cost / (self.sample_budget * self._interval)
            self._stride = max(1, min(self.max_stride, math.ceil(need)))
        tensors: int | None = None
        tensor_bytes: int | None = None
        if self._census_due(n, now):
            started = time.perf_counter()
            census = self._take_census(n)
            cost = time.perf_counter() - started
            self._census_time += cost
            self._census_cost = cost
            tensors, tensor_bytes = census.count, census.bytes
        self._steps.append(n)
        self._times.append(now - self._t0)
        values = (heap, rss, cuda, tensors, tensor_bytes)
        for name, value in zip(FIELDS, values, strict=True):
            self._series[name].append(-1 if value is None else value)
        if self._sink is not None:
            overhead = time.perf_counter() - now
            self._sink(
                MemorySample(n, now - self._t0, heap, rss, cuda, tensors, tensor_bytes, overhead)
            )

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        """Callback form: any hook signature (Lightning, Accelerate, custom loops)."""
        self.step()

    def _census_due(self, n: int, now: float) -> bool:
        if self.census_mode == "off" or "torch" not in sys.modules:
            return False
        if self.census_mode == "every":
            return True
        if n - self._first_step < self.warmup_steps or self._t0 is None:
            return False
        if self._census_count < max(self.min_censuses, 1):
            # A short run (smallrun) gets a live-tensor series to judge; every run gets the
            # baseline census that a growing heap is compared against to name its kind.
            return True
        # Every census, the first (the baseline the cause analysis compares against)
        # included, waits until the budget affords it: with ~10^5 objects a census costs
        # tens of ms, i.e. about 20 s into a loop at the default 0.5 %.
        estimate = self._census_cost or FIRST_CENSUS_ESTIMATE_S
        elapsed = now - self._t0
        return self._census_time + estimate <= self.census_budget * elapsed

    def _take_census(self, n: int) -> Census:
        import torch

        tensors = _live_tensors(torch)
        groups: dict[str, list[Any]] = {}
        seen_ptrs: set[int] = set()
        seen_nodes: set[int] = set()
        keep_nodes: list[Any] = []  # ids are only unique while the node objects live
        total_bytes = 0
        for t in tensors:
            try:
                kind = _kind_of(t)
                grad_fn = t.grad_fn
                gname = type(grad_fn).__name__ if grad_fn is not None else None
                nbytes = 0
                if t.device.type != "meta":
                    # Count each data pointer once (a view at offset 0 shares its base's).
                    # Not t.untyped_storage(): that creates a storage PyObject which torch
                    # then keeps alive, so the census itself would grow the heap.
                    ptr = t.data_ptr()
                    if ptr == 0 or ptr not in seen_ptrs:
                        seen_ptrs.add(ptr)
                        nbytes = int(t.nbytes)
            except Exception:  # fake / functional / sparse tensors: count, no bytes
                kind, gname, nbytes = f"{type(t).__name__} (opaque)", None, 0
            try:
                numel = int(t.numel())
            except Exception:
                numel = 0
            entry = groups.setdefault(kind, [0, 0, gname, numel, 0])
            entry[0] += 1
            entry[1] += nbytes
            total_bytes += nbytes
            if gname is not None:
                entry[4] += _walk_graph(t, seen_nodes, keep_nodes)
        del tensors, keep_nodes
        census = Census(
            step=n,
            count=sum(v[0] for v in groups.values()),
            bytes=total_bytes,
            groups=tuple(
                TensorGroup(k, v[0], v[1], v[2], v[3], v[4]) for k, v in sorted(groups.items())
            ),
            nodes=len(seen_nodes),
        )
        self._census_count += 1
        if not self.retain_censuses and len(self._censuses) >= 2:
            self._censuses[-1] = census
        else:
            self._censuses.append(census)
        if self._census_sink is not None:
            self._census_sink(census)
        return census

    # -- attaching -------------------------------------------------------------------------

    def attach(self, optimizer: Any) -> Any:
        """Sample after every ``optimizer.step()`` (also Accelerate's wrapped optimizer)."""
        inner = getattr(
            optimizer, "optimizer", optimizer
        )  # AcceleratedOptimizer, LightningOptimizer

        def hook(_opt: Any, _args: Any, _kwargs: Any) -> None:
            self.step()

        handle = inner.register_step_post_hook(hook)
        self._handles.append(handle)
        return handle

    def attach_all_optimizers(self) -> Any:
        """Sample after the steps of every optimizer in the process (a global post-hook).

        With several optimizers (GAN, multi-task) only the first one that steps counts, so a
        step is a training iteration, not an optimizer call.
        """
        from torch.optim.optimizer import register_optimizer_step_post_hook

        def hook(opt: Any, _args: Any, _kwargs: Any) -> None:
            if self._leader is None:
                self._leader = id(opt)
            if id(opt) == self._leader:
                self.step()

        handle = register_optimizer_step_post_hook(hook)
        self._handles.append(handle)
        return handle

    def detach(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()

    def wrap(self, iterable: Iterable[Any]) -> Iterator[Any]:
        """Yield from ``iterable`` and sample after each item's loop body has run."""
        started = False
        for item in iterable:
            if started:
                self.step()
            started = True
            yield item
        if started:
            self.step()

    def __enter__(self) -> MemoryGrowthMonitor:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        report = self.close()
        if exc_type is None and self.raise_on_growth and report.grows:
            raise MemoryGrowthError(report)

    # -- results ---------------------------------------------------------------------------

    @property
    def steps_recorded(self) -> int:
        return len(self._steps)

    def samples(self) -> list[MemorySample]:
        out = []
        for i, n in enumerate(self._steps):
            heap, rss, cuda, tensors, tensor_bytes = (
                None if v < 0 else int(v) for v in (self._series[name][i] for name in FIELDS)
            )
            out.append(MemorySample(n, self._times[i], heap, rss, cuda, tensors, tensor_bytes))
        return out

    @property
    def censuses(self) -> tuple[Census, ...]:
        return tuple(self._censuses)

    def close(self, *, final_census: bool = True) -> GrowthReport:
        """Stop recording, take the final census and return the report (idempotent).

        ``final_census=False`` when closing after the loop's locals are gone (at interpreter
        exit): a census then would count what the loop no longer holds.
        """
        if self._report is not None:
            return self._report
        self.detach()
        if (
            final_census
            and self._censuses
            and self._steps
            and self._censuses[-1].step != self._steps[-1]
        ):
            self._take_census(self._steps[-1])
        self._closed = True
        self._rss.close()
        self._report = build_report(
            steps=list(self._steps),
            series={name: list(a) for name, a in self._series.items()},
            censuses=self._censuses,
            warmup_steps=self.warmup_steps,
            min_bytes_per_step=self.min_bytes_per_step,
            min_tensors_per_step=self.min_tensors_per_step,
        )
        if self._report.cause is not None and final_census:
            holder = _find_holder(self._report.cause.kind)
            if holder:
                self._report = _with_holder(self._report, holder)
        return self._report

    def report(self) -> GrowthReport:
        """The report so far (without closing) -- for a mid-run check."""
        if self._report is not None:
            return self._report
        return build_report(
            steps=list(self._steps),
            series={name: list(a) for name, a in self._series.items()},
            censuses=self._censuses,
            warmup_steps=self.warmup_steps,
            min_bytes_per_step=self.min_bytes_per_step,
            min_tensors_per_step=self.min_tensors_per_step,
        )


def _with_holder(report: GrowthReport, holder: str) -> GrowthReport:
    cause = report.cause
    assert cause is not None
    return dataclasses.replace(report, cause=dataclasses.replace(cause, holder=holder))


def _find_holder(kind: str) -> str | None:
    """Describe the container holding the newest tensor of ``kind`` (a list of N items...)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    newest = None
    for obj in _live_tensors(torch):
        try:
            if _kind_of(obj) == kind:
                newest = obj
        except Exception:
            continue
    if newest is None:
        return None
    for ref in gc.get_referrers(newest):
        if isinstance(ref, (list, tuple, set, dict)) and ref is not globals() and len(ref) > 1:
            return f"a {type(ref).__name__} of {len(ref)} items"
        name = type(ref).__name__
        if name == "deque":
            return f"a deque of {len(ref)} items"
    return None


def _tensor_types(torch: Any) -> set[type]:
    """torch.Tensor and every subclass defined so far (Parameter, Buffer, user subclasses)."""
    found: set[type] = set()
    todo: list[type] = [torch.Tensor]
    while todo:
        t = todo.pop()
        if t not in found:
            found.add(t)
            todo.extend(t.__subclasses__())
    return found


def _live_tensors(torch: Any) -> list[Any]:
    """Every live tensor object the garbage collector tracks (tensors are GC containers)."""
    tensor_types = _tensor_types(torch)
    objs = gc.get_objects()
    try:
        # Filter in C (compress/map) rather than a Python loop over ~10^5 objects; it also
        # avoids isinstance() on lazy modules, which would trigger their deprecation hooks.
        return list(itertools.compress(objs, map(tensor_types.__contains__, map(type, objs))))
    finally:
        del objs


#: A graph walk stops counting here (a leak is evident long before; bounds the census cost).
MAX_GRAPH_NODES = 200_000


def _walk_graph(t: Any, seen: set[int], keep: list[Any]) -> int:
    """Count the autograd nodes reachable from ``t.grad_fn`` not yet in ``seen``.

    A loss kept with its graph (or ``total = total + loss``) keeps every node of every step's
    graph alive even after backward() freed the saved activations: the node count grows
    every step while the live-tensor count may not (one ``total`` tensor, replaced).
    """
    try:
        root = t.grad_fn
    except Exception:
        return 0
    found = 0
    todo = [root]
    while todo and len(seen) < MAX_GRAPH_NODES:
        node = todo.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        keep.append(node)
        found += 1
        try:
            todo.extend(nxt for nxt, _ in node.next_functions)
        except Exception:
            continue
    return found


def _kind_of(t: Any) -> str:
    grad_fn = t.grad_fn
    gname = type(grad_fn).__name__ if grad_fn is not None else None
    shape = tuple(t.shape)
    dims = str(list(shape)) if len(shape) <= 4 else f"{len(shape)}-d"
    kind = f"{type(t).__name__} {str(t.dtype).replace('torch.', '')} {dims} on {t.device.type}"
    if gname:
        kind += f" grad_fn={gname}"
    elif t.requires_grad:
        kind += " requires_grad"
    return kind


def monitor_steps(iterable: Iterable[Any] | None = None, **kwargs: Any) -> Any:
    """The one-line hook: ``for batch in monitor_steps(loader): ...``.

    Under ``ddp-lsp smallrun`` it feeds the supervisor's per-rank series (and turns off the
    automatic optimizer hook, so steps are not counted twice). Elsewhere it creates a monitor
    that warns at the end of the loop if memory grew. Without an iterable it returns the
    monitor, for a manual ``.step()`` per iteration.
    """
    from ddp_lsp.runtime import _autoattach

    session = _autoattach.session_monitor(manual=True)
    monitor = session if session is not None else MemoryGrowthMonitor(**kwargs)
    if iterable is None:
        return monitor
    if session is not None:
        return monitor.wrap(iterable)
    return _warn_at_end(monitor, iterable)


def _warn_at_end(monitor: MemoryGrowthMonitor, iterable: Iterable[Any]) -> Iterator[Any]:
    yield from monitor.wrap(iterable)
    report = monitor.close()
    if report.grows:
        warnings.warn(report.summary(), ResourceWarning, stacklevel=2)


def lightning_callback(**kwargs: Any) -> Any:
    """A Lightning ``Callback`` sampling after each training batch and reporting at the end.

    Imports ``lightning.pytorch`` (or ``pytorch_lightning``) only when called.
    """
    try:
        from lightning.pytorch import Callback  # type: ignore[import-not-found]
    except ImportError:
        from pytorch_lightning import Callback  # type: ignore[import-not-found]

    monitor = MemoryGrowthMonitor(**kwargs)

    class MemoryGrowthCallback(Callback):  # type: ignore[misc]
        """Samples memory after every training batch; raises or warns at the end of fit."""

        def __init__(self) -> None:
            super().__init__()
            self.monitor = monitor

        def on_train_batch_end(self, *args: Any, **kw: Any) -> None:
            self.monitor.step()

        def on_train_end(self, *args: Any, **kw: Any) -> None:
            report = self.monitor.close()
            if report.grows:
                if self.monitor.raise_on_growth:
                    raise MemoryGrowthError(report)
                warnings.warn(report.summary(), ResourceWarning, stacklevel=2)

    return MemoryGrowthCallback()


__all__ = [
    "Census",
    "Evidence",
    "GrowthReport",
    "LeakCause",
    "MemoryGrowthError",
    "MemoryGrowthMonitor",
    "MemorySample",
    "MetricTrend",
    "TensorGroup",
    "build_report",
    "census_evidence",
    "find_cause",
    "format_bytes",
    "lightning_callback",
    "monitor_steps",
]
