"""The pieces every door shares: one stop rule, one target predicate, one record builder, one settings
reader, one opener, and the imputation of an unmeasured tell."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import statistics
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.conftest import PYTHON, SCRIPTS
from tests.factories import make_record
from tests.launcher.test_faults import wait_for
from zeus_run.asktell import ask, report_epoch, tell
from zeus_run.cli import app
from zeus_run.contract import StopReason, TrialOutcome, expires_at, reaches_target
from zeus_run.door.opening import locate
from zeus_run.engine.core import TrialRequest
from zeus_run.engine.measure import PowerBasis
from zeus_run.engine.record import Measurement, trial_record
from zeus_run.errors import RunDirError, UsageError
from zeus_run.optimizer import Decision
from zeus_run.records import TrialRecord
from zeus_run.rundir.opener import stored_spec
from zeus_run.rundir.settings import MAX_BYTES, RunSettings, read_settings
from zeus_run.rundir.store import read_running
from zeus_run.trial.stop import StopRule, judge

FAKE = SCRIPTS / "fake_train.py"


# -- the target and the stop rule --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("metric", "target", "higher", "hit"),
    [
        (0.9, 0.9, True, True),
        (0.89, 0.9, True, False),
        (0.1, 0.2, False, True),
        (0.3, 0.2, False, False),
        (math.nan, 0.9, True, False),  # a diverged epoch never converges
        (math.inf, 0.9, True, False),
        (1.0, None, True, False),  # no target: never reached
    ],
)
def test_reaches_target(metric, target, higher, hit):
    assert reaches_target(metric, target, higher) is hit


RULE = StopRule(max_epochs=5, target_metric=0.9, cost_threshold=100.0, timeout=60.0)


@pytest.mark.parametrize(
    ("epoch", "metric", "cost", "prev", "reason"),
    [
        (1, 0.95, 10.0, 0.0, StopReason.TARGET_REACHED),
        (5, 0.5, 10.0, 8.0, StopReason.MAX_EPOCHS),
        (1, 0.5, 60.0, 0.0, None),  # epoch 1 carries the start-up: it predicts nothing
        (2, 0.5, 70.0, 30.0, StopReason.COST_THRESHOLD),  # the last epoch cost 40 J: 110 J after the next
        (2, 0.5, 55.0, 50.0, None),  # the last epoch cost 5 J: 60 J after the next, under 100
        (3, 0.5, 90.0, 80.0, None),  # 100 J after the next: not past the threshold
        (3, 0.5, 91.0, 80.0, StopReason.COST_THRESHOLD),
    ],
)
def test_the_stop_rule_predicts_the_next_epoch_from_the_last(epoch, metric, cost, prev, reason):
    assert RULE.after_epoch(epoch, metric, cost, prev) == reason


def test_the_average_would_cut_where_the_last_epoch_does_not():
    # Start-up made epoch 1 cost 60 J; epoch 2 cost 10 J. The average predicts 35 J more (105 > 100) and
    # cuts; the last epoch predicts 10 J more (80 <= 100): the rule goes on.
    assert RULE.after_epoch(2, 0.5, 70.0, 60.0) is None


def test_between_epochs_the_timeout_and_the_hard_cut():
    assert RULE.during(61.0, 10.0) is StopReason.TIMEOUT
    assert RULE.during(10.0, 101.0) is StopReason.COST_THRESHOLD
    assert RULE.during(10.0, 99.0) is None


def test_judge_reads_a_finished_trial_back_through_the_rule():
    points = [(0.5, 10.0), (0.5, 20.0), (0.95, 30.0), (0.97, 40.0)]
    j = judge(RULE, points)
    assert (j.epochs, j.reason, j.index) == (3, StopReason.TARGET_REACHED, 2)
    assert judge(RULE, [(0.5, None), (0.5, None)]).reason is None  # costs unknown: only the target and max_epochs
    assert judge(RULE, [(0.5, 10.0), (0.5, 60.0)]).reason is StopReason.COST_THRESHOLD  # 60 + 50 > 100


# -- the record builder ------------------------------------------------------------------------------------------


def test_one_record_builder_takes_the_decision_the_outcome_and_how_it_was_measured():
    req = TrialRequest(3, 2, 7, 5, Decision(16, "pruning", "why"), cost_threshold=math.inf)
    out = TrialOutcome(
        epochs=2,
        time=3.0,
        energy=30.0,
        max_power=100.0,
        cost=165.0,
        reached=False,
        stop_reason=StopReason.COST_THRESHOLD,
        exit_code=0,
        metrics=(0.1, 0.2),
    )
    r = trial_record("j", req, out, Measurement("estimate", True, "watts-x-cpu-time"), seed=9)
    assert (r.recurrence, r.attempt, r.trial, r.batch_size, r.stage, r.detail) == (3, 2, 7, 16, "pruning", "why")
    assert (r.cost_threshold, r.observed, r.metrics, r.seed) == (None, True, (0.1, 0.2), 9)
    assert (r.energy_source, r.estimated, r.energy_method, r.kind) == ("estimate", True, "watts-x-cpu-time", "real")
    assert TrialRecord.from_json(json.loads(json.dumps(r.to_json()))) == r


def test_an_unmeasured_trial_is_imputed_from_the_measured_ones():
    def rec(bs: int, time: float, energy: float, source: str = "nvml") -> TrialRecord:
        return make_record(
            job="j",
            recurrence=1,
            attempt=1,
            trial=0,
            batch_size=bs,
            stage="s",
            epochs=1,
            time=time,
            energy=energy,
            max_power=300.0,
            cost=0.0,
            reached=True,
            stop_reason="target_reached",
            energy_source=source,
        )

    history = [rec(8, 10.0, 1000.0), rec(16, 10.0, 2000.0), rec(8, 5.0, 999.0, "unmeasured")]
    e, how, power = PowerBasis.of(history).impute(16, 4.0, 100.0)
    assert (e, how.source, how.method, power) == (800.0, "unmeasured", "imputed", 300.0)  # batch size 16's 200 W
    e, how, _ = PowerBasis.of(history).impute(32, 4.0, 100.0)
    assert e == pytest.approx(4.0 * 150.0)  # no trial of 32 measured: the job's median power
    e, how, power = PowerBasis.of([]).impute(8, 4.0, 100.0)
    assert (e, how.method, power) == (400.0, "watts-x-time", 100.0)  # nothing measured yet: one stated basis


def test_a_tell_imputes_from_the_fold_as_from_the_whole_history_and_reads_only_what_was_appended(tmp_path, monkeypatch):
    """A server's tell must not re-read the history (its cost would grow with every trial): the fold keeps the
    measured trials' power, and imputes exactly what the whole history would."""
    from zeus_run.asktell import Measured
    from zeus_run.rundir.history import HistoryStore

    spec = tmp_path / "job.yaml"
    spec.write_text(spec_text(tmp_path / "runs").replace("recurrences: 3", "recurrences: 8"))
    for watts in (150.0, 250.0, 200.0):  # measured in the trial's process
        a = ask(spec)
        report_epoch(a.run_dir, a.token, 1, 0.95)
        tell(a.run_dir, a.token, exit_code=0, measured=Measured(2.0, 2.0 * watts, "nvml", False, "counter", 300.0))
    reads: list[Path] = []
    real_read = HistoryStore.read
    monkeypatch.setattr(HistoryStore, "read", lambda self, warn=True: reads.append(self.path) or real_read(self, warn))
    a = ask(a.run_dir)  # by its run directory, as the server asks
    report_epoch(a.run_dir, a.token, 1, 0.95)
    r = tell(a.run_dir, a.token, exit_code=0, time=4.0)  # time told by hand, energy not: imputed
    assert reads == []  # neither the ask, the report nor the tell parsed the whole history
    history = list(real_read(HistoryStore(a.run_dir / "history.jsonl"), False))[:-1]
    e, how, power = PowerBasis.of(history).impute(r.batch_size, r.time, 100.0)
    assert (r.energy, r.energy_method, r.max_power) == (e, how.method, power)
    assert (r.energy_source, r.energy_method) == ("unmeasured", "imputed")
    same = [h.energy / h.time for h in history if h.batch_size == r.batch_size] or [150.0, 250.0, 200.0]
    assert r.energy == pytest.approx(r.time * statistics.median(same))


