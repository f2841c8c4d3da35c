"""MemoryGrowthMonitor on real torch 2.13 CPU training loops: leaks flagged, noise not."""

from __future__ import annotations

import gc
import random
import sys
import types
import warnings
from typing import Any

import pytest

from ddp_lsp.runtime.memory import MemoryGrowthError, MemoryGrowthMonitor, monitor_steps

pytestmark = pytest.mark.torch

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional

B, D, H = 64, 256, 128
# Toy steps take ~1 ms, so the default 1 % sampling budget could read memory only every few
# steps; these tests judge per-step series, so they read at every step.
EVERY_STEP = 1e9


def _model() -> Any:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(D, H), nn.ReLU(), nn.Linear(H, 1))


def test_loss_kept_with_its_graph_is_flagged_with_the_saved_bytes_per_step() -> None:
    # The classic: backward(retain_graph=True) "to fix" a double-backward error, and the
    # loss appended to a list. Each kept graph holds what autograd saved for backward:
    # Linear1's input x (B*D), ReLU's output (B*H, shared with Linear2's input), and
    # mse_loss's input and target (B each), all float32.
    saved = (B * D + B * H + 2 * B) * 4
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    history = []
    # Garbage other tests in this process left behind must not be collected mid-loop (a heap
    # drop there moves the start of the growth: seen once under pytest-xdist).
    gc.collect()
    # Two censuses after warm-up whatever the time budget, then one at close.
    with MemoryGrowthMonitor(sample_budget=EVERY_STEP, min_censuses=2) as mon:
        mon.attach(opt)
        for _ in range(40):
            x, y = torch.randn(B, D), torch.randn(B, 1)
            loss = F.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward(retain_graph=True)
            opt.step()
            history.append(loss)
    report = mon.close()
    assert report.grows and report.metric == "heap"
    # The saved tensors plus the graph's own nodes and tensor headers: within 15 %.
    assert saved <= (report.bytes_per_step or 0) <= saved * 1.15, report.bytes_per_step
    assert report.start_step is not None and report.start_step <= report.warmup_steps + 1
    assert report.cause is not None
    assert report.cause.grad_fn == "MseLossBackward0"
    assert report.cause.tensors_per_step == pytest.approx(1.0)
    assert report.cause.holder == f"a list of {len(history)} items"
    assert "loss.item()" in report.summary()


def test_graph_without_backward_is_flagged_with_exactly_its_input_bytes() -> None:
    # Evaluation code without torch.no_grad() that keeps its outputs: the graph saves x.
    w = torch.randn(D, requires_grad=True)
    kept = []
    x_bytes = 4 * B * D * 4
    mon = MemoryGrowthMonitor(sample_budget=EVERY_STEP)
    for _ in range(30):
        x = torch.randn(4 * B, D)
        kept.append((x * w).sum())
        mon.step()
    report = mon.close()
    assert report.grows
    assert x_bytes <= (report.bytes_per_step or 0) <= x_bytes * 1.03, report.bytes_per_step


