"""A 2-rank gloo worker for the dead-rank guard tests (run as a plain process, one per rank).

Rank 1 (``--fail-rank``) raises while the other waits in ``barrier()``. Before raising, it starts a
non-daemon thread (standing in for an async checkpoint upload or a metrics flusher) that keeps
its process -- and so its gloo sockets -- alive for ``--linger`` seconds: the case where
nothing tells rank 0 that rank 1 is gone. Each rank prints one JSON line with what it saw.

usage: guard_worker.py {guard,noguard} --timeout S --linger S [--fail-rank R]
       [--destroy-in-finally] [--guard-outside-init]   (RANK/WORLD_SIZE/MASTER_* in the env)
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import threading
import time

import torch.distributed as dist

from ddp_lsp.runtime import guard_distributed


def body(linger: float, fail_rank: int, destroy_in_finally: bool) -> None:
    rank = dist.get_rank()
    try:
        if rank == fail_rank:
            threading.Thread(target=time.sleep, args=(linger,), daemon=False).start()
            time.sleep(0.3)  # let the other rank enter the barrier first
            raise ValueError(f"boom in rank {rank}")
        dist.barrier()
    finally:
        if destroy_in_finally and dist.is_initialized():
            # The common cleanup pattern, running before the guard sees the exception.
            dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["guard", "noguard"])
    parser.add_argument("--timeout", type=float, default=60.0)
    parser.add_argument("--linger", type=float, default=4.0)
    parser.add_argument("--fail-rank", type=int, default=1)
    parser.add_argument("--destroy-in-finally", action="store_true")
    parser.add_argument(
        "--guard-outside-init",
        action="store_true",
        help="the guard wraps a function that itself calls init_process_group",
    )
    args = parser.parse_args()
    call = (args.linger, args.fail_rank, args.destroy_in_finally)

    def init_then_body() -> None:
        dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=args.timeout))
        body(*call)

    rank = int(os.environ["RANK"])
    started = time.monotonic()
    outcome: dict[str, object] = {"rank": rank, "pid": os.getpid()}
    try:
        if args.guard_outside_init:
            guard_distributed(init_then_body)()
        else:
            dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=args.timeout))
            if args.mode == "guard":
                guard_distributed(body)(*call)
            else:
                body(*call)
        outcome["result"] = "ok"
    except Exception as exc:
        outcome.update(
            result="error",
            exc_type=type(exc).__name__,
            message=str(exc).splitlines()[0],
            failed_rank=getattr(exc, "failed_rank", None),
        )
        # Re-raise: the process then ends the way a real worker's would (traceback, then
        # the interpreter waits for non-daemon threads), which is what the test measures.
        raise
    finally:
        outcome["elapsed_s"] = round(time.monotonic() - started, 3)
        outcome["wall"] = time.time()
        print("RESULT " + json.dumps(outcome), flush=True)


if __name__ == "__main__":
    main()
