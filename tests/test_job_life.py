"""The job-life harness's own parts (scripts/job_life.py): its schedule, ledger pairing and checks.

The harness itself (minutes of real triggers) runs in `scripts/test_heavy.sh` as ``scripts/job_life.py --short``;
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


def test_the_short_form_is_the_fewest_nights_that_take_every_fault_kind_and_door():
    for seed in (1, 3):
        n = jl.fewest_nights(seed)
        covers = [
            {f for night in jl.schedule(k, seed) for f in night.faults} == set(jl.FAULTS)
            and {night.door for night in jl.schedule(k, seed)} == set(jl.DOORS)
            for k in (n - 1, n)
        ]
        assert covers == [False, True], (seed, n)
    assert jl.fewest_nights(1) == 9 and jl.fewest_nights(3) == 8  # as .ci/run's form says


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
    got = jl.measure(r, run(1, 1, span=2.5), 200)  # the ledger: 200 W x 2.5 s = 500 J
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


def test_the_ledger_integrates_the_marks_itself_and_allows_the_counters_slack(tmp_path):
    """The truth of a span with a start-up, training and a tail, by hand; the slack is what a counter updated every
    50 ms may honestly miss (a period of the largest power, and of each change)."""
    path = tmp_path / "marks.jsonl"
    lines = [(100.0, 60), (101.0, 250), (104.0, 120), (105.0, 60)]
    path.write_text("".join(json.dumps({"t": t, "w": w}) + "\n" for t, w in lines))
    marks = jl.Marks(path, idle_w=0.0)
    assert marks.energy(100.5, 105.5) == pytest.approx(0.5 * 60 + 3 * 250 + 1 * 120 + 0.5 * 60)
    assert marks.slack(100.5, 105.5, 50) == pytest.approx(0.05 * (250 + 190 + 130 + 60))
    r = run(1, 1, start=100.5, span=5.0)
    r.ask_at, r.ask_s = (100.6, 100.8), 0.2  # an ask in the process, at the start-up's 60 W: left out
    drew = r.drew(marks, 50)
    assert drew is not None and drew.joules == pytest.approx(930 - 0.2 * 60)
    good = jl.measure(record(1, 1, 0, energy=drew.joules * 1.06, time=4.8), r, drew)  # within 5% + the slack
    bad = jl.measure(record(1, 1, 0, energy=drew.joules * 0.88, time=4.8), r, drew)
    assert good == [] and [v.invariant for v in bad] == ["energy"]


def test_an_imputed_energy_at_a_tenth_of_the_jobs_measured_power_is_caught():
    r = run(1, 1, span=2.0)
    imputed = {"energy_source": "unmeasured", "stop_reason": "interrupted"}
    powers = jl.measured_powers([record(1, 1, 0, energy=500.0, time=2.0), record(2, 1, 1, energy=560.0, time=2.0)])
    assert powers == [250.0, 280.0]
    assert jl.measure(record(1, 1, 0, energy=530.0, time=2.0, **imputed), r, 200, powers) == []
    tenth = jl.measure(record(1, 1, 0, energy=53.0, time=2.0, **imputed), r, 200, powers)
    assert [v.invariant for v in tenth] == ["energy"] and "26.5 W" in tenth[0].seen


def test_an_indented_server_traceback_and_an_answer_500_are_flagged():
    log = (
        'INFO:     127.0.0.1:4242 - "POST /v1/jobs/nightly/trials/3/epochs HTTP/1.1" 500 Internal Server Error\n'
        "ERROR:    Exception in ASGI application\n"
        "  Traceback (most recent call last):\n"
        '    File "/repo/zeus_run/server/_jobs.py", line 40, in epochs\n'
        "      store.append(x)\n"
        "  OSError: [Errno 28] No space left on device\n"
    )
    found = jl.zeus_traceback(log)
    assert found.startswith("OSError: [Errno 28]") and "_jobs.py" in found
    assert "/v1/jobs/nightly/trials/3/epochs" in jl.server_errors(log)
    ours = "2026-11-28 11:53:38 INFO 127.0.0.1 operator POST /v1/jobs/nightly/trials/47a4f8~/epochs 500 2.3 ms\n"
    assert "/v1/jobs/nightly/trials/47a4f8~/epochs" in jl.server_errors(ours)
    assert jl.server_errors('"POST /v1/x HTTP/1.1" 409 Conflict\n') == ""


def test_an_unmeasured_record_is_held_to_its_time_and_a_positive_energy():
    r = run(1, 1, span=2.0)
    imputed = {"energy_source": "unmeasured", "stop_reason": "interrupted"}
    assert jl.measure(record(1, 1, 0, energy=330.0, time=2.0, **imputed), r, 200) == []  # said: imputed
    assert [v.invariant for v in jl.measure(record(1, 1, 0, energy=0.0, time=2.0, **imputed), r, 200)] == ["energy"]
    assert [v.invariant for v in jl.measure(record(1, 1, 0, energy=330.0, time=1.0, **imputed), r, 200)] == ["time"]
    assert [v.invariant for v in jl.measure(record(1, 1, 0, energy=330.0, time=2.0), r, 200)] == ["energy"]


# -- the true saving -----------------------------------------------------------------------------------------


def test_true_sides_charge_the_default_its_known_cost_and_both_sides_a_night_with_no_model():
    over = 0.2  # what a launch adds beyond the script's own time
    known = {bs: train.STARTUP + train.REACH[bs] * train.EPOCH_S[bs] for bs in (32, 64)}
    b0 = jl.DEFAULT_BATCH_SIZE
    records = [
        record(1, 1, 0, batch_size=b0),
        record(2, 1, 1, batch_size=32),
        record(3, 1, 2, batch_size=32, stop_reason="crashed", reached=False),
        record(3, 2, 3, batch_size=16, stop_reason="crashed", reached=False),
        record(4, 1, 4, batch_size=32, stop_reason="infrastructure", reached=False, observed=False),
        record(4, 2, 5, batch_size=32),
    ]
    spans = [known[b0] + over + train.SAVE, known[32] + over + train.SAVE, 1.6, 1.7, 0.9, known[32] + over + train.SAVE]
    nights = [1, 2, 3, 3, 4, 4]
    runs = [
        run(r["recurrence"], r["attempt"], start=100.0 * i, span=spans[i], pid=i + 1, night=nights[i])
        for i, r in enumerate(records)
    ]
    for r, x in zip(records, runs, strict=True):
        x.batch_size, x.reached = r["batch_size"], r["reached"]
    draws = {1: 200.0, 2: 150.0, 3: 250.0, 4: 100.0}
    sides = jl.true_sides(records, runs, draws, b0)
    assert sides is not None
    spent_t = sum(s - (train.SAVE if r["reached"] else 0.0) for s, r in zip(spans, records, strict=True))
    default_t = 3 * (known[b0] + over) + 1.6 + 1.7 + 0.9  # three nights with a model; the OOM night and the loss as ran
    assert sides["time"] == pytest.approx((spent_t, default_t))
    default_e = (known[b0] + over) * (200 + 150 + 100) + 1.6 * 250 + 1.7 * 250 + 0.9 * 100
    assert sides["energy"][1] == pytest.approx(default_e)
    assert jl.true_sides(records[2:4], runs[2:4], draws, b0) is None  # nothing reached yet: no default's cost


def test_true_sides_charge_the_default_by_the_one_rule_for_bad_nights():
    """A failure above the default and an interrupted launcher are zeus-run's alone; at or below it, both sides'."""
    over = 0.2
    one = train.STARTUP + train.REACH[jl.DEFAULT_BATCH_SIZE] * train.EPOCH_S[jl.DEFAULT_BATCH_SIZE] + over
    b0 = jl.DEFAULT_BATCH_SIZE
    records = [
        record(1, 1, 0, batch_size=b0),
        record(2, 1, 1, batch_size=128, stop_reason="crashed", reached=False),  # out of memory above b0: no model
        record(2, 2, 2, batch_size=b0, stop_reason="crashed", reached=False),  # ... and at b0: the default's too
        record(3, 1, 3, batch_size=b0, stop_reason="interrupted", reached=False, observed=False),
        record(3, 2, 4, batch_size=b0),
    ]
    spans = [one + train.SAVE, 1.6, 1.7, 0.9, one + train.SAVE]
    nights = [1, 2, 2, 3, 3]
    runs = [
        run(r["recurrence"], r["attempt"], start=100.0 * i, span=spans[i], pid=i + 1, night=nights[i])
        for i, r in enumerate(records)
    ]
    for r, x in zip(records, runs, strict=True):
        x.batch_size, x.reached = r["batch_size"], r["reached"]
    sides = jl.true_sides(records, runs, {1: 100.0, 2: 100.0, 3: 100.0}, b0)
    assert sides is not None
    assert sides["time"][1] == pytest.approx(2 * one + 1.7)  # not 128's 1.6, not the interrupted 0.9


def test_coverage_counts_what_held():
    cov, other = jl.Coverage(), jl.Coverage()
    cov.judged.update(energy=3, time=3)
    cov.held.update(energy=3, time=2)
    other.judged.update(energy=1)
    cov.add(other)
    assert "energy 3/4 (75.0%" in cov.line() and "time 2/3 (66.7%" in cov.line()


def test_an_orphan_that_died_or_was_run_again_breaks_the_orphan_invariant():
    """A kill-launcher night: the orphan must run to its end (exit 0), and its record say what it reached, with no
    script running its recurrence again."""
    night = jl.Night(5, "cron", faults=("kill-launcher",))

    def check(orphan, records, more=()):
        log = jl.NightLog(night, orphan_pid=orphan.pid)
        v: list = []
        jl.Life._check_orphan(None, log, records, [orphan, *more], v)  # type: ignore[arg-type]  # uses no state
        return v

    good = run(4, 2, pid=7, night=5, exit_code=0, reached=True)
    assert check(good, [record(4, 2, 3)]) == []
    died = run(4, 2, pid=7, night=5, exit_code=1, error="BrokenPipeError: [Errno 32] Broken pipe")
    (v,) = check(died, [record(4, 2, 3, stop_reason="interrupted", reached=False)])
    assert v.invariant == "orphan" and "BrokenPipeError" in v.seen
    again = run(4, 3, pid=8, night=5, start=200.0, exit_code=0, reached=True)
    ignored = check(good, [record(4, 2, 3, stop_reason="interrupted", reached=False), record(4, 3, 4)], [again])
    assert sorted(x.expected[:20] for x in ignored) == ["its record to say re", "no script to run a r"]
