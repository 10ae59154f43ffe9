"""A trial that reached its target while its launcher was dead is recorded as reached, from its event log.

The launcher is killed with SIGKILL while the script trains; the script (in a session of its own) goes on,
reports its epochs into its event log through `zeus_run.train`, reaches the target and exits. The next
launcher records the trial from that log (its epochs, the time from its launch, an imputed energy said to
be one), instead of recording it interrupted with 0 epochs and running it again.
"""

from __future__ import annotations

import datetime
import json
import signal
import textwrap
import time
from pathlib import Path

import pytest

from tests.cli.test_run_cli import alive, zeus
from tests.conftest import PYTHON, REPO
from tests.launcher.test_faults import launch, wait_for

#: Reports through zeus_run.train and prints nothing (its output pipe dies with the launcher). It waits in its
#: first epoch until ``go`` exists, so the test can kill the launcher there.
SCRIPT = """
import os, sys, time
sys.path.insert(0, {repo!r})
from zeus_run.train import Trial

trial = Trial.from_env()
with open({pid!r} + ".tmp", "w") as f:
    f.write(str(os.getpid()))
os.replace({pid!r} + ".tmp", {pid!r})
metrics = {metrics!r}
for epoch in trial.epochs():
    while not os.path.exists({go!r}):
        time.sleep(0.02)
    trial.report(metrics[epoch - 1])
    if {prints!r}:
        print(f"epoch {{epoch}} val_acc={{metrics[epoch - 1]}}", flush=True)  # into the launcher's output
trial.close()
if {prints!r}:
    print("saved", flush=True)
with open({done!r}, "w") as f:
    f.write("ran to its end")
"""


#: Prints each epoch's metric, read by the spec's regex (no event log, no zeus_run import), with Python's own
#: buffering where PYTHONUNBUFFERED is unset (a line at a time: it flushes). It waits in its second epoch until
#: ``go`` exists, then saves its model after the target.
REGEX_SCRIPT = """
import os, sys, time
with open({pid!r} + ".tmp", "w") as f:
    f.write(str(os.getpid()))
os.replace({pid!r} + ".tmp", {pid!r})
metrics = {metrics!r}
for epoch, metric in enumerate(metrics, 1):
    print(f"epoch {{epoch}} val_acc={{metric}}", flush=True)
    while epoch == 1 and not os.path.exists({go!r}):
        time.sleep(0.02)
    if metric >= 0.9:
        break
time.sleep(0.3)  # saving the model, after the target
print("saved", flush=True)
with open({done!r}, "w") as f:
    f.write("ran to its end")
"""


def _spec(
    tmp_path: Path, metrics: list[float], prints: bool = False, regex: bool = False, recurrences: int = 1
) -> Path:
    script = tmp_path / "train.py"
    pid, go, done = tmp_path / "pid", tmp_path / "go", tmp_path / "done"
    script.write_text(
        (REGEX_SCRIPT if regex else SCRIPT).format(
            repo=str(REPO), pid=str(pid), go=str(go), done=str(done), metrics=metrics, prints=prints
        )
    )
    metric = "metric: {source: regex, regex: 'val_acc=([0-9.]+)'}" if regex else ""
    spec = tmp_path / "job.yaml"
    spec.write_text(
        textwrap.dedent(
            f"""
            name: orphan
            command: ["{PYTHON}", "{script}"]
            batch_sizes: [1, 2]
            default_batch_size: 2
            target_metric: 0.9
            max_epochs: {len(metrics)}
            recurrences: {recurrences}
            energy: {{source: estimate, watts: 100}}
            run_dir: runs
            {metric}
            """
        )
    )
    return spec


def _orphaned(tmp_path: Path, spec: Path) -> None:
    """Run the job, kill its launcher in the first epoch, and let the script go on to its end."""
    launcher = launch(spec)
    pid_file = tmp_path / "pid"
    wait_for(lambda: pid_file.exists() and (tmp_path / "runs" / "running.json").exists())
    launcher.send_signal(signal.SIGKILL)
    launcher.communicate(timeout=30)
    (tmp_path / "go").touch()
    script = int(pid_file.read_text())
    wait_for(lambda: not alive(script), timeout=60)


