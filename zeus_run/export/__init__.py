"""Export run directories to the tools people already watch: MLflow and Prometheus.

One exporter per sink, each a `Exporter` (`_base.py`) that syncs whole run
directories, read as `zeus_run.views.jobs.JobView`:

- `MlflowExporter` (`_mlflow.py`): a parent MLflow run per job, a nested run
  per trial; idempotent through each trial's stable id tag. Needs the optional
  extra ``zeus-run[mlflow]``; nothing else in zeus-run imports mlflow.
- `PrometheusExporter` (`_prometheus.py`): the text exposition format, to a file
  (node_exporter's textfile collector) or pushed to a Pushgateway.

`LiveExports` is the one hook a real run calls after each trial ends (spec
section ``export``); a sink that fails is a warning and is retried at the next
trial, never a failed recurrence.
"""

from typing import TYPE_CHECKING, Any

from zeus_run.export._base import Exporter, ExportError, LiveExports, trial_id

if TYPE_CHECKING:
    from zeus_run.export._mlflow import MlflowExporter
    from zeus_run.export._prometheus import PrometheusExporter, exposition, push

#: The sinks, loaded on first use: a trial's save reaches `LiveExports` without loading the views they read.
_LAZY = {
    "MlflowExporter": "zeus_run.export._mlflow",
    "PrometheusExporter": "zeus_run.export._prometheus",
    "exposition": "zeus_run.export._prometheus",
    "push": "zeus_run.export._prometheus",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'zeus_run.export' has no attribute {name!r}")


__all__ = [
    "ExportError",
    "Exporter",
    "LiveExports",
    "MlflowExporter",
    "PrometheusExporter",
    "exposition",
    "push",
    "trial_id",
]
