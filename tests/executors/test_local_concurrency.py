"""``concurrency: N`` with the local executor: N slots on this machine (CPU slots, or groups of GPUs).

The same behaviours under Slurm are in tests/test_slurm_run.py.
"""

from __future__ import annotations

import json
import signal
import subprocess
import threading
from pathlib import Path

import pytest

from tests.concurrency_helpers import in_flight, overlapping
from tests.conftest import PYTHON, SCRIPTS
from tests.executors.test_slurm_executor import check_audit, wait_for
from tests.factories import job_spec
from tests.fake_nvml import FakeGpu, FakeNvml
from tests.launcher.test_faults import launch
from zeus_run.energy import NvmlEnergy
from zeus_run.executors import LocalExecutor
from zeus_run.launcher import run_job
from zeus_run.rundir.history import read_history
from zeus_run.spec import load_spec

FAKE = str(SCRIPTS / "fake_train.py")


def spec_text(recurrences: int = 6, epoch_time: float = 0.3, concurrency: int = 2, extra: str = "") -> str:
    """`tests.factories.job_spec` for job ``c``: batch sizes up to 8, ``concurrency`` trials at once."""
    return job_spec(
        extra,
        needs="1:0,2:2,4:3,8:2",
        args=["--epoch-time", str(epoch_time)],
        name="c",
        batch_sizes=[1, 2, 4, 8],
        max_epochs=4,
        recurrences=recurrences,
        concurrency=concurrency,
    )


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
    before = read_history(run_dir)
    # The trials the kill left unrecorded (a trial killed between its history line and the
    # clearing of its marker is recorded already, and must not be recorded twice).
    pending = {m.trial for m in in_flight(run_dir)} - {b.trial for b in before}
    run_job(load_spec(spec))
    records = check_audit(run_dir)
    assert records[: len(before)] == before  # nothing lost or rewritten
    # Each trial in flight is recorded once: interrupted, or from its outcome if it had written one (adopted).
    settled = [r for r in records if r.trial in pending]
    assert pending and len(settled) == len(pending) and all(r.seen is not None for r in settled)
    assert all(r.stop_reason == "interrupted" or "taken over" in (r.message or "") for r in settled)
    keys = [(r.recurrence, r.attempt) for r in records]
    assert len(keys) == len(set(keys))
    assert {r.recurrence for r in records if r.reached} == set(range(1, 7))
    replay = subprocess.run([PYTHON, "-m", "zeus_run", "replay", str(run_dir)], capture_output=True, text=True)
    assert replay.returncode == 0, replay.stderr


def test_sigint_stops_every_trial_in_flight_and_records_them(write_spec, tmp_path):
    # Both trials hold after their first epoch until the file `never` exists (it never does) or
    # zeus-run asks them to stop: they are still in flight when the signal lands, however loaded
    # the machine, and only the launcher's stop can end them.
    never = tmp_path / "never"
    text = spec_text(recurrences=4).replace('"--epoch-time"', f'"--hold", "{never}", "--epoch-time"')
    spec = write_spec(text)
    run_dir = spec.parent / "runs"
    proc = launch(spec)
    wait_for(lambda: len(in_flight(run_dir)) == 2, "two trials in flight")
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    records = read_history(run_dir)
    assert len(records) == 2, "every trial in flight is recorded"
    assert [r.stop_reason for r in records] == ["interrupted", "interrupted"], err
    assert "2 trials are recorded as interrupted" in err
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