def _records(tmp_path: Path) -> list[dict]:
    return [json.loads(x) for x in (tmp_path / "runs" / "history.jsonl").read_text().splitlines()]


def test_a_trial_that_reached_its_target_while_the_launcher_was_dead_is_recorded_reached(tmp_path):
    spec = _spec(tmp_path, [0.5, 0.7, 0.95])
    _orphaned(tmp_path, spec)
    r = zeus("run", str(spec), "--no-output")
    assert r.returncode == 0, r.stderr
    records = _records(tmp_path)
    assert len(records) == 1, [(r["attempt"], r["stop_reason"]) for r in records]  # not interrupted, not run again
    (rec,) = records
    assert (rec["recurrence"], rec["attempt"], rec["stop_reason"], rec["reached"]) == (1, 1, "target_reached", True)
    assert rec["epochs"] == 3 and rec["metrics"] == [0.5, 0.7, 0.95]
    assert rec["observed"] is True
    assert rec["energy_source"] == "unmeasured" and rec["estimated"] is True  # said: not measured
    assert rec["energy_method"] == "watts-x-time"  # no measured trial in the job to impute from
    assert rec["energy"] > 0 and rec["time"] > 0
    assert "taken over from its event log" in rec["message"], rec["message"]
    audit = zeus("replay", str(tmp_path / "runs"))
    assert audit.returncode == 0, audit.stdout + audit.stderr


def test_an_orphan_that_prints_every_epoch_survives_its_launcher_and_is_adopted(tmp_path):
    """Issue 46, item 4: the script prints each epoch (flushed, as logging to stderr is) into its output; its
    launcher is killed with SIGKILL in its first epoch. It runs to its end all the same (its output does not
    need the dead launcher's pipe), and the next trigger records its epochs as reached without running it again."""
    spec = _spec(tmp_path, [0.5, 0.7, 0.95], prints=True)
    _orphaned(tmp_path, spec)
    done = tmp_path / "done"
    assert done.exists(), "the orphan did not run to its end (killed by a broken pipe at its first print?)"
    assert done.read_text() == "ran to its end"
    r = zeus("run", str(spec), "--no-output")
    assert r.returncode == 0, r.stderr
    records = _records(tmp_path)
    assert len(records) == 1, [(r["attempt"], r["stop_reason"]) for r in records]  # adopted, not re-run
    (rec,) = records
    assert (rec["recurrence"], rec["attempt"], rec["stop_reason"], rec["reached"]) == (1, 1, "target_reached", True)
    assert rec["epochs"] == 3 and rec["metrics"] == [0.5, 0.7, 0.95]
    assert "taken over from its event log" in rec["message"], rec["message"]
    # Charged to its exit (its print and close after the target), the part after the target at the same power.
    assert rec["after_time"] > 0 and rec["after_energy"] == pytest.approx(100.0 * rec["after_time"], rel=0.01), rec


def test_an_orphan_that_did_not_reach_the_target_is_still_interrupted_and_run_again(tmp_path):
    spec = _spec(tmp_path, [0.5, 0.6, 0.7])
    _orphaned(tmp_path, spec)
    r = zeus("run", str(spec), "--no-output")
    assert r.returncode == 1, r.stderr  # the re-run does not reach the target either: the job cannot converge
    records = _records(tmp_path)
    assert records[0]["stop_reason"] == "interrupted" and records[0]["epochs"] == 0
    assert "died" in records[0]["message"]
    assert [(x["recurrence"], x["attempt"]) for x in records[:2]] == [(1, 1), (1, 2)]  # run again
    # It ran (energy really spent counts): from its launch to its last write, charged at the job's watts.
    assert records[0]["time"] > 0 and records[0]["energy"] == pytest.approx(100.0 * records[0]["time"])
    assert records[0]["observed"] is False and "until its last write" in records[0]["message"]


