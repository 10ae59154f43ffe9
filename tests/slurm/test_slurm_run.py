"""zeus-run runs against the real Slurm of scripts/slurm_dev.sh (2 emulated nodes; skipped without it).

The same behaviours without a cluster are in tests/test_slurm_executor.py (a fake
sbatch/squeue/scancel); these make sure they hold against Slurm itself. The
run whose trial outlives its Slurm time limit is in tests/test_slurm_cluster.py,
where its wait overlaps the client's own time-limit test.
"""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.concurrency_helpers import in_flight as markers_in_flight
from tests.concurrency_helpers import overlapping
from tests.conftest import PYTHON
from tests.executors.test_slurm_executor import check_audit, spec_text, wait_for
from tests.launcher.test_faults import launch
from tests.slurm_helpers import SlurmCluster
from zeus_run.launcher import run_job
from zeus_run.rundir.history import read_history
from zeus_run.slurm import find_jobs, run_job_prefix
from zeus_run.spec import load_spec

# One cluster of two nodes: its tests run one at a time (in one xdist worker, `.ci/run`'s -n 2).
pytestmark = [pytest.mark.slurm, pytest.mark.xdist_group("slurm")]

ROOT = Path(__file__).resolve().parents[2]


def live(run_dir: Path, name: str = "k") -> list[str]:
    """Job ids of the run (job ``name``) that Slurm still has pending or running."""
    return [j.job_id for j in find_jobs(prefix=run_job_prefix(name, run_dir)) if not j.final]


def in_flight(run_dir: Path) -> list[dict]:
    """The trials ``running.json`` marks in flight (one or several), as JSON objects."""
    return [m.to_json() for m in markers_in_flight(run_dir)]


def test_demo_with_two_jobs_in_flight_uses_both_nodes_and_overlaps(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    text = (ROOT / "configs" / "slurm_demo.yaml").read_text()
    text = text.replace("workdir: ..", f"workdir: {ROOT}").replace(
        "run_dir: ../runs/slurm-demo", f"run_dir: {tmp_path / 'runs'}"
    )
    assert "concurrency: 2" in text and "kind: slurm" in text
    spec = tmp_path / "slurm_demo.yaml"
    spec.write_text(text)
    result = run_job(load_spec(spec))
    records = check_audit(result.run_dir)
    assert sum(r.reached for r in records) == 20 and len({r.recurrence for r in records}) == 20
    nodes = {(r.provenance or {}).get("slurm_node") for r in records}
    assert nodes == set(slurm_cluster.nodes) and len(nodes) == 2
    assert all((r.provenance or {}).get("slurm_state") == "COMPLETED" for r in records)
    assert len({(r.provenance or {})["slurm_job_id"] for r in records}) == len(records)
    assert overlapping(records) >= 5  # two in flight most of the time
    assert live(result.run_dir, "slurm-demo") == []


def test_sigkill_the_launcher_then_resume_leaves_no_duplicate_and_no_job(
    write_spec, slurm_cluster: SlurmCluster
) -> None:
    spec = write_spec(
        spec_text(epoch_time=0.5, recurrences=5, gpus=0).replace("recurrences: 5", "recurrences: 5\nconcurrency: 2")
    )
    run_dir = spec.parent / "runs"
    proc = launch(spec)
    wait_for(
        lambda: (run_dir / "history.jsonl").exists() and any(i.get("slurm_job_id") for i in in_flight(run_dir)),
        "a finished trial and a submitted one",
    )
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    run_job(load_spec(spec))
    records = check_audit(run_dir)
    keys = [(r.recurrence, r.attempt) for r in records]
    assert len(keys) == len(set(keys))
    assert {r.recurrence for r in records if r.reached} == {1, 2, 3, 4, 5}
    assert live(run_dir) == []
    assert not (run_dir / "running.json").exists()
    replay = subprocess.run([PYTHON, "-m", "zeus_run", "replay", str(run_dir)], capture_output=True, text=True)
    assert replay.returncode == 0, replay.stderr


def test_a_hand_scancel_is_recorded_as_cancelled_and_retried(write_spec, slurm_cluster: SlurmCluster) -> None:
    spec = write_spec(spec_text(needs="2:3", epoch_time=1.5, recurrences=1, gpus=0))
    run_dir = spec.parent / "runs"
    proc = launch(spec)
    first = wait_for(lambda: next((i for i in in_flight(run_dir) if i.get("slurm_job_id")), None), "a submitted trial")
    time.sleep(1.0)
    subprocess.run(["scancel", first["slurm_job_id"]], check=True)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    records = read_history(run_dir)
    cancelled, retry = records[0], records[-1]
    assert cancelled.stop_reason == "infrastructure" and not cancelled.observed
    assert (cancelled.provenance or {})["slurm_state"] == "CANCELLED"
    assert (cancelled.provenance or {})["slurm_job_id"] == first["slurm_job_id"]
    assert "CANCELLED" in (cancelled.message or "")
    assert retry.recurrence == 1 and retry.attempt == 2 and retry.reached
    assert live(run_dir) == []
