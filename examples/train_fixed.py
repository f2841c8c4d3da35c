"""Train a small image classifier with DDP and mixed precision: the corrected version.

    torchrun --nproc_per_node=4 examples/train_fixed.py --epochs 3

The twin of ``train_buggy.py`` with every bug fixed; each fix is marked ``FIX(DDPxxx)``.
``ddp-lsp check examples/train_fixed.py`` reports nothing.
"""

import argparse
import contextlib
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
        # FIX(DDP406): two tensors instead of a list of dicts: forked workers share the pages.
        steps = torch.arange(n, dtype=torch.float32).remainder(251) / 251.0
        self.pixels = steps.view(n, 1, 1, 1).expand(n, 3, 32, 32).contiguous()
        self.labels = torch.arange(n).remainder(num_classes)

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int):
        return self.pixels[index], self.labels[index]


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
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--log-every", type=int, default=50)
    parser.add_argument("--ckpt-dir", default="checkpoints")
    parser.add_argument("--resume", default="")
    return parser.parse_args()


def setup() -> tuple[int, int, int]:
    local_rank = int(os.environ["LOCAL_RANK"])
    rank = int(os.environ["RANK"])
    world_size = int(os.environ["WORLD_SIZE"])
    # FIX(DDP505): pin this process to its GPU before NCCL creates its communicators.
    torch.cuda.set_device(local_rank)
    dist.init_process_group(backend="nccl")
    dist.barrier()
    return local_rank, rank, world_size


def warmup(model, loader, optimizer, scaler, device, steps: int) -> None:
    """A few steps at a low learning rate before the real schedule."""
    for i, (x, y) in enumerate(loader):
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        # FIX(DDP205): torch.autocast("cuda", ...) replaces torch.cuda.amp.autocast.
        with torch.autocast("cuda", dtype=torch.float16):
            loss = F.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        # FIX(DDP204): step, then update.
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
        if i + 1 == steps:
            break


def probe_head(model, loader, optimizer, scaler, device) -> None:
    """One pass training only the head (a quick linear probe before fine-tuning)."""
    for x, y in loader:
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        with torch.autocast("cuda", dtype=torch.float16):
            loss = F.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        # FIX(DDP203): the scaler unscales, skips inf/NaN steps, then steps the optimizer.
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)


def evaluate(model: DDP, loader: DataLoader, device: torch.device) -> float:
    """Accuracy over the whole validation set; every rank takes part (it is collective)."""
    model.eval()
    counts = torch.zeros(2, device=device)
    with torch.no_grad():
        for x, y in loader:
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            pred = model(x).argmax(dim=1)
            counts[0] += (pred == y).sum()
            counts[1] += y.numel()
    # One all-reduce and one host sync per evaluation, not per batch.
    dist.all_reduce(counts)
    model.train()
    correct, total = counts.tolist()
    return correct / max(total, 1.0)


def main() -> None:
    args = parse_args()
    local_rank, rank, world_size = setup()
    # FIX(DDP503): distinct random streams per rank, still reproducible.
    torch.manual_seed(args.seed + rank)
    # FIX(DDP504): each rank on its own GPU.
    device = torch.device("cuda", local_rank)

    model = SmallNet().to(device)
    # FIX(DDP105): convert BatchNorm to SyncBatchNorm before wrapping.
    model = nn.SyncBatchNorm.convert_sync_batchnorm(model)
    # FIX(DDP102): every parameter is used, so no find_unused_parameters.
    model = DDP(model, device_ids=[local_rank])
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    # FIX(DDP205): torch.amp.GradScaler("cuda") replaces torch.cuda.amp.GradScaler.
    scaler = torch.amp.GradScaler("cuda")

    if args.resume:
        # FIX(DDP303): load onto the CPU, then copy into this rank's model.
        state = torch.load(args.resume, map_location="cpu")
        model.module.load_state_dict(state)

    train_set = SyntheticImages(20_000)
    val_set = SyntheticImages(2_000)
    # FIX(DDP401): each rank reads its own shard. FIX(DDP404): pinned host memory.
    # FIX(DDP405): a worker count from the command line, sized to the node.
    train_sampler = DistributedSampler(train_set, shuffle=True)
    train_loader = DataLoader(
        train_set,
        batch_size=args.batch_size,
        sampler=train_sampler,
        num_workers=args.workers,
        pin_memory=True,
    )
    # FIX(DDP403): the sampler shuffles (here: does not, for a stable validation order).
    val_sampler = DistributedSampler(val_set, shuffle=False)
    val_loader = DataLoader(
        val_set, batch_size=args.batch_size, sampler=val_sampler, num_workers=2, pin_memory=True
    )

    warmup(model, train_loader, optimizer, scaler, device, args.warmup_steps)
    probe_head(model, val_loader, optimizer, scaler, device)

    losses = []
    running_loss = torch.zeros((), device=device)
    start = time.time()
    for epoch in range(args.epochs):
        # FIX(DDP402): a new shuffle order every epoch, the same on every rank.
        train_sampler.set_epoch(epoch)
        for step, (x, y) in enumerate(train_loader):
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            # FIX(DDP101): skip the gradient all-reduce on accumulation micro-steps; the
            # forward runs inside no_sync too, because DDP prepares its reducer there.
            is_accumulating = (step + 1) % args.accum_steps != 0
            sync_context = model.no_sync() if is_accumulating else contextlib.nullcontext()
            with sync_context:
                with torch.autocast("cuda", dtype=torch.float16):
                    logits = model(x)
                    loss = F.cross_entropy(logits, y) / args.accum_steps
                scaler.scale(loss).backward()
            # FIX(DDP301): detached values do not keep the graph alive, and need no host sync.
            losses.append(loss.detach())
            running_loss += loss.detach()
            # FIX(DDP502, DDP302): log on rank 0 only, and only every log_every steps.
            if rank == 0 and step % args.log_every == 0:
                print(f"epoch {epoch} step {step} loss {loss.item():.4f}")
            if not is_accumulating:
                # FIX(DDP201): unscale before clipping, so the threshold applies to real grads.
                scaler.unscale_(optimizer)
                torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
                scaler.step(optimizer)
                # FIX(DDP202): one update per optimizer step.
                scaler.update()
                optimizer.zero_grad(set_to_none=True)

        # FIX(DDP104, DDP103): every rank evaluates (the DDP forward and the all-reduce
        # inside are collective), and every rank reaches the barrier.
        accuracy = evaluate(model, val_loader, device)
        if rank == 0:
            print(f"epoch {epoch}: val accuracy {accuracy:.3f}")
            os.makedirs(args.ckpt_dir, exist_ok=True)
            # FIX(DDP501): rank 0 writes. FIX(DDP304): the plain module's keys.
            torch.save(model.module.state_dict(), os.path.join(args.ckpt_dir, f"epoch{epoch}.pt"))
        dist.barrier()

    if rank == 0:
        mean = torch.stack(losses).mean().item()
        print(f"done in {time.time() - start:.0f}s, mean loss {mean:.4f}")
    # FIX(DDP506): tear the process group down cleanly.
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
