"""zeus_run.slurm against a real Slurm (the dev cluster of scripts/slurm_dev.sh; skipped without it).

Also the zeus-run run whose trial outlives its Slurm time limit (the rest of the
real-Slurm runs are in tests/test_slurm_run.py). Both time-limit jobs are started
when the test session starts (tests/conftest.py), so that their 60-90 s wait
overlaps the rest of the suite.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.slurm.test_slurm_run import live
from tests.slurm_helpers import SlurmCluster, unique, wait_file, wait_final, wait_for
from zeus_run.rundir.history import read_history
from zeus_run.slurm import (
    BatchJob,
    JobInfo,
    SlurmSettings,
    SlurmSubmitError,
    cancel,
    exec_script,
    find_jobs,
    is_infrastructure_failure,
    query,
    submit,
)

# One cluster of two nodes: its tests run one at a time (in one xdist worker, `.ci/run`'s -n 2).
pytestmark = [pytest.mark.slurm, pytest.mark.xdist_group("slurm")]

CPU = SlurmSettings(gpus=0)

#: A job that reports where and how it runs, then waits for RELEASE (or a signal).
PROBE = textwrap.dedent(
    """
    import json, os, signal, subprocess, sys, time
    report, release, term = sys.argv[1:4]
    # A child, like the training script under the agent: it notes a SIGTERM in term + ".child".
    child = subprocess.Popen([sys.executable, "-c", CHILD, term + ".child"])
    def on_term(signum, frame):
        time.sleep(0.5)  # time for a SIGTERM sent to the child as well to be noted
        child.kill()
        with open(term, "w") as f:
            f.write("SIGTERM")
        sys.exit(0)
    signal.signal(signal.SIGTERM, on_term)
    keys = ("SLURM_JOB_ID", "SLURM_JOB_NAME", "SLURMD_NODENAME", "CUDA_VISIBLE_DEVICES", "ZEUS_TEST_EXTRA")
    data = {k: os.environ.get(k) for k in keys}
    data["cwd"] = os.getcwd()
    with open(report + ".tmp", "w") as f:
        json.dump(data, f)
    os.replace(report + ".tmp", report)
    print("probe started", flush=True)
    deadline = time.monotonic() + float(sys.argv[4])
    while not os.path.exists(release) and time.monotonic() < deadline:
        time.sleep(0.1)
    child.kill()
    sys.exit(int(sys.argv[5]))
    """
)
CHILD = (
    "import signal, sys, time\n"
    "signal.signal(signal.SIGTERM, lambda *_: (open(sys.argv[1], 'w').write('SIGTERM'), sys.exit(0)))\n"
    "time.sleep(600)\n"
)
PROBE = f"CHILD = {CHILD!r}\n" + PROBE


class Probe:
    """One probe job's files in a test's tmp_path."""

    def __init__(self, root: Path, label: str) -> None:
        self.dir = root / label
        self.dir.mkdir(parents=True)
        self.report = self.dir / "report.json"
        self.release = self.dir / "release"
        self.term = self.dir / "term"
        self.log = self.dir / "output.log"

    def job(self, name: str, wait_s: float = 300, exit_code: int = 0, env: dict[str, str] | None = None) -> BatchJob:
        script = self.dir / "probe.py"
        script.write_text(PROBE)
        argv = [sys.executable, script, self.report, self.release, self.term, str(wait_s), str(exit_code)]
        return BatchJob(name=name, script=exec_script(argv), output=self.log, chdir=self.dir, env=env or {})

    def started(self) -> dict:
        return json.loads(wait_file(self.report))


def test_job_runs_in_its_directory_and_completes(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    probe = Probe(tmp_path, "p")
    name = unique()
    job_id = submit(probe.job(name, wait_s=0, env={"ZEUS_TEST_EXTRA": "42"}), CPU)
    assert job_id.isdigit()
    info = wait_final(job_id)
    assert info.state == "COMPLETED"
    assert info.exit_code == 0
    assert info.name == name
    assert info.batch_host in slurm_cluster.nodes
    assert info.start_time is not None and info.end_time is not None
    report = probe.started()
    assert report["SLURM_JOB_ID"] == job_id
    assert report["SLURM_JOB_NAME"] == name
    assert report["SLURMD_NODENAME"] == info.batch_host
    assert report["cwd"] == str(probe.dir)
    assert report["ZEUS_TEST_EXTRA"] == "42"
    assert "probe started" in probe.log.read_text()
    assert not is_infrastructure_failure(info.state)


def test_job_that_exits_non_zero_reads_failed_with_its_code(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    probe = Probe(tmp_path, "p")
    job_id = submit(probe.job(unique(), wait_s=0, exit_code=3), CPU)
    info = wait_final(job_id)
    assert (info.state, info.exit_code, info.exit_signal) == ("FAILED", 3, 0)
    assert not is_infrastructure_failure(info.state)


def test_unknown_job_ids_are_left_out(slurm_cluster: SlurmCluster) -> None:
    assert query(["987654321"]) == {}
    assert query([]) == {}


def test_scancel_of_a_running_job_reads_cancelled(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    probe = Probe(tmp_path, "p")
    job_id = submit(probe.job(unique()), CPU)
    probe.started()
    assert query([job_id])[job_id].state == "RUNNING"
    cancel([job_id])
    info = wait_final(job_id)
    assert info.state == "CANCELLED"
    assert is_infrastructure_failure(info.state)


def test_sigterm_to_the_batch_script_lets_it_finish_on_its_own(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    """The graceful stop: SIGTERM reaches the exec'd process (the agent) and not its child (the training);
    the agent exits 0, so the job is COMPLETED."""
    probe = Probe(tmp_path, "p")
    job_id = submit(probe.job(unique()), CPU)
    probe.started()
    cancel([job_id], signal="TERM", batch_only=True)
    assert wait_file(probe.term) == "SIGTERM"
    assert not Path(f"{probe.term}.child").exists()
    info = wait_final(job_id)
    assert (info.state, info.exit_code) == ("COMPLETED", 0)


def test_jobs_are_found_by_name_and_prefix_in_any_state(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    run = unique("zt-run")
    other = unique("zt-other")
    probes = {label: Probe(tmp_path, label) for label in ("a", "b", "x")}
    ids = {
        "a": submit(probes["a"].job(f"{run}-r0001-t01"), CPU),
        "b": submit(probes["b"].job(f"{run}-r0002-t01", wait_s=0), CPU),
        "x": submit(probes["x"].job(f"{other}-r0001-t01"), CPU),
    }
    try:
        wait_final(ids["b"])  # one finished job: still found, with its final state
        by_name = find_jobs(names=[f"{run}-r0001-t01"])
        assert [j.job_id for j in by_name] == [ids["a"]]
        by_prefix = {j.job_id: j for j in find_jobs(prefix=run + "-")}
        assert set(by_prefix) == {ids["a"], ids["b"]}
        assert by_prefix[ids["b"]].state == "COMPLETED"
        assert find_jobs(names=[]) == []
        assert find_jobs(names=[unique("zt-nobody")]) == []
    finally:
        cancel(ids.values())


def test_gpu_jobs_spread_over_two_nodes_with_their_own_gpu(
    slurm_cluster: SlurmCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two one-GPU jobs run at once on two one-GPU nodes; Slurm sets CUDA_VISIBLE_DEVICES, and only with --gres."""
    gpu_nodes = [n for n in slurm_cluster.nodes if slurm_cluster.gpus[n] >= 1]
    if len(gpu_nodes) < 2 or any(slurm_cluster.gpus[n] != 1 for n in gpu_nodes):
        pytest.skip(f"needs two nodes with one GPU each, found {slurm_cluster.gpus}: scripts/slurm_dev.sh start 2")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)  # sbatch would export ours
    probes = [Probe(tmp_path, f"g{i}") for i in range(2)]
    ids = [submit(p.job(unique()), SlurmSettings(gpus=1)) for p in probes]
    cpu_probe = Probe(tmp_path, "cpu")
    cpu_id = submit(cpu_probe.job(unique(), wait_s=0), CPU)
    try:
        reports = [p.started() for p in probes]  # both run at the same time: each holds its node's only GPU
        nodes = {r["SLURMD_NODENAME"] for r in reports}
        assert len(nodes) == 2
        assert nodes <= set(slurm_cluster.nodes)
        assert {info.batch_host for info in query(ids).values()} == nodes
        for r in reports:
            assert re.fullmatch(r"\d+", r["CUDA_VISIBLE_DEVICES"] or ""), r
        assert cpu_probe.started()["CUDA_VISIBLE_DEVICES"] is None
    finally:
        for p in probes:
            p.release.touch()
    for job_id in ids:
        assert wait_final(job_id).state == "COMPLETED"
    assert wait_final(cpu_id).state == "COMPLETED"


