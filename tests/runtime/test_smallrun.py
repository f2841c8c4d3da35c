"""``ddp-lsp smallrun`` end to end: torchrun, 2 gloo ranks, the monitor attached by the shim.

Each run is checked for the verdict, the reason, and that no process of the run survives: every
process started under the supervisor inherits a unique environment token, and after the
supervisor returns no process on the machine may carry it.
"""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.runtime.conftest import PYTHON, REPO, WORKERS, child_env

pytestmark = pytest.mark.torch

TOY = WORKERS / "ddp_toy.py"
TORCHRUN = [PYTHON, "-m", "torch.distributed.run", "--standalone", "--monitor-interval", "0.2"]


def _survivors(token: str) -> list[Any]:
    psutil = pytest.importorskip("psutil")
    found = []
    for p in psutil.process_iter(["pid", "cmdline"]):
        try:
            if p.environ().get("DDP_LSP_TEST_TOKEN") == token:
                found.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def smallrun(
    tmp_path: Path, mode: str, *options: str, timeout: float = 120, nproc: int = 2
) -> dict[str, Any]:
    token = uuid.uuid4().hex
    out = tmp_path / "result.json"
    cmd = [PYTHON, "-m", "ddp_lsp.cli", "smallrun", "--timeout", str(timeout), "--json", str(out)]
    cmd += list(options)
    cmd += ["--", *TORCHRUN, "--nproc-per-node", str(nproc), str(TOY), mode, "20"]
    proc = subprocess.run(
        cmd,
        cwd=REPO,
        env=child_env(DDP_LSP_TEST_TOKEN=token),
        capture_output=True,
        text=True,
        timeout=timeout + 60,
    )
    result: dict[str, Any] = json.loads(out.read_text())
    result["_exit"] = proc.returncode
    result["_stdout"] = proc.stdout
    result["_survivors"] = _survivors(token)
    return result


def _kinds(result: dict[str, Any]) -> set[str]:
    return {f["kind"] for f in result["findings"]}


def test_a_correct_ddp_script_passes(tmp_path: Path) -> None:
    r = smallrun(tmp_path, "ok")
    assert r["_exit"] == 0 and r["status"] == "pass", r["findings"]
    ranks = {x["rank"]: x for x in r["ranks"] if x["rank"] is not None}
    assert set(ranks) == {0, 1}
    for x in ranks.values():  # attached without editing the script: 20 samples per rank
        assert x["steps"] == 20 and x["memory"]["grows"] is False
    assert "PASS" in r["_stdout"]
    assert r["_survivors"] == []


def test_a_leaking_script_fails_with_bytes_per_step_and_cause(tmp_path: Path) -> None:
    r = smallrun(tmp_path, "leak")
    assert r["_exit"] == 1 and r["status"] == "leak", r["findings"]
    leaks = [f for f in r["findings"] if f["kind"] == "leak"]
    assert {f["rank"] for f in leaks} == {0, 1}
    mem = next(x["memory"] for x in r["ranks"] if x["rank"] == 0)
    # Saved by each kept graph (retain_graph=True): input 32x64, ReLU output 32x64, output
    # and target 32x1, float32 = 16.6 KiB, plus nodes and headers.
    saved = (32 * 64 * 2 + 32 * 2) * 4
    assert saved <= mem["bytes_per_step"] <= saved * 2
    assert mem["cause"]["grad_fn"] == "MseLossBackward0"
    assert "loss.item()" in leaks[0]["message"]
    assert r["_survivors"] == []


def test_a_crashing_rank_is_named(tmp_path: Path) -> None:
    r = smallrun(tmp_path, "crash")
    assert r["_exit"] == 1 and r["status"] == "crash", r["findings"]
    first = r["findings"][0]
    assert first["kind"] == "crash" and first["rank"] == 1
    assert "ValueError: bad batch on rank 1" in first["message"]
    assert "ddp_toy.py" in first["message"]
    assert r["_survivors"] == []


