"""What the launcher keeps as evidence after a stop decision, and when an early stop's grace starts."""

from __future__ import annotations

import dataclasses
import textwrap
from pathlib import Path

from tests.trial.test_stop import plan, run
from zeus_run.contract import StopReason

#: Waits (a state, not a duration) until zeus-run asked the script to stop.
WAIT_FOR_STOP = """
import os, sys, time
stop = os.environ["ZEUS_STOP_FILE"]
while not os.path.exists(stop):
    time.sleep(0.01)
"""


def script(tmp_path: Path, body: str) -> str:
    path = tmp_path / "train.py"
    path.write_text(WAIT_FOR_STOP + textwrap.dedent(body))
    return str(path)


def test_a_metric_written_after_an_early_stop_is_kept_as_evidence(tmp_path):
    # Cut by the cost threshold during its first epoch; the script finishes that epoch and prints its metric.
    p = plan(tmp_path, metric_regex=r"val_acc=([0-9.]+)", cost_threshold=50.0, term_grace=60.0)
    p = dataclasses.replace(p, argv=(p.argv[0], script(tmp_path, 'print("val_acc=0.30", flush=True)\n')))
    out = run(p)
    assert out.stop_reason is StopReason.COST_THRESHOLD and out.ended == "exited"
    assert out.metrics == () and out.epochs == 0  # not counted: it came after the decision
    assert out.after_metrics == (0.30,)  # but it proves the metric can be read


def test_the_epoch_an_early_stop_landed_in_that_reaches_the_target_is_recorded_reached(tmp_path):
    body = """
    print("val_acc=0.95", flush=True)
    open(os.path.join(os.environ["ZEUS_LOG_DIR"], "model.txt"), "w").write("saved")
    """
    p = plan(tmp_path, metric_regex=r"val_acc=([0-9.]+)", cost_threshold=50.0, term_grace=60.0)
    p = dataclasses.replace(p, argv=(p.argv[0], script(tmp_path, body)))
    out = run(p)
    assert out.stop_reason is StopReason.TARGET_REACHED and out.reached and out.metrics == (0.95,)
    assert out.after_metrics is None and out.exit_code == 0 and out.ended == "exited"
    assert (p.log_path.parent / "model.txt").read_text() == "saved"


def test_an_early_stops_grace_starts_once_the_script_can_answer(tmp_path):
    # The decision comes while the script still "imports" for three times the grace; it then
    # starts its Trial, sees the stop file and exits by itself: no SIGTERM.
    body = """
    time.sleep(3.0)
    from zeus_run.train import Trial
    trial = Trial.from_env()
    sys.exit(0 if trial.should_stop() else 5)
    """
    p = plan(tmp_path, cost_threshold=50.0, term_grace=1.0)
    p = dataclasses.replace(p, argv=(p.argv[0], script(tmp_path, body)))
    out = run(p)
    assert out.stop_reason is StopReason.COST_THRESHOLD
    assert (out.ended, out.exit_code) == ("exited", 0)