@pytest.mark.parametrize(
    ("settings", "field"),
    [
        (SlurmSettings(partition="no-such-partition", gpus=0), "executor.partition"),
        (SlurmSettings(gpus=64), "executor.gpus"),
    ],
)
def test_a_refused_submission_names_the_setting(
    slurm_cluster: SlurmCluster, tmp_path: Path, settings: SlurmSettings, field: str
) -> None:
    job = BatchJob(unique(), exec_script(["true"]), tmp_path / "out.log", tmp_path)
    with pytest.raises(SlurmSubmitError, match=re.escape(field)) as err:
        submit(job, settings)
    assert err.value.exit_code == 2


def test_job_over_its_time_limit_ends_timeout(timeout_job: tuple[str, Probe, dict]) -> None:
    """Slurm sends SIGTERM at the limit (KillWait before SIGKILL) and the job reads TIMEOUT."""
    job_id, probe, final = timeout_job  # started with the session (tests/conftest.py)
    probe.started()
    info = wait_for(lambda: final.get("info"), timeout=300, what=f"job {job_id} to end")
    assert isinstance(info, JobInfo)
    assert (info.state, info.reason) == ("TIMEOUT", "TimeLimit")
    assert is_infrastructure_failure(info.state)
    assert probe.term.read_text() == "SIGTERM"


def test_a_trial_over_its_time_limit_is_recorded_as_a_timeout(over_time: tuple[Path, subprocess.Popen]) -> None:
    run_dir, proc = over_time
    _, err = proc.communicate(timeout=240)
    records = read_history(run_dir)
    assert len(records) == 1, err
    (rec,) = records
    assert rec.stop_reason == "infrastructure" and not rec.observed
    assert (rec.provenance or {})["slurm_state"] == "TIMEOUT"
    assert "TIMEOUT" in (rec.message or "") and "executor.time" in (rec.message or "")
    # infra_retries: 0, so the launcher stops rather than retry, and says why.
    assert proc.returncode == 1 and "TIMEOUT" in err and "internal error" not in err and "Traceback" not in err
    assert live(run_dir) == []
