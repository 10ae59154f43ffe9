"""Early stopping that knows what it is for (`zeus_run.optimizer.early_stop`): slowdowns neither cascade nor stick."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.factories import make_record
from zeus_run.cost import epochs_under_threshold
from zeus_run.engine.core import Engine, Ledger, TrialRequest
from zeus_run.engine.replay import Knobs, audit
from zeus_run.optimizer import make_optimizer
from zeus_run.optimizer.early_stop import SLOWDOWN, EarlyStopRule, Pace
from zeus_run.records import TrialRecord
from zeus_run.spec import OptimizerSettings

EPOCHS = 10


class SlowMachine:
    """Every batch size converges in `EPOCHS` epochs; recurrence n runs ``slow.get(n, 1)`` times slower.

    A try is cut at its threshold as the trace executor does (`epochs_under_threshold`).
    """

    def __init__(self, cost: dict[int, float], slow: dict[int, float]) -> None:
        self.cost = cost
        self.slow = slow

    def __call__(self, req: TrialRequest) -> TrialRecord:
        bs = req.decision.batch_size
        per_epoch = self.cost[bs] / EPOCHS * self.slow.get(req.recurrence, 1.0)
        limit, cut = epochs_under_threshold(req.cost_threshold, per_epoch, EPOCHS)
        epochs = limit if cut else EPOCHS
        return make_record(
            job="t",
            recurrence=req.recurrence,
            attempt=req.attempt,
            trial=req.trial,
            batch_size=bs,
            stage=req.decision.stage,
            detail=req.decision.detail,
            epochs=epochs,
            time=epochs * per_epoch / 100,
            energy=epochs * per_epoch,
            max_power=100.0,
            cost=epochs * per_epoch,
            reached=not cut,
            stop_reason="cost_threshold" if cut else "target_reached",
            cost_threshold=req.cost_threshold if math.isfinite(req.cost_threshold) else None,
        )


def run(cost, slow, recurrences=30, settings=None, beta=2.0, max_early_stops=None, seed=1):
    opt = make_optimizer(settings or OptimizerSettings(), tuple(cost), sorted(cost)[len(cost) // 2], seed, recurrences)
    engine = Engine(opt, recurrences, 20, beta, max_early_stops)
    return engine, engine.run([], SlowMachine(cost, slow))


def tries(records) -> dict[int, int]:
    out: dict[int, int] = {}
    for r in records:
        out[r.recurrence] = out.get(r.recurrence, 0) + 1
    return out


@pytest.mark.parametrize(
    ("rule", "converged", "expected"),
    [
        ("paper", {64}, 200.0),  # the paper cuts every batch size at beta x the cheapest recurrence
        ("paper", set(), 200.0),
        ("robust", {64}, math.inf),  # a bandit arm is never cut
        ("robust", {32}, 200.0),  # an exploration of a batch size never seen to converge is
    ],
)
def test_threshold(rule, converged, expected):
    assert EarlyStopRule(rule).threshold(2.0, 100.0, 64, converged) == expected
    assert EarlyStopRule(rule).threshold(None, 100.0, 32, converged) == math.inf  # beta null: off


def test_fallback_after():
    assert EarlyStopRule("paper").fallback_after(None) is None  # the paper's semantics
    assert EarlyStopRule("paper").fallback_after(3) == 3
    assert EarlyStopRule("robust").fallback_after(None) == 1
    assert EarlyStopRule("robust").fallback_after(3) == 1
    with pytest.raises(ValueError, match="unknown early-stop rule"):
        EarlyStopRule("nope")


def test_pace_is_the_median_cost_per_epoch_of_the_batch_sizes_own_converged_tries():
    def rec(bs, cost, epochs=10):
        return make_record(
            job="t",
            recurrence=1,
            attempt=1,
            trial=0,
            batch_size=bs,
            stage="thompson",
            epochs=epochs,
            time=1.0,
            energy=cost,
            max_power=100.0,
            cost=cost,
            reached=True,
            stop_reason="target_reached",
        )

    pace = Pace()
    assert pace.slowdown(rec(8, 100.0)) == 1.0  # no history: no judgement
    for c in (100.0, 110.0, 400.0):  # one slow try does not move the median
        pace.add(rec(8, c))
    assert pace.slowdown(rec(8, 220.0)) == pytest.approx(2.0)
    assert pace.slowdown(rec(8, 110.0, epochs=5)) == pytest.approx(2.0)  # per epoch, not per run
    assert pace.slowdown(rec(16, 500.0)) == 1.0  # another batch size has its own pace


def test_a_slow_recurrence_takes_one_extra_try_and_is_not_charged_to_the_batch_size_it_cut():
    cost = {8: 30.0, 16: 20.0, 32: 10.0, 64: 14.0}
    _, quiet = run(cost, {})
    explored = [r for r in quiet if r.stage == "pruning" and r.recurrence > 1]
    slow_rec = explored[0].recurrence  # slow down a recurrence whose first try explores
    engine, records = run(cost, {slow_rec: 2.5})
    t = tries(records)
    assert max(t.values()) <= 2 and t[slow_rec] == 2
    first, second = (r for r in records if r.recurrence == slow_rec)
    assert first.stop_reason == "cost_threshold" and second.stage == "fallback" and second.reached
    ledger = Ledger.from_history(engine, records)
    assert ledger.slow == {slow_rec: pytest.approx(2.5)}
    # The cut try taught the optimizer nothing: the walk probes that batch size again later.
    assert any(r.batch_size == first.batch_size and r.reached for r in records if r.recurrence > slow_rec)
    # Replay re-derives every decision, slow recurrence included.
    knobs = Knobs(tuple(cost), 32, 0.5, 2.0, 1, OptimizerSettings(), 0.9, True, EPOCHS, 20, horizon=30)
    assert audit(records, knobs).divergence is None


def test_the_paper_rule_cascades_where_the_robust_one_does_not():
    # A long slow spell after a quiet start: every batch size runs 2.5x slower.
    cost = {8: 30.0, 16: 20.0, 32: 10.0, 64: 14.0}
    slow = {n: 2.5 for n in range(8, 31)}
    # beta x the cheapest ever: nothing fits, and recurrence after recurrence uses up its tries (each recorded
    # as failed; the job goes on)
    _, cascading = run(cost, slow, settings=OptimizerSettings(revision=1))
    failed = {r.recurrence for r in cascading if r.recurrence_failed is not None}
    assert failed and min(failed) >= 8 and max(tries(cascading).values()) == 20
    _, records = run(cost, slow)
    assert not any(r.recurrence_failed for r in records)
    assert max(tries(records).values()) <= 2


@settings(max_examples=60, deadline=None)
@given(
    shape=st.lists(st.floats(0.5, 4.0), min_size=2, max_size=6),
    slow=st.dictionaries(st.integers(1, 24), st.floats(1.0, 3.0), max_size=24),
    seed=st.integers(0, 1000),
    beta=st.sampled_from([1.2, 1.5, 2.0, 3.0]),
    max_early_stops=st.sampled_from([None, 1, 3]),
)
def test_a_recurrence_wide_slowdown_never_costs_more_than_one_extra_try(shape, slow, seed, beta, max_early_stops):
    """Under the default policy, whatever recurrences run slow and by how much (up to 3x), in any pattern."""
    cost = {2**i: 100.0 * f for i, f in enumerate(shape)}
    _, records = run(cost, slow, recurrences=24, beta=beta, max_early_stops=max_early_stops, seed=seed)
    t = tries(records)
    assert set(t) == set(range(1, 25))  # every recurrence ended with a model
    assert max(t.values()) <= 2
    for r in records:
        if r.batch_size in {x.batch_size for x in records[: r.trial] if x.reached}:
            assert r.reached  # a batch size that converged before is never cut
    assert SLOWDOWN > 1.0


def test_a_run_recorded_under_an_older_revision_goes_on_under_it_unless_the_spec_names_another(write_spec):
    """An upgrade's new default revision never stops a recurring job: a spec that leaves ``optimizer.revision``
    at its default goes on under the revision the run was recorded with (1: before revisions); a spec that
    names another one is refused, and --force starts a run directory next to it."""
    from tests.cli.test_run_cli import spec_text, zeus
    from zeus_run.door.opening import locate
    from zeus_run.rundir.settings import read_settings
    from zeus_run.spec import load_spec

    spec = write_spec(spec_text(body="recurrences: 3\n").replace("recurrences: 1\n", ""))
    assert zeus("run", str(spec), "--no-output", "-n", "1").returncode == 0
    run_dir = spec.parent / "runs"
    stored = run_dir / "spec.yaml"
    stored.write_text("".join(ln for ln in stored.read_text().splitlines(True) if "revision:" not in ln))
    assert locate(load_spec(spec)).spec.optimizer.revision == 1  # recorded before revisions
    resumed = zeus("run", str(spec), "--no-output", "-n", "2")
    assert resumed.returncode == 0, resumed.stderr
    assert "recorded under zeus-voi revision 1: it goes on under revision 1" in resumed.stderr
    assert "revision" not in (read_settings(run_dir) or {}).get("optimizer", {})  # the record is as it was
    assert zeus("replay", str(run_dir)).returncode == 0
    spec.write_text(spec.read_text() + "optimizer: {revision: 5}\n")
    refused = zeus("run", str(spec), "--no-output", "-n", "3")
    assert refused.returncode == 2 and "optimizer.revision: 1 -> 5" in refused.stderr
    forced = zeus("run", str(spec), "--no-output", "-n", "1", "--force")
    assert forced.returncode == 0 and (spec.parent / "runs-2" / "spec.yaml").is_file(), forced.stderr
    assert read_settings(spec.parent / "runs-2")["optimizer"]["revision"] == 5
