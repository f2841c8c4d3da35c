import argparse

import torch
from torch.nn.parallel import DistributedDataParallel as DDP

import utils
from engine import train_one_epoch


def main(args):
    local_rank = utils.init_distributed_mode()
    model = DDP(torch.nn.Linear(1024, 10).cuda(), device_ids=[local_rank])
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    scaler = torch.amp.GradScaler("cuda")
    if args.resume and utils.is_main_process():
        utils.resume(model.module, args.resume)
    loader = []
    for _ in range(args.epochs):
        train_one_epoch(model, loader, optimizer, scaler, accum_iter=4)
        utils.save_checkpoint(model.module.state_dict(), "checkpoint.pth")
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--resume", default="")
    parser.add_argument("--epochs", type=int, default=10)
    main(parser.parse_args())
