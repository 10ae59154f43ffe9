#!/usr/bin/env python3
"""A PyTorch training job through the `zeus_run.train` helper, single process or DDP under torchrun.

It trains a small MLP on a classification problem it generates (no download,
same data every run) and reports validation accuracy after each epoch. Swap
`make_data` and `make_model` for your own; the zeus-run parts are the five
lines marked ``# zeus-run``.

Batch size: ``ZEUS_BATCH_SIZE`` (or ``--batch-size``) is the *global* batch
size; under DDP each of the WORLD_SIZE processes takes an equal share.
Only rank 0 reports the metric (one event per epoch); it tells the other ranks
when to stop, so all processes leave the epoch loop together.

Run by hand:
    python scripts/torch_train.py --batch-size 256 --lr 0.05
    torchrun --standalone --nproc_per_node 2 scripts/torch_train.py --batch-size 256
Through zeus-run: configs/pytorch.yaml and configs/pytorch-ddp.yaml.
"""

from __future__ import annotations

import argparse
import os

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

from zeus_run.train import Trial


def make_data(n_train: int = 20000, n_val: int = 2000, dim: int = 16, classes: int = 4):
    """Gaussian clusters, two per class (not linearly separable); fixed seed."""
    g = torch.Generator().manual_seed(20231)
    centers = torch.randn(classes * 2, dim, generator=g)
    n = n_train + n_val
    comp = torch.randint(0, classes * 2, (n,), generator=g)
    x = centers[comp] + 1.7 * torch.randn(n, dim, generator=g)
    y = comp % classes
    return TensorDataset(x[:n_train], y[:n_train]), TensorDataset(x[n_train:], y[n_train:])


def make_model(dim: int = 16, hidden: int = 64, classes: int = 4) -> nn.Module:
    return nn.Sequential(
        nn.Linear(dim, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, classes)
    )


def evaluate(model: nn.Module, loader: DataLoader, device: torch.device) -> float:
    model.eval()
    correct = total = 0
    with torch.no_grad():
        for x, y in loader:
            pred = model(x.to(device)).argmax(dim=1)
            correct += int((pred == y.to(device)).sum())
            total += len(y)
    model.train()
    return correct / max(total, 1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--batch-size", type=int, default=None, help="Global batch size (default: $ZEUS_BATCH_SIZE or 256)."
    )
    ap.add_argument("--lr", type=float, default=None, help="Learning rate (default: $ZEUS_LEARNING_RATE or 0.05).")
    ap.add_argument("--epochs", type=int, default=None, help="Most epochs (default: $ZEUS_MAX_EPOCHS or 20).")
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--train-size", type=int, default=20000)
    args = ap.parse_args()

    distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1
    if distributed:
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    rank = dist.get_rank() if distributed else 0
    world = dist.get_world_size() if distributed else 1
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device(f"cuda:{local_rank}" if torch.cuda.is_available() else "cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)

    # zeus-run: read the batch size, learning rate, seed, target and epoch limit it chose
    # (the arguments are the defaults when the script runs by hand).
    trial = Trial.from_env(batch_size=256, learning_rate=0.05, seed=0, max_epochs=20, target_metric=0.83)
    batch_size = args.batch_size or trial.batch_size
    lr = args.lr or trial.learning_rate
    if args.epochs:
        trial.max_epochs = args.epochs
    torch.manual_seed(trial.seed)

    train_set, val_set = make_data(n_train=args.train_size)
    sampler = DistributedSampler(train_set, seed=trial.seed) if distributed else None
    per_rank = max(1, batch_size // world)
    train = DataLoader(train_set, batch_size=per_rank, shuffle=sampler is None, sampler=sampler)
    val = DataLoader(val_set, batch_size=1024)
    model = make_model(hidden=args.hidden).to(device)
    if distributed:
        model = nn.parallel.DistributedDataParallel(model, device_ids=[local_rank] if device.type == "cuda" else None)
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()

    epoch = 0
    while True:
        epoch += 1
        if sampler is not None:
            sampler.set_epoch(epoch)
        # zeus-run: trial.iterate counts iterations for GPU power-limit profiling in the first epoch
        # (on rank 0 only: the other ranks run the same iterations in lockstep).
        for x, y in trial.iterate(train) if rank == 0 else train:
            opt.zero_grad(set_to_none=True)
            loss_fn(model(x.to(device)), y.to(device)).backward()
            opt.step()
        keep = True
        if rank == 0:
            acc = evaluate(model.module if distributed else model, val, device)
            print(
                f"epoch {epoch:3d} bs={batch_size} ({per_rank}/rank x {world}) lr={lr:.4g} val_acc={acc:.4f}",
                flush=True,
            )
            keep = trial.report(acc)  # zeus-run: one event per epoch; False once it is time to stop
        if distributed:
            flag = torch.tensor([1 if keep else 0], device=device)
            dist.broadcast(flag, src=0)  # rank 0 decides for everyone
            keep = bool(flag.item())
        if not keep:
            break
    trial.close()  # zeus-run
    if distributed:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
