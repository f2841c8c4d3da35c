"""A small MLP trained on synthetic batches made in the loop (no DataLoader).

Shape: few layers, wide enough that its gradients (~12 MiB fp32) cost as much to all-reduce
as the step costs to compute at a small batch. Runs as one process or under torchrun (DDP,
NCCL on GPUs, gloo on CPU). Example for ``ddp-lsp feasibility``:

    ddp-lsp feasibility -- python examples/feasibility/mlp.py
"""

from __future__ import annotations

import argparse
import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--width", type=int, default=1024)
    args = parser.parse_args()

    distributed = "RANK" in os.environ
    cuda = torch.cuda.is_available()
    if distributed:
        dist.init_process_group("nccl" if cuda else "gloo")
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device("cuda", local_rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    torch.manual_seed(0)
    w = args.width
    model: nn.Module = nn.Sequential(
        nn.Linear(256, w),
        nn.ReLU(),
        nn.Linear(w, w),
        nn.ReLU(),
        nn.Linear(w, w),
        nn.ReLU(),
        nn.Linear(w, 10),
    ).to(device)
    if distributed:
        model = DDP(model, device_ids=[local_rank] if cuda else None)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    gen = torch.Generator(device="cpu").manual_seed(int(os.environ.get("RANK", "0")))
    for _ in range(args.steps):
        x = torch.randn(args.batch, 256, generator=gen).to(device, non_blocking=True)
        y = torch.randint(0, 10, (args.batch,), generator=gen).to(device, non_blocking=True)
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    if distributed:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
