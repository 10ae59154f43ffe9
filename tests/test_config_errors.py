"""Configuration errors are not observations (`zeus_run.trial.classify`)."""

from __future__ import annotations

import dataclasses

import pytest

from tests.cli.test_run_cli import history, spec_text, zeus
from zeus_run.engine.core import Ledger
from zeus_run.engine.replay import Knobs, audit
from zeus_run.records import TrialRecord
from zeus_run.rundir.history import read_history
from zeus_run.trial.classify import config_error

BASE = TrialRecord("t", 1, 1, 0, 2, "pruning", 0, 2.0, 200.0, 100.0, 200.0, False, "exited", exit_code=0)
CONVERGED = dataclasses.replace(
    BASE, epochs=4, time=4.0, reached=True, stop_reason="target_reached", metrics=(0.5, 0.6, 0.7, 0.95)
)


@pytest.mark.parametrize(
    ("changes", "history", "spec_fault"),
    [
        ({}, [], True),  # exited 0 without a single metric reading
        ({"stop_reason": "timeout", "exit_code": -15}, [], True),
        ({"metrics": (0.5,)}, [], False),  # it read a metric: the batch size's fault
        ({"kind": "simulated"}, [], False),
        ({"exit_code": None}, [], False),  # never ran
        ({"stop_reason": "crashed", "exit_code": 2}, [], True),  # argparse rejected a {placeholder}
        ({"stop_reason": "crashed", "exit_code": 2, "time": 0.5}, [CONVERGED], False),  # not the first trial
        ({"stop_reason": "crashed", "exit_code": 1}, [], False),
        # cut or crashed after more than an epoch of that batch size, without a reading
        ({"stop_reason": "cost_threshold", "exit_code": -15, "time": 2.0}, [CONVERGED], True),
        ({"stop_reason": "crashed", "exit_code": 1, "time": 2.0}, [CONVERGED], True),
        ({"stop_reason": "crashed", "exit_code": 1, "time": 1.2}, [CONVERGED], False),  # within an epoch: OOM
        ({"stop_reason": "cost_threshold", "time": 2.0, "batch_size": 4}, [CONVERGED], False),  # no pace for 4
    ],
)
def test_config_error_table(changes, history, spec_fault):
    record = dataclasses.replace(BASE, **changes)
    assert (config_error(record, history) is not None) is spec_fault


def test_a_wrong_regex_stops_with_exit_2_and_a_fixed_spec_resumes_without_force(write_spec):
    body = "recurrences: 3\nmetric: {regex: 'val_loss=([0-9.]+)'}\n"
    spec = write_spec(spec_text("--mode print", body).replace("recurrences: 1\n", ""))
    r = zeus("run", str(spec), "--no-output")
    assert r.returncode == 2, r.stderr
    assert "failed because of the job spec, not the batch size" in r.stderr and "metric.regex" in r.stderr
    (bad,) = history(spec)
    assert bad["stop_reason"] == "config_error" and bad["observed"] is False and bad["batch_size"] == 2
    # Fix the regex: the same command resumes the run (no --force) and re-runs that try.
    spec.write_text(spec.read_text().replace("val_loss=", "val_acc="))
    r = zeus("run", str(spec), "--no-output")
    assert r.returncode == 0, r.stderr
    recs = history(spec)
    assert recs[0] == bad and recs[1]["recurrence"] == 1 and recs[1]["attempt"] == 2 and recs[1]["reached"]
    assert {x["recurrence"] for x in recs if x["reached"]} == {1, 2, 3}
    # The record steered nothing: the retry is a fresh run's first decision, the optimizer
    # folded only the observed tries, and every decision re-derives from them.
    assert (recs[1]["batch_size"], recs[1]["stage"], recs[1]["detail"]) == (2, "pruning", "default batch size first")
    records = read_history(spec.parent / "runs")
    knobs = Knobs.from_run_dir(spec.parent / "runs")
    ledger = Ledger.from_history(knobs.engine(4), records)
    assert ledger.observed == len(records) - 1 == ledger.state.step
    assert audit(records, knobs).divergence is None


def test_a_placeholder_the_script_rejects_is_a_configuration_error(write_spec):
    spec = write_spec(spec_text("--epochs {epochs}"))  # fake_train.py has no --epochs: argparse exits 2
    r = zeus("run", str(spec), "--no-output")
    assert r.returncode == 2, r.stderr
    assert "rejected its arguments on the first trial" in r.stderr and "--epochs" in r.stderr
    (rec,) = history(spec)
    assert rec["stop_reason"] == "config_error" and rec["observed"] is False and rec["exit_code"] == 2
