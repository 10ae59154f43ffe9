"""The whole process in every figure (issue 54, 4 and 6): a trial's tail after its tell, which lands after the
trial is saved and exported, reaches MLflow (its trial run logged again, ``estimated_share`` the history's) and
the Prometheus and summary totals (``whole``), while the cost, and so every decision, leaves it out."""

from __future__ import annotations

import pytest

from tests.export.test_prometheus import parse
from tests.fake_mlflow.store import PATH as FAKE_MLFLOW
from tests.fake_mlflow.store import trial_runs
from zeus_run.export import trial_id
from zeus_run.rundir.tails import record_tail

SPEC = """
name: tailed
command: ["python", "train.py"]
batch_sizes: [8, 16]
default_batch_size: 8
target_metric: 0.9
max_epochs: 3
recurrences: 3
energy: {{source: estimate, watts: 100, basis: wall-time}}
run_dir: {run_dir}
"""


def _told(tmp_path):
    """A run directory whose one trial told itself (its record ends at the close, a third of it estimated)."""
    from tests.factories import make_record
    from zeus_run.asktell import ask, cancel
    from zeus_run.rundir.history import HISTORY_NAME, HistoryStore

    spec = tmp_path / "job.yaml"
    spec.write_text(SPEC.format(run_dir=tmp_path / "runs"))
    a = ask(spec)  # makes the run directory; its record is replaced below
    cancel(a.run_dir, a.token)
    window = {"by": "script", "from": "process-start", "extended_at": "power-at-start", "extended_s": 0.5}
    window.update({"extended_j": 50.0, "to": "close"})
    record = make_record(
        0,
        job="tailed",
        batch_size=8,
        energy=150.0,
        energy_source="nvml",
        estimated=True,
        estimated_energy=50.0,
        estimated_share=50.0 / 150.0,
        window=window,
        provenance={"ask_token": "t0"},
    )
    (a.run_dir / HISTORY_NAME).unlink()
    HistoryStore(a.run_dir / HISTORY_NAME).append(record)
    return a.run_dir, "t0", record


def test_mlflow_logs_a_trial_again_once_its_tail_lands_with_the_historys_figures(tmp_path, monkeypatch):
    from zeus_run.export import MlflowExporter
    from zeus_run.views.jobs import load_job

    monkeypatch.syspath_prepend(str(FAKE_MLFLOW))
    store = tmp_path / "mlflow-store.json"
    monkeypatch.setenv("FAKE_MLFLOW_STORE", str(store))
    run_dir, token, record = _told(tmp_path)
    exporter = MlflowExporter(f"sqlite:///{tmp_path / 'mlflow.db'}")
    exporter.export([load_job(run_dir)])
    before = trial_runs(store)[trial_id(record)]
    assert before["tags"]["zeus_run.tail"] == "pending", before["tags"]
    record_tail(run_dir, token, 2.0, 400.0, "exit")
    exporter.export([load_job(run_dir)])
    after = trial_runs(store)[trial_id(record)]
    assert after["tags"]["zeus_run.tail"] == "landed", after["tags"]
    assert after["metrics"]["whole_energy_joules"][-1][0] == pytest.approx(record.energy + 400.0)
    assert after["metrics"]["estimated_share"][-1][0] == pytest.approx(50.0 / (record.energy + 400.0))


def test_prometheus_and_the_total_line_count_the_whole_process(tmp_path):
    from zeus_run.cli._render import summary_lines
    from zeus_run.export import PrometheusExporter
    from zeus_run.views.jobs import load_job

    run_dir, token, record = _told(tmp_path)
    record_tail(run_dir, token, 2.0, 400.0, "exit")
    job = load_job(run_dir)
    out = tmp_path / "out.prom"
    PrometheusExporter(out).export([job])
    samples = parse(out.read_text())
    (whole,) = [v for _, v in samples["zeus_run_whole_energy_joules_total"]]
    assert whole == pytest.approx(record.energy + (record.after_energy or 0.0) + 400.0)
    (energy,) = [v for _, v in samples["zeus_run_energy_joules_total"]]
    assert energy == pytest.approx(record.energy)  # the trial's own figure, as the cost counts it
    (total,) = [x for x in summary_lines(job.summary) if x.startswith("Total:")]
    assert "the whole process" in total and "550.0 J" in total, total  # 150 J + its 400 J tail
