"""Fine-tune a text classifier on JSON-lines data with DDP under torchrun.

torchrun --nproc_per_node 4 data_train.py --data train.jsonl --val val.jsonl
"""
import argparse
import json
import os

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset, IterableDataset
from torch.utils.data.distributed import DistributedSampler

LABELS = ["negative", "neutral", "positive"]


class JsonlDataset(Dataset):
    """Every record of a JSON-lines file, tokenised on the fly."""

    def __init__(self, path, vocab_size=30000):
        self.vocab_size = vocab_size
        self.label_to_idx = {name: i for i, name in enumerate(LABELS)}
        with open(path) as f:
            self.records = [json.loads(line) for line in f]

    def __len__(self):
        return len(self.records)

    def __getitem__(self, i):
        rec = self.records[i]
        ids = [hash(w) % self.vocab_size for w in rec["text"].split()][:128]
        ids += [0] * (128 - len(ids))
        return torch.tensor(ids), self.label_to_idx[rec["label"]]


class PackedDataset(Dataset):
    """Pre-tokenised ids in one NumPy buffer: what JsonlDataset should become."""

    def __init__(self, path):
        data = np.load(path)
        self.ids = torch.from_numpy(data["ids"])
        self.labels = torch.from_numpy(data["labels"])

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        return self.ids[i], self.labels[i]


class UnlabelledStream(IterableDataset):
    """Raw text for the auxiliary loss, sharded by rank inside __iter__."""

    def __init__(self, paths):
        self.paths = paths

    def __iter__(self):
        rank, world = dist.get_rank(), dist.get_world_size()
        for path in self.paths[rank::world]:
            with open(path) as f:
                for line in f:
                    yield torch.tensor([hash(w) % 30000 for w in line.split()][:128])


class Classifier(nn.Module):
    def __init__(self, vocab_size=30000, dim=256):
        super().__init__()
        self.embed = nn.EmbeddingBag(vocab_size, dim)
        self.head = nn.Linear(dim, len(LABELS))

    def forward(self, ids):
        return self.head(self.embed(ids))


def build_val_loader(path, batch_size):
    val_set = JsonlDataset(path)
    return DataLoader(val_set, batch_size=batch_size, shuffle=False, num_workers=2, pin_memory=True)


def build_aux_loader(paths):
    return DataLoader(UnlabelledStream(paths), batch_size=32, num_workers=2)


def train_one_epoch(model, loader, optimizer, criterion, device, epoch):
    model.train()
    for step, (ids, labels) in enumerate(loader):
        ids = ids.to(device, non_blocking=True)
        labels = labels.to(device, non_blocking=True)
        loss = criterion(model(ids), labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()


@torch.no_grad()
def evaluate(model, loader, device):
    model.eval()
    correct = total = 0
    for ids, labels in loader:
        pred = model(ids.to(device)).argmax(1)
        correct += (pred.cpu() == labels).sum().item()
        total += labels.numel()
    return correct / max(total, 1)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", required=True)
    parser.add_argument("--val", required=True)
    parser.add_argument("--packed", default=None)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--workers", type=int, default=8)
    args = parser.parse_args()

    local_rank = int(os.environ["LOCAL_RANK"])
    dist.init_process_group("nccl")
    torch.cuda.set_device(local_rank)
    device = torch.device("cuda", local_rank)

    train_set = JsonlDataset(args.data)
    train_sampler = DistributedSampler(train_set)
    train_loader = DataLoader(
        train_set,
        batch_size=args.batch_size,
        shuffle=True,  # new order every epoch
        sampler=train_sampler,
        num_workers=args.workers,
    )
    val_loader = build_val_loader(args.val, 256)

    model = DDP(Classifier().to(device), device_ids=[local_rank])
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
    criterion = nn.CrossEntropyLoss()

    for epoch in range(args.epochs):
        train_one_epoch(model, train_loader, optimizer, criterion, device, epoch)
        acc = evaluate(model, val_loader, device)
        if dist.get_rank() == 0:
            print(f"epoch {epoch} accuracy {acc:.3f}")

    if args.packed:
        packed = PackedDataset(args.packed)
        packed_loader = DataLoader(packed, batch_size=args.batch_size, shuffle=True, num_workers=4)
        train_one_epoch(model, packed_loader, optimizer, criterion, device, args.epochs)

    dist.destroy_process_group()


if __name__ == "__main__":
    main()
