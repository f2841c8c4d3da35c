"""Fine-tune a classifier with DDP under torchrun (one process per GPU, several nodes).

A fixture for the rank/device rules (DDP302-DDP304, DDP503-DDP506): the bugs they exist for
next to the idioms they must leave alone. Its exact findings are in
rank_device_train.expected.json (regenerate with `pytest --update-goldens`, never by hand).
"""

from __future__ import annotations

import argparse
import math
import os
import random

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--resume", default="")
    parser.add_argument("--pretrained", default="")
    parser.add_argument("--log-every", type=int, default=50)
    parser.add_argument("--out", default="out")
    return parser.parse_args()


def setup_distributed() -> tuple[int, int, int]:
    """torchrun sets RANK, LOCAL_RANK and WORLD_SIZE."""
    rank = int(os.environ["RANK"])
    local_rank = int(os.environ["LOCAL_RANK"])
    world_size = int(os.environ["WORLD_SIZE"])
    # DDP505: every rank opens its first CUDA context on GPU 0 (the barrier runs there).
    dist.init_process_group(backend="nccl")
    dist.barrier()
    return rank, local_rank, world_size


def set_seed(seed: int) -> None:
    # The caller decides the value: not reported here.
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def seed_worker(worker_id: int) -> None:
    # DataLoader workers: derived from the (already rank-offset) torch seed.
    worker_seed = torch.initial_seed() % 2**32
    np.random.seed(worker_seed)
    random.seed(worker_seed)


class Net(nn.Module):
    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Dropout(0.1))
        self.head = nn.Linear(64, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x))


def build_model(args: argparse.Namespace, local_rank: int) -> DDP:
    model = Net()
    if args.pretrained:
        # Fine: map_location given.
        model.load_state_dict(torch.load(args.pretrained, map_location="cpu"))
    # DDP504: every rank on GPU 0.
    model = model.cuda(0)
    # Fine: the local rank.
    return DDP(model, device_ids=[local_rank], output_device=local_rank)


def build_loader(dataset: TensorDataset, args: argparse.Namespace) -> DataLoader:
    # The sampler's seed and the shuffling generator must be the same on every rank.
    sampler = DistributedSampler(dataset, shuffle=True, seed=args.seed)
    g = torch.Generator()
    g.manual_seed(args.seed)
    return DataLoader(
        dataset,
        batch_size=32,
        sampler=sampler,
        num_workers=2,
        pin_memory=True,
        worker_init_fn=seed_worker,
        generator=g,
    )


def resume(model: DDP, optimizer: torch.optim.Optimizer, path: str, rank: int) -> int:
    # DDP303: loads onto the GPU the checkpoint was saved from, on every rank.
    checkpoint = torch.load(path)
    model.module.load_state_dict(checkpoint["model"])
    optimizer.load_state_dict(checkpoint["optimizer"])
    if rank == 0:
        # Fine: rank 0 alone reads the run's metadata.
        meta = torch.load(os.path.join(os.path.dirname(path), "meta.pt"))
        print(f"resuming run {meta['run_id']}")
    return int(checkpoint["epoch"]) + 1


def train_one_epoch(
    model: DDP,
    loader: DataLoader,
    optimizer: torch.optim.Optimizer,
    epoch: int,
    args: argparse.Namespace,
) -> float:
    model.train()
    running = torch.zeros((), device="cuda")
    for step, (x, y) in enumerate(loader):
        x, y = x.cuda(non_blocking=True), y.cuda(non_blocking=True)
        logits = model(x)
        loss = F.cross_entropy(logits, y)
        if not math.isfinite(loss.item()):
            # Fine: the NaN check needs the value on the host.
            raise RuntimeError(f"loss is {loss.item()} at step {step}")
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        running += loss.detach()
        # DDP302: a host synchronisation on every step.
        acc = (logits.argmax(1) == y).float().mean().item()
        if step % args.log_every == 0 and dist.get_rank() == 0:
            # Fine: occasional.
            print(f"epoch {epoch} step {step} loss {loss.item():.4f} acc {acc:.3f}")
    return running.item() / max(1, len(loader))


@torch.no_grad()
def evaluate(model: DDP, loader: DataLoader) -> float:
    model.eval()
    correct = torch.zeros((), device="cuda")
    total = 0
    for x, y in loader:
        x, y = x.cuda(non_blocking=True), y.cuda(non_blocking=True)
        correct += (model(x).argmax(1) == y).sum()
        total += y.numel()
    dist.all_reduce(correct)
    return correct.item() / (total * dist.get_world_size())


def save(model: DDP, optimizer: torch.optim.Optimizer, epoch: int, args: argparse.Namespace) -> None:
    if dist.get_rank() != 0:
        return
    # DDP304: "module." in every key.
    torch.save(model.state_dict(), os.path.join(args.out, "last_weights.pt"))
    # Fine: the inner module.
    state = {
        "model": model.module.state_dict(),
        "optimizer": optimizer.state_dict(),
        "epoch": epoch,
    }
    torch.save(state, os.path.join(args.out, "checkpoint.pt"))


def main() -> None:
    args = parse_args()
    # DDP506: the group started by setup_distributed() is never destroyed.
    rank, local_rank, world_size = setup_distributed()
    # DDP503: the same seed on every rank.
    set_seed(args.seed)
    if world_size == 1:
        # Fine: the single-process branch.
        device = torch.device("cuda:0")
    else:
        device = torch.device("cuda", local_rank)
    model = build_model(args, local_rank)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
    start = resume(model, optimizer, args.resume, rank) if args.resume else 0
    data = TensorDataset(torch.randn(4096, 32), torch.randint(0, 10, (4096,)))
    train_loader = build_loader(data, args)
    val_loader = DataLoader(data, batch_size=64, sampler=DistributedSampler(data, shuffle=False))
    for epoch in range(start, args.epochs):
        train_loader.sampler.set_epoch(epoch)
        train_one_epoch(model, train_loader, optimizer, epoch, args)
        acc = evaluate(model, val_loader)
        if rank == 0:
            print(f"epoch {epoch}: val acc {acc:.3f} on {device}")
        save(model, optimizer, epoch, args)


if __name__ == "__main__":
    main()
