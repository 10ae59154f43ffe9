"""The job-life harness's own parts (scripts/job_life.py): its schedule, ledger pairing and checks.

The harness itself (minutes of real triggers) runs in `.ci/run` as ``scripts/job_life.py --nights 10``;
these tests check, fast, that each of its checks can fail and agrees with the formats it reads.
"""

from __future__ import annotations

import importlib.util
import json
import sys

import pytest

from tests.conftest import REPO
from tests.export.helpers import simulated_run
from zeus_run.export import exposition
from zeus_run.views.jobs import load_job


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, REPO / "scripts" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


jl = _load("job_life")
train = _load("job_life_train")


def record(recurrence: int, attempt: int, trial: int, **fields) -> dict:
    base = {
        "job": "nightly",
        "recurrence": recurrence,
        "attempt": attempt,
        "trial": trial,
        "batch_size": 64,
        "stop_reason": "target_reached",
        "reached": True,
        "observed": True,
        "time": 2.0,
        "energy": 400.0,
    }
    return {**base, **fields}


def run(recurrence: int | None, attempt: int | None, start: float = 100.0, span: float = 2.5, **fields):
    r = jl.Run(pid=fields.pop("pid", 1), night=fields.pop("night", 1), door=fields.pop("door", "cron"), start=start)
    r.recurrence, r.attempt = recurrence, attempt
    r.exit_seen = start + span
    for k, v in fields.items():
        setattr(r, k, v)
    return r


# -- the schedule ------------------------------------------------------------------------------------------


def test_the_schedule_is_reproducible_and_takes_every_fault_and_door_in_ten_nights():
    nights = jl.schedule(10, seed=7)
    assert nights == jl.schedule(10, seed=7) and nights != jl.schedule(10, seed=8)
    assert nights[0].door == "cron" and nights[0].faults == ()
    faults = [f for n in nights[1:8] for f in n.faults]
    assert sorted(faults) == sorted(jl.FAULTS)  # nights 2..8: each kind once
    assert {n.door for n in nights} == set(jl.DOORS)
    for n in nights:
        for f in n.faults:
            assert jl.FAULT_DOOR.get(f, n.door) == n.door, n  # a kill of the launcher is a cron night, ...
        assert 150 <= n.draw_w <= 290
        assert (n.clock_step != 0) == ("clock-jump" in n.faults)
        assert bool(n.busy_door) == ("busy" in n.faults)
    steps = [n.clock_step for n in jl.schedule(60, seed=7) if n.clock_step]
    assert steps[:2] == list(jl.CLOCK_STEPS)  # forward, then back, in turn
    ooms = [n.oom_exit for n in jl.schedule(60, seed=7) if "oom" in n.faults]
    assert ooms[:2] == [True, False]  # printed and sys.exit(1), then raised, in turn


def test_the_schedule_leaves_out_skipped_faults_and_faults_whose_door_is_not_used():
    nights = jl.schedule(30, seed=1, doors=("cron", "exec"), skip=("oom",))
    faults = {f for n in nights for f in n.faults}
    assert "oom" not in faults and "kill-server" not in faults and "restart" not in faults
    assert "kill-launcher" in faults and {n.door for n in nights} == {"cron", "exec"}


# -- the ledger paired with the history ---------------------------------------------------------------------


def test_records_pair_with_the_scripts_that_ran_them_and_the_rest_is_named():
    records = [record(1, 1, 0), record(2, 1, 1, reached=False), record(2, 2, 2), record(3, 1, 3)]
    runs = [run(1, 1, pid=10), run(2, 1, pid=11), run(2, 2, pid=12), run(4, 1, pid=13), run(None, None, pid=14)]
    pairs, lost, orphans = jl.pair(records, runs)
    assert [(i, r.pid) for i, r in pairs] == [(0, 10), (1, 11), (2, 12)]
    assert [r.pid for r in lost] == [13]  # a script with a trial and no record
    assert orphans == [3]  # a record without a script (pid 14 never got a trial: not a trial)


def test_a_tried_again_trial_pairs_in_order():
    records = [record(1, 1, 0, stop_reason="interrupted"), record(1, 1, 1)]
    runs = [run(1, 1, start=50.0, pid=2), run(1, 1, start=10.0, pid=1)]
    pairs, lost, orphans = jl.pair(records, runs)
    assert [(i, r.pid) for i, r in pairs] == [(0, 1), (1, 2)] and not lost and not orphans


