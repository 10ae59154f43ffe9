"""``concurrency: N`` with the local executor: N slots on this machine (CPU slots, or groups of GPUs).

The same behaviours under Slurm are in tests/test_slurm_run.py.
"""

from __future__ import annotations

import signal
import subprocess

import pytest

from tests.concurrency_helpers import in_flight, overlapping
from tests.conftest import PYTHON, SCRIPTS
from tests.executors.test_slurm_executor import check_audit, wait_for
from tests.fake_nvml import FakeGpu, FakeNvml
from tests.test_faults import launch
from zeus_run.energy import NvmlEnergy
from zeus_run.errors import UsageError
from zeus_run.history import read_history
from zeus_run.runner import run_job
from zeus_run.spec import load_spec

FAKE = str(SCRIPTS / "fake_train.py")


def spec_text(recurrences: int = 6, epoch_time: float = 0.3, concurrency: int = 2, extra: str = "") -> str:
    return f"""
name: c
command: ["{PYTHON}", "{FAKE}", "--batch-size", "{{batch_size}}", "--needs", "1:0,2:2,4:3,8:2", "--epoch-time", "{epoch_time}"]
batch_sizes: [1, 2, 4, 8]
default_batch_size: 2
target_metric: 0.9
max_epochs: 4
recurrences: {recurrences}
concurrency: {concurrency}
energy: {{source: estimate, watts: 100, basis: wall-time}}
run_dir: runs
{extra}
"""


def test_two_cpu_slots_overlap_and_the_run_audits(write_spec):
    spec = write_spec(spec_text())
    result = run_job(load_spec(spec))
    records = check_audit(result.run_dir)
    assert {r.recurrence for r in records if r.reached} == set(range(1, 7))
    assert overlapping(records) >= 3
    assert all(r.seen is not None and r.in_flight is not None for r in records)  # stamped for the audit
    assert max(len(r.in_flight or ()) for r in records) == 1  # never more than 2 in flight
    assert not (result.run_dir / "running.json").exists()
    # Each trial has its own estimate: two trials at once are not charged each other's time.
    assert all(r.energy == pytest.approx(100 * r.time, rel=0.2) for r in records if r.time > 0.5)


def test_sigkill_with_two_in_flight_then_resume_records_both_and_audits(write_spec):
    spec = write_spec(spec_text(recurrences=6, epoch_time=0.5))
    run_dir = spec.parent / "runs"

    def two_running() -> bool:
        return len(in_flight(run_dir)) == 2 and (run_dir / "history.jsonl").exists()

    proc = launch(spec)
    wait_for(two_running, "two trials in flight after one ended")
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    killed = {m.trial for m in in_flight(run_dir)}
    before = read_history(run_dir)
    run_job(load_spec(spec))
    records = check_audit(run_dir)
    assert records[: len(before)] == before  # nothing lost or rewritten
    # Each trial in flight is recorded: interrupted, or from its outcome if it had written one (adopted).
    settled = [r for r in records if r.trial in killed and r.trial not in {b.trial for b in before}]
    assert len(settled) == 2 and all(r.seen is not None for r in settled)
    assert all(r.stop_reason == "interrupted" or "taken over" in (r.message or "") for r in settled)
    keys = [(r.recurrence, r.attempt) for r in records]
    assert len(keys) == len(set(keys))
    assert {r.recurrence for r in records if r.reached} == set(range(1, 7))
    replay = subprocess.run([PYTHON, "-m", "zeus_run", "replay", str(run_dir)], capture_output=True, text=True)
    assert replay.returncode == 0, replay.stderr


def test_sigint_stops_every_trial_in_flight_and_records_them(write_spec):
    # Epochs of 4 s: a trial cannot reach its target (2 epochs) before the signal lands, even on
    # a machine so loaded that seconds pass between two steps of this test.
    spec = write_spec(spec_text(recurrences=4, epoch_time=4.0))
    run_dir = spec.parent / "runs"
    proc = launch(spec)
    wait_for(lambda: len(in_flight(run_dir)) == 2, "two trials in flight")
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    records = read_history(run_dir)
    assert len(records) == 2, "every trial in flight is recorded"
    interrupted = [r for r in records if r.stop_reason == "interrupted"]
    assert interrupted and all(r.stop_reason == "interrupted" or r.reached for r in records)
    said = "2 trials are recorded as interrupted" if len(interrupted) == 2 else "that trial is recorded as interrupted"
    assert said in err
    assert not (run_dir / "running.json").exists()
    check_audit(run_dir)


def test_gpu_slots_split_the_visible_gpus_and_measure_their_own(write_spec, tmp_path):
    gpus = [FakeGpu(uuid=f"GPU-{i}", power_mw=100_000.0 * (i + 1)) for i in range(4)]
    nv = FakeNvml(gpus)
    seen = tmp_path / "seen.txt"
    spec = write_spec(
        spec_text(recurrences=4, extra="power_limit: {enabled: false}\nshell: true").replace(
            f'command: ["{PYTHON}", "{FAKE}", "--batch-size", "{{batch_size}}", "--needs", "1:0,2:2,4:3,8:2", "--epoch-time", "0.3"]',
            f"command: 'echo \"$CUDA_VISIBLE_DEVICES\" >> {seen} && exec {PYTHON} {FAKE} --batch-size {{batch_size}} --needs 1:0,2:2,4:3,8:2 --epoch-time 0.3'",
        )
    )
    with NvmlEnergy(None, nvml=nv, environ={}) as energy:
        result = run_job(load_spec(spec), energy=energy)
    groups = set(seen.read_text().split())
    assert groups == {"GPU-0,GPU-1", "GPU-2,GPU-3"}
    check_audit(result.run_dir)


def test_power_limits_with_several_in_flight_are_refused_clearly(write_spec):
    spec = write_spec(spec_text(recurrences=2))
    nv = FakeNvml([FakeGpu(uuid="GPU-a"), FakeGpu(uuid="GPU-b")])
    with (
        NvmlEnergy(None, nvml=nv, environ={}) as energy,
        pytest.raises(UsageError, match=r"power_limit\.enabled: false, or concurrency: 1"),
    ):
        run_job(load_spec(spec), energy=energy)
