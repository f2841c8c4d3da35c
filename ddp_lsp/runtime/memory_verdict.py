"""The verdict on a memory series: does it grow with the step count, and what grows.

What :class:`~ddp_lsp.runtime.memory.MemoryGrowthMonitor` records (per-step readings, tensor
censuses) is judged here, in the monitor at close and in the ``ddp-lsp smallrun`` supervisor
(:mod:`ddp_lsp.runtime.smallrun_judge`) from the ranks' series files: :func:`build_report`
gives a :class:`GrowthReport` whose verdict is ``leak`` only on evidence that grows at nearly
every judged step (a census series, or heap bytes above the run's own noise floor with a
growing tensor kind named), ``suspect`` for heap growth alone, ``flat`` or ``inconclusive``.
Pure: no torch, no readings of this process.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from ddp_lsp.runtime.stats import (
    StepGrowth,
    TrendResult,
    analyze_series,
    delta_noise_floor,
    step_growth,
)


@dataclass(frozen=True)
class TensorGroup:
    """Live tensors that share a kind (class, dtype, device, shape, autograd state)."""

    kind: str
    count: int
    bytes: int
    grad_fn: str | None
    #: Elements of one tensor of the kind (the first one seen).
    numel: int = 0
    #: Autograd graph nodes first reached from this kind's tensors' ``grad_fn``.
    nodes: int = 0


@dataclass(frozen=True)
class Census:
    step: int
    count: int
    bytes: int
    groups: tuple[TensorGroup, ...]
    #: Distinct autograd graph nodes reachable from the live tensors (-1: not counted).
    nodes: int = -1


@dataclass(frozen=True)
class Evidence:
    """A census series that grew at (nearly) every judged step: what a leak verdict rests on."""

    #: ``live tensors``, ``autograd graph nodes``, ``tensor bytes``, or ``kind`` (of ``kind``).
    what: str
    kind: str | None
    per_step: float
    unit: str  # tensors | nodes | bytes
    rising: int
    intervals: int

    def describe(self) -> str:
        amount = (
            format_bytes(self.per_step)
            if self.unit == "bytes"
            else f"{self.per_step:.2f} {self.unit}"
        )
        subject = self.kind if self.kind else self.what
        extra = " (graph nodes it keeps)" if self.kind and self.unit == "nodes" else ""
        return f"{subject}{extra}: +{amount}/step, up in {self.rising} of {self.intervals} steps"


@dataclass(frozen=True)
class LeakCause:
    """The tensor kind whose count grows with the steps, and what that usually means."""

    kind: str
    tensors_per_step: float
    bytes_per_step: float
    grad_fn: str | None
    hint: str
    holder: str | None = None
    #: Other kinds that accumulate at the same time (e.g. the activations a kept graph saved).
    also: tuple[str, ...] = ()


@dataclass(frozen=True)
class MetricTrend:
    metric: str
    unit: str
    decides: bool
    trend: TrendResult


@dataclass(frozen=True)
class GrowthReport:
    """What the monitor concluded. ``grows`` is the gate; the rest explains it."""

    grows: bool
    inconclusive: bool
    #: The metric that decided (``cuda``, ``heap``, ``rss`` or ``tensors``).
    metric: str | None
    bytes_per_step: float | None
    tensors_per_step: float | None
    start_step: int | None
    steps: int
    warmup_steps: int
    cause: LeakCause | None
    trends: tuple[MetricTrend, ...]
    notes: tuple[str, ...] = ()
    #: ``leak`` (== ``grows``), ``suspect`` (bytes grow, no tensor kind or graph does),
    #: ``flat`` or ``inconclusive``.
    verdict: str = "flat"
    #: The census series that grew at every step (a leak verdict needs one, or a bytes
    #: growth above the noise floor together with a named tensor kind).
    evidence: tuple[Evidence, ...] = ()
    #: Growth per step that this run's own step-to-step variance can fake (bytes metric).
    noise_floor: float | None = None
    #: Censuses judged after warm-up.
    censuses: int = 0
    #: Autograd graph nodes added per step, when the graph grew at every step.
    nodes_per_step: float | None = None

    def summary(self) -> str:
        if self.verdict == "suspect":
            return (
                f"memory: suspect, not a leak verdict: {self.metric} grew "
                f"{format_bytes(self.bytes_per_step or 0)}/step (noise floor of this run "
                f"{format_bytes(self.noise_floor or 0)}/step) but no live tensor, tensor kind "
                f"or autograd graph grew over {self.censuses} censuses: allocator noise or "
                "non-tensor memory (numpy arrays, Python objects); rerun with more steps to tell"
            )
        if self.inconclusive and not self.grows:
            return f"memory: inconclusive ({'; '.join(self.notes) or 'too few steps'})"
        if not self.grows:
            judged = f", {self.censuses} censuses flat" if self.censuses else ""
            return f"memory: no growth with the step count over {self.steps} steps{judged}"
        label = {
            "graph": "autograd graph nodes",
            "tensors": "live tensors",
            "tensor_bytes": "live tensor bytes",
        }.get(self.metric or "", self.metric or "")
        parts = [f"memory grows with the step count ({label})"]
        if self.bytes_per_step is not None and self.bytes_per_step >= 1:
            parts.append(f"{format_bytes(self.bytes_per_step)}/step")
        if self.tensors_per_step is not None:
            parts.append(f"{self.tensors_per_step:.2f} live tensors/step")
        if self.nodes_per_step is not None:
            parts.append(f"{self.nodes_per_step:.2f} graph nodes/step")
        if self.start_step is not None:
            parts.append(f"from step {self.start_step}")
        text = ", ".join(parts)
        if self.evidence:
            text += "\n  grew at every step: " + "; ".join(e.describe() for e in self.evidence[:3])
        if self.cause is not None:
            if self.cause.tensors_per_step > 0:
                text += f"\n  likely cause: {self.cause.kind} accumulates"
                text += f" (+{self.cause.tensors_per_step:.2f}/step)"
            else:
                text += f"\n  likely cause: {self.cause.kind} keeps a growing autograd graph"
            if self.cause.holder:
                text += f", held by {self.cause.holder}"
            if self.cause.also:
                text += "\n  also accumulating: " + ", ".join(self.cause.also[:4])
            text += f"\n  {self.cause.hint}"
        return text

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def format_bytes(n: float) -> str:
    sign = "-" if n < 0 else ""
    value = abs(float(n))
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{sign}{value:.1f} {unit}" if unit != "B" else f"{sign}{value:.0f} B"
        value /= 1024
    return f"{sign}{value:.1f} GiB"  # pragma: no cover


def _hint_for(kind_grad_fn: str | None, type_name: str) -> str:
    if kind_grad_fn:
        return (
            "tensors that still hold their autograd graph are kept across steps (e.g. "
            "`losses.append(loss)` or `total += loss`): each keeps its graph's nodes, and its "
            "saved activations too if backward() was not run or used retain_graph=True. "
            "Keep `loss.item()` or `loss.detach()` instead."
        )
    if type_name == "Parameter":
        return "new Parameters appear every step: a module or optimizer built inside the loop?"
    return (
        "tensors are kept across steps: a list, dict or cache that only grows "
        "(metrics, outputs, per-step history)? Store `.item()`/`.cpu()` summaries or bound it."
    )


def _column(steps: list[int], values: list[int]) -> tuple[list[int], list[float]]:
    xs, ys = [], []
    for s, v in zip(steps, values, strict=False):
        if v >= 0:
            xs.append(s)
            ys.append(float(v))
    return xs, ys


def find_cause(
    censuses: list[Census] | tuple[Census, ...], warmup_steps: int, first_step: int = 0
) -> LeakCause | None:
    """Compare the first steady-state census with the last one: which kind accumulates?

    ``first_step`` is the run's first recorded step (warm-up counts from there).
    """
    if len(censuses) < 2:
        return None
    steady = [c for c in censuses if c.step >= first_step + warmup_steps] or list(censuses)
    base, last = steady[0], censuses[-1]
    span = last.step - base.step
    if span <= 0:
        return None
    before = {g.kind: g for g in base.groups}
    growing: list[tuple[TensorGroup, int, int]] = []
    for g in last.groups:
        prev = before.get(g.kind)
        d_count = g.count - (prev.count if prev else 0)
        d_bytes = g.bytes - (prev.bytes if prev else 0)
        # A kind counts as accumulating when at least one more lives every other step.
        if d_count >= max(2, 0.5 * span):
            growing.append((g, d_count, d_bytes))
    if not growing:
        return None
    # A tensor with a grad_fn keeps its whole graph alive (inputs saved for backward become
    # live tensors too), so it is the root of the leak even when its graph weighs more.
    with_graph = [item for item in growing if item[0].grad_fn]
    if with_graph:
        # The graph's output end (the loss: usually a scalar) is what the code keeps.
        g, d_count, d_bytes = min(with_graph, key=lambda item: item[0].numel)
    else:
        g, d_count, d_bytes = max(growing, key=lambda item: (item[2], item[1]))
    type_name = g.kind.split(" ", 1)[0]
    others = tuple(f"{o.kind} (+{dc / span:.2f}/step)" for o, dc, _ in growing if o.kind != g.kind)
    return LeakCause(
        kind=g.kind,
        tensors_per_step=d_count / span,
        bytes_per_step=sum(item[2] for item in growing) / span,
        grad_fn=g.grad_fn,
        hint=_hint_for(g.grad_fn, type_name),
        also=others,
    )


def census_evidence(
    censuses: list[Census] | tuple[Census, ...],
    *,
    warmup_steps: int,
    first_step: int,
    min_bytes_per_step: float,
    min_tensors_per_step: float,
) -> tuple[list[Evidence], StepGrowth | None]:
    """Which census series grew at every judged step, and the verdict on the live-tensor count.

    Candidates: the live-tensor count, the autograd graph's node count, the live tensor bytes,
    and per tensor kind its count and the graph nodes its tensors keep. Returns the growing
    ones (per-kind first, most per step first) and the live-count verdict (None: no census).
    """
    if not censuses:
        return [], None
    steps = [c.step for c in censuses]

    def judge(values: list[float], min_rate: float) -> StepGrowth:
        return step_growth(
            steps, values, warmup_steps=warmup_steps, min_rate=min_rate, first_step=first_step
        )

    total = judge([float(c.count) for c in censuses], min_tensors_per_step)
    found: list[Evidence] = []

    def add(what: str, kind: str | None, unit: str, g: StepGrowth) -> None:
        if g.grows:
            found.append(Evidence(what, kind, g.rate_per_step, unit, g.rising, g.intervals))

    cut = first_step + warmup_steps
    kinds: dict[str, None] = {}
    for c in censuses:
        if c.step >= cut:
            for g in c.groups:
                kinds.setdefault(g.kind)
    for kind in kinds:
        per = [{g.kind: g for g in c.groups}.get(kind) for c in censuses]
        add(
            "kind",
            kind,
            "tensors",
            judge([float(g.count if g else 0) for g in per], min_tensors_per_step),
        )
        if any(g is not None and g.grad_fn for g in per):
            add(
                "kind",
                kind,
                "nodes",
                judge([float(g.nodes if g else 0) for g in per], min_tensors_per_step),
            )
    add("live tensors", None, "tensors", total)
    if all(c.nodes >= 0 for c in censuses):
        add(
            "autograd graph nodes",
            None,
            "nodes",
            judge([float(c.nodes) for c in censuses], min_tensors_per_step),
        )
    add(
        "tensor bytes", None, "bytes", judge([float(c.bytes) for c in censuses], min_bytes_per_step)
    )
    return found, total


def _cause_from_evidence(
    evidence: list[Evidence], censuses: list[Census] | tuple[Census, ...]
) -> LeakCause | None:
    """The tensor kind a leak verdict names, from the kinds that grew at every step."""
    kinds = [e for e in evidence if e.kind is not None]
    if not kinds:
        return None
    last = {g.kind: g for g in censuses[-1].groups} if censuses else {}
    counted = [e for e in kinds if e.unit == "tensors"]
    if counted:
        with_graph = [e for e in counted if last.get(e.kind or "") and last[e.kind or ""].grad_fn]
        # A kept tensor with a grad_fn keeps its graph (and what it saved) alive: the root
        # of the leak even when its graph weighs more; the loss end is usually a scalar.
        pick = (
            min(with_graph, key=lambda e: last[e.kind or ""].numel)
            if with_graph
            else max(
                counted,
                key=lambda e: (
                    e.per_step * max(1, last[e.kind or ""].bytes if e.kind in last else 1)
                ),
            )
        )
    else:
        pick = max(kinds, key=lambda e: e.per_step)
    group = last.get(pick.kind or "")
    grad_fn = group.grad_fn if group is not None else None
    type_name = (pick.kind or "").split(" ", 1)[0]
    hint = _hint_for(grad_fn, type_name)
    if pick.unit == "nodes":
        hint = (
            f"one {pick.kind} holds an autograd graph that grows every step "
            "(`total = total + loss`, a running metric or an EMA computed from tensors with "
            "grad): accumulate `loss.item()` or `loss.detach()` instead."
        )
    others = tuple(e.describe() for e in kinds if e.kind != pick.kind)
    return LeakCause(
        kind=pick.kind or "",
        tensors_per_step=pick.per_step if pick.unit == "tensors" else 0.0,
        bytes_per_step=(group.bytes / max(group.count, 1) * pick.per_step)
        if group is not None and pick.unit == "tensors"
        else 0.0,
        grad_fn=grad_fn,
        hint=hint,
        also=others,
    )


#: The C heap keeps moving for a few steps after the first ones (allocator arenas, lazily
#: built kernels): a byte series is judged from this many steps on whatever the warm-up.
BYTES_WARMUP_STEPS = 5


def build_report(
    *,
    steps: list[int],
    series: dict[str, list[int]],
    censuses: list[Census] | tuple[Census, ...],
    warmup_steps: int,
    min_bytes_per_step: float,
    min_tensors_per_step: float,
    bytes_warmup_steps: int | None = None,
) -> GrowthReport:
    """Judge recorded series. Also used by the smallrun supervisor on the ranks' files.

    A ``leak`` verdict needs evidence that grows with the steps and is not allocator noise:

    1. a census series (live tensors, graph nodes, tensor bytes, one kind's count) that rose
       at nearly every step after warm-up (:func:`ddp_lsp.runtime.stats.step_growth`); or
    2. the byte series (CUDA allocated, C heap, RSS) growing by the robust trend criteria,
       faster than the noise floor measured on this same series, *and* a tensor kind whose
       count grew between the first steady census and the last (the kind is named).

    Bytes growing without any growing kind is ``suspect`` (numbers given; not a failure).
    """
    trends: list[MetricTrend] = []
    notes: list[str] = []
    bytes_warmup = warmup_steps if bytes_warmup_steps is None else bytes_warmup_steps
    bytes_metric: str | None = None
    for name in ("cuda", "heap", "rss"):
        xs, _ = _column(steps, series.get(name, []))
        if xs:
            bytes_metric = name
            break
    if bytes_metric == "rss":
        notes.append("no allocator reading here (not glibc): RSS alone misses small leaks")
    for name, unit, min_slope, warm in (
        ("cuda", "bytes", min_bytes_per_step, bytes_warmup),
        ("heap", "bytes", min_bytes_per_step, bytes_warmup),
        ("rss", "bytes", min_bytes_per_step, bytes_warmup),
        ("tensors", "tensors", min_tensors_per_step, warmup_steps),
        ("tensor_bytes", "bytes", min_bytes_per_step, warmup_steps),
    ):
        xs, ys = _column(steps, series.get(name, []))
        if not xs:
            continue
        trend = analyze_series(xs, ys, warmup_steps=warm, min_slope=min_slope, first_step=steps[0])
        decides = name in (bytes_metric, "tensors")
        trends.append(MetricTrend(name, unit, decides, trend))
    by_name = {t.metric: t for t in trends}
    first = steps[0] if steps else 0
    evidence, live = census_evidence(
        censuses,
        warmup_steps=warmup_steps,
        first_step=first,
        min_bytes_per_step=min_bytes_per_step,
        min_tensors_per_step=min_tensors_per_step,
    )
    judged_censuses = len([c for c in censuses if c.step >= first + warmup_steps])
    bytes_trend = by_name.get(bytes_metric or "")
    floor: float | None = None
    bytes_grow = False
    if bytes_trend is not None and not bytes_trend.trend.inconclusive:
        xs, ys = _column(steps, series.get(bytes_metric or "", []))
        cut = first + bytes_warmup
        steady = [(x, y) for x, y in zip(xs, ys, strict=True) if x >= cut]
        floor = max(
            min_bytes_per_step,
            delta_noise_floor([x for x, _ in steady], [y for _, y in steady]),
        )
        bytes_grow = bytes_trend.trend.grows and bytes_trend.trend.slope_per_step >= floor
        if bytes_trend.trend.grows and not bytes_grow:
            notes.append(
                f"{bytes_metric} rose {format_bytes(bytes_trend.trend.slope_per_step)}/step, "
                f"within this run's noise floor of {format_bytes(floor)}/step"
            )
    if (
        bytes_metric == "heap"
        and "rss" in by_name
        and by_name["rss"].trend.grows
        and not bytes_grow
    ):
        notes.append(
            "RSS grows but allocated memory does not: the allocator keeps freed pages "
            "(fragmentation), not a tensor leak"
        )
    cause = _cause_from_evidence(evidence, censuses)
    if bytes_grow and cause is None:
        cause = find_cause(censuses, warmup_steps, first)
    verdict = "flat"
    if evidence or (bytes_grow and cause is not None):
        verdict = "leak"
    elif bytes_grow:
        verdict = "suspect"
        notes.append(
            f"the {bytes_metric} grows but no tensor kind accumulates: non-tensor memory (numpy "
            "arrays, Python objects) or a library cache such as MKL's per-size buffers, which "
            "grows with each new matrix shape (MKL_DISABLE_FAST_MM=1 turns it off)"
        )
    elif (live is None or live.inconclusive) and (
        bytes_trend is None or bytes_trend.trend.inconclusive
    ):
        verdict = "inconclusive"
        reasons = []
        if live is not None:
            reasons.append(live.reason)
        if bytes_trend is not None:
            reasons.append(f"{bytes_metric}: {bytes_trend.trend.reason}")
        notes.append("; ".join(reasons) or "no samples recorded")
    metric: str | None = None
    bytes_per_step: float | None = None
    tensors_per_step: float | None = None
    start: int | None = None
    if bytes_trend is not None and (bytes_grow or verdict == "leak") and bytes_trend.trend.grows:
        metric = bytes_metric
        bytes_per_step = bytes_trend.trend.slope_per_step
        start = bytes_trend.trend.start_step
    live_ev = next((e for e in evidence if e.what == "live tensors"), None)
    if live_ev is not None:
        tensors_per_step = live_ev.per_step
    if verdict == "leak" and metric is None:
        top = live_ev or next((e for e in evidence if e.kind is None), None) or evidence[0]
        metric = {"tensors": "tensors", "nodes": "graph", "bytes": "tensor_bytes"}[top.unit]
        start = live.first_step if live is not None else None
        tb = next((e for e in evidence if e.what == "tensor bytes"), None)
        bytes_per_step = (
            tb.per_step if tb is not None else (cause.bytes_per_step if cause else None)
        )
    if (
        verdict == "leak"
        and tensors_per_step is None
        and cause is not None
        and cause.tensors_per_step
    ):
        tensors_per_step = cause.tensors_per_step
    if verdict == "suspect":
        metric = bytes_metric
        bytes_per_step = bytes_trend.trend.slope_per_step if bytes_trend is not None else None
    graph_ev = next((e for e in evidence if e.what == "autograd graph nodes"), None)
    return GrowthReport(
        grows=verdict == "leak",
        inconclusive=verdict == "inconclusive",
        metric=metric,
        bytes_per_step=bytes_per_step,
        tensors_per_step=tensors_per_step,
        start_step=start,
        steps=len(steps),
        warmup_steps=warmup_steps,
        cause=cause if verdict == "leak" else None,
        trends=tuple(trends),
        notes=tuple(notes),
        verdict=verdict,
        evidence=tuple(evidence),
        noise_floor=floor,
        censuses=judged_censuses,
        nodes_per_step=graph_ev.per_step if graph_ev is not None else None,
    )
