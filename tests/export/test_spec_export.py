"""The spec's ``export`` section, and what a live export does when its sink is missing."""

from __future__ import annotations

import importlib.util
import logging

import pytest

from tests.export.helpers import free_port, real_run
from zeus_run.errors import SpecError, UsageError
from zeus_run.export import LiveExports
from zeus_run.spec import ExportSettings, MlflowExport, PrometheusExport, parse_spec

BASE = "name: j\ncommand: [x]\nbatch_sizes: [1, 2]\ndefault_batch_size: 1\ntarget_metric: 1\n"


def test_export_section_is_parsed():
    spec = parse_spec(
        BASE
        + "export: {mlflow: {tracking_uri: 'sqlite:///m.db', experiment: nightly}, prometheus: {push: 'http://h:9091'}}"
    )
    assert spec.export == ExportSettings(MlflowExport("sqlite:///m.db", "nightly"), PrometheusExport("http://h:9091"))
    assert spec.to_dict()["export"] == {
        "mlflow": {"tracking_uri": "sqlite:///m.db", "experiment": "nightly"},
        "prometheus": {"push": "http://h:9091"},
    }
    assert parse_spec(BASE).export == ExportSettings()


def test_export_section_problems_are_listed_together():
    with pytest.raises(SpecError) as e:
        parse_spec(BASE + "export: {mlflow: {experimnt: x}, prometheus: {push: 'ftp://x'}, grafana: 1}")
    text = str(e.value)
    assert "export.grafana" in text and "Did you mean 'experiment'" in text
    assert "export.mlflow.tracking_uri" in text and "export.prometheus.push = 'ftp://x': is not an http(s) URL" in text


def test_live_mlflow_without_mlflow_installed_is_refused_before_any_trial(tmp_path, monkeypatch):
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "mlflow" else real_find_spec(name, *a)
    )
    with pytest.raises(UsageError, match=r"zeus-run\[mlflow\]"):
        LiveExports.from_settings(ExportSettings(mlflow=MlflowExport("sqlite:///x.db")), tmp_path)


def test_a_down_pushgateway_is_a_warning_and_every_recurrence_still_runs(tmp_path, caplog):
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    with caplog.at_level(logging.WARNING, logger="zeus_run"):
        run_dir = real_run(tmp_path, "alpha", 2, export=f"export: {{prometheus: {{push: '{url}'}}}}")
    assert (run_dir / "history.jsonl").read_text().count("\n") >= 2
    warnings = [r.getMessage() for r in caplog.records if "export prometheus failed" in r.getMessage()]
    assert warnings and "retried after the next trial" in warnings[0] and url in warnings[0]


def test_the_core_and_the_cli_never_import_mlflow():
    import subprocess
    import sys

    code = (
        "import sys, zeus_run.cli, zeus_run.launcher, zeus_run.export, zeus_run.views.report, zeus_run.views.jobs, "
        "zeus_run.views.plot_jobs; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('mlflow', 'typer', 'rich')))"
    )
    core = subprocess.run([sys.executable, "-c", code.replace("zeus_run.cli, ", "")], capture_output=True, text=True)
    assert core.returncode == 0 and core.stdout.strip() == "[]", core.stdout + core.stderr
    cli = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert cli.returncode == 0 and "mlflow" not in cli.stdout, cli.stdout + cli.stderr
