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


def test_the_communication_share_comes_from_steps_without_a_census() -> None:
    from ddp_lsp.runtime.smallrun_judge import communication_share

    # 20 steps of 20 ms; a 300 ms census after the samples of steps 2..13 (the gate's own);
    # DDP's reading after step n describes step n - 1.
    steps = list(range(20))
    times, overheads, ddp, t = [], [], [], 0.0
    for s in steps:
        times.append(t)
        o = 0.3 if 2 <= s <= 13 else 0.0
        overheads.append(o)
        # A censused neighbour inflates the comm (waiting for the peer's census): 250 ms.
        comm = 250_000_000 if 2 <= s - 1 <= 14 else 8_000_000
        ddp.append([s, comm, 2_000_000, 5_000_000, 6_000_000] if s >= 1 else None)
        t += 0.020 + o
    c = communication_share(steps, times, ddp, overheads)
    # Steps 1 and 15..18 (each described by the next reading) had no census around them.
    assert c is not None and c["steps"] == 5
    assert abs(c["step_ms"] - 20.0) < 1e-6
    assert (c["allreduce_ms"], c["exposed_ms"]) == (8.0, 6.0)
    assert c["share"] == 0.4 and c["exposed_share"] == 0.3
    # A 10-step run is censused at every step after warm-up: not measured, and said so.
    short = communication_share(steps[:10], times[:10], ddp[:10], overheads[:10])
    assert short is not None and short["share"] is None and "censused" in short["reason"]
    assert communication_share(steps, times, [None] * 20, overheads) is None  # no DDP model


def test_helpers_that_inherit_rank_are_not_ranks(tmp_path: Path) -> None:
    import json

    from ddp_lsp.runtime.smallrun_files import records

    def proc(pid: int, ppid: int, rank: int | None, cmdline: list[str]) -> None:
        rec = {"pid": pid, "ppid": ppid, "rank": rank, "argv": [], "cmdline": cmdline}
        (tmp_path / f"proc-{pid}.json").write_text(json.dumps(rec))

    proc(10, 1, None, ["python", "launch.py"])
    proc(11, 10, 0, ["python", "-c", "from multiprocessing.spawn import spawn_main"])
    proc(12, 10, 0, ["python", "-c", "from multiprocessing.resource_tracker import main"])
    proc(13, 11, 0, ["python", "-c", "from multiprocessing.spawn import spawn_main"])  # worker
    procs = records(tmp_path, "proc")
    assert procs[11]["rank"] == 0 and not procs[11].get("helper")
    assert procs[12]["rank"] is None and procs[12]["helper"]  # the resource tracker
    assert procs[13]["rank"] is None and procs[13]["helper"]  # rank 0's DataLoader worker
