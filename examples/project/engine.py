import torch


def train_one_epoch(model, loader, optimizer, loss_scaler, accum_iter):
    model.train()
    for step, (images, targets) in enumerate(loader):
        with torch.autocast("cuda", dtype=torch.float16):
            loss = torch.nn.functional.cross_entropy(model(images), targets)
        loss_scaler.scale(loss / accum_iter).backward()
        if (step + 1) % accum_iter == 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            loss_scaler.step(optimizer)
            loss_scaler.update()
            optimizer.zero_grad()
