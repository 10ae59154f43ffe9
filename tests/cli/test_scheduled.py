"""One recurrence per trigger: the crontab and scrontab examples' command lines, run as cron would."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.cli.test_run_cli import spec_text, zeus
from zeus_run.errors import BUSY_EXIT_CODE

EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "scheduling"
K8S_WRAPPER = EXAMPLES / "zeus-run-trigger.sh"


def cron_command(name: str) -> str:
    """The shell command of the example's one schedule line (the five time fields dropped)."""
    lines = [ln for ln in (EXAMPLES / name).read_text().splitlines() if ln.strip() and not ln.startswith("#")]
    (line,) = lines
    return line.split(None, 5)[5]


@pytest.fixture
def cron_home(tmp_path: Path) -> dict[str, str]:
    """A HOME with jobs/nightly/job.yaml and zeus-run in jobs/nightly/.venv/bin, and cron's environment.

    cron runs a line with ``/bin/sh``, ``PATH=/usr/bin:/bin``, ``HOME`` and ``SHELL`` and nothing
    else (no ``PYTHONUNBUFFERED``, no virtual environment on PATH): ``env -i`` gives exactly that.
    """
    job = tmp_path / "jobs" / "nightly"
    job.mkdir(parents=True)
    (job / "job.yaml").write_text(spec_text().replace("recurrences: 1\n", "recurrences: null\n"))
    bin_dir = job / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    shim = bin_dir / "zeus-run"  # the venv's console script, as pip writes it: an absolute interpreter
    shim.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -m zeus_run "$@"\n')
    shim.chmod(0o755)
    return {"HOME": str(tmp_path), "PATH": "/usr/bin:/bin", "SHELL": "/bin/sh"}


def trigger(env: dict[str, str], command: str) -> subprocess.CompletedProcess:
    cron_env = ["env", "-i", *(f"{k}={v}" for k, v in env.items())]
    return subprocess.run([*cron_env, "/bin/sh", "-c", command], capture_output=True, text=True, timeout=120)


def records(env: dict[str, str]) -> list[dict]:
    path = Path(env["HOME"]) / "jobs" / "nightly" / "runs" / "history.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.parametrize("example", ["crontab", "scrontab"])
def test_five_triggers_give_recurrences_1_to_5_and_the_audit_passes(cron_home, example):
    command = cron_command(example)
    assert '"$HOME/jobs/nightly/.venv/bin/zeus-run" run job.yaml --next -q' in command
    for n in range(1, 6):
        r = trigger(cron_home, command)
        assert r.returncode == 0, r.stderr
        assert r.stdout == "" and r.stderr == ""  # quiet: cron mails nothing
        recs = records(cron_home)
        assert max(x["recurrence"] for x in recs) == n
        assert all(x["triggered_at"] for x in recs)
    assert sorted({x["recurrence"] for x in recs}) == [1, 2, 3, 4, 5]
    log = Path(cron_home["HOME"]) / "jobs" / "nightly" / "zeus-run.log"
    assert not log.exists() or log.read_text() == ""  # no table appended per trigger
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
    first = subprocess.Popen(["env", "-i", *(f"{k}={v}" for k, v in cron_home.items()), "/bin/sh", "-c", command])
    try:
        deadline = time.monotonic() + 60
        while not (job / "runs" / "running.json").exists():
            assert first.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        second = trigger(cron_home, 'cd "$HOME/jobs/nightly" && .venv/bin/zeus-run run job.yaml --next')
        wrapped = trigger(cron_home, f'cd "$HOME/jobs/nightly" && PATH=.venv/bin:$PATH sh {K8S_WRAPPER}')
    finally:
        assert first.wait(timeout=120) == 0
    assert second.returncode == BUSY_EXIT_CODE == 75
    (line,) = [ln for ln in second.stderr.splitlines() if ln.strip()]
    assert f"on {socket.gethostname()}, since " in line and "pid " in line
    assert line.startswith("Run directory ") and "Error:" not in line  # a skip, not an error
    assert [x["recurrence"] for x in records(cron_home)] == [1]  # nothing piled up
    assert wrapped.returncode == 0, wrapped.stderr  # the Kubernetes wrapper: busy is not a failure


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
    tested = cron_command("scrontab")
    dag = (EXAMPLES / "airflow_dag.py").read_text()
    assert f"bash_command='{tested}'" in dag and "skip_on_exit_code=75" in dag
    assert "from airflow.sdk import dag" in dag  # Airflow 3's import paths
    assert "from airflow.providers.standard.operators.bash import BashOperator" in dag
    scron = (EXAMPLES / "scrontab").read_text()
    assert "#SCRON --gpus=1" in scron and "#SCRON --output=" in scron
    container = k8s_container()
    assert container["command"] == ["sh", "-c"] and container["workingDir"].endswith("jobs/nightly")
    wrapper = [ln for ln in K8S_WRAPPER.read_text().splitlines() if ln and not ln.startswith("#")]
    assert container["args"][0] == "\n".join(wrapper).replace(' "$@"', "") + "\n"  # the tested wrapper


