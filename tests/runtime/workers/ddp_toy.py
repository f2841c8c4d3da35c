"""A 2-rank DDP toy for ``ddp-lsp smallrun`` tests, launched with torchrun (gloo, CPU).

modes: ok | leak (keeps each loss with its graph) | crash (rank 1 raises at step 5) |
hang (rank 1 stops at step 5; rank 0 blocks in the next all-reduce) | nostep (a manual SGD
loop without optimizer.step(), using the documented one-line monitor_steps hook).
"""

from __future__ import annotations

import datetime
import sys
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


def main() -> None:
    mode = sys.argv[1]
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 20
    torch.manual_seed(0)
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
    rank = dist.get_rank()
    model = DDP(nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    history = []
    batches = range(steps)
    if mode == "nostep":
        from ddp_lsp.runtime import monitor_steps

        batches = monitor_steps(batches)
    for step in batches:
        x, y = torch.randn(32, 64), torch.randn(32, 1)
        loss = nn.functional.mse_loss(model(x), y)
        if mode == "crash" and rank == 1 and step == 5:
            raise ValueError("bad batch on rank 1")
        if mode == "hang" and rank == 1 and step == 5:
            time.sleep(3600)
        if mode == "nostep":
            model.zero_grad()
            loss.backward()
            with torch.no_grad():
                for p in model.parameters():
                    p -= 0.01 * p.grad
        else:
            opt.zero_grad()
            loss.backward(retain_graph=(mode == "leak"))
            opt.step()
        if mode == "leak":
            history.append(loss)  # the loss *with its graph*, every step
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
