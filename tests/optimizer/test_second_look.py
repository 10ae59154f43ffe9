"""``zeus-voi`` revision 6: a batch size whose only run may have been slow gets a second look."""

from __future__ import annotations

import pytest

from tests.optimizer.revisions import voi
from zeus_run.engine.core import Engine
from zeus_run.optimizer import LegacyVOIOptimizer, Observation, ZeusVOIOptimizer
from zeus_run.optimizer.legacy.second_look import recheck, slow_runs
from zeus_run.sim import JOBS, Noise, TraceExecutor, job_table, load_traces, simulate
from zeus_run.spec import OptimizerSettings

BS = (256, 512, 1024, 2048, 4096)
B0 = 1024

# b0's only run cost 2x what its neighbours predict (a slow recurrence 1), yet ran its epochs within
# SLOWDOWN of 512's pace (revision 3's check lets it stand); the walk went down and 512 leads. One of
# 512's later runs was found 2x slow by the engine (`Observation.slowdown`).
UNLUCKY_B0 = [
    Observation(1024, 2.0 * 12.0, True, epochs=4),
    Observation(512, 20.0, True, epochs=4),
    Observation(256, 40.0, True, epochs=4),
    *[Observation(512, 20.0, True, epochs=4) for _ in range(4)],
    Observation(512, 20.0, True, epochs=4, slowdown=2.0),
    *[Observation(512, 20.0, True, epochs=4) for _ in range(2)],
]


def opt(revision: int) -> ZeusVOIOptimizer:
    return voi(BS, B0, seed=1, horizon=100, revision=revision)


def test_the_slowdowns_the_engine_found_are_counted():
    r6 = opt(6)
    state = r6.fold(UNLUCKY_B0)
    q, slowdowns = slow_runs(r6, state)
    assert slowdowns == (2.0,)
    assert state.checks == 7  # the runs of 512 after its first
    assert q == pytest.approx((1 + 0.5) / (len(UNLUCKY_B0) + 1))  # every converged run could have been slow


def test_a_slow_looking_only_run_of_b0_is_run_again():
    r4, r6 = opt(4), opt(6)
    assert r6.posterior(r6.fold(UNLUCKY_B0))[0][B0].mean == pytest.approx(24.0)  # revision 3 did not correct it
    assert r6.decide(r6.fold(UNLUCKY_B0)).batch_size == B0
    assert "second look" in r6.decide(r6.fold(UNLUCKY_B0)).detail
    assert r4.decide(r4.fold(UNLUCKY_B0)).batch_size != B0  # revision 4 never comes back to it


def test_a_second_run_at_the_usual_pace_puts_b0_back_in_the_lead():
    r6 = opt(6)
    state = r6.fold([*UNLUCKY_B0, Observation(1024, 12.0, True, epochs=4)])
    assert r6.leader(state) == B0


@pytest.mark.parametrize(
    ("case", "observations"),
    [
        # quiet: no run was ever found slow, so there is nothing to correct by (revision 4's walk)
        ("no slowdown seen", [o if o.slowdown == 1.0 else Observation(512, 20.0, True, epochs=4) for o in UNLUCKY_B0]),
        # b0's run costs what its neighbours predict: a slow run is the less likely explanation
        ("as predicted", [Observation(1024, 12.0, True, epochs=4), *UNLUCKY_B0[1:]]),
    ],
)
def test_no_second_look_without_evidence(case, observations):
    r4, r6 = opt(4), opt(6)
    assert recheck(r6, r6.fold(observations), *_leader_and_spread(r6, observations)) is None, case
    assert r6.decide(r6.fold(observations)) == r4.decide(r4.fold(observations)), case


def _leader_and_spread(o: ZeusVOIOptimizer, observations: list[Observation]):
    state = o.fold(observations)
    est, cv2 = o.posterior(state)
    return est, o.leader(state), cv2


