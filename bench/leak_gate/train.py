"""Training scripts for the leak-gate acceptance run (bench/leak_gate_acceptance.py).

    torchrun --standalone --nproc-per-node 2 bench/leak_gate/train.py CASE {leak,clean}
        [--epochs 2] [--samples 10] [--batch-size 2]

2 gloo ranks on CPU, DDP, a DistributedSampler, AdamW: the small run of the method this gate
comes from (2 epochs, 10 samples per rank). Each CASE has a leaking variant and a clean
counterpart that does the same work without keeping anything across steps:

- ``graph``: the loss appended to a list with its autograd graph (``losses.append(loss)``)
  vs ``losses.append(loss.item())``;
- ``list``: a growing Python list of (detached) output tensors vs a bounded deque of them;
- ``cache``: a dict of tensors keyed by the step number vs keyed by the batch shape;
- ``chain``: ``running = running + loss`` (one tensor whose graph grows every step) vs
  ``running += loss.item()``.
"""

from __future__ import annotations

import argparse
import collections
import datetime
import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

CASES = ("graph", "list", "cache", "chain")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("case", choices=CASES)
    p.add_argument("variant", choices=("leak", "clean"))
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--samples", type=int, default=10, help="samples per rank per epoch")
    p.add_argument("--batch-size", type=int, default=2)
    args = p.parse_args()
    leak = args.variant == "leak"
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    world = dist.get_world_size()
    torch.manual_seed(0)
    n = args.samples * world
    data = TensorDataset(torch.randn(n, 32), torch.randn(n, 1))
    sampler = DistributedSampler(data, shuffle=True, seed=0)
    loader = DataLoader(data, batch_size=args.batch_size, sampler=sampler)
    model = DDP(nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1)))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    kept: list[object] = []
    recent: collections.deque[torch.Tensor] = collections.deque(maxlen=2)
    cache: dict[object, torch.Tensor] = {}
    running: torch.Tensor | float = 0.0
    step = 0
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        for x, y in loader:
            out = model(x)
            loss = nn.functional.mse_loss(out, y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            if args.case == "graph":
                kept.append(loss if leak else loss.item())
            elif args.case == "list":
                (kept if leak else recent).append(out.detach().clone())
            elif args.case == "cache":
                cache[step if leak else tuple(x.shape)] = out.detach().clone()
            elif args.case == "chain":
                running = running + loss if leak else running + loss.item()
            step += 1
    if dist.get_rank() == 0:
        print(f"{args.case}/{args.variant}: {step} steps per rank, kept {len(kept)}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
