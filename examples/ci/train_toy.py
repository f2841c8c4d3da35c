"""A small DDP training script for the CI example: 2 CPU processes, gloo, synthetic data.

    torchrun --standalone --nproc-per-node 2 examples/ci/train_toy.py --epochs 2 --limit-batches 10

It is written the way a real script would be, with the two runtime guards in place:
``guard_distributed`` around the training body (one rank's exception ends the job at once and
names the rank), and nothing else: under ``ddp-lsp smallrun`` the memory monitor attaches
itself to ``optimizer.step()``. ``--leak`` keeps every loss with its graph, to see the gate fail.
"""

from __future__ import annotations

import argparse
import datetime
import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

from ddp_lsp.runtime import guard_distributed


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--limit-batches", type=int, default=10)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--leak", action="store_true", help="keep each loss with its graph (a bug)")
    return p.parse_args()


@guard_distributed
def train(args: argparse.Namespace) -> None:
    rank = dist.get_rank()
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(4096, 64), torch.randn(4096, 1))
    sampler = DistributedSampler(data, shuffle=True, seed=0)
    loader = DataLoader(data, batch_size=args.batch_size, sampler=sampler)
    model = DDP(nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 1)))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    history = []
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)  # a different shuffle each epoch, the same on every rank
        total = 0.0
        for i, (x, y) in enumerate(loader):
            if i == args.limit_batches:
                break
            loss = nn.functional.mse_loss(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward(retain_graph=args.leak)
            opt.step()
            total += loss.item()  # a float: keeps no graph
            if args.leak:
                history.append(loss)
        if rank == 0:
            print(f"epoch {epoch}: mean loss {total / args.limit_batches:.4f}", flush=True)


def main() -> None:
    args = parse_args()
    # timeout=: a rank that never arrives fails the job in 2 minutes, not the 30-minute default.
    dist.init_process_group("gloo", timeout=datetime.timedelta(minutes=2))
    try:
        train(args)
    finally:
        if dist.is_initialized():  # the guard destroys the group when a rank fails
            dist.destroy_process_group()


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
