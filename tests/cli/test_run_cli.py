"""End-to-end: the real CLI (called in-process) launching small scripts as subprocesses."""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import SCRIPTS
from tests.factories import CliResult, job_spec, zeus_run_cli, zeus_run_process

FAKE = str(SCRIPTS / "fake_train.py")


def spec_text(extra_args: str = "", body: str = "") -> str:
    """`tests.factories.job_spec`, ``extra_args`` added to the script's command line."""
    return job_spec(body, args=extra_args.split())


def zeus(*args: str, cwd: Path | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``zeus-run ARGS`` in a process of its own (`tests.factories.zeus_run_process`), for the modules that test a
    process's behaviour; ``timeout`` fails a hang."""
    return zeus_run_process(*args, cwd=cwd, timeout=timeout, env={**os.environ, "COLUMNS": "200"})


def zeus_in(*args: str, cwd: Path | None = None) -> CliResult:
    """``zeus-run ARGS`` in-process (`tests.factories.zeus_run_cli`): no process behaviour is under test; the trials
    it launches are processes."""
    return zeus_run_cli(*args, cwd=cwd, env={"COLUMNS": "200"})


def history(spec: Path) -> list[dict]:
    lines = (spec.parent / "runs" / "history.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def test_converging_trial(write_spec):
    spec = write_spec(spec_text())
    r = zeus_in("run", str(spec), "--no-output")
    assert r.returncode == 0, r.stderr
    (rec,) = history(spec)
    assert rec["reached"] is True and rec["stop_reason"] == "target_reached"
    assert rec["epochs"] == 2 and rec["batch_size"] == 2 and rec["metrics"] == [0.5, 1.0]
    assert rec["energy_source"] == "estimate" and rec["estimated"] is True
    assert rec["energy"] == pytest.approx(100 * rec["time"], rel=0.05)
    assert rec["cost"] == pytest.approx(0.5 * rec["energy"] + 0.5 * 100 * rec["time"], rel=1e-6)
    run_dir = spec.parent / "runs"
    assert (run_dir / "spec.yaml").exists()
    assert (run_dir / rec["log"]).read_text().count("done") == 2


#: The paper's policy: it explores (and early-stops) on a two-recurrence run, where zeus-voi plans no exploration.
ZEUS = "optimizer: {policy: zeus}\n"


def test_never_reaching_target_hits_max_epochs(write_spec):
    # zeus: its pruning explores in recurrence 2 (zeus-voi does not, with one recurrence left)
    spec = write_spec(spec_text(body="recurrences: 2\nbeta: null\n" + ZEUS).replace("recurrences: 1\n", ""))
    r = zeus_in("run", str(spec), "--no-output")
    assert r.returncode == 0, r.stderr
    recs = history(spec)
    assert [x["batch_size"] for x in recs] == [2, 1, 4]
    assert recs[1]["stop_reason"] == "max_epochs" and recs[1]["epochs"] == 5 and recs[1]["reached"] is False
    assert recs[2]["reached"] is True and recs[2]["recurrence"] == 2 and recs[2]["attempt"] == 2


def test_crashing_trial_is_a_failed_trial(write_spec):
    spec = write_spec(
        spec_text("--crash-at 2 --crash-bs 1", "recurrences: 2\nbeta: null\n" + ZEUS).replace("recurrences: 1\n", "")
    )
    r = zeus_in("run", str(spec), "--no-output")
    assert r.returncode == 0, r.stderr
    crashed = history(spec)[1]
    assert crashed["stop_reason"] == "crashed" and crashed["exit_code"] == 3
    assert crashed["reached"] is False and crashed["observed"] is True
    assert "boom at epoch 2" in crashed["message"]


def test_cost_threshold_stops_early_and_kills_the_process_group(write_spec, tmp_path):
    pidfile = tmp_path / "pids"
    spec = write_spec(
        spec_text(
            f"--epoch-time 0.15 --ignore-stop --pid-file {pidfile}",
            "recurrences: 2\nbeta: 1.5\nmax_epochs: 30\nstop: {grace: 1}\n" + ZEUS,  # it ignores the stop file
        )
        .replace("recurrences: 1\n", "")
        .replace("max_epochs: 5\n", "")
    )
    r = zeus_in("run", str(spec), "--no-output")
    assert r.returncode == 0, r.stderr
    recs = history(spec)
    stopped = recs[1]
    assert stopped["batch_size"] == 1 and stopped["stop_reason"] == "cost_threshold"
    # Recurrence 1 cost C over 2 epochs; threshold 1.5 C: the launcher stops before the next epoch would cross
    # it (about 3 epochs of an idle machine; on a loaded one the epochs' costs vary, so a few more or fewer).
    assert stopped["cost_threshold"] == pytest.approx(1.5 * recs[0]["cost"])
    assert 1 <= stopped["epochs"] < 30
    # Charged up to the moment it was stopped: a little over the threshold, more on a loaded machine,
    # far below the 30 epochs it would have run without the early stop.
    assert stopped["cost"] <= stopped["cost_threshold"] * 1.15
    pid, child = (int(x) for x in pidfile.read_text().split())
    deadline = time.monotonic() + 30  # the run ended after the trial: its process group was killed then
    while any(alive(p) for p in (pid, child)) and time.monotonic() < deadline:
        time.sleep(0.05)
    for p in (pid, child):
        assert not alive(p), f"process {p} survived the trial"


def alive(pid: int) -> bool:
    """True if pid runs (a zombie awaiting a reaper that is not ours counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_metric_read_by_regex_from_plain_prints(write_spec):
    spec = write_spec(spec_text("--mode print", "metric:\n  regex: 'val_acc=([0-9.]+)'\n"))
    r = zeus_in("run", str(spec), "--no-output")
    assert r.returncode == 0, r.stderr
    (rec,) = history(spec)
    assert rec["reached"] is True and rec["metrics"] == [0.5, 1.0]


def test_multi_recurrence_history_has_one_valid_record_per_trial(write_spec):
    spec = write_spec(spec_text(body="recurrences: 6\n").replace("recurrences: 1\n", ""))
    r = zeus_in("run", str(spec), "--no-output")
    assert r.returncode == 0, r.stderr
    recs = history(spec)
    trial_dirs = sorted((spec.parent / "runs" / "trials").iterdir())
    assert len(recs) == len(trial_dirs)
    assert [x["trial"] for x in recs] == list(range(len(recs)))
    assert sorted({x["recurrence"] for x in recs if x["reached"]}) == [1, 2, 3, 4, 5, 6]
    for x in recs:
        assert x["schema"] == 1 and x["kind"] == "real" and x["cost"] > 0
        assert (x["stop_reason"] == "target_reached") == x["reached"]
    # History command renders it; JSON and CSV go to stdout.
    h = zeus_in("history", str(spec.parent / "runs"))
    assert h.returncode == 0 and "Recurrences converged: 6" in h.stdout
    j = zeus_in("history", str(spec.parent / "runs"), "--format", "json")
    assert len(json.loads(j.stdout)["trials"]) == len(recs)
    c = zeus_in("history", str(spec.parent / "runs"), "--format", "csv")
    assert len(c.stdout.strip().splitlines()) == len(recs) + 1


def test_rerun_of_a_finished_job_resumes_and_runs_nothing(write_spec):
    spec = write_spec(spec_text())
    assert zeus_in("run", str(spec), "--no-output").returncode == 0
    r = zeus_in("run", str(spec), "--no-output")
    assert r.returncode == 0 and len(history(spec)) == 1


# -- bad input: one paragraph, exit code 2, no traceback, nothing half-written ----------


def test_missing_spec_file(tmp_path):
    r = zeus_in("run", str(tmp_path / "nope.yaml"))
    assert r.returncode == 2
    assert "does not exist" in r.stderr and "Traceback" not in r.stderr


def test_default_command_is_run(tmp_path):
    r = zeus_in(str(tmp_path / "nope.yaml"))
    assert r.returncode == 2 and "does not exist" in r.stderr


def test_missing_training_script(write_spec):
    spec = write_spec(spec_text().replace(FAKE, "/nonexistent/train.py"))
    r = zeus_in("run", str(spec))
    assert r.returncode == 2, r.stderr
    assert "does not exist" in r.stderr and "/nonexistent/train.py" in r.stderr and "Traceback" not in r.stderr
    assert not (spec.parent / "runs" / "history.jsonl").exists()


def test_unwritable_run_directory(write_spec, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    spec = write_spec(spec_text().replace("run_dir: runs", f"run_dir: {blocker}/runs"))
    r = zeus_in("run", str(spec))
    assert r.returncode == 2
    assert "Cannot create run directory" in r.stderr and "Traceback" not in r.stderr


def test_spec_error_exit_code_and_message(write_spec):
    spec = write_spec(spec_text().replace("default_batch_size: 2", "default_batch_size: 3"))
    r = zeus_in("check", str(spec))
    assert r.returncode == 2
    assert "default_batch_size = 3" in r.stderr and "Traceback" not in r.stderr


def test_default_that_never_converges_is_a_clear_error(write_spec):
    spec = write_spec(spec_text().replace("default_batch_size: 2", "default_batch_size: 1"))
    r = zeus_in("run", str(spec), "--no-output")
    assert r.returncode == 1
    assert "first recurrence" in r.stderr and "batch size 1" in r.stderr
    assert len(history(spec)) == 1  # the failed trial is still recorded


def test_after_the_first_recurrence_failed_and_the_script_was_fixed_replay_audits_every_record(write_spec):
    """The run stops when the default batch size does not converge; fixed, the same command resumes, and the
    audit re-derives the decisions after the stop too (it used to stop checking there and say "all")."""
    broken = spec_text(body="recurrences: 3").replace("recurrences: 1\n", "").replace('"1:0,2:2,4:3"', '"1:0,2:0,4:3"')
    spec = write_spec(broken)
    assert zeus_in("run", str(spec), "--no-output").returncode == 1
    spec.write_text(broken.replace('"1:0,2:0,4:3"', '"1:0,2:2,4:3"'))  # the script fixed: not a decision setting
    r = zeus_in("run", str(spec), "--no-output")
    assert r.returncode == 0, r.stderr
    records = history(spec)
    assert len(records) >= 4 and records[0]["reached"] is False
    audit = zeus_in("replay", str(spec.parent / "runs"), "--format", "json")
    assert audit.returncode == 0, audit.stderr
    assert json.loads(audit.stdout)["checked"] == len(records)


def test_every_command_has_help_with_an_example():
    for cmd in ("run", "history", "check"):
        r = zeus_in(cmd, "--help")
        assert r.returncode == 0 and "Example" in r.stdout, cmd
    r = zeus_in("--version")
    assert r.returncode == 0 and r.stdout.startswith("zeus-run ")


@pytest.mark.parametrize("run_dir", ["runs", "runs/nightly/job"])
def test_a_spec_that_fails_at_start_leaves_no_run_directory(tmp_path, run_dir):
    spec = tmp_path / "job.yaml"
    spec.write_text(
        spec_text()
        .replace("energy: {source: estimate, watts: 100, basis: wall-time}", "energy: {source: nvml}")
        .replace("run_dir: runs", f"run_dir: {run_dir}")
    )
    r = zeus_in("run", str(spec), "--no-output")
    assert r.returncode == 2 and "nvml" in r.stderr.lower(), r.stderr
    assert not (tmp_path / "runs").exists()  # nor the parents it created for it


def test_a_run_dir_that_is_a_file_is_a_usage_error(write_spec, tmp_path):
    spec = write_spec(spec_text())
    (tmp_path / "notes.txt").write_text("mine\n")
    r = zeus_in("run", str(spec), "--run-dir", str(tmp_path / "notes.txt"), "--no-output")
    assert r.returncode == 2, r.stderr
    assert "--run-dir" in r.stderr and "is not a directory" in r.stderr and "internal error" not in r.stderr
    assert (tmp_path / "notes.txt").read_text() == "mine\n"


def test_history_csv_writes_provenance_as_json(tmp_path):
    spec = tmp_path / "job.yaml"
    spec.write_text(spec_text())
    assert zeus_in("run", str(spec), "--no-output").returncode == 0
    r = zeus_in("history", str(tmp_path / "runs"), "--format", "csv")
    assert r.returncode == 0, r.stderr
    row = next(csv.DictReader(io.StringIO(r.stdout)))
    assert json.loads(row["provenance"])["host"]


def test_relative_run_dir_from_another_directory(write_spec, tmp_path):
    """`--run-dir` relative to the caller's directory reaches a script that runs in the spec's directory.

    The trial's files (events, heartbeat) are handed to the script as absolute paths; a relative
    one would point into the script's working directory and the first trial would crash.
    """
    spec = write_spec(spec_text())
    caller = tmp_path / "elsewhere"
    caller.mkdir()
    r = zeus_in("run", str(spec), "--run-dir", "rel-runs", "--no-output", cwd=caller)
    assert r.returncode == 0, r.stderr
    (line,) = (caller / "rel-runs" / "history.jsonl").read_text().splitlines()
    rec = json.loads(line)
    assert rec["reached"] is True and rec["stop_reason"] == "target_reached"


def test_a_run_directory_runs_as_the_job_with_its_own_spec(write_spec, tmp_path):
    spec = write_spec(spec_text(body="recurrences: null\n").replace("recurrences: 1\n", ""))
    r = zeus("run", str(spec), "--no-output", "--next")
    assert r.returncode == 0, r.stderr
    run_dir = spec.parent / "runs"
    spec.unlink()  # the run directory is the job now
    r = zeus("run", str(run_dir), "--no-output", "--next", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    r = zeus("run", str(run_dir / "spec.yaml"), "--no-output", "--next", cwd=tmp_path)  # the stored spec as it is
    assert r.returncode == 0, r.stderr
    recs = history(spec)
    assert [x["recurrence"] for x in recs if x["reached"]] == [1, 2, 3]
    assert not list(run_dir.glob("spec.*.yaml"))  # the same spec each time: nothing replaced


def test_warm_from_a_symlink_loop_is_a_usage_error_not_an_internal_one(write_spec, tmp_path):
    spec = write_spec(spec_text(body="optimizer: {policy: zeus-voi}\n"))
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    r = zeus("run", str(spec), "--no-output", "--warm-from", str(tmp_path / "a"))
    assert r.returncode == 2, r.stderr
    assert "--warm-from" in r.stderr and "not a usable path" in r.stderr and "internal error" not in r.stderr
    r = zeus("run", str(spec), "--no-output", "--run-dir", str(tmp_path / "a" / "runs"))  # the loop as a run directory
    assert r.returncode == 2 and "is not a directory" in r.stderr and "internal error" not in r.stderr, r.stderr
