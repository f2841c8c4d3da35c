import os

import torch
import torch.distributed as dist


def init_distributed_mode():
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    dist.init_process_group(backend="nccl")
    return local_rank


def is_main_process():
    return dist.get_rank() == 0


def resume(model, path):
    # Rank 0 reads the file, every rank receives it: a collective.
    state = [torch.load(path, map_location="cpu") if is_main_process() else None]
    dist.broadcast_object_list(state, src=0)
    model.load_state_dict(state[0])


def save_checkpoint(state, filename):
    torch.save(state, filename)
