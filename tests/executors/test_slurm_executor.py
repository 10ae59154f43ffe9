"""The slurm executor without a cluster: a fake sbatch/squeue/scancel (tests/fake_slurm.py) that really runs the jobs.

The same behaviours against the real Slurm are in tests/test_slurm_run.py.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests import fake_slurm
from tests.conftest import SCRIPTS
from tests.factories import job_spec, make_record
from tests.launcher.test_faults import launch
from zeus_run.contract import RunningMarker
from zeus_run.engine.replay import Knobs, audit
from zeus_run.errors import Interrupted
from zeus_run.executors import EXECUTORS, SlurmExecutor
from zeus_run.executors._slurm_records import _infra_streak
from zeus_run.launcher import run_job
from zeus_run.records import TrialRecord
from zeus_run.rundir.history import read_history
from zeus_run.slurm import SlurmAgentError, SlurmError, run_job_prefix
from zeus_run.spec import load_spec
from zeus_run.trial.agent import AGENT_NAME, HEARTBEAT_NAME, OUTCOME_NAME, heartbeat_age, read_outcome

FAKE = str(SCRIPTS / "fake_train.py")
WAIT = 60.0


def spec_text(needs: str = "1:0,2:2,4:3,8:2", epoch_time: float = 0.05, recurrences: int = 3, **executor: Any) -> str:
    """`tests.factories.job_spec` for job ``k`` on the Slurm executor (``executor`` over its settings)."""
    settings = {"kind": "slurm", "heartbeat_timeout": 30, **executor}
    return job_spec(
        needs=needs,
        args=["--epoch-time", str(epoch_time)],
        name="k",
        batch_sizes=[1, 2, 4, 8],
        max_epochs=4,
        recurrences=recurrences,
        stop="{term_grace: 1, kill_grace: 2}",
        executor=json.dumps(settings),
    )


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Fake Slurm commands first on PATH; returns their state directory (jobs/, calls.log)."""
    state = tmp_path / "slurm"
    fake_slurm.install(tmp_path / "bin", state)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_SLURM_DIR", str(state))
    return state


def calls(state: Path) -> list[str]:
    path = state / "calls.log"
    return path.read_text().splitlines() if path.exists() else []


def jobs(state: Path) -> dict[str, dict]:
    return {p.stem: json.loads(p.read_text()) for p in (state / "jobs").glob("*.json")}


def live_jobs(state: Path) -> list[str]:
    return [i for i, j in jobs(state).items() if j["state"] in ("PENDING", "RUNNING")]


def wait_for(check, what: str, timeout: float = WAIT):
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def check_audit(run_dir: Path) -> list[TrialRecord]:
    records = read_history(run_dir)
    result = audit(records, Knobs.from_run_dir(run_dir))
    assert result.divergence is None, result.divergence.describe()
    return records


def in_thread(spec_path: Path, cancel: threading.Event | None = None) -> tuple[threading.Thread, dict]:
    """run_job in a thread (signals are the main thread's); the result or the error lands in the dict."""
    out: dict = {}

    def work() -> None:
        try:
            out["result"] = run_job(load_spec(spec_path), cancel=cancel)
        except BaseException as exc:  # handed to the test
            out["error"] = exc

    thread = threading.Thread(target=work)
    thread.start()
    return thread, out


def running_trial(run_dir: Path) -> dict:
    """running.json once its trial's job was submitted and its agent beats."""

    def ready() -> dict | None:
        try:
            info = json.loads((run_dir / "running.json").read_text())
        except (OSError, ValueError):
            return None
        if info.get("slurm_job_id") and (Path(info["trial_dir"]) / HEARTBEAT_NAME).exists():
            return info
        return None

    return wait_for(ready, "a running trial with a heartbeat")