def test_a_hanging_run_is_killed_whole_and_each_rank_says_where(tmp_path: Path) -> None:
    # A hang counted as 4 s without a step from any rank (start-up on a busy 2-core CI box
    # can take longer than any fixed whole-run timeout short enough for a test).
    # --flight-recorder on: the c10d flight recorder also works on gloo (torch 2.13), so the
    # dump-on-hang path that matters on NCCL runs here for real.
    r = smallrun(tmp_path, "hang", "--stall-timeout", "4", "--flight-recorder", "on")
    assert r["_exit"] == 1 and r["status"] == "hang", r["findings"]
    fr = r["flight_recorder"]
    assert set(fr["ranks"]) == {"0", "1"}, fr
    behind, ahead = fr["ranks"]["1"], fr["ranks"]["0"]
    assert behind["last_enqueued"] == ahead["last_enqueued"] - 1  # rank 1 never called it
    assert ahead["recent"][-1]["op"] == "gloo:all_reduce"
    assert any(
        f"rank 1 never entered collective #{ahead['last_enqueued']}" in f["message"]
        for f in r["findings"]
    ), r["findings"]
    assert "crash" not in _kinds(r)  # torchrun's reaction to our SIGTERM is not a crash
    stuck = {
        f["rank"]: f["message"]
        for f in r["findings"]
        if f["kind"] == "hang" and f["rank"] is not None
    }
    assert set(stuck) == {0, 1}
    assert any("no rank finished a step for 4 s" in f["message"] for f in r["findings"])
    # Rank 1 sleeps in its loop; rank 0 waits in DDP's gradient all-reduce inside backward().
    assert "ddp_toy.py" in stuck[1] and "backward" in stuck[0]
    # The agent and both ranks (in sessions of their own, under torchrun) were killed.
    assert len(r["killed"]) >= 3
    assert r["_survivors"] == []


def _plain(tmp_path: Path, mode: str) -> dict[str, Any]:
    token = uuid.uuid4().hex
    out = tmp_path / f"{mode}.json"
    cmd = [PYTHON, "-m", "ddp_lsp.cli", "smallrun", "--timeout", "120", "--json", str(out)]
    cmd += ["--", PYTHON, str(WORKERS / "plain_loop.py"), mode]
    proc = subprocess.run(
        cmd,
        cwd=REPO,
        env=child_env(DDP_LSP_TEST_TOKEN=token),
        capture_output=True,
        text=True,
        timeout=180,  # a process left holding our pipes would otherwise hang the test
    )
    result: dict[str, Any] = json.loads(out.read_text())
    result["_exit"] = proc.returncode
    result["_survivors"] = _survivors(token)
    return result


def test_the_one_line_hook_samples_a_loop_without_optimizer_step(tmp_path: Path) -> None:
    leak = _plain(tmp_path, "leak")
    assert leak["_exit"] == 1 and leak["status"] == "leak", leak["findings"]
    (rank,) = [r for r in leak["ranks"] if r["steps"]]
    assert rank["steps"] == 30
    ok = _plain(tmp_path, "ok")
    assert ok["_exit"] == 0 and ok["status"] == "pass", ok["findings"]
    assert leak["_survivors"] == [] and ok["_survivors"] == []


def test_a_loop_the_monitor_cannot_see_is_inconclusive_and_says_the_one_line(
    tmp_path: Path,
) -> None:
    r = _plain(tmp_path, "nohook")
    assert r["_exit"] == 2 and r["status"] == "inconclusive", r["findings"]
    (finding,) = r["findings"]
    assert finding["kind"] == "no-data" and "monitor_steps" in finding["message"]


