"""The leak verdict from recorded series: evidence that grows with the steps, never noise alone.

Series are injected (no torch): the shapes are the ones measured on real runs (a
clean script's heap rising ~1.1 KiB/step with a flat tensor count; a kept loss adding one
tensor and ~5 graph nodes a step; ``total = total + loss`` adding nodes with a flat count).
"""

from __future__ import annotations

from ddp_lsp.runtime.memory_verdict import Census, TensorGroup, build_report
from ddp_lsp.runtime.stats import delta_noise_floor, step_growth

PARAM = TensorGroup("Parameter float32 [64, 32] on cpu requires_grad", 4, 16_000, None, 2048)


def _censuses(
    steps: range, kinds: dict[str, tuple[int, int, str | None]], nodes: int = 12
) -> list[Census]:
    """``kinds``: name -> (count at step 0, added per step, grad_fn)."""
    out = []
    for s in steps:
        groups = [PARAM]
        total_nodes = nodes
        for name, (base, per, grad_fn) in kinds.items():
            count = base + per * s
            if count:
                kept_nodes = 5 * count if grad_fn else 0
                total_nodes += kept_nodes
                groups.append(TensorGroup(name, count, 4 * count, grad_fn, 1, kept_nodes))
        out.append(
            Census(
                s,
                sum(g.count for g in groups),
                sum(g.bytes for g in groups),
                tuple(groups),
                total_nodes,
            )
        )
    return out


def _report(steps: range, heap: list[int], censuses: list[Census]) -> object:
    return build_report(
        steps=list(steps),
        series={"heap": heap, "tensors": [c.count for c in censuses]},
        censuses=censuses,
        warmup_steps=2,
        min_bytes_per_step=1024,
        min_tensors_per_step=0.5,
        bytes_warmup_steps=5,
    )


def test_heap_growth_without_a_growing_kind_is_suspect_not_a_leak() -> None:
    # The clean script: 34 steps, heap +1.1 KiB/step, every tensor count flat.
    steps = range(34)
    heap = [100_000_000 + 1126 * s + (512 if s % 3 else 0) for s in steps]
    r = _report(steps, heap, _censuses(steps, {}))
    assert not r.grows and r.verdict == "suspect", r.summary()  # type: ignore[attr-defined]
    text = r.summary()  # type: ignore[attr-defined]
    assert "not a leak verdict" in text and "1.1 KiB/step" in text and "noise floor" in text


def test_a_kept_loss_is_a_leak_in_ten_steps_with_its_kind_named() -> None:
    steps = range(10)  # 2 epochs of 10 samples, batch 2: 10 steps per rank
    loss = "Tensor float32 [] on cpu grad_fn=MseLossBackward0"
    censuses = _censuses(steps, {loss: (1, 1, "MseLossBackward0")})
    heap = [100_000_000 + 5_000 * s for s in steps]
    r = _report(steps, heap, censuses)
    assert r.grows and r.verdict == "leak", r.summary()  # type: ignore[attr-defined]
    assert r.cause is not None and r.cause.kind == loss  # type: ignore[attr-defined]
    assert r.tensors_per_step == 1.0  # type: ignore[attr-defined]
    assert "loss.item()" in r.summary()  # type: ignore[attr-defined]


def test_a_growing_graph_behind_one_tensor_is_a_leak() -> None:
    # running = running + loss: one live tensor (replaced each step), its graph grows.
    steps = range(10)
    chain = "Tensor float32 [] on cpu grad_fn=AddBackward0"
    censuses = []
    for c in _censuses(steps, {}):
        g = TensorGroup(chain, 1, 4, "AddBackward0", 1, 7 * c.step)
        censuses.append(
            Census(c.step, c.count + 1, c.bytes + 4, (*c.groups, g), c.nodes + 7 * c.step)
        )
    r = _report(steps, [100_000_000] * 10, censuses)
    assert r.grows and r.metric == "graph", r.summary()  # type: ignore[attr-defined]
    assert r.nodes_per_step == 7.0  # type: ignore[attr-defined]
    assert r.cause is not None and r.cause.kind == chain  # type: ignore[attr-defined]
    assert "growing autograd graph" in r.summary()  # type: ignore[attr-defined]


def test_a_cache_that_fills_then_stays_is_not_a_leak() -> None:
    # A per-shape cache filling over the first steps, then flat; the heap follows it.
    steps = range(20)
    censuses = []
    for c in _censuses(steps, {}):
        n = min(c.step, 6)
        g = TensorGroup("Tensor float32 [2, 1] on cpu", n, 8 * n, None, 2)
        censuses.append(
            Census(c.step, c.count + n, c.bytes + 8 * n, (*c.groups, g), c.nodes) if n else c
        )
    heap = [100_000_000 + 4096 * min(s, 6) for s in steps]
    r = _report(steps, heap, censuses)
    assert r.verdict == "flat", r.summary()  # type: ignore[attr-defined]


def test_too_few_steps_is_inconclusive_and_says_so() -> None:
    steps = range(5)
    r = _report(steps, [100_000_000] * 5, _censuses(steps, {}))
    assert r.verdict == "inconclusive" and r.inconclusive  # type: ignore[attr-defined]
    assert "need at least 5" in r.summary()  # type: ignore[attr-defined]


def test_step_growth_needs_a_rise_at_nearly_every_step() -> None:
    xs = list(range(2, 10))
    assert step_growth(xs, [float(s) for s in xs], warmup_steps=0, min_rate=0.5).grows
    # A flat count with a transient tensor now and then: up and down, never a trend.
    noisy = [30.0, 31, 30, 30, 31, 30, 31, 30]
    assert not step_growth(xs, noisy, warmup_steps=0, min_rate=0.5).grows
    # A list cleared every 4 steps: a sawtooth.
    saw = [30.0 + (s % 4) for s in xs]
    assert not step_growth(xs, saw, warmup_steps=0, min_rate=0.5).grows
    # Filled during the first half, flat in the second.
    plateau = [30.0 + min(s, 5) for s in xs]
    assert not step_growth(xs, plateau, warmup_steps=0, min_rate=0.5).grows
    # Four samples cannot say "every step".
    few = step_growth(xs[:4], [1.0, 2, 3, 4], warmup_steps=0, min_rate=0.5)
    assert few.inconclusive and not few.grows


def test_the_noise_floor_comes_from_the_run_and_ignores_one_collection() -> None:
    steps = list(range(20))
    steady = [1000.0 * s for s in steps]
    assert delta_noise_floor(steps, steady) == 0.0
    jumpy = [4096.0 * (s // 4) + (2000.0 if s % 2 else 0.0) for s in steps]
    assert delta_noise_floor(steps, jumpy) > 1000
    collected = list(steady)
    collected[10:] = [v - 50_000 for v in collected[10:]]  # one gc in the middle
    assert delta_noise_floor(steps, collected) == 0.0
