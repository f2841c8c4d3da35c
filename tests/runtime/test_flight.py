"""smallrun's readings from injected facts: flight-recorder dumps (NCCL-shaped; no GPU here),
the all-reduce share of a step, which processes are ranks.

The dump layout is the one ``_dump_fr_trace_json`` gives on torch 2.13 (seen on gloo in
tests/runtime/test_smallrun.py): ``pg_status`` per process group, and ``entries`` with the
collective's sequence number, op, sizes, dtypes, state and the issuing Python frames.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ddp_lsp.runtime.flight import summarize


def _entry(
    seq: int, op: str = "nccl:all_reduce", size: int = 1024, line: int = 40
) -> dict[str, Any]:
    return {
        "collective_seq_id": seq,
        "pg_id": 0,
        "profiling_name": op,
        "input_sizes": [[size]],
        "input_dtypes": ["BFloat16"],
        "state": "started",
        "is_p2p": False,
        "frames": [
            {
                "name": "all_reduce",
                "filename": "/v/site-packages/torch/distributed/c10d.py",
                "line": 1,
            },
            {"name": "train_step", "filename": "/job/train.py", "line": line},
        ],
    }


def _dump(enqueued: int, completed: int, entries: list[dict[str, Any]]) -> dict[str, Any]:
    status = {"last_enqueued_collective": enqueued, "last_completed_collective": completed}
    return {"version": "2.10", "pg_status": {"0": status}, "entries": entries}


def test_the_rank_that_never_called_the_collective_is_named() -> None:
    # A collective inside `if rank == 0:`: ranks 0 and 2 wait in #8, rank 1 is still at #7.
    ahead = _dump(8, 7, [_entry(7), _entry(8, "nccl:broadcast", 16, line=55)])
    behind = _dump(7, 7, [_entry(6), _entry(7)])
    report = summarize({0: ahead, 1: behind, 2: ahead})
    (finding,) = report.findings
    assert finding.startswith("flight recorder: rank 1 never entered collective #8")
    assert "nccl:broadcast [[16]] BFloat16 from train.py:55 in train_step" in finding
    assert "its last was #7 nccl:all_reduce" in finding
    assert report.to_dict()["ranks"]["1"]["last_enqueued"] == 7


def test_ranks_in_different_collectives_at_one_sequence_number_are_a_mismatch() -> None:
    a = _dump(5, 4, [_entry(5, "nccl:all_reduce", 1024)])
    b = _dump(5, 4, [_entry(5, "nccl:all_gather", 512, line=71)])
    (finding,) = summarize({0: a, 1: b}).findings
    assert "mismatched collective #5" in finding
    assert "rank 0 ran nccl:all_reduce [[1024]]" in finding
    assert "rank 1 ran nccl:all_gather [[512]] BFloat16 from train.py:71" in finding


def test_every_rank_in_the_same_collective_is_the_transport() -> None:
    same = _dump(12, 11, [_entry(12)])
    (finding,) = summarize({0: same, 1: same}).findings
    assert "every rank entered collective #12" in finding and "transport" in finding


def test_a_rank_that_could_not_dump_is_said_and_the_rest_still_read() -> None:
    ahead = _dump(3, 2, [_entry(3)])
    report = summarize({0: ahead}, errors={1: "RuntimeError: no flight recorder"})
    assert report.findings == (
        "flight recorder: rank 1 could not dump: RuntimeError: no flight recorder",
    )


def test_the_communication_share_uses_ddps_timers_and_leaves_out_the_monitors_time() -> None:
    from ddp_lsp.runtime.smallrun import communication_share

    steps = list(range(10))
    # 20 ms steps, plus a 300 ms census after each sample from step 2 on (the gate's own).
    times, overheads, t = [], [], 0.0
    for s in steps:
        times.append(t)
        o = 0.3 if s >= 2 else 0.0
        overheads.append(o)
        t += 0.020 + o
    ddp = {
        "avg_backward_comm_time": 8_000_000,  # 8 ms
        "avg_backward_compute_comm_overlap_time": 2_000_000,
        "avg_forward_compute_time": 5_000_000,
        "avg_backward_compute_time": 6_000_000,
        "iteration": 10,
        "num_buckets_reduced": 1,
    }
    c = communication_share(steps, times, ddp, warmup=2, overheads=overheads)
    assert c is not None
    assert abs(c["step_ms"] - 20.0) < 1e-6
    assert (c["allreduce_ms"], c["exposed_ms"]) == (8.0, 6.0)
    assert c["share"] == 0.4 and c["exposed_share"] == 0.3
    assert communication_share(steps, times, None) is None  # no DDP model: nothing said


def test_helpers_that_inherit_rank_are_not_ranks(tmp_path: Path) -> None:
    import json

    from ddp_lsp.runtime.smallrun import _records

    def proc(pid: int, ppid: int, rank: int | None, cmdline: list[str]) -> None:
        rec = {"pid": pid, "ppid": ppid, "rank": rank, "argv": [], "cmdline": cmdline}
        (tmp_path / f"proc-{pid}.json").write_text(json.dumps(rec))

    proc(10, 1, None, ["python", "launch.py"])
    proc(11, 10, 0, ["python", "-c", "from multiprocessing.spawn import spawn_main"])
    proc(12, 10, 0, ["python", "-c", "from multiprocessing.resource_tracker import main"])
    proc(13, 11, 0, ["python", "-c", "from multiprocessing.spawn import spawn_main"])  # worker
    procs = _records(tmp_path, "proc")
    assert procs[11]["rank"] == 0 and not procs[11].get("helper")
    assert procs[12]["rank"] is None and procs[12]["helper"]  # the resource tracker
    assert procs[13]["rank"] is None and procs[13]["helper"]  # rank 0's DataLoader worker
