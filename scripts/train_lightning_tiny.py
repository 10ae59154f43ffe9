#!/usr/bin/env python3
"""A tiny PyTorch Lightning job for zeus-run, on the CPU in seconds (configs/lightning_tiny.yaml).

A small MLP learns a made-up task: is a point inside a ring? The data are made
in memory from a fixed seed. The only zeus-run line is the callback:
``ZeusRunCallback`` reports ``val_acc`` (logged with ``self.log``) when validation
ends and stops the trainer when zeus-run says stop; its ``trial`` carries the
batch size, learning rate, seed and epochs of the decision. A run that reaches
the target saves a checkpoint in the trial's directory (``$ZEUS_LOG_DIR/model.ckpt``).

Run it alone (``python scripts/train_lightning_tiny.py``) to train with the defaults.
"""

from __future__ import annotations

import logging
import os

import lightning
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from zeus_run.integrations.lightning import ZeusRunCallback
from zeus_run.train import Trial


def make_data(n: int, seed: int) -> TensorDataset:
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(n, 2, generator=g) * 4 - 2
    r = x.norm(dim=1)
    y = ((r > 0.8) & (r < 1.6)).long()
    return TensorDataset(x, y)


class Ring(lightning.LightningModule):
    def __init__(self, lr: float) -> None:
        super().__init__()
        self.lr = lr
        self.net = nn.Sequential(nn.Linear(2, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 2))

    def training_step(self, batch, _idx):
        x, y = batch
        return nn.functional.cross_entropy(self.net(x), y)

    def validation_step(self, batch, _idx):
        x, y = batch
        self.log("val_acc", (self.net(x).argmax(1) == y).float().mean(), prog_bar=False)

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=self.lr)


#: Epochs when run by hand, outside zeus-run.
BY_HAND_EPOCHS = 5


def main() -> None:
    torch.set_num_threads(1)
    logging.getLogger("lightning.pytorch").setLevel(logging.WARNING)
    # By hand (no ZEUS_* set) it trains at most 5 epochs; under zeus-run the spec's max_epochs.
    trial = Trial.from_env(max_epochs=BY_HAND_EPOCHS)
    callback = ZeusRunCallback(trial)
    lightning.seed_everything(trial.seed, verbose=False)
    train = DataLoader(make_data(2048, seed=0), batch_size=trial.batch_size, shuffle=True)
    val = DataLoader(make_data(1024, seed=1), batch_size=1024)
    model = Ring(trial.learning_rate or 1e-3)
    trainer = lightning.Trainer(
        max_epochs=trial.max_epochs,
        accelerator="cpu",
        devices=1,
        callbacks=[callback],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
    )
    trainer.fit(model, train, val)
    print(f"epochs {trial.epoch}, last val_acc {trial.last_metric}, reached {trial.reached}", flush=True)
    if trial.reached:
        path = os.path.join(os.environ.get("ZEUS_LOG_DIR") or ".", "model.ckpt")
        trainer.save_checkpoint(path)
        print(f"model saved to {path}", flush=True)


if __name__ == "__main__":
    main()
