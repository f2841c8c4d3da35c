"""``ddp-lsp feasibility``: the command line, the analysis of injected rank results, and real
runs of a tiny script under torchrun (CPU, gloo). GPU runs skip with the reason here."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from ddp_lsp.runtime.feasibility import (
    CommandError,
    FeasibilityConfig,
    analyse,
    buckets_of,
    main,
    parse_command,
    render,
    run_feasibility,
    step_parts,
    sweep_sizes,
    to_json,
)

from .conftest import REPO, WORKERS

TINY = str(WORKERS / "feas_tiny.py")
PY = sys.executable

# -- the command line --------------------------------------------------------------------------


def test_entry_from_python_script() -> None:
    e = parse_command(["/opt/py/bin/python3.11", "-u", "train.py", "--lr", "3e-4"])
    assert (e.python, e.target, e.module, e.args, e.python_opts) == (
        "/opt/py/bin/python3.11",
        "train.py",
        False,
        ("--lr", "3e-4"),
        ("-u",),
    )
    assert e.torchrun(2) == [
        "/opt/py/bin/python3.11",
        "-u",
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        "2",
        "train.py",
        "--lr",
        "3e-4",
    ]


def test_entry_from_module_and_from_torchrun() -> None:
    e = parse_command(["python", "-m", "pkg.train", "--epochs", "1"])
    assert (e.target, e.module, e.args) == ("pkg.train", True, ("--epochs", "1"))
    assert e.torchrun(1)[-4:] == ["-m", "pkg.train", "--epochs", "1"]
    e = parse_command(
        ["torchrun", "--nnodes", "1", "--nproc_per_node=8", "--standalone", "train.py", "-b", "4"]
    )
    assert (e.target, e.module, e.args) == ("train.py", False, ("-b", "4"))
    e = parse_command(
        ["python", "-m", "torch.distributed.run", "--nproc-per-node", "4", "-m", "a.b"]
    )
    assert (e.target, e.module) == ("a.b", True)


@pytest.mark.parametrize(
    ("command", "message"),
    [
        ([], "no training command"),
        (["python", "-c", "print(1)"], "not -c code"),
        (["accelerate", "launch", "train.py"], "launches its own processes"),
        (["torchrun", "--nproc-per-node", "2"], "without a training script"),
        (["make", "train"], "is not a Python script"),
    ],
)
def test_entry_errors(command: list[str], message: str) -> None:
    with pytest.raises(CommandError, match=message):
        parse_command(command)


def test_cli_errors(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert "after '--'" in capsys.readouterr().err
    assert main(["--nproc", "1", "--", "python", "t.py"]) == 2
    assert "--nproc must be at least 2" in capsys.readouterr().err
    assert main(["--", "accelerate", "launch", "t.py"]) == 2
    assert "launches its own processes" in capsys.readouterr().err


def test_sweep_sizes_cover_the_buckets_and_smaller() -> None:
    sizes = sweep_sizes([1 << 20, 5 << 20])
    assert (1 << 20) in sizes and (5 << 20) in sizes
    assert min(sizes) <= (1 << 20) // 16 and max(sizes) >= 5 << 20


# -- the analysis, from injected rank results ---------------------------------------------------


def rank(
    *,
    world: int,
    step: float,
    backward: float,
    exposed: float = 0.0,
    data: float = 0.0,
    optimizer: float = 0.001,
    buckets: tuple[tuple[int, float], ...] = ((4 << 20, 0.5), (1 << 20, 0.1)),
    shared_step: float | None = None,
    cuda: bool = False,
    batch: int = 32,
    backward_calls: int = 1,
    comm_rounds: int = 1,
    sweep: list[list[float]] | None = None,
    ddp: dict[str, Any] | None = None,
    steps: int = 10,
) -> dict[str, Any]:
    recs = []
    for _ in range(steps):
        bwd_compute = backward - exposed
        recs.append(
            {
                "data": data,
                "backward": backward,
                "backward_calls": backward_calls,
                "optimizer": optimizer,
                "buckets": [
                    [i, nbytes, frac * bwd_compute, 0.001]
                    for _ in range(comm_rounds)
                    for i, (nbytes, frac) in enumerate(buckets)
                ],
                "comm_rounds": comm_rounds,
                "exposed": exposed,
            }
        )
    out: dict[str, Any] = {
        "rank": 0,
        "world_size": world,
        "steps": {"main": steps},
        "wall": {"main": step * steps},
        "records": {"main": recs, "shared": []},
        "batch": batch,
        "threads": 2,
        "cuda": cuda,
        "device_count": 2 if cuda else 0,
        "backend": "nccl" if cuda else "gloo",
        "ended": "steps",
        "ddp": ddp
        or {
            "bucket_cap_bytes": 25 << 20,
            "gradient_as_bucket_view": False,
            "find_unused_parameters": False,
            "params": 1_310_720,
            "grad_dtype": "float32",
        },
        "sweep": sweep,
    }
    if shared_step is not None:
        out["steps"]["shared"] = steps
        out["wall"]["shared"] = shared_step * steps
        out["records"]["shared"] = recs
    return out


def linear_sweep(alpha: float, busbw: float) -> list[list[float]]:
    # 2 ranks: t = 2*alpha + b/busbw
    return [[b, 2 * alpha + b / busbw] for b in (64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20)]


def test_step_split_and_buckets_from_records() -> None:
    r = rank(world=2, step=0.1, backward=0.05, exposed=0.02, data=0.01)
    parts = step_parts(r)
    assert parts.data == pytest.approx(0.01)
    assert parts.backward == pytest.approx(0.03)
    assert parts.comm == pytest.approx(0.02)
    assert parts.forward == pytest.approx(0.1 - 0.01 - 0.05 - 0.001)
    bs = buckets_of(r)
    assert [b.nbytes for b in bs] == [4 << 20, 1 << 20]
    assert [round(b.ready_frac, 3) for b in bs] == [0.5, 0.1]


def test_cpu_analysis_predicts_from_one_process_and_names_the_dominant_cost() -> None:
    sweep = linear_sweep(50e-6, 0.5e9)
    single = rank(world=1, step=0.1, backward=0.05, shared_step=0.15)
    # 2 CPU ranks: each computes at the shared-core pace, plus the whole all-reduce (10 ms).
    multi = {
        r: rank(world=2, step=0.165, backward=0.065, exposed=0.015, sweep=sweep) for r in (0, 1)
    }
    a = analyse(parse_command([PY, "t.py"]), single, multi, 2)
    comm = sum(2 * 50e-6 + b / 0.5e9 for b in (4 << 20, 1 << 20))
    assert a.model is not None and a.model.busbw_Bps == pytest.approx(0.5e9, rel=1e-3)
    assert a.predicted is not None
    assert a.predicted.comm_s == pytest.approx(comm, rel=1e-3)
    # Not hidden on CPU: one rank's step = shared-core compute + the all-reduce.
    assert a.predicted.speedup == pytest.approx(2 * 0.1 / (0.15 + comm), rel=1e-3)
    assert a.measured_speedup == pytest.approx(2 * 0.1 / 0.165)
    text = render(a)
    assert "measured speed-up x1.21" in text
    assert "dominant cost per rank: forward" in text
    assert "verdict: marginal" in text
    assert "gradient_as_bucket_view=True" in text
    assert "projection across nodes: give --inter-node-gbps" in text
    data = to_json(a)
    assert data["schema"] == "ddp-lsp-feasibility/1"
    assert data["ddp"]["parts"]["dominant"].startswith("forward")
    json.dumps(data)


def test_communication_bound_job_gets_the_communication_advice() -> None:
    sweep = linear_sweep(100e-6, 0.2e9)
    single = rank(world=1, step=0.02, backward=0.01, shared_step=0.02, buckets=((25 << 20, 1.0),))
    multi = {
        r: rank(
            world=2, step=0.16, backward=0.15, exposed=0.14, sweep=sweep, buckets=((25 << 20, 1.0),)
        )
        for r in (0, 1)
    }
    a = analyse(parse_command([PY, "t.py"]), single, multi, 2)
    text = render(a)
    assert "verdict: communication-bound" in text
    assert "dominant cost exposed all-reduce" in text
    assert "bigger per-rank batch" in text and "no_sync" in text
    assert "bf16_compress_hook" in text


def test_many_small_buckets_get_the_bucket_size_advice() -> None:
    sweep = linear_sweep(2e-3, 1e9)  # a slow-latency link
    small = tuple((256 << 10, i / 40) for i in range(40))
    single = rank(world=1, step=0.05, backward=0.03, shared_step=0.05, buckets=small)
    multi = {
        r: rank(world=2, step=0.25, backward=0.22, exposed=0.19, sweep=sweep, buckets=small)
        for r in (0, 1)
    }
    text = render(analyse(parse_command([PY, "t.py"]), single, multi, 2))
    assert "larger bucket_cap_mb: 40 buckets" in text


def test_accumulation_without_no_sync_and_find_unused_are_named() -> None:
    ddp = {
        "gradient_as_bucket_view": True,
        "find_unused_parameters": True,
        "params": 10,
        "grad_dtype": "float32",
    }
    single = rank(world=1, step=0.1, backward=0.05, shared_step=0.1, ddp=ddp)
    multi = {
        r: rank(
            world=2,
            step=0.11,
            backward=0.06,
            sweep=linear_sweep(1e-5, 1e9),
            ddp=ddp,
            backward_calls=4,
            comm_rounds=4,
        )
        for r in (0, 1)
    }
    text = render(analyse(parse_command([PY, "t.py"]), single, multi, 2))
    assert "4 backward passes per optimizer step and 4 all-reduces" in text
    assert "find_unused_parameters=True walks" in text
    assert "gradient_as_bucket_view=True" not in text


def test_gpu_analysis_overlaps_and_projects_nodes() -> None:
    # Injected GPU facts: buckets ready early in backward hide behind it.
    sweep = linear_sweep(10e-6, 100e9)
    single = rank(world=1, step=0.1, backward=0.06, cuda=True)
    multi = {
        r: rank(world=2, step=0.101, backward=0.061, exposed=0.001, cuda=True, sweep=sweep)
        | {"gpu_util": 93.0, "h2d_gbps": 24.5}
        for r in (0, 1)
    }
    from ddp_lsp.preflight.commmodel import AlphaBeta

    a = analyse(
        parse_command([PY, "t.py"]), single, multi, 2, inter_node=AlphaBeta(20e-6, 10e9, "given")
    )
    assert a.device == "GPU"
    assert a.predicted is not None and a.predicted.exposed_s < a.predicted.comm_s
    text = render(a)
    assert "GPU: utilisation 93%, host-to-device 24.5 GB/s pinned" in text
    assert "GPUs on one node" in text
    assert "projection across nodes: 2 nodes (4 ranks)" in text
    assert a.node_projections[0].ranks == 4


def test_preflight_report_supplies_the_sweep(tmp_path: Path) -> None:
    from ddp_lsp.runtime.feasibility import preflight_sweep

    report = {
        "probes": [
            {
                "id": "dist.busbw",
                "value": {
                    "world_size": 2,
                    "backend": "gloo",
                    "sweep": [
                        {"bytes": b, "time_us": (2 * 30e-6 + b / 1e9) * 1e6}
                        for b in (65536, 1 << 20, 4 << 20)
                    ],
                },
            }
        ]
    }
    path = tmp_path / "pf.json"
    path.write_text(json.dumps(report))
    sweep = preflight_sweep(path)
    single = rank(world=1, step=0.1, backward=0.05, shared_step=0.1)
    multi = {r: rank(world=2, step=0.11, backward=0.06) for r in (0, 1)}
    a = analyse(parse_command([PY, "t.py"]), single, multi, 2, sweep=sweep)
    assert a.model is not None and a.model.alpha_s == pytest.approx(30e-6, rel=1e-3)
    assert "preflight dist.busbw" in a.model_source
    (tmp_path / "empty.json").write_text(json.dumps({"probes": []}))
    with pytest.raises(CommandError, match="no dist.busbw sweep"):
        preflight_sweep(tmp_path / "empty.json")


# -- real runs (torchrun, gloo, 2 CPU ranks) ----------------------------------------------------


@pytest.fixture(autouse=False)
def one_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("PYTHONPATH", str(REPO))


def test_real_run_measures_the_users_steps(one_thread: None) -> None:
    analysis, problem = run_feasibility(
        FeasibilityConfig((PY, TINY, "--hook"), steps=4, warmup=2, nproc=2, timeout_s=240)
    )
    assert analysis is not None, problem
    # The script's own gradients, as DDP bucketed them: 4,680 fp32 parameters.
    assert analysis.grad_bytes == 4680 * 4
    assert analysis.single["ddp"]["params"] == 4680
    assert analysis.single["user_comm_hook"].endswith("allreduce_hook")
    assert analysis.single["batch"] == 16 and analysis.single["steps"]["main"] == 4
    assert analysis.multi is not None and analysis.multi["backend"] == "gloo"
    assert analysis.multi["sweep"] and analysis.model is not None
    assert analysis.measured_speedup is not None and analysis.measured_speedup > 0
    assert analysis.predicted is not None and analysis.predicted.speedup > 0
    # The ranks left after the measured steps, stopped by the hook.
    assert analysis.multi["ended"] == "steps" and analysis.single["ended"] == "steps"
    assert "verdict:" in render(analysis)
    # Each run's measured phase on the host's monotonic clock, for the host-load samples.
    start, end = analysis.multi["mono"]["main"]
    assert start <= end
    assert all(v >= 0 for v in analysis.multi["other_load"].values())


def test_real_run_of_a_script_that_ends_early(one_thread: None) -> None:
    analysis, problem = run_feasibility(
        FeasibilityConfig((PY, TINY, "--steps", "3"), steps=5, warmup=2, nproc=2, timeout_s=240)
    )
    assert analysis is None
    assert "one-process run: the script ended after 3 optimizer steps" in problem


def test_real_run_of_a_script_without_ddp(one_thread: None) -> None:
    analysis, problem = run_feasibility(
        FeasibilityConfig((PY, TINY, "--no-ddp"), steps=2, warmup=1, nproc=2, timeout_s=240)
    )
    assert analysis is None
    assert "built no DistributedDataParallel" in problem


def test_gpu_run_of_the_mlp_example() -> None:
    torch = pytest.importorskip("torch")
    gpus = torch.cuda.device_count()
    if gpus < 1:
        pytest.skip("no GPU on this machine: the GPU paths (CUDA events, NVML, H2D) need one")
    analysis, problem = run_feasibility(
        FeasibilityConfig(
            (PY, str(REPO / "examples/feasibility/mlp.py"), "--batch", "512"),
            steps=20,
            warmup=5,
            timeout_s=300,
        )
    )
    assert analysis is not None, problem
    assert analysis.device == "GPU"
    assert analysis.single["cuda"] and analysis.single.get("h2d_gbps")
    assert any("backward_gpu" in r for r in analysis.single["records"]["main"])
    text = render(analysis)
    if gpus >= 2:
        assert analysis.multi is not None and analysis.multi["backend"] == "nccl"
        assert analysis.predicted is not None and analysis.measured_speedup is not None
        assert "GPU: utilisation" in text
    else:
        assert analysis.multi is None and "no DDP run over 2 GPUs" in text


def test_cpu_ranks_share_the_cores_with_each_other_and_the_neighbours() -> None:
    from ddp_lsp.runtime.feasibility import cpu_rank_step

    def single(own: float, total: float | None = None) -> dict[str, Any]:
        r = rank(world=1, step=0.1, backward=0.05)
        r.update(cpus=2, threads=1, own_cpu_s={"main": own}, cpu_s={"main": total or own})
        return r

    # Alone on 2 cores (got a whole core): 2 one-thread ranks fit, no slowdown.
    assert cpu_rank_step(single(1.0), 2, 0.1) == (0.1, "")
    # Got 0.8 of a core: other load L = 2*1/0.8 - 1 = 1.5; 2 ranks get 2/3.5 each.
    t, why = cpu_rank_step(single(0.8), 2, 0.1)
    assert t == pytest.approx(0.1 * 0.8 / (2 / 3.5))
    assert "other load ~1.5" in why
    # DataLoader workers: 2 ranks need 2 x 1.8 CPU-s per step... from 2 cores.
    t, why = cpu_rank_step(single(1.0, total=1.8), 2, 0.1)
    assert t == pytest.approx(2 * 0.18 / 2) and "DataLoader workers included" in why


def test_a_change_of_the_hosts_load_between_the_runs_is_said() -> None:
    from ddp_lsp.runtime.feasibility import cpu_rank_step

    def single(own: float, then: float | None) -> dict[str, Any]:
        r = rank(world=1, step=0.1, backward=0.05)
        r.update(cpus=2, threads=1, own_cpu_s={"main": own}, cpu_s={"main": own})
        r["other_load"] = {} if then is None else {"main": then}
        return r

    base_t, base_why = cpu_rank_step(single(0.8, None), 2, 0.1)
    # The neighbours' measured load fell from 2.0 to 0.5 runnable tasks: said, not modelled
    # (the prediction keeps the one-process run's load).
    t, why = cpu_rank_step(single(0.8, 2.0), 2, 0.1, other_now=0.5)
    assert t == base_t
    assert why.startswith(base_why) and "went from ~2.0 to ~0.5 runnable tasks" in why
    # Within half a task, or not measured in one of the runs: nothing to say.
    assert cpu_rank_step(single(0.8, 2.0), 2, 0.1, other_now=2.3) == (base_t, base_why)
    assert cpu_rank_step(single(0.8, None), 2, 0.1, other_now=0.5) == (base_t, base_why)
    assert cpu_rank_step(single(0.8, 2.0), 2, 0.1, other_now=None) == (base_t, base_why)
    # Alone on the cores (nothing else to say) the change is still reported.
    t, why = cpu_rank_step(single(1.0, 0.0), 2, 0.1, other_now=3.0)
    assert t == 0.1 and why.startswith("the host's other load went from ~0.0 to ~3.0")


def test_the_report_names_a_load_change_between_the_runs() -> None:
    """Injected timings: the same runs with the host's other load measured lower during the
    DDP run: the same prediction, and a note that says what moved."""

    def runs(then: float | None, now: float | None) -> Any:
        single = rank(world=1, step=0.4, backward=0.2)
        # 10 steps of 0.4 s on 0.25 s of CPU each: got 0.625 of a core (other load ~2.2).
        single.update(cpus=2, threads=1, own_cpu_s={"main": 2.5}, cpu_s={"main": 2.5})
        single["other_load"] = {"main": then} if then is not None else {}
        multi = {
            r: rank(world=2, step=0.45, backward=0.22, sweep=linear_sweep(50e-6, 1e9))
            for r in (0, 1)
        }
        multi[0]["other_load"] = {"main": now} if now is not None else {}
        return analyse(parse_command([PY, "t.py"]), single, multi, 2)

    steady, fell = runs(6.0, 6.0), runs(6.0, 2.0)
    assert fell.predicted == steady.predicted == runs(None, None).predicted
    assert any("went from ~6.0 to ~2.0 runnable tasks" in n for n in fell.notes)
    assert not any("runnable tasks between" in n for n in steady.notes)
    assert "went from ~6.0 to ~2.0" in render(fell)


def test_supervisor_and_shim_stay_cheap_and_chain(tmp_path: Path) -> None:
    import subprocess

    from ddp_lsp.runtime.feasibility import SHIM_DIR

    from .conftest import child_env

    probe = "import sys, ddp_lsp.runtime.feasibility; print('torch' in sys.modules)"
    out = subprocess.run(
        [PY, "-c", probe], cwd=REPO, env=child_env(), capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "False", out.stderr
    (tmp_path / "sitecustomize.py").write_text("import builtins; builtins.CHAINED = True\n")
    env = child_env()
    env["PYTHONPATH"] = f"{SHIM_DIR}:{tmp_path}:{REPO}"
    # The torchrun agent of a feasibility run: the directory is set, RANK is not.
    env["DDP_LSP_FEAS_DIR"] = str(tmp_path)
    env.pop("RANK", None)
    code = (
        "import builtins, sys; from ddp_lsp.runtime import feasibility_hook as h;"
        "print(getattr(builtins, 'CHAINED', False), 'torch' in sys.modules, h._session is None)"
    )
    out = subprocess.run([PY, "-c", code], cwd=REPO, env=env, capture_output=True, text=True)
    assert out.stdout.split() == ["True", "False", "True"], out.stderr


def test_the_wait_for_the_slowest_rank_comes_from_steps_at_a_ranks_thread_count() -> None:
    from ddp_lsp.runtime.feasibility import step_stdev

    single = rank(world=1, step=0.5, backward=0.2, shared_step=0.1)
    # Full threads on an oversubscribed host: steps of 0.1-0.9 s; one thread: steady 0.1 s.
    for i, r in enumerate(single["records"]["main"]):
        r["t_end"] = sum(0.1 if j % 2 else 0.9 for j in range(i + 1))
    single["records"]["shared"] = [
        dict(r, t_end=0.1 * i) for i, r in enumerate(single["records"]["main"])
    ]
    assert step_stdev(single, "main") > 0.3 and step_stdev(single, "shared") < 1e-9
    multi = {r: rank(world=2, step=0.12, backward=0.06, sweep=linear_sweep(0, 1e9)) for r in (0, 1)}
    a = analyse(parse_command([PY, "t.py"]), single, multi, 2)
    assert a.predicted is not None
    assert a.predicted.exposed_s == pytest.approx(a.predicted.comm_s)  # no wait added
