"""Exports against the real thing: MLflow's store and server, promtool, a Pushgateway, headless Chromium.

Marked ``integrations``: scripts/test_integrations.sh installs what they need
and runs them; elsewhere each skips, saying what is missing.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import urllib.request
from collections import Counter
from pathlib import Path

import pytest

from tests.export.helpers import real_run, simulated_run, zeus
from tests.export.services import INSTALL, mlflow_server, need, pushgateway
from tests.export.test_prometheus import parse
from zeus_run.export import exposition, trial_id
from zeus_run.views.jobs import load_job

pytestmark = pytest.mark.integrations


def client_for(uri: str):
    mlflow = pytest.importorskip("mlflow", reason=f"mlflow is not installed: {INSTALL}")
    return mlflow.tracking.MlflowClient(tracking_uri=uri)


def read_back(uri: str, experiment: str = "zeus-run") -> tuple[list, dict[str, list]]:
    """The parent runs and, by parent run id, their trial runs, as MLflow's client returns them."""
    client = client_for(uri)
    exp = client.get_experiment_by_name(experiment)
    assert exp is not None
    runs = client.search_runs([exp.experiment_id], max_results=5000)
    parents = [r for r in runs if r.data.tags.get("zeus_run.role") == "job"]
    children: dict[str, list] = {p.info.run_id: [] for p in parents}
    for r in runs:
        if r.data.tags.get("zeus_run.role") == "trial":
            children[r.data.tags["mlflow.parentRunId"]].append(r)
    return parents, children


def test_mlflow_export_reads_back_through_mlflows_client_and_a_second_export_adds_only_new_trials(tmp_path):
    client_for("sqlite://")  # or skip
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    run_dir = real_run(tmp_path, "alpha", 2)
    sim = simulated_run(tmp_path)
    done = zeus("export", "mlflow", str(run_dir), str(sim), "--tracking-uri", uri)
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""  # nothing on stdout: MLflow's run URLs are suppressed
    parents, children = read_back(uri)
    assert sorted(p.data.tags["zeus_run.job"] for p in parents) == ["alpha", "squad"]
    alpha = next(p for p in parents if p.data.tags["zeus_run.job"] == "alpha")
    job = load_job(run_dir)
    assert alpha.data.params["default_batch_size"] == "2" and alpha.data.params["policy"] == "zeus-voi"
    assert alpha.data.metrics["trials"] == job.summary.trials
    assert alpha.data.metrics["total_energy_joules"] == pytest.approx(job.summary.total_energy)
    trials = children[alpha.info.run_id]
    assert sorted(t.data.tags["zeus_run.trial_id"] for t in trials) == sorted(trial_id(r) for r in job.records)
    client = client_for(uri)
    for t in trials:
        record = next(r for r in job.records if trial_id(r) == t.data.tags["zeus_run.trial_id"])
        assert t.data.params["batch_size"] == str(record.batch_size)
        assert t.data.params["learning_rate"] == str(record.learning_rate)
        assert t.data.tags["stage"] == record.stage and t.data.tags["stop_reason"] == record.stop_reason
        assert t.data.metrics["cost_joules"] == pytest.approx(record.cost)
        assert t.data.metrics["epochs"] == record.epochs
        series = client.get_metric_history(t.info.run_id, "metric")
        assert [m.step for m in sorted(series, key=lambda m: m.step)] == list(range(1, len(record.metrics) + 1))
        assert t.info.status == "FINISHED"

    # Again, unchanged: nothing added. After two more recurrences: only their trials.
    assert zeus("export", "mlflow", str(run_dir), "--tracking-uri", uri).returncode == 0
    assert sum(len(c) for c in read_back(uri)[1].values()) == job.summary.trials + load_job(sim).summary.trials
    real_run(tmp_path, "alpha", 4, run_dir=run_dir)
    again = zeus("export", "mlflow", str(run_dir), "--tracking-uri", uri)
    assert again.returncode == 0, again.stderr
    grown = load_job(run_dir)
    assert f"{grown.summary.trials - job.summary.trials} new trial run(s)" in again.stderr
    parents, children = read_back(uri)
    alpha = next(p for p in parents if p.data.tags["zeus_run.job"] == "alpha")
    ids = Counter(t.data.tags["zeus_run.trial_id"] for t in children[alpha.info.run_id])
    assert set(ids) == {trial_id(r) for r in grown.records} and max(ids.values()) == 1
    steps = [m.step for m in client.get_metric_history(alpha.info.run_id, "trials")]
    assert sorted(set(steps)) == [job.summary.trials, grown.summary.trials]  # the summary over time