def test_each_slot_sets_profiles_and_restores_only_its_own_gpus(write_spec, tmp_path, monkeypatch):
    """concurrency: 2 with power limits: every trial's limits land on its own slot's GPU alone."""
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).resolve().parents[1]))
    gpus = [
        FakeGpu(uuid=f"GPU-{i}", min_mw=150_000, max_mw=300_000, power_fn=lambda t, lim: min(lim, 220.0))
        for i in range(2)
    ]
    nv = FakeNvml(gpus)
    # Which slot's trial each limit call came from (a trial runs wholly in one thread; threads may be reused).
    current = threading.local()
    by_slot: dict[int, set[int]] = {}
    record, run_on_slot = nv._record, LocalExecutor.run_on_slot

    def record_slot(*call):
        if call[0] == "limit" and getattr(current, "slot", None) is not None:
            by_slot.setdefault(current.slot, set()).add(call[1])
        record(*call)

    def on_slot(self, req, slot):
        current.slot = slot
        try:
            return run_on_slot(self, req, slot)
        finally:
            current.slot = None

    nv._record = record_slot  # type: ignore[method-assign]
    monkeypatch.setattr(LocalExecutor, "run_on_slot", on_slot)
    step = SCRIPTS / "step_train.py"
    spec = write_spec(
        f"""
name: pl2
command: ["{PYTHON}", "{step}", "100", "0.004"]
batch_sizes: [32, 64]
default_batch_size: 32
target_metric: 0.9
max_epochs: 4
recurrences: 4
concurrency: 2
energy: {{source: nvml}}
power_limit: {{step_watts: 50, warmup_iters: 2, measure_iters: 5, min_window_s: 0.01, settle_s: 0, min_counter_updates: 1}}
run_dir: runs
"""
    )
    with NvmlEnergy(None, nvml=nv, environ={}) as energy:
        result = run_job(load_spec(spec), energy=energy)
    records = read_history(result.run_dir / "history.jsonl")
    assert records and all(r.power_limit is not None for r in records if r.reached)
    sets = [(c[1], c[2]) for c in nv.calls if c[0] == "limit"]
    assert {i for i, _ in sets} == {0, 1}  # both slots' GPUs were driven
    # Each slot's trials set limits on its own GPU alone (the launcher probed and restored both).
    assert by_slot == {0: {0}, 1: {1}}, by_slot
    assert any(mw == 150_000 for _, mw in sets)  # a profiling sweep reached the minimum
    assert all(g.limit_mw == 300_000 and g.persistence == 0 for g in nv.gpus)  # all restored
    store = json.loads((result.run_dir / "power_profiles.json").read_text())
    assert list(store["models"]) == ["1 x NVIDIA A40"]  # one slot's model, shared by both slots
    check_audit(result.run_dir)


def test_a_try_that_never_started_uses_no_try_and_leaves_no_marker(write_spec, monkeypatch):
    """Too many open files as a trial's marker is written (concurrency 2): nothing started, so the try is not
    used, no running.json names it (the next launch would record it interrupted, "the launcher died"), and the
    same command then runs the job from there."""
    import errno

    from zeus_run.errors import LaunchEnvironmentError
    from zeus_run.rundir.store import RunDir

    spec = write_spec(spec_text(recurrences=3, epoch_time=0.05))
    real = RunDir.mark_running
    calls = []

    def flaky(self, marker):
        calls.append(marker)
        if len(calls) == 2:  # the second slot's trial: no file descriptor left for running.json's temporary
            raise OSError(errno.EMFILE, "Too many open files")
        return real(self, marker)

    monkeypatch.setattr(RunDir, "mark_running", flaky)
    with pytest.raises(LaunchEnvironmentError, match="Too many open files"):
        run_job(load_spec(spec))
    never = calls[1]
    run_dir = spec.parent / "runs"
    assert not (run_dir / "running.json").exists()
    records = read_history(run_dir)
    assert never.trial not in {r.trial for r in records}  # no record, and no marker to make one later
    assert all(r.recurrence != never.recurrence for r in records)
    monkeypatch.setattr(RunDir, "mark_running", real)
    result = run_job(load_spec(spec))
    records = check_audit(result.run_dir)
    assert {r.recurrence for r in records if r.reached} == {1, 2, 3}
    (again,) = [r for r in records if r.recurrence == never.recurrence]
    assert again.attempt == 1 and again.reached  # its recurrence's first try: none was used
