"""Callbacks for training frameworks: one line in a Hugging Face or Lightning script.

* `zeus_run.integrations.hf.ZeusRunCallback`: a ``transformers.TrainerCallback``
  (``pip install 'zeus-run[hf]'``).
* `zeus_run.integrations.lightning.ZeusRunCallback`: a ``lightning.pytorch.Callback``
  (``pip install 'zeus-run[lightning]'``).

Both drive a `zeus_run.train.Trial` (`_driver.Driver`): they report the metric
named in the spec (``metric.name``) after each evaluation, count optimizer steps
for power-limit profiling, and, when zeus-run says stop (target reached,
``max_epochs``, early stop), ask the framework to end its loop, so the trainer
saves and returns normally; nothing is killed. They read the same ``ZEUS_*``
environment under ``zeus-run run`` and under ask/tell (``zeus-run ask``,
``zeus-run exec``), so a script needs no change between the two.

This package imports neither framework; each module imports its own.
"""
