"""A one-process training loop without ``optimizer.step()``, for ``ddp-lsp smallrun`` tests.

modes: leak | ok (manual SGD, sampled through the documented one line ``monitor_steps``) |
nohook (manual SGD and no monitor_steps: the supervisor has nothing to judge).
"""

from __future__ import annotations

import sys

import torch

from ddp_lsp.runtime import monitor_steps


def main() -> None:
    mode = sys.argv[1]
    torch.manual_seed(0)
    w = torch.randn(256, 1, requires_grad=True)
    kept = []
    batches = range(30)
    loop = batches if mode == "nohook" else monitor_steps(batches)  # the one line
    for _ in loop:
        x = torch.randn(64, 256)
        loss = (x @ w).pow(2).mean()
        loss.backward(retain_graph=(mode == "leak"))
        with torch.no_grad():
            w -= 0.01 * w.grad
            w.grad = None
        if mode == "leak":
            kept.append(loss)


if __name__ == "__main__":
    main()