def test_each_trial_is_a_job_running_the_agent_and_its_record_names_job_node_and_state(write_spec, fake):
    spec = write_spec(spec_text())
    result = run_job(load_spec(spec))
    run_dir = spec.parent / "runs"
    records = check_audit(run_dir)
    assert len(records) == len(result.new) >= 3 and sum(r.reached for r in records) == 3
    submitted = [c for c in calls(fake) if c.startswith("sbatch")]
    assert len(submitted) == len(records)
    prefix = run_job_prefix("k", run_dir)
    for record, call in zip(records, submitted, strict=True):
        tdir = run_dir / "trials" / f"r{record.recurrence:04d}-t{record.attempt:02d}"
        assert f"--job-name={prefix}{tdir.name} " in call
        assert f"--output={tdir}/output.log " in call and "--open-mode=append" in call
        assert f"--chdir={tdir} " in call
        job = jobs(fake)[record.provenance["slurm_job_id"]]
        assert job["name"] == prefix + tdir.name
        assert record.provenance["slurm_state"] == "COMPLETED" == job["state"]
        assert record.provenance["slurm_node"] == fake_slurm.NODE == record.provenance["host"]
        assert (record.energy_source, record.energy_method) == ("estimate", "watts-x-time")  # from the agent
        assert "epoch 1 done" in (tdir / "output.log").read_text()  # the agent logs the script's output there
        assert json.loads((tdir / AGENT_NAME).read_text())["slurm_job_id"] == job["id"]
    assert live_jobs(fake) == []


def test_a_node_that_cannot_see_the_run_directory_stops_the_run_and_says_so(write_spec, fake, monkeypatch):
    monkeypatch.setenv("FAKE_SLURM_MODE", "ghost")  # the job "runs", but nothing appears in the run directory
    spec = write_spec(spec_text(heartbeat_timeout=1))
    with pytest.raises(SlurmAgentError, match="filesystem that the compute nodes share") as err:
        run_job(load_spec(spec))
    assert err.value.exit_code == 2
    assert str(spec.parent / "runs" / "trials" / "r0001-t01") in str(err.value)
    assert "scancel 100" in calls(fake)
    assert live_jobs(fake) == []
    assert not (spec.parent / "runs" / "history.jsonl").exists()


def test_an_agent_that_cannot_start_on_the_node_stops_the_run_with_its_output(write_spec, fake, monkeypatch):
    monkeypatch.setenv("FAKE_SLURM_MODE", "fail")
    spec = write_spec(spec_text())
    with pytest.raises(SlurmAgentError, match="could not run there") as err:
        run_job(load_spec(spec))
    assert "/nowhere/python: No such file or directory" in str(err.value)
    assert not (spec.parent / "runs" / "history.jsonl").exists()


def test_stopping_the_launcher_asks_the_agent_to_stop_and_records_interrupted(write_spec, fake):
    spec = write_spec(spec_text(needs="2:40", epoch_time=1.0))
    cancel = threading.Event()
    thread, out = in_thread(spec, cancel)
    info = running_trial(spec.parent / "runs")
    cancel.set()
    thread.join(WAIT)
    assert isinstance(out.get("error"), Interrupted)
    (record,) = read_history(spec.parent / "runs")
    assert (record.stop_reason, record.observed) == ("interrupted", False)
    assert record.provenance["slurm_job_id"] == info["slurm_job_id"]
    job_id = info["slurm_job_id"]
    assert f"scancel --signal=TERM --batch {job_id}" in calls(fake)
    assert f"scancel {job_id}" not in calls(fake)  # the agent stopped in time: no plain cancel
    assert record.provenance["slurm_state"] == "COMPLETED"  # the agent wrote its outcome and exited 0
    assert record.ended in ("exited", "sigterm") and record.exit_code is not None
    assert live_jobs(fake) == []


def test_a_job_cancelled_by_hand_is_an_infrastructure_failure_and_is_retried(write_spec, fake):
    spec = write_spec(spec_text(needs="2:4,4:3,8:2", epoch_time=1.0, recurrences=2))
    thread, out = in_thread(spec)
    info = running_trial(spec.parent / "runs")
    subprocess.run(["scancel", info["slurm_job_id"]], check=True)
    thread.join(WAIT * 2)
    assert "error" not in out, out.get("error")
    records = check_audit(spec.parent / "runs")
    first, retry = records[0], records[1]
    assert (first.recurrence, first.attempt, first.stop_reason, first.observed) == (1, 1, "infrastructure", False)
    assert first.provenance["slurm_state"] == "CANCELLED"
    assert "CANCELLED" in (first.message or "") and "retried" in (first.message or "")
    assert (retry.recurrence, retry.attempt, retry.batch_size, retry.reached) == (1, 2, 2, True)
    assert retry.provenance["slurm_job_id"] != first.provenance["slurm_job_id"]
    assert [r.recurrence for r in records if r.reached] == [1, 2]