# -- energy and time against the ledger -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("energy", "after", "broken"),
    [(480.0, 20.0, False), (500.0 * 1.049, 0.0, False), (450.0, 0.0, True), (400.0, 130.0, True)],
)
def test_energy_within_five_percent_of_the_span_times_the_draw(energy, after, broken):
    r = record(1, 1, 0, energy=energy, after_energy=after, time=2.0, after_time=0.5)
    got = jl.measure(r, run(1, 1, span=2.5), draw_w=200)  # the ledger: 200 W x 2.5 s = 500 J
    assert [v.invariant for v in got] == (["energy"] if broken else [])
    if broken:
        assert got[0].trial == "r0001-t01" and got[0].expected.startswith("500.0 J (ledger: 200 W x 2.50 s)")


def test_time_counts_the_whole_span_after_the_target_included():
    ok = jl.measure(record(1, 1, 0, energy=500.0, time=2.0, after_time=0.5), run(1, 1, span=2.5), 200)
    short = jl.measure(record(1, 1, 0, energy=500.0, time=2.0), run(1, 1, span=2.5), 200)
    assert ok == [] and [v.invariant for v in short] == ["time"]
    assert "-20.0%" in short[0].seen


# -- exports: the harness's reading of the exposition against the real exporter --------------------------------


def test_the_expected_exposition_agrees_with_zeus_runs_export_of_the_same_history(tmp_path):
    run_dir = simulated_run(tmp_path)
    records = [json.loads(line) for line in (run_dir / "history.jsonl").read_text().splitlines() if line.strip()]
    text = exposition([load_job(run_dir)])
    assert jl.compare_exposition(jl.parse_exposition(text), jl.expected_exposition(records)) == []
    # One trial short of the history (a push that predates the last record): every count and total disagrees.
    stale = jl.compare_exposition(jl.parse_exposition(text), jl.expected_exposition([*records, records[-1]]))
    names = {name for name, _, _ in stale}
    assert "zeus_run_energy_joules_total" in names and "zeus_run_time_seconds_total" in names
    assert any(name.startswith("zeus_run_trials_total") for name in names)


def test_an_outcome_the_history_lacks_is_a_mismatch_and_labels_keep_samples_apart():
    text = (
        '# TYPE zeus_run_trials_total counter\nzeus_run_trials_total{job_name="a \\"b\\"",outcome="crashed"} 2\n'
        'zeus_run_trials_total{job_name="a",outcome="target_reached"} 1\n'
    )
    seen = jl.parse_exposition(text)
    assert seen == {"zeus_run_trials_total{outcome=crashed}": 2.0, "zeus_run_trials_total{outcome=target_reached}": 1.0}
    want = jl.expected_exposition([record(1, 1, 0)])
    bad = jl.compare_exposition(seen, want)
    assert ("zeus_run_trials_total{outcome=crashed}", "absent (no such record)", "2") in bad
    assert ("zeus_run_energy_joules_total", "400", "absent") in bad


# -- the rest ------------------------------------------------------------------------------------------------


def test_a_traceback_counts_only_through_zeus_runs_code():
    ours = 'Traceback (most recent call last):\n  File "/x/scripts/job_life_train.py", line 3\nRuntimeError: CUDA out of memory\n'
    theirs = (
        'Traceback (most recent call last):\n  File "/repo/zeus_run/server/_gate.py", line 86, in __call__\n'
        "    await x\nOSError: [Errno 28] No space left on device\n"
    )
    assert jl.zeus_traceback("epoch 1\n" + ours) == ""
    found = jl.zeus_traceback(ours + "INFO stopped\n" + theirs)
    assert found.startswith("OSError: [Errno 28]") and "_gate.py" in found


def test_a_torn_history_line_is_named(tmp_path):
    path = tmp_path / "history.jsonl"
    path.write_text(json.dumps(record(1, 1, 0)) + "\n" + '{"job": "nightly", "recur')
    records, problem = jl.read_history(path)
    assert len(records) == 1 and problem is not None and "line 2" in problem