def k8s_container() -> dict:
    import yaml

    job = yaml.safe_load((EXAMPLES / "k8s-cronjob.yaml").read_text())
    (container,) = job["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"]
    return container


def _own_pid_namespace() -> str | None:
    """Why a PID namespace of its own cannot be had here (None: it can)."""
    if os.geteuid() != 0:
        return "needs root for unshare --pid (a PID namespace of its own)"
    if shutil.which("unshare") is None:
        return "no unshare(1) on this machine"
    probe = subprocess.run(
        ["unshare", "--pid", "--fork", "--kill-child", "--mount-proc", "true"], capture_output=True, timeout=30
    )
    return None if probe.returncode == 0 else f"unshare --pid fails here: {probe.stderr.decode().strip()}"


def _children(pid: int) -> list[int]:
    return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def test_sigterm_to_pid_1_of_the_kubernetes_pod_stops_zeus_run_gracefully(cron_home):
    """The CronJob's container, its shell as PID 1 of a PID namespace of its own (as in a pod), gets SIGTERM (a pod's
    deletion): zeus-run stops gracefully, the trial's script gets its stop and saves its model, and the trial is
    recorded as interrupted."""
    why = _own_pid_namespace()
    if why is not None:
        pytest.skip(why)
    job = Path(cron_home["HOME"]) / "jobs" / "nightly"
    script = Path(__file__).resolve().parents[1] / "scripts" / "graceful_train.py"
    (job / "job.yaml").write_text(
        f"""
name: pod
command: ["{sys.executable}", "{script}", "--sigterm", "save", "--forever", "--epoch-time", "0.2"]
batch_sizes: [1, 2]
default_batch_size: 1
target_metric: 0.9
max_epochs: 1000
recurrences: null
stop: {{term_grace: 2, kill_grace: 60}}  # the script ignores the stop file (--forever): SIGTERM after 2 s
energy: {{source: estimate, watts: 100, basis: wall-time}}
run_dir: runs
"""
    )
    container = k8s_container()
    env = {**cron_home, "PATH": f"{job / '.venv' / 'bin'}:/usr/bin:/bin"}
    pod = subprocess.Popen(  # --kill-child: the pod goes with unshare, whatever the test does
        ["unshare", "--pid", "--fork", "--kill-child", "--mount-proc", *container["command"], *container["args"]],
        cwd=job,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        events = job / "runs"
        deadline = time.monotonic() + 120
        # A state, not a duration: the trial's script has reported an epoch (it runs, its handler is set).
        while not any(p.stat().st_size > 0 for p in events.glob("**/events.jsonl")):
            assert pod.poll() is None, pod.communicate()
            assert time.monotonic() < deadline, "the trial never reported an epoch"
            time.sleep(0.1)
        (pid1,) = _children(pod.pid)  # unshare's child: PID 1 of the pod's namespace, the wrapper's shell
        nspid = Path(f"/proc/{pid1}/status").read_text().split("NSpid:")[1].splitlines()[0]  # its line alone
        assert nspid.split()[-1] == "1"
        os.kill(pid1, signal.SIGTERM)
        _, err = pod.communicate(timeout=120)
    finally:
        if pod.poll() is None:  # the wrapper dropped SIGTERM: end the pod (unshare takes its namespace along)
            pod.kill()
            pod.communicate()
    assert pod.returncode == 128 + signal.SIGTERM, err  # zeus-run's own code for SIGTERM, passed on
    (model,) = events.glob("**/model.txt")
    assert model.read_text() == "sigterm"  # the script got its stop and saved
    (record,) = records(cron_home)
    assert record["stop_reason"] == "interrupted"
    assert "Traceback" not in err


@pytest.mark.parametrize(("code", "expected"), [(0, 0), (75, 0), (1, 1), (2, 2), (130, 130)])
def test_the_kubernetes_wrapper_counts_busy_as_success_and_passes_other_codes(tmp_path, code, expected):
    fake = tmp_path / "zeus-run"
    fake.write_text(f"#!/bin/sh\nexit {code}\n")
    fake.chmod(0o755)
    r = subprocess.run(["sh", str(K8S_WRAPPER)], env={"PATH": f"{tmp_path}:/usr/bin:/bin"}, timeout=30)
    assert r.returncode == expected
