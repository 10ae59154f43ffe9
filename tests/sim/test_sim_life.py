"""The simulator's bad nights (`zeus_run.sim.Life`, ``--life``) and the truth a run is judged against."""

from __future__ import annotations

import dataclasses
import json
from collections import Counter

import pytest
from typer.testing import CliRunner

from zeus_run.cli import app
from zeus_run.contract import StopReason
from zeus_run.sim import JOBS, Life, NightLife, job_table, load_traces, simulate


@pytest.fixture
def squad(traces_dir):
    traces = load_traces(traces_dir / "summary_train.csv", traces_dir / "summary_power_v100.csv")
    return job_table(traces, JOBS["squad"])


def test_nights_are_drawn_from_the_seed_alone_and_the_first_is_quiet():
    life, sizes = Life(), (8, 16, 32, 64, 128)
    a = life.nights(7, 400, sizes, 32, 100.0)
    assert a == life.nights(7, 400, sizes, 32, 100.0) and a != life.nights(8, 400, sizes, 32, 100.0)
    assert a[0] == NightLife() and len(a) == 400
    kinds = Counter()
    for n in a[1:]:
        kinds.update(
            k
            for k, on in (
                ("oom", n.oom_from is not None),
                ("slow night", n.night_factor > 1 or n.night_stall > 0),
                ("slow try", n.try_factor > 1 or n.try_stall > 0),
                ("interrupted", n.interrupted is not None),
                ("lost", n.lost is not None),
                ("environment", n.environment),
            )
            if on
        )
    assert set(kinds) == {"oom", "slow night", "slow try", "interrupted", "lost", "environment"}
    # An out-of-memory night hits the largest batch sizes: from a drawn one up, most often above the default.
    ooms = [n.oom_from for n in a if n.oom_from is not None]
    assert sum(b > 32 for b in ooms) > sum(b <= 32 for b in ooms)
    assert Life(0.0).nights(7, 50, sizes, 32, 100.0) == (NightLife(),) * 50
    with pytest.raises(ValueError, match="life"):
        Life.parse("lots")


def test_a_life_is_deterministic_and_every_recurrence_ends(squad):
    one = simulate(squad, seed=5, horizon=40, baselines=False, life=Life(2.0), max_early_stops=3)
    again = simulate(squad, seed=5, horizon=40, baselines=False, life=Life(2.0), max_early_stops=3)
    assert [r.to_json() for r in one.records] == [r.to_json() for r in again.records]
    assert {r.recurrence for r in one.records} == set(range(1, 41))  # resumed after interruptions and env errors
    # Each night's first-try fault is in its recurrence's records, and nothing else is.
    reasons = {n: {r.stop_reason for r in one.records if r.recurrence == n} for n in range(1, 41)}
    faults = {
        StopReason.INTERRUPTED: {n for n, x in enumerate(one.life, 1) if x.interrupted is not None},
        StopReason.ENVIRONMENT_ERROR: {n for n, x in enumerate(one.life, 1) if x.environment},
        StopReason.INFRASTRUCTURE: {n for n, x in enumerate(one.life, 1) if x.lost is not None},
    }
    assert any(faults.values())
    for reason, nights in faults.items():
        assert {n for n, seen in reasons.items() if reason in seen} == nights, reason
    assert not any(r.observed for r in one.records if not r.stop_reason.observed)
    for r in one.records:
        if r.stop_reason is StopReason.CRASHED:
            assert one.life[r.recurrence - 1].ooms(r.batch_size) and "out of memory" in (r.cause or "")


