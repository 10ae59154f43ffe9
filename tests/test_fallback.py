"""A recurrence always produces a model: after max_early_stops early stops, the best known batch size runs unthrottled."""

from __future__ import annotations

import math

from tests.factories import make_record
from zeus_run.engine.core import Engine, TrialRequest
from zeus_run.engine.position import best_known, position
from zeus_run.engine.replay import Knobs, audit
from zeus_run.optimizer import make_optimizer
from zeus_run.records import TrialRecord
from zeus_run.spec import OptimizerSettings

# Batch size -> cost of a run to the target on a quiet machine (all converge).
COST = {8: 30.0, 16: 20.0, 32: 10.0, 64: 14.0}


class LoadedMachine:
    """Converges every time; after ``quiet`` trials every run costs ``load`` times more.

    A trial whose cost would exceed its threshold is cut at the threshold, as the launcher does.
    """

    def __init__(self, quiet: int, load: float) -> None:
        self.quiet = quiet
        self.load = load
        self.n = 0

    def __call__(self, req: TrialRequest) -> TrialRecord:
        bs = req.decision.batch_size
        cost = COST[bs] * (1.0 if self.n < self.quiet else self.load)
        self.n += 1
        cut = cost > req.cost_threshold
        return make_record(
            job="t",
            recurrence=req.recurrence,
            attempt=req.attempt,
            trial=req.trial,
            batch_size=bs,
            stage=req.decision.stage,
            detail=req.decision.detail,
            epochs=3,
            time=cost / 100,
            energy=cost,
            max_power=100.0,
            cost=req.cost_threshold if cut else cost,
            reached=not cut,
            stop_reason="cost_threshold" if cut else "target_reached",
            cost_threshold=None if math.isinf(req.cost_threshold) else req.cost_threshold,
        )


#: The paper's early stop (revision 1 of the default policy): the rule these tests are about.
PAPER = OptimizerSettings(revision=1)


def engine(max_early_stops: int | None, max_tries: int = 20, settings: OptimizerSettings = PAPER) -> Engine:
    opt = make_optimizer(settings, tuple(COST), 16, seed=1)
    return Engine(opt, 30, max_tries, 2.0, max_early_stops)


def test_load_after_a_quiet_start_makes_every_recurrence_fail_without_the_rule():
    # Each recurrence that uses up max_tries is recorded as failed, and the job goes on with the next one.
    records = engine(None).run([], LoadedMachine(quiet=8, load=2.5))
    failed = [r for r in records if r.recurrence_failed is not None]
    assert failed, "the load should exhaust some recurrence's tries"
    for f in failed:
        tries = [r for r in records if r.recurrence == f.recurrence and r.observed]
        assert len(tries) == 20 and tries[-1] is f and not any(r.reached for r in tries)
        assert f.recurrence_failed.startswith("20 of max_tries 20 tries without the target; the last: cost_threshold")
    assert {r.recurrence for r in records} == set(range(1, 31))  # never stopped
    assert position(records, 20).ended == 30
    assert position(records).failed == len(failed)


def test_after_n_early_stops_the_best_known_batch_size_runs_without_a_threshold():
    records = engine(3).run([], LoadedMachine(quiet=8, load=2.5))
    done = {r.recurrence for r in records if r.reached}
    assert done == set(range(1, 31))  # every recurrence ended with a model
    fallbacks = [r for r in records if r.stage == "fallback"]
    assert fallbacks, "the load should have forced fallbacks"
    for f in fallbacks:
        earlier = [r for r in records if r.recurrence == f.recurrence and r.trial < f.trial]
        assert sum(r.stop_reason == "cost_threshold" for r in earlier) >= 3
        assert f.cost_threshold is None and f.reached
        # The best known batch size from the records before it.
        conv = position(records[: f.trial]).converged
        assert f.batch_size == best_known(conv, 16)
    # Never more than 3 early stops before the fallback, in any recurrence.
    for rec in done:
        rs = [r for r in records if r.recurrence == rec]
        assert sum(r.stop_reason == "cost_threshold" for r in rs) <= 3


def test_replay_audits_a_run_with_fallbacks():
    records = engine(2).run([], LoadedMachine(quiet=8, load=2.5))
    assert any(r.stage == "fallback" for r in records)
    knobs = Knobs(tuple(COST), 16, 0.5, 2.0, 1, PAPER, 0.9, True, 10, 20, max_early_stops=2)
    assert audit(records, knobs).divergence is None
    other = audit(records, Knobs(tuple(COST), 16, 0.5, 2.0, 1, PAPER, 0.9, True, 10, 20))
    assert other.divergence is not None  # without the rule the engine asks for something else


def test_the_default_policy_takes_the_same_load_with_at_most_one_early_stop_per_recurrence():
    # The robust early stop (`zeus_run.optimizer.early_stop`): the bandit's arms are never cut, and one
    # early stop sends the recurrence to the fallback, even with the paper's max_early_stops (None).
    records = engine(None, settings=OptimizerSettings()).run([], LoadedMachine(quiet=8, load=2.5))
    assert {r.recurrence for r in records if r.reached} == set(range(1, 31))
    for rec in range(1, 31):
        assert sum(r.recurrence == rec for r in records) <= 2


def test_best_known_is_the_lowest_mean_cost_or_the_default():
    assert best_known({}, 16) == 16
    assert best_known({8: (30.0, 2), 32: (20.0, 1), 64: (42.0, 3)}, 16) == 64  # means 15, 20, 14
    assert best_known({8: (10.0, 1), 32: (10.0, 1)}, 16) == 8  # a tie goes to the smaller