def _native(tmp_path: Path, mode: str) -> dict[str, Any]:
    token = uuid.uuid4().hex
    out = tmp_path / f"{mode}.json"
    cmd = [PYTHON, "-m", "ddp_lsp.cli", "smallrun", "--timeout", "60", "--json", str(out)]
    cmd += ["--", PYTHON, str(WORKERS / "native.py"), mode]
    proc = subprocess.run(
        cmd,
        cwd=REPO,
        env=child_env(DDP_LSP_TEST_TOKEN=token),
        capture_output=True,
        text=True,
        timeout=180,  # a process left holding our pipes would otherwise hang the test
    )
    result: dict[str, Any] = json.loads(out.read_text())
    result["_exit"] = proc.returncode
    result["_survivors"] = _survivors(token)
    return result


def test_a_crash_in_native_code_is_reported_with_its_python_stack(tmp_path: Path) -> None:
    r = _native(tmp_path, "segv")
    assert r["_exit"] == 1 and r["status"] == "crash", r["findings"]
    message = r["findings"][0]["message"]
    assert "Fatal Python error: Segmentation fault" in message
    assert "native.py" in message and "crash_in_native_code" in message


def test_processes_left_behind_after_a_normal_exit_are_killed_and_reported(
    tmp_path: Path,
) -> None:
    r = _native(tmp_path, "orphan")
    leftovers = [f for f in r["findings"] if f["kind"] == "leftover"]
    assert len(leftovers) == 1 and "sleep 300" in leftovers[0]["message"]
    assert r["_survivors"] == []


def _job(tmp_path: Path, mode: str, timeout: float = 200) -> dict[str, Any]:
    token = uuid.uuid4().hex
    out = tmp_path / f"{mode}.json"
    cmd = [PYTHON, "-m", "ddp_lsp.cli", "smallrun", "--timeout", str(timeout), "--json", str(out)]
    cmd += ["--", PYTHON, str(WORKERS / "spawn_job.py"), mode]
    proc = subprocess.run(
        cmd,
        cwd=REPO,
        env=child_env(DDP_LSP_TEST_TOKEN=token),
        capture_output=True,
        text=True,
        timeout=timeout + 60,
    )
    result: dict[str, Any] = json.loads(out.read_text())
    result["_exit"] = proc.returncode
    result["_survivors"] = _survivors(token)
    return result


def test_a_dead_rank_ends_the_run_instead_of_its_peers_timeout(tmp_path: Path) -> None:
    # Rank 1 raises before the rendezvous; rank 0 waits in it (300 s timeout) and the
    # launcher joins rank 0 first. Without the dead-rank guard this is a hang at --timeout.
    r = _job(tmp_path, "early-crash")
    assert r["_exit"] == 1 and r["status"] == "crash", r["findings"]
    first = r["findings"][0]
    assert first["rank"] == 1 and "ValueError: no data shard for rank 1" in first["message"]
    assert "spawn_job.py" in first["message"]
    stuck = [f for f in r["findings"] if f["kind"] == "hang" and f["rank"] == 0]
    assert len(stuck) == 1, r["findings"]  # multiprocessing's resource tracker is no rank
    assert "after rank 1 died" in stuck[0]["message"]
    assert "_create_c10d_store" in stuck[0]["message"]  # where rank 0 waited
    assert not any("still running after" in f["message"] for f in r["findings"])
    assert r["_survivors"] == []


def test_an_mp_spawn_crash_names_the_rank_and_its_line(tmp_path: Path) -> None:
    r = _job(tmp_path, "spawn-crash")
    assert r["_exit"] == 1 and r["status"] == "crash", r["findings"]
    first = r["findings"][0]
    assert first["rank"] == 1, r["findings"]
    assert "ValueError: bad batch on rank 1" in first["message"]
    assert "spawn_job.py" in first["message"] and "in spawned" in first["message"]
    assert "mp.spawn process 1" in first["message"]
    assert "ProcessRaisedException" not in first["message"]
    assert r["_survivors"] == []