def test_figures_a_client_reports_without_saying_how_it_measured_are_marked_time_then_energy(tmp_path):
    """The Zeus client reports time and energy with each epoch and no meter: the record says what was reported,
    in the one order every door uses (``time energy``)."""
    spec = tmp_path / "job.yaml"
    spec.write_text(spec_text(tmp_path / "runs"))
    a = ask(spec)
    report_epoch(a.run_dir, a.token, 1, 0.5, time=10.0, energy=2000.0)
    report_epoch(a.run_dir, a.token, 2, 0.95, time=20.0, energy=4000.0)
    r = tell(a.run_dir, a.token, exit_code=0, time=20.0, energy=4000.0)
    assert (r.reported, r.energy_source, r.time, r.energy) == ("time energy", "reported", 20.0, 4000.0)
    # Ended without figures (Zeus's client's PATCH at its exit): the last epoch's time and energy, one point.
    b = ask(a.run_dir)
    report_epoch(b.run_dir, b.token, 1, 0.5, time=10.0, energy=2000.0)
    r = tell(b.run_dir, b.token, exit_code=1, message="ended before the server said to stop")
    assert (r.reported, r.energy_source, r.time, r.energy) == ("time energy", "reported", 10.0, 2000.0)


# -- the settings reader and the opener --------------------------------------------------------------------------