def test_live_mlflow_logging_survives_a_stopped_tracking_server(tmp_path, caplog):
    with mlflow_server(tmp_path) as server:
        export = f"export: {{mlflow: {{tracking_uri: '{server.url}', experiment: live}}}}"
        run_dir = real_run(tmp_path, "beta", 2, export=export)
        _, children = read_back(server.url, "live")
        assert sum(len(c) for c in children.values()) == load_job(run_dir).summary.trials

        server.stop()
        with caplog.at_level(logging.WARNING, logger="zeus_run"):
            real_run(tmp_path, "beta", 3, export=export, run_dir=run_dir)
        warned = [r.getMessage() for r in caplog.records if "export mlflow failed" in r.getMessage()]
        assert warned and "is not reachable" in warned[0], [r.getMessage() for r in caplog.records]
        assert load_job(run_dir).summary.recurrences == 3  # the recurrence ran and was recorded

        server.start()  # back up: the next trial's export catches up with every trial missed
        real_run(tmp_path, "beta", 4, export=export, run_dir=run_dir)
        job = load_job(run_dir)
        _, children = read_back(server.url, "live")
        ids = Counter(t.data.tags["zeus_run.trial_id"] for c in children.values() for t in c)
        assert set(ids) == {trial_id(r) for r in job.records} and max(ids.values()) == 1


def test_promtool_check_metrics_passes_on_the_exported_file(tmp_path):
    promtool = need("promtool")
    prom = tmp_path / "zeus_run.prom"
    dirs = [real_run(tmp_path, "alpha", 2), simulated_run(tmp_path)]
    assert zeus("export", "prometheus", *map(str, dirs), "-o", str(prom)).returncode == 0
    checked = subprocess.run([promtool, "check", "metrics"], input=prom.read_bytes(), capture_output=True, timeout=60)
    assert checked.returncode == 0 and checked.stdout + checked.stderr == b"", checked
    # The check can fail: a counter without _total is a lint problem promtool names.
    bad = prom.read_text().replace("zeus_run_trials_total", "zeus_run_trials")
    refused = subprocess.run([promtool, "check", "metrics"], input=bad.encode(), capture_output=True, timeout=60)
    assert b"zeus_run_trials" in refused.stdout + refused.stderr


def test_push_to_a_real_pushgateway_reads_back_from_its_metrics(tmp_path):
    with pushgateway(tmp_path) as gateway:
        alpha, sim = real_run(tmp_path, "alpha", 2), simulated_run(tmp_path)
        done = zeus("export", "prometheus", str(alpha), str(sim), "--push", gateway.url)
        assert done.returncode == 0, done.stderr
        with urllib.request.urlopen(gateway.url + "/metrics", timeout=10) as r:
            text = r.read().decode()
        ours = "\n".join(line for line in text.splitlines() if line.startswith("zeus_run_"))
        got = parse(ours)
        want = parse(exposition([load_job(alpha), load_job(sim)]))
        assert set(got) == set(want)
        for name, rows in want.items():
            for labels, value in rows:
                match = [v for lab, v in got[name] if all(lab.get(k) == x for k, x in labels.items())]
                assert match == [pytest.approx(value)], (name, labels)

        # Live: the spec's export.prometheus.push pushes after each trial.
        live = real_run(tmp_path, "gamma", 2, export=f"export: {{prometheus: {{push: '{gateway.url}'}}}}")
        with urllib.request.urlopen(gateway.url + "/metrics", timeout=10) as r:
            pushed = parse("\n".join(line for line in r.read().decode().splitlines() if line.startswith("zeus_run_")))
        reached = [
            v
            for lab, v in pushed["zeus_run_recurrences_total"]
            if (lab["job_name"], lab["outcome"]) == ("gamma", "reached")
        ]
        assert reached == [load_job(live).summary.recurrences] == [2]


