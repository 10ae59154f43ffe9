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

from zeus_run.export._base import Exporter, ExportError, LiveExports, trial_id
from zeus_run.export._mlflow import MlflowExporter
from zeus_run.export._prometheus import PrometheusExporter, exposition, push

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