def test_the_truth_is_what_the_default_would_have_spent_over_the_same_life(squad):
    quiet = simulate(squad, seed=2, horizon=12, baselines=False)
    # A quiet life is the traces' own: the same runs, the same truth.
    lived = simulate(squad, seed=2, horizon=12, baselines=False, life=Life(0.0))
    assert [r.to_json() for r in lived.records] == [r.to_json() for r in quiet.records]
    assert lived.default_cost == pytest.approx(quiet.default_cost)
    assert lived.default_energy == pytest.approx(quiet.default_energy)

    from zeus_run.sim._lived import default_truth
    from zeus_run.sim._simulator import TraceExecutor

    ex = TraceExecutor(squad, 0.5, 2)
    delivered = quiet.records  # a model every night
    # Every night after the first, every batch size runs out of memory, the default included.
    oom = (NightLife(),) + (NightLife(oom_from=min(squad.batch_sizes)),) * 11
    none = default_truth(squad, ex, quiet.default, oom, [r for r in delivered if r.recurrence == 1], 3)
    assert none[0] < 2 * quiet.default.cost and none[1] < 2 * quiet.default.energy  # one run, 33 crashes
    once = default_truth(squad, ex, quiet.default, oom, [r for r in delivered if r.recurrence == 1], 1)
    assert none[0] - quiet.default.cost == pytest.approx(3 * (once[0] - quiet.default.cost))  # max_tries crashes
    every = default_truth(squad, ex, quiet.default, oom, delivered, 3)  # zeus-run delivered each night's model
    assert every[0] == pytest.approx(none[0] + 11 * quiet.default.cost)  # the default runs again to deliver it
    slow = (NightLife(),) + (NightLife(night_factor=2.0),) * 11
    assert default_truth(squad, ex, quiet.default, slow, delivered)[1] == pytest.approx(23 * quiet.default.energy)
    stalled = (NightLife(try_stall=10.0),)
    first = delivered[:1]
    assert default_truth(squad, ex, quiet.default, stalled, first)[2] == pytest.approx(quiet.default.time + 10.0)
    # What the tries no batch size caused spent is on the default's side too.
    lost = [dataclasses.replace(delivered[0], stop_reason="infrastructure", reached=False, observed=False)]
    plain = default_truth(squad, ex, quiet.default, (NightLife(),), first)
    assert default_truth(squad, ex, quiet.default, (NightLife(),), first + lost)[1] == pytest.approx(
        plain[1] + lost[0].energy
    )