def test_small_tensor_leak_is_caught_by_the_live_tensor_count() -> None:
    # Two small detached tensors a step (~1 KiB of heap, under the bytes threshold): the
    # count catches what RSS misses.
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    metrics = []
    mon = MemoryGrowthMonitor(sample_budget=EVERY_STEP, census="every", min_bytes_per_step=1e9)
    mon.attach(opt)
    for _ in range(16):
        x, y = torch.randn(B, D), torch.randn(B, 1)
        out = model(x)
        loss = F.mse_loss(out, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        metrics.append((loss.detach(), out.detach().mean()))
    report = mon.close()
    assert report.grows and report.metric == "tensors"
    assert report.tensors_per_step == pytest.approx(2.0)
    assert report.cause is not None and report.cause.grad_fn is None


def _train(steps: int, batch: Any, extra: Any = None, census: str = "auto") -> Any:
    model = _model()
    opt = torch.optim.Adam(model.parameters())
    mon = MemoryGrowthMonitor(sample_budget=EVERY_STEP, census=census)
    mon.attach(opt)
    for step in range(steps):
        b = batch(step)
        x, y = torch.randn(b, D), torch.randn(b, 1)
        out = model(x)
        loss = F.mse_loss(out, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if extra is not None:
            extra(step, model, out)
    return mon.close()


def test_allocator_caching_plateau_is_not_flagged() -> None:
    # A caching allocator in miniature: buffers kept per power-of-two size class, filled
    # during the first steps, reused after that (plus oneDNN's own per-shape cache).
    rng = random.Random(1)
    pool: dict[int, Any] = {}

    def cache(step: int, model: Any, out: Any) -> None:
        n = rng.randint(8, 4096)
        size = 1 << (n - 1).bit_length()
        pool.setdefault(size, torch.empty(size, D))

    report = _train(100, lambda s: B, cache)
    assert not report.grows and not report.inconclusive, report.summary()
    assert len(pool) >= 5  # the pool did grow during the run


def test_varying_batch_sizes_are_not_flagged() -> None:
    # Bucketed dynamic batching. (Hundreds of distinct sizes in a 100-step run would make
    # MKL's per-size buffer cache grow on most steps: see docs/runtime.md, "Limits".)
    rng = random.Random(2)
    report = _train(100, lambda s: rng.choice(range(32, 257, 32)))
    assert not report.grows and not report.inconclusive, report.summary()
    heap = next(t for t in report.trends if t.metric == "heap")
    assert heap.trend.mann_kendall_z != 0  # the series was noisy, not flat


def test_periodic_evaluation_is_not_flagged() -> None:
    # Every 5 steps: an evaluation pass whose outputs replace the previous ones, and the
    # training outputs collected since the last evaluation are cleared (a sawtooth).
    collected: list[Any] = []
    last_eval: dict[str, Any] = {}

    def periodic(step: int, model: Any, out: Any) -> None:
        collected.append(out.detach())
        if step % 5 == 4:
            with torch.no_grad():
                last_eval["outputs"] = [model(torch.randn(512, D)) for _ in range(4)]
            collected.clear()

    # census="every": the live-tensor count (which the sawtooth moves) gets judged too.
    report = _train(40, lambda s: B, periodic, census="every")
    assert not report.grows and not report.inconclusive, report.summary()
    tensors = next(t for t in report.trends if t.metric == "tensors")
    assert tensors.decides and not tensors.trend.inconclusive  # the count was judged too


def test_context_manager_raises_on_growth_and_not_otherwise() -> None:
    kept = []
    w = torch.randn(D, requires_grad=True)
    with pytest.raises(MemoryGrowthError) as err:
        with MemoryGrowthMonitor(sample_budget=EVERY_STEP, raise_on_growth=True) as mon:
            for _ in range(20):
                kept.append((torch.randn(B, D) * w).sum())
                mon(None, "any", callback="signature")  # callback form
    assert err.value.report.grows
    with MemoryGrowthMonitor(sample_budget=EVERY_STEP, raise_on_growth=True) as mon:
        for _ in range(20):
            (torch.randn(B, D) * w).sum().backward()
            mon.step()
    assert mon.steps_recorded == 20


def test_monitor_steps_wraps_a_loop_and_warns_on_growth(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DDP_LSP_SMALLRUN_DIR", raising=False)
    w = torch.randn(D, requires_grad=True)
    kept = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for x in monitor_steps(torch.randn(20, B, D), sample_budget=EVERY_STEP):
            kept.append((x * w).sum())
    assert any(
        issubclass(c.category, ResourceWarning) and "grows" in str(c.message) for c in caught
    )


def test_lightning_callback_samples_each_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    # Lightning is not installed here: a stub `lightning.pytorch.Callback` checks our glue.
    pkg = types.ModuleType("lightning")
    sub = types.ModuleType("lightning.pytorch")

    class Callback:
        pass

    sub.Callback = Callback  # type: ignore[attr-defined]
    pkg.pytorch = sub  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "lightning", pkg)
    monkeypatch.setitem(sys.modules, "lightning.pytorch", sub)
    from ddp_lsp.runtime import lightning_callback

    cb = lightning_callback(raise_on_growth=True, sample_budget=EVERY_STEP)
    assert isinstance(cb, Callback)
    w = torch.randn(D, requires_grad=True)
    kept = []
    for i in range(20):
        kept.append((torch.randn(B, D) * w).sum())
        cb.on_train_batch_end("trainer", "module", "outputs", "batch", i)
    with pytest.raises(MemoryGrowthError):
        cb.on_train_end("trainer", "module")
    assert cb.monitor.steps_recorded == 20


def test_census_respects_its_time_budget(monkeypatch) -> None:
    # The monitor's clock is a fake one: a step costs 2 ms and a census 50 ms of it, whatever
    # the machine's load (a real clock made this test fail on a busy machine).
    from types import SimpleNamespace

    from ddp_lsp.runtime import memory

    clock = [0.0]
    monkeypatch.setattr(memory, "time", SimpleNamespace(perf_counter=lambda: clock[0]))
    budget = 0.3
    # min_censuses=0: no unconditional censuses after the warm-up but the baseline one.
    mon = MemoryGrowthMonitor(
        sample_budget=EVERY_STEP, census="auto", census_budget=budget, min_censuses=0
    )
    real_census = mon._take_census

    def slow_census(n: int):  # type: ignore[no-untyped-def]
        clock[0] += 0.05
        return real_census(n)

    mon._take_census = slow_census  # type: ignore[method-assign]
    x = torch.randn(64, 64)
    steps = 0
    # Run until three censuses have happened (the budget decides when), bounded.
    while len(mon.censuses) < 3 and steps < 20000:
        x = torch.tanh(x @ x) / 16  # a little compute per step
        clock[0] += 0.002
        mon.step()
        steps += 1
    elapsed = clock[0]
    assert len(mon.censuses) == 3
    # Without the budget the three would come on consecutive steps after the warm-up; with it
    # each census waits until census time is within 30 % of the loop's: 50 ms per census
    # needs about 80 steps of 2 ms between the second and the third.
    assert steps > mon.warmup_steps + 3 + 50, steps
    # Census time stays within the budget's share of the loop's time, give or take one
    # census (the budget is checked with the previous census's cost).
    spent = mon._census_time
    assert spent <= budget * elapsed + mon._census_cost, (spent, elapsed)


def test_readings_thin_out_when_they_would_cost_more_than_the_budget() -> None:
    # A budget no reading can meet (1e-9 of the step) must fall back to every max_stride-th
    # step, and a generous one must read every step.
    tight = MemoryGrowthMonitor(sample_budget=1e-9, max_stride=8, census="off")
    loose = MemoryGrowthMonitor(sample_budget=EVERY_STEP, census="off")
    x = torch.randn(128, 128)
    for _ in range(80):
        x = torch.tanh(x @ x) / 8
        tight.step()
        loose.step()
    assert loose.steps_recorded == 80
    assert 80 / 8 <= tight.steps_recorded <= 80 / 8 + 2
