#!/usr/bin/env python3
"""The doors' training script (`door_train.py`) as a Hugging Face ``Trainer`` job: `ZeusRunCallback` reports
``eval_accuracy`` each epoch and ends training when zeus-run says stop.

Batch size B reaches the target after ``REACH[B]`` epochs and each epoch burns ``WORK[B]`` CPU seconds, as in
`door_train.py`; the model is a 2x2 linear layer, so the Trainer adds little work of its own.

Options: ``--fail crash|oom|import`` for the failure outcomes (a wrong ``metric.name`` in the spec is the
"no metric" one).
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def main() -> None:
    from tests.doors.door_train import REACH, WORK, begin, burn

    _, trial = begin(("crash", "oom", "import"))

    import torch
    from transformers import Trainer, TrainerCallback

    from zeus_run.integrations.hf import ZeusRunCallback, training_arguments

    torch.set_num_threads(1)
    need = REACH.get(trial.batch_size, 0)
    evaluations = [0]

    class Tiny(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = torch.nn.Linear(2, 2)

        def forward(self, x: torch.Tensor, labels: torch.Tensor) -> dict[str, torch.Tensor]:
            logits = self.linear(x)
            return {"loss": torch.nn.functional.cross_entropy(logits, labels), "logits": logits}

    class Work(TrainerCallback):
        def on_epoch_end(self, *a: object, **k: object) -> None:
            burn(WORK.get(trial.batch_size, 1.0))

    def accuracy(_pred: object) -> dict[str, float]:
        evaluations[0] += 1  # one evaluation per epoch
        return {"accuracy": 0.95 if need and evaluations[0] >= need else 0.5}

    data = [{"x": torch.zeros(2), "labels": torch.tensor(0)} for _ in range(trial.batch_size)]
    out = os.environ.get("ZEUS_LOG_DIR") or "door_hf_out"
    hf_args = training_arguments(
        out, trial=trial, use_cpu=True, disable_tqdm=True, logging_strategy="no", dataloader_num_workers=0
    )
    trainer = Trainer(
        model=Tiny(),
        args=hf_args,
        train_dataset=data,
        eval_dataset=data,
        compute_metrics=accuracy,
        callbacks=[Work(), ZeusRunCallback(trial)],
    )
    trainer.train()
    print(f"epochs {trial.epoch}, reached {trial.reached}")  # not flushed: a pipe holds it


if __name__ == "__main__":
    main()
