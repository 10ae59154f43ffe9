"""`ZeusRunCallback` for PyTorch Lightning (``pip install 'zeus-run[lightning]'``).

::

    from zeus_run.integrations.lightning import ZeusRunCallback

    cb = ZeusRunCallback()                             # cb.trial.batch_size, .learning_rate, .max_epochs
    trainer = lightning.Trainer(max_epochs=cb.trial.max_epochs, callbacks=[cb])
    trainer.fit(model, train_loader, val_loader)       # ends early when zeus-run says stop

The metric is the spec's ``metric.name`` (default ``val_acc``), read from
``trainer.callback_metrics`` when validation ends (log it with ``self.log``).
"""

from __future__ import annotations

from typing import Any

from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.callbacks import Callback

from zeus_run.integrations._driver import Driver
from zeus_run.train import Trial

__all__ = ["ZeusRunCallback"]


class ZeusRunCallback(Callback):
    """Reports each validation's metric to zeus-run and stops the trainer when zeus-run says stop.

    Args:
        trial: The trial (default: from the ``ZEUS_*`` environment).
        metric: The metric's name in ``trainer.callback_metrics`` (default: the spec's
            ``metric.name``, else ``val_acc``).
    """

    def __init__(self, trial: Trial | None = None, metric: str | None = None) -> None:
        self.driver = Driver(trial, metric, default_metric="val_acc")

    @property
    def trial(self) -> Trial:
        return self.driver.trial

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        batches = trainer.num_training_batches
        if isinstance(batches, int) and batches > 0:
            self.trial.set_iters_per_epoch(batches)

    def on_train_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if self.driver.stepped():
            trainer.should_stop = True

    def on_validation_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if trainer.sanity_checking:
            return
        if self.driver.evaluated(trainer.callback_metrics):
            trainer.should_stop = True

    def on_fit_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self.driver.close()
