"""Train an image classifier with DDP under torchrun; evaluate and checkpoint on rank 0.

A fixture for the collectives rules (DDP102-DDP105): the bugs they exist for next to the
idioms they must leave alone. Its exact findings are in collectives_train.expected.json
(regenerate with `pytest --update-goldens`, never by hand).
"""

from __future__ import annotations

import argparse
import os
from contextlib import contextmanager

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def is_main_process() -> bool:
    return not dist.is_initialized() or dist.get_rank() == 0


def reduce_mean(t: torch.Tensor) -> torch.Tensor:
    # Same branch on every rank: not a rank guard.
    if not dist.is_initialized() or dist.get_world_size() == 1:
        return t
    t = t.detach().clone()
    dist.all_reduce(t)
    return t / dist.get_world_size()


@contextmanager
def main_process_first(local_rank: int):
    """Let local rank 0 download first while the other ranks wait (every rank: one barrier)."""
    if local_rank not in (-1, 0):
        dist.barrier()
    yield
    if local_rank == 0:
        dist.barrier()


class Net(nn.Module):
    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 16, 3, padding=1)
        self.bn = nn.BatchNorm2d(16)
        self.head = nn.Linear(16, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.bn(self.conv(x)))
        return self.head(x.mean(dim=(2, 3)))


def build_model(args: argparse.Namespace) -> DDP:
    model = Net(args.num_classes).cuda(args.gpu)
    model = DDP(model, device_ids=[args.gpu])
    if args.sync_bn:
        # Too late: the model is already wrapped.
        model = nn.SyncBatchNorm.convert_sync_batchnorm(model)
    return model


def make_loader(args: argparse.Namespace, train: bool) -> DataLoader:
    with main_process_first(args.local_rank):
        data = TensorDataset(torch.randn(256, 3, 32, 32), torch.randint(0, 10, (256,)))
    sampler = DistributedSampler(data, shuffle=train)
    return DataLoader(data, batch_size=32, sampler=sampler, num_workers=2, pin_memory=True)


class Trainer:
    def __init__(self, model: nn.Module, args: argparse.Namespace) -> None:
        self.args = args
        self.rank = args.rank
        self.model = DDP(
            model.cuda(args.gpu),
            device_ids=[args.gpu],
            find_unused_parameters=True,  # the aux head is not used every step
        )
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.1, momentum=0.9)
        self.train_loader = make_loader(args, train=True)
        self.val_loader = make_loader(args, train=False)

    def _reduce_metrics(self, correct: int, total: int) -> float:
        t = torch.tensor([correct, total], dtype=torch.float64, device="cuda")
        dist.all_reduce(t)
        return (t[0] / t[1]).item()

    def train_one_epoch(self, epoch: int) -> float:
        self.model.train()
        self.train_loader.sampler.set_epoch(epoch)
        running = torch.zeros((), device="cuda")
        for step, (images, target) in enumerate(self.train_loader):
            images, target = images.cuda(non_blocking=True), target.cuda(non_blocking=True)
            loss = F.cross_entropy(self.model(images), target)
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            self.optimizer.step()
            running += loss.detach()
            if step % 50 == 0 and self.rank == 0:
                print(f"epoch {epoch} step {step} loss {loss.item():.4f}")
        return reduce_mean(running).item()

    def validate(self) -> float:
        """Every rank evaluates its shard; the accuracy is reduced over all of them."""
        self.model.eval()
        correct = total = 0
        with torch.no_grad():
            for images, target in self.val_loader:
                output = self.model(images.cuda())
                correct += (output.argmax(1).cpu() == target).sum().item()
                total += target.numel()
        return self._reduce_metrics(correct, total)

    def quick_eval(self) -> float | None:
        """A look at the validation set on rank 0 only."""
        if self.rank != 0:
            return None
        self.model.eval()
        correct = total = 0
        with torch.no_grad():
            for images, target in self.val_loader:
                output = self.model(images.cuda())
                correct += (output.argmax(1).cpu() == target).sum().item()
                total += target.numel()
        return self._reduce_metrics(correct, total)

    def save_checkpoint(self, epoch: int, path: str) -> None:
        if self.rank == 0:
            state = {"model": self.model.module.state_dict(), "epoch": epoch}
            torch.save(state, path)
        dist.barrier()  # nobody reads the file before it is complete

    def resume(self, path: str) -> int:
        state = None
        if self.rank == 0 and os.path.exists(path):
            state = torch.load(path, map_location="cpu")
        holder = [state]
        dist.broadcast_object_list(holder, src=0)
        if holder[0] is None:
            return 0
        self.model.module.load_state_dict(holder[0]["model"])
        return holder[0]["epoch"] + 1

    def fit(self, epochs: int, start: int = 0) -> None:
        for epoch in range(start, epochs):
            self.train_one_epoch(epoch)
            acc = self.validate()
            # Every rank computed the same reduced accuracy: they stop together.
            if acc > 0.99:
                break
            self.save_checkpoint(epoch, os.path.join(self.args.out, "last.pt"))

    def finetune(self, epochs: int) -> None:
        for epoch in range(epochs):
            self.train_one_epoch(epoch)
            acc = self.quick_eval()
            if self.rank == 0 and acc is not None and acc > 0.99:
                print("target reached")
                break
            self.save_checkpoint(epoch, os.path.join(self.args.out, "ft.pt"))


def evaluate_on_rank0(model: DDP, loader: DataLoader) -> float:
    model.eval()
    losses = []
    with torch.no_grad():
        for images, target in loader:
            losses.append(F.cross_entropy(model(images.cuda()), target.cuda()))
    return reduce_mean(torch.stack(losses).mean()).item()


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--num-classes", type=int, default=10)
    parser.add_argument("--sync-bn", action="store_true")
    parser.add_argument("--out", default="checkpoints")
    args = parser.parse_args()
    args.rank = int(os.environ["RANK"])
    args.local_rank = int(os.environ["LOCAL_RANK"])
    args.gpu = args.local_rank
    return args


def main() -> None:
    args = parse_args()
    torch.cuda.set_device(args.gpu)
    dist.init_process_group("nccl")
    if is_main_process():
        os.makedirs(args.out, exist_ok=True)
    dist.barrier()
    trainer = Trainer(Net(args.num_classes), args)
    start = trainer.resume(os.path.join(args.out, "last.pt"))
    trainer.fit(args.epochs, start)
    if args.rank == 0:
        print("final loss", evaluate_on_rank0(trainer.model, trainer.val_loader))
    if args.rank != 0:
        return
    torch.save(trainer.model.module.state_dict(), os.path.join(args.out, "final.pt"))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