def test_an_orphan_still_running_is_stopped_and_its_span_charged(tmp_path):
    spec = _spec(tmp_path, [0.5, 0.6, 0.7])
    launcher = launch(spec)
    pid_file = tmp_path / "pid"
    wait_for(lambda: pid_file.exists() and (tmp_path / "runs" / "running.json").exists())
    launcher.send_signal(signal.SIGKILL)
    launcher.communicate(timeout=30)
    script = int(pid_file.read_text())
    assert alive(script)  # waiting in its first epoch, with no launcher
    before = time.time()
    second = launch(spec)  # stops the orphan, records it, runs the recurrence again
    history = tmp_path / "runs" / "history.jsonl"
    wait_for(lambda: history.exists() and history.read_text().strip() != "", timeout=120)
    after = time.time()
    (tmp_path / "go").touch()  # the re-run goes on
    second.communicate(timeout=120)
    assert not alive(script)
    rec = _records(tmp_path)[0]
    assert (rec["stop_reason"], rec["observed"]) == ("interrupted", False)
    started = datetime.datetime.fromisoformat(rec["started_at"]).timestamp()
    assert before - started <= rec["time"] <= after - started  # its launch to the moment it was stopped
    assert rec["energy"] == pytest.approx(100.0 * rec["time"]) and rec["energy_source"] == "unmeasured"
    assert "until a later launcher stopped it" in rec["message"], rec["message"]
    trial_dir = tmp_path / "runs" / "trials" / "r0001-t01"
    assert float((trial_dir / "killed_at").read_text()) == pytest.approx(started + rec["time"], abs=0.01)
    audit = zeus("replay", str(tmp_path / "runs"))
    assert audit.returncode == 0, audit.stdout + audit.stderr


def test_an_orphan_whose_metric_is_read_by_regex_is_adopted_reached_with_its_whole_process(tmp_path):
    """Issue 53, item 3: the launcher is killed with SIGKILL after the first epoch of a script whose metric is
    read by a regex over its output. The script goes on through the relay, reaches the target at epoch 4 and
    saves its model. The next trigger (`run --next`) reads its epochs from the output log the relay kept
    writing: one record, reached, charged from its launch to the end of its output, the recurrence not run
    again. Triggered again the same night (the job's cadence unknown: within half a day), it runs no other
    recurrence (`zeus_run.door.calendar`)."""
    spec = _spec(tmp_path, [0.5, 0.6, 0.7, 0.95], regex=True, recurrences=5)
    pid_file = tmp_path / "pid"
    launcher = launch(spec, "--next")
    trial_dir = tmp_path / "runs" / "trials" / "r0001-t01"
    wait_for(lambda: b"epoch 1" in _read(trial_dir / "output.log"))  # the launcher's relay has logged epoch 1
    launcher.send_signal(signal.SIGKILL)
    launcher.communicate(timeout=30)
    killed = time.time()
    (tmp_path / "go").touch()
    wait_for(lambda: not alive(int(pid_file.read_text())), timeout=60)
    assert (tmp_path / "done").read_text() == "ran to its end"  # not killed by a broken pipe
    assert b"saved" in _read(trial_dir / "output.log")  # the relay wrote the log on alone
    r = zeus("run", str(spec), "--no-output", "--next")
    assert r.returncode == 0, r.stderr
    (rec,) = _records(tmp_path)  # adopted: not interrupted, not run again, and tonight's: none other
    assert (rec["recurrence"], rec["attempt"], rec["stop_reason"], rec["reached"]) == (1, 1, "target_reached", True)
    assert "runs no other" in r.stderr, r.stderr
    assert rec["metrics"] == [0.5, 0.6, 0.7, 0.95] and rec["epochs"] == 4 and rec["observed"] is True
    assert "taken over from its output log" in rec["message"], rec["message"]
    started = datetime.datetime.fromisoformat(rec["started_at"]).timestamp()
    # The whole process: its epochs after the kill and its save (0.3 s) after the target are charged.
    assert started + rec["time"] >= killed - 0.5, rec
    assert rec["after_time"] >= 0.25 and rec["after_energy"] == pytest.approx(100.0 * rec["after_time"], rel=0.01)
    audit = zeus("replay", str(tmp_path / "runs"))
    assert audit.returncode == 0, audit.stdout + audit.stderr


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:
        return b""
