"""Train a small image classifier with DDP and mixed precision: the buggy version.

    torchrun --nproc_per_node=4 examples/train_buggy.py --epochs 3

This is what a DDP + AMP script often looks like after a port from single-GPU code. It runs
on one GPU, and on eight it hangs, wastes communication, leaks memory, writes corrupt
checkpoints or silently trains badly. Every bug is marked ``BUG(DDPxxx)`` with the ddp-lsp
rule that finds it; ``train_fixed.py`` is the corrected twin.

    ddp-lsp check examples/train_buggy.py
"""

import argparse
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset, DistributedSampler


class SyntheticImages(Dataset):
    """CIFAR-sized random images, so the example needs no download."""

    def __init__(self, n: int, num_classes: int = 10) -> None:
        # BUG(DDP406): a list of Python dicts; every forked DataLoader worker touches their
        # reference counts and slowly copies all of it (memory that looks like a leak).
        self.samples = [
            {"pixels": [float(i % 251) / 251.0] * (3 * 32 * 32), "label": i % num_classes}
            for i in range(n)
        ]

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int):
        sample = self.samples[index]
        x = torch.tensor(sample["pixels"]).view(3, 32, 32)
        return x, sample["label"]


class SmallNet(nn.Module):
    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 32, 3, padding=1),
            nn.BatchNorm2d(32),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1),
            nn.BatchNorm2d(64),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
        )
        self.head = nn.Linear(64, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x).flatten(1))


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--lr", type=float, default=3e-4)
    parser.add_argument("--accum-steps", type=int, default=4)
    parser.add_argument("--clip", type=float, default=1.0)
    parser.add_argument("--warmup-steps", type=int, default=50)
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--ckpt-dir", default="checkpoints")
    parser.add_argument("--resume", default="")
    return parser.parse_args()


def setup() -> tuple[int, int, int]:
    local_rank = int(os.environ["LOCAL_RANK"])
    rank = int(os.environ["RANK"])
    world_size = int(os.environ["WORLD_SIZE"])
    # BUG(DDP505): no torch.cuda.set_device(local_rank) first: every rank opens a CUDA
    # context on GPU 0 when NCCL starts (the barrier runs on the current device).
    dist.init_process_group(backend="nccl")
    dist.barrier()
    return local_rank, rank, world_size


def warmup(model, loader, optimizer, scaler, device, steps: int) -> None:
    """A few steps at a low learning rate before the real schedule."""
    for i, (x, y) in enumerate(loader):
        x, y = x.to(device), y.to(device)
        # BUG(DDP205): torch.cuda.amp.autocast is deprecated since PyTorch 2.4.
        with torch.cuda.amp.autocast():
            loss = F.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        # BUG(DDP204): update() before step(): the scale changes before the inf check.
        scaler.update()
        scaler.step(optimizer)
        optimizer.zero_grad(set_to_none=True)
        if i + 1 == steps:
            break


def probe_head(model, loader, optimizer, scaler, device) -> None:
    """One pass training only the head (a quick linear probe before fine-tuning)."""
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        with torch.autocast("cuda", dtype=torch.float16):
            loss = F.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        # BUG(DDP203): the optimizer applies scaled gradients and never skips inf/NaN steps.
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)


def evaluate(model: DDP, loader: DataLoader, device: torch.device) -> float:
    model.eval()
    correct = total = 0
    with torch.no_grad():
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            pred = model(x).argmax(dim=1)
            correct += (pred == y).sum().item()
            total += y.numel()
    model.train()
    return correct / max(total, 1)


