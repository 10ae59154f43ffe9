#!/usr/bin/env python3
"""A tiny Hugging Face Trainer job for zeus-run, on the CPU in seconds (configs/hf_tiny.yaml).

A two-layer BERT built from a config (nothing is downloaded) learns a made-up
task: does the sequence hold token 3 more often than token 4? The data are made
in memory from a fixed seed. The only zeus-run lines are the two imports'
helpers: `training_arguments` (batch size, learning rate, seed, epochs from the
decision) and `ZeusRunCallback` (reports ``eval_accuracy``, stops when told).
A run that reaches the target saves the model in the trial's directory
(``$ZEUS_LOG_DIR/model``).

Run it alone (``python scripts/train_hf_tiny.py``) to train with the defaults.
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # a config, not a download
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np
import torch
from transformers import BertConfig, BertForSequenceClassification, Trainer
from transformers.utils import logging as hf_logging

from zeus_run.integrations.hf import ZeusRunCallback, training_arguments
from zeus_run.train import Trial

VOCAB, LENGTH = 16, 12


def make_data(n: int, seed: int) -> list[dict[str, torch.Tensor]]:
    rng = np.random.default_rng(seed)
    ids = rng.integers(1, VOCAB, size=(n, LENGTH))
    labels = (ids == 3).sum(1) > (ids == 4).sum(1)
    return [
        {
            "input_ids": torch.tensor(row),
            "attention_mask": torch.ones(LENGTH, dtype=torch.long),
            "labels": torch.tensor(int(y)),
        }
        for row, y in zip(ids, labels, strict=True)
    ]


def accuracy(pred) -> dict[str, float]:
    return {"accuracy": float((pred.predictions.argmax(-1) == pred.label_ids).mean())}


#: Epochs when run by hand, outside zeus-run.
BY_HAND_EPOCHS = 5


def main() -> None:
    torch.set_num_threads(1)
    hf_logging.disable_progress_bar()  # logs that read well in cron and CI
    # By hand (no ZEUS_* set) it trains at most 5 epochs; under zeus-run the spec's max_epochs.
    trial = Trial.from_env(max_epochs=BY_HAND_EPOCHS)
    callback = ZeusRunCallback(trial)
    torch.manual_seed(trial.seed)
    config = BertConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=LENGTH,
        num_labels=2,
    )
    model = BertForSequenceClassification(config)
    out = os.environ.get("ZEUS_LOG_DIR") or "hf_tiny_out"
    args = training_arguments(
        out,
        trial=trial,
        per_device_eval_batch_size=256,
        use_cpu=True,
        disable_tqdm=True,
        logging_strategy="no",
        dataloader_num_workers=0,
    )
    trainer = Trainer(
        model=model,
        args=args,
        train_dataset=make_data(1024, seed=0),
        eval_dataset=make_data(512, seed=1),
        compute_metrics=accuracy,
        callbacks=[callback],
    )
    trainer.train()
    print(f"epochs {trial.epoch}, last eval_accuracy {trial.last_metric}, reached {trial.reached}", flush=True)
    if trial.reached:
        trainer.save_model(os.path.join(out, "model"))
        print(f"model saved to {os.path.join(out, 'model')}", flush=True)


if __name__ == "__main__":
    main()
