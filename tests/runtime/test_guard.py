"""The dead-rank guard on a real 2-rank gloo job (torch 2.13 CPU).

Rank 1 raises while rank 0 waits in ``barrier()``, and a non-daemon thread keeps rank 1's
process (so its sockets) alive for a few seconds: nothing tells rank 0 that rank 1 is gone.
"""

from __future__ import annotations

import pytest

from tests.runtime.conftest import WORKERS, run_ranks

pytestmark = pytest.mark.torch

WORKER = WORKERS / "guard_worker.py"
LINGER_S = 2.5  # how long rank 1's stray thread keeps its process alive (> the 2 s timeout)
#: The process-group timeout of the guarded runs: without the guard, the surviving rank would
#: sit this long in barrier(). The checks below compare with it, not with a time budget (a
#: loaded host stretches every step; the mechanism is what is tested).
PG_TIMEOUT_S = 60.0


def test_guard_ends_both_ranks_promptly_and_names_the_failed_rank(torch_mod: object) -> None:
    runs = run_ranks(WORKER, ["guard", "--timeout", f"{PG_TIMEOUT_S:g}", "--linger", str(LINGER_S)])
    r0, r1 = runs
    assert r1.result["exc_type"] == "ValueError"
    raised_at = float(r1.result["wall"])
    # Rank 0 left the barrier with an error naming rank 1, long before the 60 s timeout.
    assert r0.result["exc_type"] == "RankFailureError", r0.stderr[-2000:]
    assert r0.result["failed_rank"] == 1
    assert "rank 1" in str(r0.result["message"]) and "boom in rank 1" in str(r0.result["message"])
    assert "boom in rank 1" in r0.stderr  # the failed rank's traceback travels with the error
    assert float(r0.result["wall"]) - raised_at < PG_TIMEOUT_S
    # Both processes are gone long before the timeout (rank 1 waits for its own thread).
    for run in runs:
        assert run.returncode != 0
        assert run.ended_at - raised_at < PG_TIMEOUT_S, (run.rank, run.ended_at - raised_at)


def test_without_guard_rank0_waits_out_the_timeout_and_cannot_name_the_rank(
    torch_mod: object,
) -> None:
    timeout_s = 2.0  # stands in for the 30 min gloo default (10 min on NCCL)
    runs = run_ranks(WORKER, ["noguard", "--timeout", str(timeout_s), "--linger", str(LINGER_S)])
    r0, r1 = runs
    assert r1.result["exc_type"] == "ValueError"
    raised_at = float(r1.result["wall"])
    waited = float(r0.result["wall"]) - raised_at
    # Rank 0 sat in barrier() for the whole timeout: this is what the guard saves (timeout_s
    # here, the process-group timeout in a real job), and its error does not say who failed.
    assert r0.result["exc_type"] == "RuntimeError"
    assert waited >= timeout_s * 0.8, waited
    assert "Timed out" in str(r0.result["message"])
    assert "rank 1" not in str(r0.result["message"])
    assert r0.result["failed_rank"] is None


def test_rank0_failing_still_reaches_the_others_though_it_hosts_the_store(
    torch_mod: object,
) -> None:
    # Rank 0 hosts the TCPStore (env:// without torchrun). The guard decorates a function
    # that calls init_process_group itself, and whose finally block destroys the group
    # before the guard sees the exception: the guard still publishes the record through the
    # store it cached when the group came up, and stays until rank 1 has read it.
    runs = run_ranks(
        WORKER,
        [
            "guard",
            "--timeout",
            f"{PG_TIMEOUT_S:g}",
            "--linger",
            "0",
            "--fail-rank",
            "0",
            "--destroy-in-finally",
            "--guard-outside-init",
        ],
    )
    r0, r1 = runs
    assert r0.result["exc_type"] == "ValueError"
    raised_at = float(r0.result["wall"])
    assert r1.result["exc_type"] == "RankFailureError", r1.stderr[-2000:]
    assert r1.result["failed_rank"] == 0
    assert "boom in rank 0" in str(r1.result["message"])
    for run in runs:
        assert run.ended_at - raised_at < PG_TIMEOUT_S, (run.rank, run.ended_at - raised_at)