def _train_by_hand(tmp_path, oom: str = ""):
    """The training script run by hand (no ZEUS_* variables): its ledger lines and the finished process."""
    import os
    import subprocess

    ledger, state = tmp_path / "ledger.jsonl", tmp_path / "state"
    state.mkdir()
    if oom:
        (state / "oom").write_text(oom)
    env = {k: v for k, v in os.environ.items() if not k.startswith("ZEUS_")}
    env.update(JOB_LIFE_LEDGER=str(ledger), JOB_LIFE_STATE=str(state), JOB_LIFE_NIGHT="3", JOB_LIFE_DOOR="cron")
    env["PYTHONPATH"] = str(REPO)
    script = str(REPO / "scripts" / "job_life_train.py")
    done = subprocess.run([sys.executable, script], env=env, capture_output=True, text=True, timeout=120)
    return [json.loads(line) for line in ledger.read_text().splitlines()], done


@pytest.mark.parametrize(("style", "traceback"), [("raise", True), ("exit", False)])
def test_an_oom_night_fails_the_script_with_the_cuda_error_either_way(tmp_path, style, traceback):
    events, done = _train_by_hand(tmp_path, oom=style)
    assert done.returncode == 1 and "CUDA out of memory" in done.stderr
    assert ("Traceback" in done.stderr) == traceback
    assert [e["event"] for e in events] == ["start", "trial", "exit"] and events[-1]["exit_code"] == 1


def test_the_training_script_writes_its_span_to_the_ledger(tmp_path):
    """Run by hand the script trains at its default batch size and writes its start, its trial and its exit."""
    events, done = _train_by_hand(tmp_path)
    assert done.returncode == 0, done.stderr
    assert [e["event"] for e in events] == ["start", "trial", "exit"]
    start, trial, end = events
    assert start["night"] == "3" and trial["batch_size"] == 64 and end["exit_code"] == 0 and end["reached"]
    # Its start-up, the epochs batch size 64 takes to the target, and saving the model: all in its span.
    assert end["t"] - start["t"] >= train.STARTUP + train.REACH[64] * train.EPOCH_S[64] + train.SAVE


def test_a_process_that_asked_and_told_itself_is_charged_to_its_exit_without_its_ask_and_its_tell():
    r = run(1, 1, start=100.0, span=4.0)
    r.ask_s, r.telling, r.told = 0.3, 103.3, 103.5  # asked for 0.3 s; its tell took 0.2 s, 0.5 s before its exit
    assert r.span == pytest.approx(4.0 - 0.3 - 0.2)  # what it did after the tell is the trial's tail (issue 46)
    assert jl.measure(record(1, 1, 0, energy=700.0, time=3.5), r, 200) == []
    (e, _) = jl.measure(record(1, 1, 0, energy=600.0, time=3.0), r, 200)  # up to its tell only: too little
    assert "less its ask (0.30 s) and its tell" in e.expected


def test_only_a_lease_expired_on_a_full_disk_night_counts_as_a_measurement_the_disk_lost():
    expired = record(4, 1, 5, stop_reason="infrastructure", provenance={"lease_expired": True})
    assert jl.lost_to_full_disk(expired, ("full-disk",))
    assert not jl.lost_to_full_disk(expired, ("kill-server",))  # any other night: an energy violation
    assert not jl.lost_to_full_disk(record(4, 1, 5, stop_reason="infrastructure"), ("full-disk",))


def test_an_unmeasured_record_is_held_to_its_time_and_a_positive_energy():
    r = run(1, 1, span=2.0)
    imputed = {"energy_source": "unmeasured", "stop_reason": "interrupted"}
    assert jl.measure(record(1, 1, 0, energy=330.0, time=2.0, **imputed), r, 200) == []  # said: imputed
    assert [v.invariant for v in jl.measure(record(1, 1, 0, energy=0.0, time=2.0, **imputed), r, 200)] == ["energy"]
    assert [v.invariant for v in jl.measure(record(1, 1, 0, energy=330.0, time=1.0, **imputed), r, 200)] == ["time"]
    assert [v.invariant for v in jl.measure(record(1, 1, 0, energy=330.0, time=2.0), r, 200)] == ["energy"]
