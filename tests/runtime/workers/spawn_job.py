"""Jobs that start their own ranks (no torchrun), for ``ddp-lsp smallrun`` dead-rank tests.

modes:
- ``spawn-crash``: ``torch.multiprocessing.spawn`` 2 gloo ranks of DDP training; rank 1 raises
  at step 3 (the parent then raises ProcessRaisedException, which names no rank);
- ``early-crash``: a hand-written launcher (multiprocessing, ``RANK`` in each child's
  environment) whose rank 1 raises before ``init_process_group`` while rank 0 waits for it
  in the rendezvous, and the launcher joins rank 0 first: without the supervisor's dead-rank
  guard the job would wait for the rendezvous timeout (300 s).
"""

from __future__ import annotations

import datetime
import multiprocessing
import os
import socket
import sys


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def spawned(index: int, world: int) -> None:
    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    dist.init_process_group(
        "gloo", rank=index, world_size=world, timeout=datetime.timedelta(seconds=300)
    )
    model = DDP(nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(20):
        if index == 1 and step == 3:
            raise ValueError("bad batch on rank 1")
        loss = model(torch.randn(4, 8)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    dist.destroy_process_group()


def launched() -> None:
    import torch.distributed as dist

    if os.environ["RANK"] == "1":
        raise ValueError("no data shard for rank 1")
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=300))
    dist.barrier()


def main() -> None:
    mode = sys.argv[1]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()))
    if mode == "spawn-crash":
        import torch.multiprocessing as mp

        mp.spawn(spawned, args=(2,), nprocs=2)
    elif mode == "early-crash":
        ctx = multiprocessing.get_context("spawn")
        procs = []
        for rank in range(2):
            os.environ.update(RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK=str(rank))
            p = ctx.Process(target=launched)
            p.start()
            procs.append(p)
        for p in procs:  # rank 0 first: it waits in the rendezvous for rank 1
            p.join()


if __name__ == "__main__":
    main()
