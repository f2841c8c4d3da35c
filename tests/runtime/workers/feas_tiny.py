"""A tiny DDP training script for the ``ddp-lsp feasibility`` tests (CPU, gloo under torchrun).

Flags: ``--hook`` registers the user's own comm hook (default_hooks.allreduce_hook) before the
first forward; ``--steps N`` ends the script after N optimizer steps (an early end); ``--no-ddp``
never wraps the model; ``--accumulate K`` runs K backward passes per optimizer step without
``no_sync``; ``--find-unused`` sets find_unused_parameters=True.
"""

from __future__ import annotations

import argparse
import os

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=10_000)
parser.add_argument("--hook", action="store_true")
parser.add_argument("--no-ddp", action="store_true")
parser.add_argument("--accumulate", type=int, default=1)
parser.add_argument("--find-unused", action="store_true")
args = parser.parse_args()

dist.init_process_group("gloo")
torch.manual_seed(0)
# 64*64+64 + 64*8+8 = 4680 parameters: 18,720 bytes of fp32 gradients.
model: nn.Module = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 8))
if not args.no_ddp:
    model = DDP(model, find_unused_parameters=args.find_unused)
    if args.hook:
        model.register_comm_hook(dist.group.WORLD, default_hooks.allreduce_hook)
data = TensorDataset(torch.randn(256, 64), torch.randint(0, 8, (256,)))
loader = DataLoader(data, batch_size=16, shuffle=True)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
step = 0
while step < args.steps:
    for x, y in loader:
        for _ in range(args.accumulate):
            nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        opt.zero_grad()
        step += 1
        if step >= args.steps:
            break
print("training finished", os.environ.get("RANK"))
dist.destroy_process_group()
