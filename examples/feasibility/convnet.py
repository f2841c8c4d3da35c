"""A small conv net fed by a real DataLoader (DistributedSampler, worker processes) over a
synthetic image data set.

Shape: few parameters (~0.07 M), much compute per sample (convolutions over 32x32 images):
the all-reduce is small next to the step. Example for ``ddp-lsp feasibility``:

    ddp-lsp feasibility -- python examples/feasibility/convnet.py --workers 1
"""

from __future__ import annotations

import argparse
import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler


class SyntheticImages(Dataset[tuple[torch.Tensor, int]]):
    """Images made from the index (same on every rank and every epoch), like a decoded data set."""

    def __init__(self, size: int) -> None:
        self.size = size

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        gen = torch.Generator().manual_seed(index)
        return torch.randn(3, 32, 32, generator=gen), index % 10


def make_model() -> nn.Module:
    def block(i: int, o: int) -> nn.Sequential:
        return nn.Sequential(nn.Conv2d(i, o, 3, padding=1), nn.BatchNorm2d(o), nn.ReLU())

    return nn.Sequential(
        block(3, 32),
        block(32, 32),
        nn.MaxPool2d(2),
        block(32, 64),
        block(64, 64),
        nn.MaxPool2d(2),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(64, 10),
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=100)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--samples", type=int, default=4096)
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
    model = make_model().to(device)
    if distributed:
        model = DDP(model, device_ids=[local_rank] if cuda else None)
    data = SyntheticImages(args.samples)
    sampler = DistributedSampler(data) if distributed else None
    loader = DataLoader(
        data,
        batch_size=args.batch,
        sampler=sampler,
        shuffle=sampler is None,
        num_workers=args.workers,
        pin_memory=cuda,
        persistent_workers=args.workers > 0,
        drop_last=True,
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    for epoch in range(args.epochs):
        if sampler is not None:
            sampler.set_epoch(epoch)
        for x, y in loader:
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
    if distributed:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