def spec_text(run_dir: Path, lease: float = 600) -> str:
    return (
        f'name: one\ncommand: ["{PYTHON}", "{FAKE}", "--batch-size", "{{batch_size}}"]\nbatch_sizes: [1, 2]\n'
        f"default_batch_size: 2\ntarget_metric: 0.9\nmax_epochs: 3\nrecurrences: 3\nlease: {lease}\n"
        f"energy: {{source: estimate, watts: 100, basis: wall-time}}\nrun_dir: {run_dir}\n"
    )


def test_the_settings_reader_refuses_links_and_oversized_files(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    assert read_settings(run) is None
    elsewhere = tmp_path / "elsewhere.yaml"
    elsewhere.write_text("default_batch_size: 8\n")
    os.symlink(elsewhere, run / "spec.yaml")
    with pytest.raises(RunDirError, match=r"spec\.yaml"):
        read_settings(run)
    assert RunSettings.read(run).raw is None  # the views: no settings, never an error
    os.unlink(run / "spec.yaml")
    (run / "spec.yaml").write_text("x: " + "a" * MAX_BYTES + "\n")
    with pytest.raises(RunDirError, match="larger than"):
        read_settings(run)
    (run / "spec.yaml").write_text("default_batch_size: 8\naccounting: {currency: EUR}\nlease: 5\n")
    s = RunSettings.read(run)
    assert (s.default_batch_size, dict(s.accounting or {}), s.lease) == (8, {"currency": "EUR"}, 5.0)


def test_one_opener_locates_a_job_from_a_spec_or_its_run_directory(tmp_path):
    spec = tmp_path / "job.yaml"
    spec.write_text(spec_text(tmp_path / "runs"))
    where = locate(spec)
    assert where.path == (tmp_path / "runs").absolute() and not where.resumed
    a = ask(spec)
    again = locate(a.run_dir)  # a run directory names itself; its spec is its own spec.yaml
    assert again.path == a.run_dir and again.spec == stored_spec(a.run_dir) and again.spec.name == "one"
    with pytest.raises(UsageError, match="no such spec file or run directory"):
        locate(tmp_path / "missing.yaml")


def test_history_reads_and_writes_nothing_and_shows_expired_asks_as_expired(tmp_path):
    spec = tmp_path / "job.yaml"
    spec.write_text(spec_text(tmp_path / "runs", lease=1))
    first = ask(spec)
    for epoch in (1, 2):
        report_epoch(first.run_dir, first.token, epoch, 0.95 if epoch == 2 else 0.5)
    tell(first.run_dir, first.token, exit_code=0)
    a = ask(spec)
    (marker,) = read_running(a.run_dir)
    wait_for(lambda: expires_at(marker, 1) < time.time(), timeout=60)  # nothing renews it
    history = (a.run_dir / "history.jsonl").read_bytes()
    running = (a.run_dir / "running.json").read_bytes()
    r = CliRunner().invoke(app, ["history", str(a.run_dir), "--format", "json"])
    assert r.exit_code == 0, r.output
    assert "infrastructure" in r.output and "lease expired" in r.output  # shown as expired
    assert (a.run_dir / "history.jsonl").read_bytes() == history  # a read-only command stayed read-only
    assert (a.run_dir / "running.json").read_bytes() == running
    assert read_running(a.run_dir) == [marker]


def test_tell_counts_a_trial_stopped_between_epochs_up_to_its_stop(tmp_path):
    spec = tmp_path / "job.yaml"
    spec.write_text(spec_text(tmp_path / "runs"))
    a = ask(spec)
    now = time.time()
    measured = {"source": "estimate", "method": "watts-x-cpu-time", "estimated": True, "max_power": 100.0}
    events = [
        {"event": "start", "time": now - 10},
        {"event": "info", "measured": measured, "time": now - 10},
        {"event": "epoch", "epoch": 1, "metric": 0.5, "elapsed": 3.0, "energy": 30.0, "time": now - 7},
        # the training side's stop rule cut it mid-epoch (the hard cut): counted up to here
        {"event": "stop", "reason": "cost_threshold", "elapsed": 4.5, "energy": 45.0, "time": now - 5.5},
        {"event": "epoch", "epoch": 2, "metric": 0.5, "elapsed": 6.0, "energy": 60.0, "time": now - 4},
    ]
    (a.trial_dir / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    r = tell(a.run_dir, a.token, exit_code=0)
    assert (r.stop_reason, r.epochs, r.time, r.energy, r.metrics) == ("cost_threshold", 1, 4.5, 45.0, (0.5,))
    assert (r.energy_source, r.energy_method, r.observed) == ("estimate", "watts-x-cpu-time", True)
    assert r.after_time is not None and r.after_time > 0  # from the stop to the tell


# -- the decision path ---------------------------------------------------------------------------------------------


def test_run_ask_tell_the_job_api_and_the_audit_all_decide_and_judge_through_engine_ask_and_tell(tmp_path, monkeypatch):
    """One decision path: `run`'s loop, ``ask``/``tell``, the `Job` API and the audit take every decision through
    `Engine.ask`, and every door's record goes through `Engine.tell` (the one judge), never around them."""
    from zeus_run.asktell import Job
    from zeus_run.engine.core import Engine
    from zeus_run.engine.knobs import Knobs
    from zeus_run.engine.replay import audit
    from zeus_run.launcher import run_job
    from zeus_run.spec import load_spec

    asked: list[tuple[str, int]] = []
    told: list[tuple[str, int]] = []
    door = ["run"]
    real_ask, real_tell = Engine.ask, Engine.tell

    def spy_ask(self, ledger, horizon=None):
        request = real_ask(self, ledger, horizon)
        if request is not None:
            asked.append((door[0], request.trial))
        return request

    def spy_tell(self, request, record, before, stamp, ledger=None):
        told.append((door[0], record.trial))
        return real_tell(self, request, record, before, stamp, ledger)

    monkeypatch.setattr(Engine, "ask", spy_ask)
    monkeypatch.setattr(Engine, "tell", spy_tell)

    # `zeus-run run --next 2`: two recurrences of four, in the launcher's loop
    spec_file = tmp_path / "job.yaml"
    spec_file.write_text(
        spec_text(tmp_path / "runs").replace('"{batch_size}"]', '"{batch_size}", "--needs", "1:2,2:2"]')
    )
    result = run_job(load_spec(spec_file).with_overrides(recurrences=4), next_recurrences=2)  # `run --next 2`
    assert [r.trial for r in result.new] == [0, 1]
    assert asked == told == [("run", 0), ("run", 1)]

    # the same run directory, asked and told from a shell's library calls
    door[0] = "ask/tell"
    a = ask(result.run_dir)
    for epoch, metric in ((1, 0.5), (2, 0.95)):
        report_epoch(a.run_dir, a.token, epoch, metric)
    record = tell(a.run_dir, a.token, exit_code=0)
    assert record.reached and asked[-1] == told[-1] == ("ask/tell", 2)

    # the Job API (what the callbacks and the server's jobs drive)
    door[0] = "job"
    job = Job(run_dir=result.run_dir)
    with job.ask() as trial:
        trial.report(0.95, epoch=1)
    assert job.record is not None and job.record.reached and asked[-1] == told[-1] == ("job", 3)

    # the audit re-derives each recorded decision through the same ask, and judges nothing
    door[0] = "audit"
    n_told = len(told)
    history = read_history_of(result.run_dir)
    checked = audit(history, Knobs.from_spec(stored_spec(result.run_dir)))
    assert checked.divergence is None and checked.checked == len(history) == 4
    assert [t for d, t in asked if d == "audit"] == [0, 1, 2, 3] and len(told) == n_told


def read_history_of(run_dir: Path) -> list[TrialRecord]:
    from zeus_run.rundir.history import read_history

    return list(read_history(run_dir / "history.jsonl", warn=False))


# -- the learning-curve stop through ask/tell ----------------------------------------------------------------------


def _mark_curve_stop(run_dir: Path, token: str) -> None:
    """Make the ask a probe held to its learning curve (what the engine decides for zeus-voi's probes)."""
    from zeus_run.contract import markers_from_json, markers_to_json

    path = run_dir / "running.json"
    markers, _ = markers_from_json(json.loads(path.read_text()))
    marked = [dataclasses.replace(m, curve_stop=True) if m.token == token else m for m in markers]
    path.write_text(json.dumps(markers_to_json(marked)))


@pytest.mark.parametrize("curve_stop", [True, False])
def test_an_asked_probe_is_held_to_its_learning_curve_as_a_launched_one_is(tmp_path, curve_stop):
    """A flat curve at 0.5 against a target of 0.9 with max_epochs 10: the launcher stops it after 3 epochs
    (`tests/trial/test_stop.py`); ``report_epoch`` and the tell judge an ask's trial by the same rule."""
    spec = tmp_path / "job.yaml"
    spec.write_text(spec_text(tmp_path / "runs").replace("max_epochs: 3", "max_epochs: 10"))
    a = ask(spec)
    assert not a.curve_stop  # b0's first run is no probe
    if curve_stop:
        _mark_curve_stop(a.run_dir, a.token)
    answers = [report_epoch(a.run_dir, a.token, e, 0.5, time=float(e), energy=10.0 * e) for e in range(1, 11)]
    stopped = [(e, s) for e, s in enumerate(answers, start=1) if s is not None]
    record = tell(a.run_dir, a.token, exit_code=0)
    if curve_stop:
        assert stopped[0] == (3, StopReason.NO_PROGRESS)
        assert (record.stop_reason, record.epochs, record.observed) == (StopReason.NO_PROGRESS, 3, True)
    else:
        assert stopped == [(10, StopReason.MAX_EPOCHS)] and record.stop_reason is StopReason.MAX_EPOCHS


def test_a_trial_told_from_the_environment_stops_itself_on_its_curve(tmp_path, monkeypatch):
    """`zeus_run.train.Trial` measuring itself (ask/tell without exec) reads ``ZEUS_CURVE_STOP``."""
    from zeus_run.contract import Env
    from zeus_run.train import Trial

    events = tmp_path / "events.jsonl"
    for name, value in {
        Env.EVENT_LOG: str(events),
        Env.HEARTBEAT: str(tmp_path / "heartbeat"),
        Env.ENERGY: json.dumps({"source": "estimate", "watts": 100}),
        Env.MAX_EPOCHS: "10",
        Env.TARGET_METRIC: "0.9",
        Env.CURVE_STOP: "1",
    }.items():
        monkeypatch.setenv(name, value)
    trial = Trial.from_env(batch_size=8)
    try:
        goes_on = [trial.report(0.5) for _ in range(3)]
    finally:
        trial.close()
    assert goes_on == [True, True, False]
    stops = [json.loads(line) for line in events.read_text().splitlines() if '"stop"' in line]
    assert [s["reason"] for s in stops] == ["no_progress"]