def main() -> None:
    args = parse_args()
    local_rank, rank, world_size = setup()
    # BUG(DDP503): the same seed on every rank: identical augmentation and dropout masks.
    torch.manual_seed(args.seed)
    # BUG(DDP504): every rank on GPU 0.
    device = torch.device("cuda:0")

    model = SmallNet().to(device)
    # BUG(DDP102): no parameter goes unused here; the graph walk after every forward is waste.
    model = DDP(model, device_ids=[local_rank], find_unused_parameters=True)
    # BUG(DDP105): converting after the DDP wrap: DDP keeps the old BatchNorm modules.
    model = nn.SyncBatchNorm.convert_sync_batchnorm(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    # BUG(DDP205): torch.cuda.amp.GradScaler is deprecated since PyTorch 2.4.
    scaler = torch.cuda.amp.GradScaler()

    if args.resume:
        # BUG(DDP303): no map_location: every rank loads onto the GPU the tensors were saved
        # from, usually cuda:0, which then runs out of memory.
        state = torch.load(args.resume)
        model.module.load_state_dict(state)

    train_set = SyntheticImages(20_000)
    val_set = SyntheticImages(2_000)
    # BUG(DDP401): no DistributedSampler: every rank warms up on the whole dataset.
    # BUG(DDP404): workers feed a GPU without pin_memory=True.
    # BUG(DDP405): 32 workers per process, times the processes per node (`--preflight` of a node).
    warmup_loader = DataLoader(
        train_set, batch_size=args.batch_size, shuffle=True, num_workers=32
    )
    # BUG(DDP402): train_sampler.set_epoch(epoch) is never called: the same order every epoch.
    train_sampler = DistributedSampler(train_set)
    train_loader = DataLoader(
        train_set, batch_size=args.batch_size, sampler=train_sampler, num_workers=4, pin_memory=True
    )
    val_sampler = DistributedSampler(val_set, shuffle=False)
    # BUG(DDP403): shuffle=True together with a sampler raises ValueError.
    val_loader = DataLoader(
        val_set, batch_size=args.batch_size, sampler=val_sampler, shuffle=True, num_workers=2
    )

    warmup(model, warmup_loader, optimizer, scaler, device, args.warmup_steps)
    probe_head(model, val_loader, optimizer, scaler, device)

    losses = []
    running_loss = 0.0
    start = time.time()
    for epoch in range(args.epochs):
        for step, (x, y) in enumerate(train_loader):
            x, y = x.to(device), y.to(device)
            # BUG(DDP205): deprecated autocast again.
            with torch.cuda.amp.autocast():
                logits = model(x)
                loss = F.cross_entropy(logits, y) / args.accum_steps
            # BUG(DDP101): gradient accumulation without model.no_sync(): DDP all-reduces the
            # gradients on every micro-step, though the optimizer steps every accum_steps.
            scaler.scale(loss).backward()
            # BUG(DDP301): keeps every step's autograd graph alive; memory grows each step.
            losses.append(loss)
            # BUG(DDP301): the same, through an accumulator.
            running_loss += loss
            # BUG(DDP502): every rank prints. BUG(DDP302): .item() syncs the host each step.
            print(f"epoch {epoch} step {step} loss {loss.item():.4f}")
            if (step + 1) % args.accum_steps == 0:
                # BUG(DDP201): clipping gradients that are still multiplied by the loss scale.
                torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
                scaler.step(optimizer)
                # BUG(DDP202): no scaler.update(): the scale never adapts to overflows.
                optimizer.zero_grad(set_to_none=True)

        if rank == 0:
            # BUG(DDP103): only rank 0 reaches the barrier; the others never do: a hang.
            dist.barrier()
            # BUG(DDP104): the DDP forward on rank 0 alone deadlocks (buffer broadcast).
            accuracy = evaluate(model, val_loader, device)
            print(f"epoch {epoch}: val accuracy {accuracy:.3f}")

        os.makedirs(args.ckpt_dir, exist_ok=True)
        # BUG(DDP501): every rank writes the same file at once.
        # BUG(DDP304): the DDP wrapper's state_dict has "module." in every key.
        torch.save(model.state_dict(), os.path.join(args.ckpt_dir, f"epoch{epoch}.pt"))

    # BUG(DDP502): printed once per rank.
    print(f"done in {time.time() - start:.0f}s, mean loss {sum(losses) / len(losses):.4f}")
    # BUG(DDP506): the process group is never destroyed.


if __name__ == "__main__":
    main()