def test_a_spawn_parents_report_of_a_killed_child_names_the_child() -> None:
    from ddp_lsp.runtime.smallrun_judge import spawn_child_crash

    # ProcessExitedException: the child died from a signal, no traceback of its own.
    rec = {
        "pid": 10,
        "rank": None,
        "exc_type": "ProcessExitedException",
        "message": "process 1 terminated with signal SIGKILL",
        "child_error": "process 1 terminated with signal SIGKILL",
        "error_index": 1,
        "error_pid": 12,
        "time": 100.0,
    }
    child = spawn_child_crash(rec, 12, rank=None)
    assert child["pid"] == 12 and child["rank"] == 1 and child["spawned"]
    assert child["message"] == "process 1 terminated with signal SIGKILL"
    assert child["time"] < rec["time"]
    # ProcessRaisedException: the child's traceback; the rank its process group gave it.
    trace = (
        "\n\n-- Process 0 terminated with the following error:\nTraceback (most recent call "
        'last):\n  File "/x/site-packages/torch/multiprocessing/spawn.py", line 90, in _wrap\n'
        '    fn(i, *args)\n  File "/job/train.py", line 31, in worker\n    step(batch)\n'
        "RuntimeError: CUDA error: out of memory\n"
    )
    rec = {**rec, "exc_type": "ProcessRaisedException", "child_error": trace, "error_index": 0}
    child = spawn_child_crash(rec, 12, rank=3)
    assert (child["rank"], child["exc_type"]) == (3, "RuntimeError")
    assert child["message"] == "CUDA error: out of memory"
    assert child["where"] == "train.py:31 in worker"


def test_debug_collectives_names_both_sides_of_a_mismatch(tmp_path: Path) -> None:
    token = uuid.uuid4().hex
    out = tmp_path / "mismatch.json"
    cmd = [PYTHON, "-m", "ddp_lsp.cli", "smallrun", "--timeout", "120", "--json", str(out)]
    cmd += ["--debug-collectives", "--", *TORCHRUN, "--nproc-per-node", "2"]
    cmd += [str(WORKERS / "mismatch.py")]
    proc = subprocess.run(
        cmd,
        cwd=REPO,
        env=child_env(DDP_LSP_TEST_TOKEN=token),
        capture_output=True,
        text=True,
        timeout=180,
    )
    r = json.loads(out.read_text())
    assert proc.returncode == 1 and r["status"] == "mismatch", r["findings"]
    first = r["findings"][0]
    assert first["kind"] == "mismatch"
    assert "rank 0 ran ALLREDUCE of [4] Float at mismatch.py:21" in first["message"]
    assert "rank 1 ran BROADCAST of [3] Float at mismatch.py:23" in first["message"]
    assert _survivors(token) == []


def test_a_mismatch_is_read_from_the_process_group_wrappers_error() -> None:
    from ddp_lsp.runtime.smallrun_judge import collective_mismatch

    text = (
        "RuntimeError: Detected mismatch between collectives on ranks. Rank 3 is running "
        "collective: CollectiveFingerPrint(SequenceNumber=42, OpType=ALLGATHER, "
        "TensorShape=[8, 2], TensorDtypes=BFloat16, TensorDeviceTypes=TensorOptions(dtype="
        "c10::BFloat16, device=cuda:3)), but Rank 0 is running collective: "
        "CollectiveFingerPrint(SequenceNumber=42, OpType=REDUCE_SCATTER, TensorShape=[16], "
        "TensorDtypes=BFloat16, TensorDeviceTypes=TensorOptions(dtype=c10::BFloat16))."
    )
    found = collective_mismatch(text)
    assert found is not None
    a, b = found["sides"]
    assert (a["rank"], a["sequence"], a["op"], a["shape"], a["dtype"]) == (
        3,
        42,
        "ALLGATHER",
        "[8, 2]",
        "BFloat16",
    )
    assert (b["rank"], b["op"], b["shape"]) == (0, "REDUCE_SCATTER", "[16]")
    assert collective_mismatch("RuntimeError: Connection closed by peer") is None