def test_infrastructure_failures_in_a_row_stop_the_run_naming_them(write_spec, fake, monkeypatch):
    monkeypatch.setenv("FAKE_SLURM_MODE", "timeout:1.0")  # every job is ended as over its time limit
    spec = write_spec(spec_text(needs="2:40", epoch_time=1.0, infra_retries=1, time="1"))
    with pytest.raises(SlurmError, match=r"ended by the cluster \(TIMEOUT, TIMEOUT\).*executor\.time") as err:
        run_job(load_spec(spec))
    assert not isinstance(err.value, SlurmAgentError)
    records = read_history(spec.parent / "runs")
    assert [(r.attempt, r.stop_reason, r.observed) for r in records] == [(1, "infrastructure", False)] * 1 + [
        (2, "infrastructure", False)
    ]
    assert all(r.provenance["slurm_state"] == "TIMEOUT" and "TIMEOUT (TimeLimit)" in (r.message or "") for r in records)
    assert _infra_streak(records) == ["TIMEOUT", "TIMEOUT"]
    # Resuming first says so again (the streak is read back from the history), before submitting anything.
    before = len([c for c in calls(fake) if c.startswith("sbatch")])
    with pytest.raises(SlurmError, match="TIMEOUT, TIMEOUT"):
        run_job(load_spec(spec))
    assert len([c for c in calls(fake) if c.startswith("sbatch")]) == before


def test_a_relaunched_launcher_takes_over_the_running_job_of_a_killed_one(write_spec, fake):
    spec = write_spec(spec_text(needs="1:0,2:4,4:3,8:2", epoch_time=0.6, recurrences=2))
    run_dir = spec.parent / "runs"
    proc = launch(spec)
    info = running_trial(run_dir)
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    assert info["slurm_job_id"] in live_jobs(fake)  # the trial goes on without its launcher
    run_job(load_spec(spec))
    records = check_audit(run_dir)
    keys = [(r.recurrence, r.attempt) for r in records]
    assert len(keys) == len(set(keys))
    taken = next(r for r in records if (r.recurrence, r.attempt) == (info["recurrence"], info["attempt"]))
    assert taken.provenance["slurm_job_id"] == info["slurm_job_id"]  # adopted, not re-run
    assert taken.stop_reason != "interrupted" and "taken over" in (taken.message or "")
    assert taken.started_at == info["started_at"]
    assert sum(c.startswith("sbatch") for c in calls(fake)) == len(records)
    assert live_jobs(fake) == []


def test_a_relaunched_launcher_cancels_a_job_whose_agent_is_gone(write_spec, fake):
    # The timeout leaves a loaded machine's heartbeat thread (every 1 s) room to keep up; the trial
    # (4 epochs of 3 s) cannot have ended, and written its outcome, before its agent is stopped.
    spec = write_spec(spec_text(needs="1:0,2:4,4:3,8:2", epoch_time=3.0, recurrences=1, heartbeat_timeout=6))
    run_dir = spec.parent / "runs"
    proc = launch(spec)
    info = running_trial(run_dir)
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    agent = json.loads(wait_for(lambda: _read(Path(info["trial_dir"]) / AGENT_NAME), "agent.json"))
    os.kill(agent["pid"], signal.SIGSTOP)  # a hung agent: its heartbeat stops
    tdir = Path(info["trial_dir"])
    wait_for(lambda: (heartbeat_age(tdir) or 0.0) > 6.5, "the heartbeat to be older than the timeout")
    assert read_outcome(tdir) is None
    run_job(load_spec(spec))
    records = check_audit(run_dir)
    assert [(r.attempt, r.stop_reason) for r in records] == [(1, "interrupted"), (2, "target_reached")]
    assert "died during this trial" in (records[0].message or "")
    assert f"scancel {info['slurm_job_id']}" in calls(fake)
    assert records[1].provenance["slurm_job_id"] != info["slurm_job_id"]
    wait_for(lambda: not live_jobs(fake), "every job to end")


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