def test_simulate_life_on_the_command_line(traces_dir):
    args = ["simulate", "squad", "--traces", str(traces_dir), "--horizon", "15", "--seeds", "4", "--life", "2"]
    res = CliRunner().invoke(app, [*args, "--format", "json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    for key in ("saved", "saved_ci", "cost_vs_default", "energy_vs_default", "time_vs_default"):
        assert key in out
    quiet = json.loads(CliRunner().invoke(app, [*args[:-2], "--format", "json"]).stdout)
    assert out["cost_vs_default"] != quiet["cost_vs_default"]
    bad = CliRunner().invoke(app, [*args[:-1], "often"])
    assert bad.exit_code == 2 and "--life" in bad.output


def test_a_one_night_oom_of_the_oracles_batch_size_does_not_keep_it_away(squad):
    """``--life oom@N``: on night N alone the Oracle's batch size and every larger one run out of memory; the crash
    is marked as a real one is, the night ends smaller, and the job returns to it (it had reached the target
    before: nothing is shut out after that night). ``oom@N+M``: a second such night shuts it out for
    ``oom_retry_after`` nights with a model, then the job returns to it."""
    quiet = simulate(squad, seed=2, horizon=30, baselines=False, life=Life(0.0), max_early_stops=3)
    best = quiet.oracle.batch_size
    night = next(r.recurrence for r in quiet.records if r.recurrence > 5 and r.batch_size == best and r.reached)
    life = Life.parse(f"oom@{night}")
    assert (life.scale, life.oom_nights, life.describe()) == (0.0, (night,), f"oom@{night}")
    run = simulate(squad, seed=2, horizon=30, baselines=False, life=life, max_early_stops=3)
    crashes = [r for r in run.records if r.oom]
    assert crashes and {r.recurrence for r in crashes} == {night} and crashes[0].batch_size >= best
    assert crashes[0].oom_retry_after == 5
    got = {r.recurrence: r.batch_size for r in run.records if r.reached}
    assert got[night] < crashes[0].batch_size
    assert [got[n] for n in range(night + 1, 31)].count(best) >= 10, got  # it comes back
    twice = simulate(squad, seed=2, horizon=30, baselines=False, life=Life.parse(f"oom@{night}+{night + 1}"))
    got = {r.recurrence: r.batch_size for r in twice.records if r.reached}
    if any(r.oom for r in twice.records if r.recurrence == night + 1):  # the job ran it again: shut out for 5
        assert all(got[n] < best for n in range(night + 1, night + 7)), got
        assert best in [got[n] for n in range(night + 7, 31)], got
    with pytest.raises(ValueError, match="night 1"):
        Life.parse("oom@1")


def test_after_a_one_night_oom_history_recommends_what_the_decisions_may_run(traces_dir, tmp_path):
    """The simulator's run directory read by ``history`` after two out-of-memory nights of the Oracle's batch size
    (8 and 9): while it is shut out, no view
    recommends it or any larger one, the table marks them and says since when, and ``history`` says until when."""
    args = ["simulate", "cifar100", "--traces", str(traces_dir), "--gpu", "v100", "--horizon", "13", "--seeds", "1"]
    res = CliRunner().invoke(app, [*args, "--life", "oom@8+9", "--run-dir", str(tmp_path)])
    assert res.exit_code == 0, res.output
    run_dir = next(tmp_path.iterdir())
    out = json.loads(CliRunner().invoke(app, ["history", str(run_dir), "--format", "json"]).stdout)
    summary = out.get("summary", out)
    (ban,) = summary["shut_out"]
    assert ban["since"] == 9 and ban["left"] is not None and ban["left"] >= 1
    assert summary["recommendation"]["batch_size"] < ban["batch_size"]
    text = CliRunner().invoke(app, ["history", str(run_dir)], env={"COLUMNS": "200", "NO_COLOR": "1"}).stdout
    assert f"shut out since recurrence 9 (out of memory), {ban['left']} more recurrence(s)" in text
    assert f"Shut out of the decisions: batch size {ban['batch_size']} and larger" in text


def test_replay_what_if_of_a_one_night_oom_obeys_the_rule(traces_dir, tmp_path):
    """``zeus-run replay RUN_DIR --eta 0.8`` on a run that lived a one-night OOM: the audit holds, the replayed crash
    is one, and no replayed decision runs a batch size the replayed records before it shut out (at eta 1 this
    run's replay stops at recurrence 4, on a batch size it never observed)."""
    from zeus_run.engine.memory import shut_out
    from zeus_run.records import TrialRecord

    args = ["simulate", "cifar100", "--traces", str(traces_dir), "--gpu", "v100", "--horizon", "20", "--seeds", "1"]
    assert CliRunner().invoke(app, [*args, "--life", "oom@8+9", "--run-dir", str(tmp_path)]).exit_code == 0
    run_dir = next(tmp_path.iterdir())
    assert CliRunner().invoke(app, ["replay", str(run_dir)]).exit_code == 0  # the recorded decisions re-derive
    res = CliRunner().invoke(app, ["replay", str(run_dir), "--eta", "0.8", "--format", "json"])
    assert res.exit_code == 0, res.output
    replayed = [TrialRecord.from_json(t) for t in json.loads(res.stdout)["trials"]]
    assert any(r.oom for r in replayed) and len({r.recurrence for r in replayed}) == 20
    for i, r in enumerate(replayed):
        ceiling = shut_out(replayed[:i]).ceiling
        night = [x.batch_size for x in replayed[:i] if x.recurrence == r.recurrence and x.oom]
        assert ceiling is None or r.batch_size < ceiling, (r.recurrence, r.batch_size, ceiling)
        assert not night or r.batch_size < min(night), (r.recurrence, r.batch_size, night)
