"""Two gloo ranks that disagree on their second collective (launched with torchrun).

Rank 0 runs ``all_reduce`` of 4 floats where rank 1 runs ``broadcast`` of 3: the bug of a
collective inside a rank-dependent branch. Under TORCH_DISTRIBUTED_DEBUG=DETAIL the process
group checks each collective against the other ranks' first and fails naming both sides.
"""

from __future__ import annotations

import datetime

import torch
import torch.distributed as dist


def main() -> None:
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    t = torch.ones(4)
    dist.all_reduce(t)
    if dist.get_rank() == 0:
        dist.all_reduce(t)
    else:
        dist.broadcast(torch.ones(3), 0)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