# -- recovery decisions --------------------------------------------------------------------------


def fake_job(state_dir: Path, job_id: str, name: str, state: str) -> None:
    (state_dir / "jobs" / f"{job_id}.json").write_text(
        json.dumps(
            {
                "id": job_id,
                "name": name,
                "output": "/dev/null",
                "chdir": "/",
                "state": state,
                "reason": "None",
                "exit": 0,
                "submit": fake_slurm.now(),
                "start": fake_slurm.now() if state != "PENDING" else "N/A",
                "end": "N/A",
                "pid": None,
                "mode": "ghost",
            }
        )
    )


@pytest.mark.parametrize(
    ("state", "beat_age", "outcome", "adopted"),
    [
        ("RUNNING", 1.0, False, True),  # agent alive
        ("RUNNING", 600.0, False, False),  # agent gone quiet
        ("PENDING", None, False, True),  # not started: nothing to lose by waiting
        ("COMPLETED", 600.0, True, True),  # ended while no launcher watched: its outcome is recorded
        ("FAILED", 600.0, False, False),  # ended without an outcome
    ],
)
def test_recover_adopts_a_live_agent_and_cancels_every_other_job_of_the_run(
    tmp_path, fake, state, beat_age, outcome, adopted
):
    tdir = tmp_path / "run" / "trials" / "r0002-t01"
    tdir.mkdir(parents=True)
    prefix = run_job_prefix("k", tmp_path / "run")
    fake_job(fake, "7", prefix + "r0002-t01", state)
    fake_job(fake, "8", prefix + "r0001-t01", "RUNNING")  # an orphan of the same run
    fake_job(fake, "9", "someone-else", "RUNNING")
    if beat_age is not None:
        (tdir / HEARTBEAT_NAME).write_text("{}")
        os.utime(tdir / HEARTBEAT_NAME, (time.time() - beat_age,) * 2)
    if outcome:
        (tdir / OUTCOME_NAME).write_text(
            json.dumps(
                {"epochs": 1, "time": 1.0, "energy": 1.0, "max_power": 1.0, "cost": 1.0, "reached": True}
            ).replace("}", ', "stop_reason": "target_reached", "exit_code": 0}')
        )
    info = RunningMarker(
        recurrence=2,
        attempt=1,
        trial=1,
        batch_size=8,
        executor="slurm",
        job_prefix=prefix,
        job_name=prefix + "r0002-t01",
        slurm_job_id="7",
        trial_dir=str(tdir),
        heartbeat_timeout=30,
    )
    assert SlurmExecutor.recover([info]) == ({1} if adopted else set())
    states = {i: j["state"] for i, j in jobs(fake).items()}
    assert states["8"] == "CANCELLED" and states["9"] == "RUNNING"
    if state in ("RUNNING", "PENDING"):
        assert states["7"] == ("CANCELLED" if not adopted else state)
    assert EXECUTORS["slurm"] is SlurmExecutor


def test_infra_streak_counts_only_the_trailing_failures():
    def rec(reason: str, state: str = "TIMEOUT") -> TrialRecord:
        return make_record(
            job="k",
            recurrence=1,
            attempt=1,
            trial=0,
            batch_size=2,
            stage="pruning",
            epochs=0,
            time=0.0,
            energy=0.0,
            max_power=1.0,
            cost=0.0,
            reached=False,
            stop_reason=reason,
            provenance={"slurm_state": state},
        )

    assert _infra_streak([rec("infrastructure"), rec("target_reached"), rec("infrastructure", "NODE_FAIL")]) == [
        "NODE_FAIL"
    ]
    assert _infra_streak([rec("infrastructure"), rec("interrupted"), rec("infrastructure", "CANCELLED")]) == [
        "TIMEOUT",
        "CANCELLED",
    ]
    assert _infra_streak([rec("infrastructure"), rec("crashed")]) == []