def test_report_renders_in_headless_chromium_with_title_and_plot(tmp_path):
    chromium = need("chromium")
    pytest.importorskip("matplotlib")
    from matplotlib.image import imread

    run_dir = real_run(tmp_path, "alpha", 3)
    report = tmp_path / "report.html"
    assert zeus("report", str(run_dir), "-o", str(report)).returncode == 0
    shot = tmp_path / "shot.png"
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run"]
    flags += ["--disable-background-networking", "--disable-component-update", "--disable-sync"]
    flags += [f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1000,2200", "--hide-scrollbars"]
    url = report.resolve().as_uri()
    dom = subprocess.run([chromium, *flags, "--dump-dom", url], capture_output=True, text=True, timeout=180)
    assert "<title>zeus-run report: alpha</title>" in dom.stdout, dom.stderr[-2000:]
    assert "<h1>zeus-run report: alpha</h1>" in dom.stdout
    done = subprocess.run([chromium, *flags, f"--screenshot={shot}", url], capture_output=True, text=True, timeout=180)
    assert shot.exists(), done.stderr[-2000:]
    pixels = imread(shot)[:, :, :3]
    assert pixels.shape[:2] == (2200, 1000)
    # The title: dark text in the top band of an otherwise white page.
    top = pixels[:80]
    assert (top.max(axis=2) < 0.3).sum() > 500
    # The plot image: its orange exploration bars (#e69f00) are drawn only from the embedded PNG.
    orange = (
        (abs(pixels[:, :, 0] - 0xE6 / 255) < 0.05)
        & (abs(pixels[:, :, 1] - 0x9F / 255) < 0.05)
        & (pixels[:, :, 2] < 0.1)
    )
    assert orange.sum() > 2000


def test_mlflow_keeps_two_run_directories_of_one_job_apart_and_ends_the_parent(tmp_path):
    """`export mlflow runs/demo srv/demo`: two parents (path in the run name and a tag), every trial of both."""
    client_for("sqlite://")  # or skip
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    first = real_run(tmp_path, "alpha", 2)
    (tmp_path / "srv").mkdir()
    second = real_run(tmp_path / "srv", "alpha", 3)
    assert first.name == second.name
    done = zeus("export", "mlflow", str(first), str(second), "--tracking-uri", uri)
    assert done.returncode == 0, done.stderr
    assert "(2 run directory(ies))" in done.stderr
    parents, children = read_back(uri)
    assert len(parents) == 2
    by_path = {p.data.tags["zeus_run.run_path"]: p for p in parents}
    for run_dir in (first, second):
        parent = by_path[str(run_dir.resolve())]
        assert str(run_dir) in parent.info.run_name
        job = load_job(run_dir)
        assert {t.data.tags["zeus_run.trial_id"] for t in children[parent.info.run_id]} == {
            trial_id(r) for r in job.records
        }
        # The job's recurrences are all done: the parent ended, FINISHED; its saving is every view's.
        assert parent.info.status == "FINISHED"
        assert parent.data.metrics.get("savings_cost") == job.summary.savings_cost
    # More recurrences: the next export reopens the parent while it adds their trials, then ends it again.
    real_run(tmp_path, "alpha", 4, run_dir=first)
    again = zeus("export", "mlflow", str(first), "--tracking-uri", uri)
    assert again.returncode == 0, again.stderr
    parent = client_for(uri).get_run(by_path[str(first.resolve())].info.run_id)
    assert parent.info.status == "FINISHED" and parent.data.metrics["trials"] == load_job(first).summary.trials


def test_mlflow_parent_of_a_simulated_run_has_the_same_saving_as_simulate(tmp_path):
    client_for("sqlite://")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    sim = simulated_run(tmp_path)
    assert zeus("export", "mlflow", str(sim), "--tracking-uri", uri).returncode == 0
    (parent,) = read_back(uri)[0]
    job = load_job(sim)
    assert parent.data.metrics["savings_cost"] == job.summary.savings_cost
    assert parent.data.metrics["savings_energy"] == job.summary.savings_energy
    assert parent.data.params["objective"] == "cost=0.5"
    # Each saving with the two ends of its 90% interval beside it, as every view states them.
    for name, ci in (("savings_cost", job.summary.savings_cost_ci), ("savings_energy", job.summary.savings_energy_ci)):
        assert ci is not None
        assert (parent.data.metrics[f"{name}_ci_low"], parent.data.metrics[f"{name}_ci_high"]) == ci
    steady = job.summary.steady
    assert steady is not None and steady.savings_ci is not None
    assert parent.data.metrics["steady_state_savings_ci_low"] == steady.savings_ci[0]


def test_the_live_export_failure_hint_is_a_command_that_works(tmp_path):
    from zeus_run.export import MlflowExporter, PrometheusExporter

    client_for("sqlite://")
    run_dir = real_run(tmp_path, "alpha", 1)
    uri = f"sqlite:///{tmp_path / 'hint.db'}"
    hint = MlflowExporter(uri, "hinted").command(run_dir)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    done = subprocess.run(hint, shell=True, capture_output=True, text=True, cwd=tmp_path, timeout=300, env=env)
    assert done.returncode == 0, done.stderr
    assert read_back(uri, "hinted")[0]
    prom = PrometheusExporter(tmp_path / "out.prom").command(run_dir)
    done = subprocess.run(prom, shell=True, capture_output=True, text=True, cwd=tmp_path, timeout=300, env=env)
    assert done.returncode == 0 and (tmp_path / "out.prom").read_text().startswith("# HELP")


def test_the_start_plans_pass_promtool_and_read_back_through_mlflows_client(tmp_path):
    """A run directory with start plans (`tests.export.test_starts`): its exposition passes `promtool check
    metrics`, and a real MLflow store gives back one run per trigger with the plan and the carbon it saved (1 kWh
    at 100 g/kWh against 300 on time: 200 g, worked out by hand)."""
    from tests.export.test_starts import _plain, _planned
    from zeus_run.export import MlflowExporter

    promtool = need("promtool")
    run_dir = _plain(tmp_path)
    _planned(run_dir)
    text = exposition([load_job(run_dir)])
    assert "zeus_run_start_carbon_saved_grams" in text
    checked = subprocess.run([promtool, "check", "metrics"], input=text.encode(), capture_output=True, timeout=60)
    assert checked.returncode == 0 and checked.stdout + checked.stderr == b"", checked
    client_for("sqlite://")  # or skip
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    MlflowExporter(uri).export([load_job(run_dir)])
    client = client_for(uri)
    exp = client.get_experiment_by_name("zeus-run")
    runs = client.search_runs([exp.experiment_id], max_results=100)
    starts = {r.data.tags["zeus_run.start_trigger"]: r for r in runs if r.data.tags.get("zeus_run.role") == "start"}
    assert sorted(starts) == ["2026-01-20T00:00:00Z", "2026-01-21T00:00:00Z"]
    moved = starts["2026-01-20T00:00:00Z"]
    assert moved.data.params["start_at"] == "2026-01-20T03:00:00Z" and moved.data.params["moved"] == "true"
    assert moved.data.metrics["saved_grams"] == pytest.approx(200.0)
    assert starts["2026-01-21T00:00:00Z"].data.tags["zeus_run.start_outcome"] == "pending"
