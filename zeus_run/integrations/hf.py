"""`ZeusRunCallback` for the Hugging Face ``transformers.Trainer`` (``pip install 'zeus-run[hf]'``).

::

    from zeus_run.integrations.hf import ZeusRunCallback, training_arguments

    args = training_arguments("out")                  # batch size, learning rate, seed, epochs from zeus-run
    trainer = Trainer(model, args, train_dataset=..., eval_dataset=..., compute_metrics=...,
                      callbacks=[ZeusRunCallback()])
    trainer.train()                                   # ends early when zeus-run says stop; then save as usual

The metric is the spec's ``metric.name`` (default ``eval_accuracy``; ``accuracy``
finds ``eval_accuracy`` too), read in ``on_evaluate``: evaluate once per epoch
(``eval_strategy="epoch"``, which `training_arguments` sets).
"""

from __future__ import annotations

from typing import Any

from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from zeus_run.integrations._driver import Driver
from zeus_run.train import Trial

__all__ = ["ZeusRunCallback", "training_arguments"]


class ZeusRunCallback(TrainerCallback):
    """Reports each evaluation's metric to zeus-run and ends training when zeus-run says stop.

    Args:
        trial: The trial (default: from the ``ZEUS_*`` environment).
        metric: The metric's name in ``metrics`` (default: the spec's ``metric.name``, else ``eval_accuracy``).
    """

    def __init__(self, trial: Trial | None = None, metric: str | None = None) -> None:
        self.driver = Driver(trial, metric, default_metric="eval_accuracy", prefix="eval_")

    @property
    def trial(self) -> Trial:
        return self.driver.trial

    def on_train_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        epochs = max(round(args.num_train_epochs), 1)
        if state.max_steps and state.max_steps > 0:
            self.trial.set_iters_per_epoch(state.max_steps // epochs)

    def on_step_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any) -> None:
        if self.driver.stepped():
            control.should_training_stop = True

    def on_evaluate(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        metrics: dict[str, float] | None = None,
        **kwargs: Any,
    ) -> None:
        if self.driver.evaluated(metrics or {}):
            control.should_training_stop = True

    def on_train_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        self.driver.close()


def training_arguments(output_dir: str, trial: Trial | None = None, **kwargs: Any) -> TrainingArguments:
    """``TrainingArguments`` with zeus-run's decision: batch size, learning rate, seed and epochs.

    Evaluation runs once per epoch (what zeus-run counts); nothing is logged to
    outside services unless ``report_to`` says so. ``kwargs`` override anything.
    """
    t = trial if trial is not None else Trial.from_env()
    settings: dict[str, Any] = {
        "output_dir": output_dir,
        "per_device_train_batch_size": t.batch_size,
        "seed": t.seed,
        "num_train_epochs": t.max_epochs,
        "eval_strategy": "epoch",
        "save_strategy": "no",
        "report_to": "none",
    }
    if t.learning_rate is not None:
        settings["learning_rate"] = t.learning_rate
    settings.update(kwargs)
    return TrainingArguments(**settings)
