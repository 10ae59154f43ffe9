"""The framework callbacks' shared logic (`zeus_run.integrations._driver`), without either framework."""

from __future__ import annotations

import json

import pytest

from zeus_run.integrations._driver import Driver, MetricNotFound
from zeus_run.train import Trial


class Tensor0d:
    """A 0-d tensor as frameworks log it: a value behind ``.item()``."""

    def __init__(self, v: float) -> None:
        self.v = v

    def item(self) -> float:
        return self.v


def _trial(tmp_path, **kw) -> Trial:
    return Trial(
        batch_size=8,
        target_metric=0.9,
        max_epochs=5,
        event_log=str(tmp_path / "events.jsonl"),
        stop_file=str(tmp_path / "stop"),
        **kw,
    )


def test_the_metric_named_in_the_spec_wins_and_a_prefix_is_tried(tmp_path):
    d = Driver(_trial(tmp_path, metric_name="accuracy"), default_metric="eval_accuracy", prefix="eval_")
    assert d.metric == "accuracy"
    assert d.value({"eval_loss": 0.3, "eval_accuracy": 0.7}) == 0.7  # HF prefixes eval metrics
    assert Driver(_trial(tmp_path), default_metric="val_acc").metric == "val_acc"
    assert Driver(_trial(tmp_path, metric_name="f1"), metric="val_f1").metric == "val_f1"  # the script's word last


def test_reports_reach_the_event_log_and_stop_at_the_target(tmp_path):
    d = Driver(_trial(tmp_path), default_metric="val_acc")
    assert not d.evaluated({"val_acc": Tensor0d(0.5)})
    assert d.evaluated({"val_acc": 0.95})
    events = [json.loads(line) for line in (tmp_path / "events.jsonl").read_text().splitlines()]
    assert [(e["epoch"], e["metric"]) for e in events if e["event"] == "epoch"] == [(1, 0.5), (2, 0.95)]
    assert d.trial.reached


def test_steps_end_training_once_zeus_run_asks(tmp_path):
    d = Driver(_trial(tmp_path), default_metric="val_acc")
    assert not d.stepped()
    (tmp_path / "stop").touch()  # zeus-run's stop: an early stop or a cancel
    d._last_check = float("-inf")  # the next step looks at the stop file
    assert d.stepped() and d.stopped
    assert d.trial.steps == 2


def test_a_missing_metric_names_what_was_logged_and_the_fix(tmp_path):
    d = Driver(_trial(tmp_path), default_metric="val_acc")
    with pytest.raises(MetricNotFound, match=r"no metric 'val_acc' \(it logged: train_loss, val_loss\).*metric\.name"):
        d.evaluated({"val_loss": 0.2, "train_loss": 0.1})


def test_the_core_package_imports_no_framework():
    import subprocess
    import sys

    code = (
        "import sys, zeus_run, zeus_run.integrations, zeus_run.integrations._driver, zeus_run.cli; "
        "print(sorted(m for m in ('transformers', 'lightning', 'torch') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
