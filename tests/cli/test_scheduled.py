"""One recurrence per trigger: the crontab and scrontab examples' command lines, run as cron would."""

from __future__ import annotations

import json
import os
import shlex
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.cli.test_run_cli import spec_text, zeus
from zeus_run.errors import BUSY_EXIT_CODE

EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "scheduling"


def cron_command(name: str) -> str:
    """The shell command of the example's one schedule line (the five time fields dropped)."""
    lines = [ln for ln in (EXAMPLES / name).read_text().splitlines() if ln.strip() and not ln.startswith("#")]
    (line,) = lines
    return line.split(None, 5)[5]


@pytest.fixture
def cron_home(tmp_path: Path) -> dict[str, str]:
    """A HOME with jobs/nightly/job.yaml and a ``zeus-run`` on PATH, as cron's minimal environment has."""
    job = tmp_path / "jobs" / "nightly"
    job.mkdir(parents=True)
    (job / "job.yaml").write_text(spec_text().replace("recurrences: 1\n", "recurrences: null\n"))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "zeus-run"
    shim.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -m zeus_run "$@"\n')
    shim.chmod(0o755)
    root = str(Path(__file__).resolve().parents[2])
    return {"HOME": str(tmp_path), "PATH": f"{bin_dir}:/usr/bin:/bin", "PYTHONPATH": root, "LANG": "C"}


def trigger(env: dict[str, str], command: str) -> subprocess.CompletedProcess:
    return subprocess.run(["/bin/sh", "-c", command], env=env, capture_output=True, text=True, timeout=120)


def records(env: dict[str, str]) -> list[dict]:
    path = Path(env["HOME"]) / "jobs" / "nightly" / "runs" / "history.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.parametrize("example", ["crontab", "scrontab"])
def test_five_triggers_give_recurrences_1_to_5_and_the_audit_passes(cron_home, example):
    command = cron_command(example)
    assert "zeus-run run job.yaml --next" in command
    for n in range(1, 6):
        r = trigger(cron_home, command)
        assert r.returncode == 0, r.stderr
        recs = records(cron_home)
        assert max(x["recurrence"] for x in recs) == n
        assert all(x["triggered_at"] for x in recs)
    assert sorted({x["recurrence"] for x in recs}) == [1, 2, 3, 4, 5]
    assert len({x["triggered_at"] for x in recs}) == 5  # one trigger each
    assert all(x.get("horizon") is None for x in recs)  # open-ended: the optimizer plans with no horizon
    run_dir = Path(cron_home["HOME"]) / "jobs" / "nightly" / "runs"
    audit = zeus("replay", str(run_dir), "--format", "json")
    assert audit.returncode == 0, audit.stderr
    hist = zeus("history", str(run_dir))
    assert hist.returncode == 0, hist.stderr
    day = recs[0]["triggered_at"][:10]
    assert "date" in hist.stdout and hist.stdout.count(day) >= 5  # each recurrence's date


def test_a_second_trigger_while_the_first_runs_exits_at_once_with_the_busy_code(cron_home):
    job = Path(cron_home["HOME"]) / "jobs" / "nightly"
    spec = job / "job.yaml"
    spec.write_text(spec.read_text().replace('"1:0,2:2,4:3"', '"1:0,2:2,4:3", "--epoch-time", "3"'))
    command = cron_command("crontab")
    first = subprocess.Popen(["/bin/sh", "-c", command], env=cron_home)
    try:
        deadline = time.monotonic() + 60
        while not (job / "runs" / "running.json").exists():
            assert first.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        second = trigger(cron_home, 'cd "$HOME/jobs/nightly" && zeus-run run job.yaml --next')
    finally:
        assert first.wait(timeout=120) == 0
    assert second.returncode == BUSY_EXIT_CODE == 75
    (line,) = [ln for ln in second.stderr.splitlines() if ln.strip()]
    assert f"on {socket.gethostname()}, since " in line and "pid " in line
    assert [x["recurrence"] for x in records(cron_home)] == [1]  # nothing piled up


def test_bare_next_means_one_and_next_k_runs_k(write_spec):
    spec = write_spec(spec_text())
    assert zeus("run", str(spec), "--no-output", "--next").returncode == 0
    r = zeus("run", str(spec), "--no-output", "--next", "2")
    assert r.returncode == 0, r.stderr
    lines = (spec.parent / "runs" / "history.jsonl").read_text().splitlines()
    recs = [json.loads(x) for x in lines]
    assert sorted({x["recurrence"] for x in recs}) == [1, 2, 3]
    assert {x.get("horizon") for x in recs} == {1}  # the spec's horizon, not the trigger's count


def test_next_with_recurrences_is_a_usage_error(write_spec):
    spec = write_spec(spec_text())
    r = zeus("run", str(spec), "--next", "-n", "3")
    assert r.returncode == 2 and "pass only one" in r.stderr
    assert not (spec.parent / "runs").exists() or not os.listdir(spec.parent / "runs")


def test_the_airflow_and_kubernetes_examples_run_the_tested_command_line():
    import yaml

    tested = cron_command("scrontab")
    assert f"bash_command='{tested}'" in (EXAMPLES / "airflow_dag.py").read_text()
    assert "skip_on_exit_code=75" in (EXAMPLES / "airflow_dag.py").read_text()
    job = yaml.safe_load((EXAMPLES / "k8s-cronjob.yaml").read_text())
    (container,) = job["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"]
    assert shlex.join(container["command"]) in tested and container["workingDir"].endswith("jobs/nightly")
