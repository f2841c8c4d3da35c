"""A small transformer language model (causal self-attention) on synthetic token streams.

Shape: an embedding and an output head of vocab x d_model, a few pre-norm transformer layers,
AdamW: gradients of ~1.5 M parameters next to attention compute over 64-token sequences.
Example for ``ddp-lsp feasibility``:

    ddp-lsp feasibility -- python examples/feasibility/lm.py
"""

from __future__ import annotations

import argparse
import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


class TinyLM(nn.Module):
    def __init__(self, vocab: int, d_model: int, layers: int, heads: int, context: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, d_model)
        self.pos = nn.Parameter(torch.zeros(context, d_model))
        layer = nn.TransformerEncoderLayer(
            d_model, heads, 4 * d_model, dropout=0.0, batch_first=True, norm_first=True
        )
        self.blocks = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab, bias=False)
        self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(context))

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        t = tokens.shape[1]
        h = self.embed(tokens) + self.pos[:t]
        h = self.blocks(h, mask=self.mask[:t, :t], is_causal=True)
        return self.head(self.norm(h))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--context", type=int, default=64)
    parser.add_argument("--vocab", type=int, default=4096)
    parser.add_argument("--d-model", type=int, default=128)
    parser.add_argument("--layers", type=int, default=2)
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
    model: nn.Module = TinyLM(args.vocab, args.d_model, args.layers, 4, args.context).to(device)
    if distributed:
        model = DDP(model, device_ids=[local_rank] if cuda else None)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    gen = torch.Generator().manual_seed(int(os.environ.get("RANK", "0")))
    for _ in range(args.steps):
        seq = torch.randint(0, args.vocab, (args.batch, args.context + 1), generator=gen)
        seq = seq.to(device, non_blocking=True)
        logits = model(seq[:, :-1])
        loss = nn.functional.cross_entropy(logits.reshape(-1, args.vocab), seq[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    if distributed:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
