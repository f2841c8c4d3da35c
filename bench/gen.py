"""Generate realistic DDP-style training modules of a given size for the benchmarks."""

from __future__ import annotations

HEADER = '''"""Generated DDP training module for benchmarks."""
import os
import math
import contextlib

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler

'''

FUNC = '''
def train_epoch_{i}(model, loader, optimizer, scaler, epoch, accum_steps=4, log_every=50):
    """Train one epoch (variant {i})."""
    model.train()
    running = 0.0
    for step, (inputs, targets) in enumerate(loader):
        inputs = inputs.cuda(non_blocking=True)
        targets = targets.cuda(non_blocking=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            outputs = model(inputs)
            loss = F.cross_entropy(outputs, targets) / accum_steps
        scaler.scale(loss).backward()
        if (step + 1) % accum_steps == 0:
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad(set_to_none=True)
        running += loss.item()
        if step % log_every == 0 and dist.get_rank() == 0:
            print(f"epoch {{epoch}} step {{step}} loss {{running / (step + 1):.4f}}")
    return running


class Block{i}(nn.Module):
    """A residual MLP block (variant {i})."""

    def __init__(self, dim, hidden):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)
        self.drop = nn.Dropout(0.1)

    def forward(self, x):
        h = self.fc1(self.norm(x))
        h = F.gelu(h)
        h = self.drop(self.fc2(h))
        return x + h

    def extra_repr(self):
        return f"dim={{self.fc1.in_features}}, hidden={{self.fc1.out_features}}"


@torch.no_grad()
def evaluate_{i}(model, loader):
    model.eval()
    total, correct = 0, 0
    for inputs, targets in loader:
        logits = model(inputs.cuda())
        correct += (logits.argmax(-1) == targets.cuda()).sum().item()
        total += targets.numel()
    return correct / max(total, 1)
'''

FOOTER = """

def main():
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl")
    model = DDP(Block0(512, 2048).cuda(), device_ids=[local_rank])
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
    scaler = torch.amp.GradScaler("cuda")
    dataset = torch.utils.data.TensorDataset(torch.randn(1024, 512), torch.randint(0, 10, (1024,)))
    sampler = DistributedSampler(dataset)
    loader = DataLoader(dataset, batch_size=32, sampler=sampler, num_workers=4, pin_memory=True)
    for epoch in range(10):
        sampler.set_epoch(epoch)
        train_epoch_0(model, loader, optimizer, scaler, epoch)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
"""


def module(lines: int) -> str:
    parts = [HEADER]
    count = HEADER.count("\n") + FOOTER.count("\n")
    i = 0
    per = FUNC.count("\n")
    while count + per <= lines or i == 0:
        parts.append(FUNC.format(i=i))
        count += per
        i += 1
    parts.append(FOOTER)
    return "".join(parts)


if __name__ == "__main__":
    import sys

    sys.stdout.write(module(int(sys.argv[1]) if len(sys.argv) > 1 else 1500))
