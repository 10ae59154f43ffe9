"""``zeus-run export``: mirror run directories into MLflow or Prometheus."""

from __future__ import annotations

import enum
import sys
from pathlib import Path

import typer

from zeus_run.cli._common import err_console, handle_errors, setup_logging
from zeus_run.errors import UsageError


class Sink(str, enum.Enum):
    """Where ``export`` writes."""

    mlflow = "mlflow"
    prometheus = "prometheus"


@handle_errors
def export_command(
    sink: Sink = typer.Argument(..., metavar="SINK", help="mlflow or prometheus.", case_sensitive=False),
    paths: list[Path] = typer.Argument(
        ..., metavar="RUN_DIR...", help="Run directories (e.g. runs/demo), or folders of them (e.g. runs)."
    ),
    tracking_uri: str | None = typer.Option(
        None,
        "--tracking-uri",
        envvar="MLFLOW_TRACKING_URI",
        help="mlflow: the tracking URI (http://host:5000, sqlite:///mlflow.db, ...). Default: $MLFLOW_TRACKING_URI.",
    ),
    experiment: str = typer.Option("zeus-run", "--experiment", help="mlflow: the experiment (created if missing)."),
    output: Path | None = typer.Option(
        None,
        "--output",
        "-o",
        help="prometheus: write the metrics to this .prom file (node_exporter's textfile collector).",
    ),
    push_url: str | None = typer.Option(
        None, "--push", help="prometheus: push the metrics to this Pushgateway, e.g. http://localhost:9091."
    ),
) -> None:
    """Export run directories: to MLflow (a parent run per job, a nested run per trial) or Prometheus (text format).

    mlflow: idempotent; run it again after more recurrences and it adds only
    the new trials (each trial run has the tag zeus_run.trial_id). Needs
    pip install 'zeus-run[mlflow]'.

    prometheus: without -o or --push the metrics go to stdout.

    Example:

        zeus-run export mlflow runs/demo --tracking-uri sqlite:///mlflow.db

        zeus-run export prometheus runs -o /var/lib/node_exporter/zeus_run.prom

        zeus-run export prometheus runs/* --push http://localhost:9091
    """
    from zeus_run.export import MlflowExporter, PrometheusExporter, exposition
    from zeus_run.views.jobs import expand_run_dirs, load_job

    setup_logging()
    if sink is Sink.mlflow:
        if output is not None or push_url is not None:
            raise UsageError("-o and --push are options of `export prometheus`; `export mlflow` takes --tracking-uri.")
        if not tracking_uri:
            raise UsageError(
                "export mlflow needs a tracking URI: pass --tracking-uri (e.g. sqlite:///mlflow.db or "
                "http://localhost:5000) or set MLFLOW_TRACKING_URI."
            )
    jobs = [load_job(d) for d in expand_run_dirs(paths)]
    if sink is Sink.mlflow:
        assert tracking_uri is not None
        done = MlflowExporter(tracking_uri, experiment).export(jobs)
    elif output is None and push_url is None:
        sys.stdout.write(exposition(jobs))
        return
    else:
        done = PrometheusExporter(output, push_url).export(jobs)
    err_console().print(f"Exported: {done}", markup=False)