def test_the_second_look_keeps_to_the_budget(monkeypatch):
    r6 = opt(6)
    state = r6.fold(UNLUCKY_B0)
    assert recheck(r6, state, *_leader_and_spread(r6, UNLUCKY_B0)) is not None
    monkeypatch.setattr(r6, "within_budget", lambda *args: False)
    assert recheck(r6, state, *_leader_and_spread(r6, UNLUCKY_B0)) is None
    assert r6.decide(state).batch_size != B0


def test_revision_6_is_a_pure_function_of_the_observations():
    a, b = opt(6), opt(6)
    for k in range(len(UNLUCKY_B0) + 1):
        sa, sb = a.fold(UNLUCKY_B0[:k]), b.fold(list(UNLUCKY_B0[:k]))
        assert sa == sb
        assert a.decide(sa) == b.decide(sb) == a.decide(a.fold(UNLUCKY_B0[:k]))


def test_earlier_revisions_ignore_the_slowdown():
    quiet = [Observation(o.batch_size, o.cost, o.reached, epochs=o.epochs) for o in UNLUCKY_B0]
    for revision in (1, 2, 3, 4, 5):
        o = opt(revision)
        assert o.fold(UNLUCKY_B0) == o.fold(quiet)


@pytest.fixture
def movielens(traces_dir):
    traces = load_traces(traces_dir / "summary_train.csv", traces_dir / "summary_power_v100.csv")
    return job_table(traces, JOBS["movielens-1m"])


class _Fixed(Noise):
    """Noise with given slowdowns (one per recurrence)."""

    def __init__(self, slowdowns: tuple[float, ...]) -> None:
        object.__setattr__(self, "p", 1.0)
        object.__setattr__(self, "lo", 1.0)
        object.__setattr__(self, "hi", 3.0)
        object.__setattr__(self, "_slowdowns", slowdowns)

    def factors(self, seed: int, recurrences: int) -> tuple[float, ...]:
        return self._slowdowns[:recurrences]


def test_a_slowed_first_run_of_b0_does_not_lock_the_walk_downwards(movielens):
    """Recurrence 1 (b0 = 1024, best 16384) 2.5x slow and three later ones: revision 6 finds the large batch sizes."""
    slowdowns = [1.0] * movielens.horizon
    for n in (1, 8, 12, 16):
        slowdowns[n - 1] = 2.5
    final = {}
    for revision in (4, 6):
        settings = OptimizerSettings.for_policy("zeus-voi", revision=revision)
        final[revision] = [
            simulate(movielens, seed=s, settings=settings, max_early_stops=3, noise=_Fixed(tuple(slowdowns))).final[0]
            for s in range(1001, 1011)
        ]
    assert min(final[4]) <= 1024  # revision 4 walks down from the slow b0 and stays there on some seeds
    assert min(final[6]) >= 2048


class _Spy(LegacyVOIOptimizer):
    """Revision 6, recording what it is told."""

    seen: list[Observation]

    def observe(self, state, obs):
        self.seen.append(obs)
        return super().observe(state, obs)


def test_the_engine_tells_the_optimizer_how_slow_a_run_it_checked_was(movielens):
    """A slow recurrence of a batch size with runs before it: its cost is taken at the usual pace, and the factor told."""
    slowdowns = [1.0] * 12
    slowdowns[9] = 2.5  # recurrence 10: the walk is over, the leader runs again
    spy = _Spy(movielens.batch_sizes, movielens.default_batch_size, seed=1, horizon=12, revision=6)
    spy.seen = []
    records = Engine(spy, 12, 20, 2.0).run([], TraceExecutor(movielens, 0.5, 1, tuple(slowdowns)))
    slow = [(r, o) for r, o in zip(records, spy.seen, strict=True) if r.recurrence == 10]
    assert len(slow) == 1
    record, obs = slow[0]
    assert obs.slowdown == pytest.approx(2.5, rel=0.05)
    assert obs.cost == pytest.approx(record.cost / obs.slowdown)
    assert all(o.slowdown == 1.0 for r, o in zip(records, spy.seen, strict=True) if r.recurrence != 10)
