"""Power-limit sweeps that fit the job: fewer limits on a short horizon, partial profiles carried to the next trial."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.fake_nvml import FakeClock, FakeGpu, FakeNvml
from zeus_run.cli.history import profile_lines
from zeus_run.energy import NvmlEnergy
from zeus_run.optimizer.power_limit import (
    OPEN_ENDED_RECURRENCES,
    recurrences_left,
    sweep_more,
    unit_cost,
)
from zeus_run.power import ProfileStore
from zeus_run.power._session import open_power_session
from zeus_run.sim import JOBS, TraceExecutor, job_table, load_traces
from zeus_run.spec import PowerLimitSettings

POLL = 0.05
BS = 64


def power_at(limit: float) -> float:  # W: the GPU draws 90% of its limit
    return 0.9 * limit


def thr_at(limit: float) -> float:  # iterations/s: flat above 225 W, linear below (best at 225 W)
    return 10.0 * min(1.0, limit / 225.0)


def test_recurrences_left_counts_this_one_and_open_ended_is_the_discounted_limit():
    assert recurrences_left(1, 24) == 24.0
    assert recurrences_left(24, 24) == 1.0
    assert recurrences_left(30, 24) == 1.0
    assert recurrences_left(5, None) == OPEN_ENDED_RECURRENCES


def test_sweep_more_is_full_with_enough_recurrences_left_else_stops_after_two_rises():
    rising = [10.0, 9.0, 9.5, 9.8]  # best at the 2nd limit, then two rises
    assert sweep_more(rising, 7, left=7)
    assert sweep_more(rising, 7, left=OPEN_ENDED_RECURRENCES)
    assert not sweep_more(rising, 7, left=6)
    assert sweep_more(rising[:3], 7, left=1)  # one rise may be noise
    assert sweep_more([10.0, 9.0, 9.5, 8.0], 7, left=1)  # a second dip restarts the count
    assert not sweep_more([10.0] * 7, 7, left=100)  # every limit measured
    assert sweep_more([], 7, left=1)


class Rig:
    """A run directory's power session on one fake GPU (150-300 W) whose counter updates every 100 ms."""

    def __init__(self, run_dir):
        self.clock = FakeClock()
        self.gpu = FakeGpu(min_mw=150_000, max_mw=300_000, power_fn=lambda t, lim: power_at(lim), update_ms=100)
        self.nvml = FakeNvml([self.gpu], clock=self.clock)
        self.energy = NvmlEnergy(None, nvml=self.nvml, environ={}, clock=self.clock)
        settings = PowerLimitSettings(warmup_iters=2, measure_iters=3, min_window_s=5.0, settle_s=0.5)
        session = open_power_session(settings, 0.5, self.energy, run_dir)
        assert session is not None
        self.session = session
        self.steps, self.frac = 0, 0.0
        self.opened = len(self.nvml.calls)  # calls after this one are the profiler's

    def set_limits(self) -> list[float]:
        return [mw / 1000 for call, _, mw in self.nvml.calls[self.opened :] if call == "limit"]

    def drive(self, profiler, max_windows: int | None = None) -> None:
        """Feed readings until done, or until ``max_windows`` limits are measured (the trial ends there)."""
        profiler.start()
        while not profiler.done and self.clock() < 3600:
            if max_windows is not None and len(profiler.profile) >= max_windows:
                return
            self.clock.advance(POLL)
            self.frac += thr_at(self.gpu.limit_mw / 1000.0) * POLL
            self.steps, self.frac = self.steps + int(self.frac), self.frac - int(self.frac)
            profiler.observe(self.steps, self.clock(), self.clock(), self.energy.read())


def test_a_partial_profile_persists_and_the_next_trial_continues_it(tmp_path):
    first = Rig(tmp_path)
    profiler = first.session.profiler_for(BS)
    first.drive(profiler, max_windows=3)  # the trial ends after 300, 275, 250 W
    assert profiler.partial and not profiler.complete
    first.session.trial_done(BS, profiler)
    data = json.loads((tmp_path / "power_profiles.json").read_text())
    assert data["partial"] == {"1 x NVIDIA A40": [BS]}
    store = ProfileStore(tmp_path, "1 x NVIDIA A40")
    assert store.get(BS) is None and [m.power_limit for m in store.partial(BS)] == [300.0, 275.0, 250.0]
    assert "(partial: the next trial continues it)" in profile_lines(tmp_path)[0]  # what `history` prints

    second = Rig(tmp_path)  # a later run (or trial) of the same batch size on the same GPU model
    again = second.session.profiler_for(BS)
    assert again is not None and not again.done and again.todo == [225.0, 200.0, 175.0, 150.0]
    second.drive(again)
    assert again.complete
    assert second.set_limits()[:4] == [225.0, 200.0, 175.0, 150.0]  # nothing measured twice
    assert [m.power_limit for m in again.profile] == [300.0, 275.0, 250.0, 225.0, 200.0, 175.0, 150.0]
    assert again.chosen == 225.0
    second.session.trial_done(BS, again)
    data = json.loads((tmp_path / "power_profiles.json").read_text())
    assert "partial" not in data and len(data["models"]["1 x NVIDIA A40"][str(BS)]) == 7
    third = Rig(tmp_path).session.profiler_for(BS)
    assert third is not None and third.done and third.chosen == 225.0


@pytest.mark.parametrize(("left", "measured"), [(None, 7), (100.0, 7), (7.0, 7), (3.0, 6)])
def test_a_short_horizon_sweeps_fewer_limits(tmp_path, left, measured):
    rig = Rig(tmp_path)
    profiler = rig.session.profiler_for(BS, left)
    rig.drive(profiler)
    assert profiler.complete and len(profiler.profile) == measured
    assert profiler.chosen == 225.0  # the cost curve is unimodal: the early stop still finds the best
    if measured < 7:
        assert 150.0 not in rig.set_limits()  # the slowest, costliest limits are never run
    rig.session.trial_done(BS, profiler)
    assert ProfileStore(tmp_path, "1 x NVIDIA A40").get(BS) is not None  # a final profile, not a partial one


def test_simulated_first_trial_on_a_short_horizon_profiles_fewer_limits(traces_dir):
    traces = load_traces(traces_dir / "summary_train.csv", traces_dir / "summary_power_v100.csv")
    table = job_table(traces, JOBS["cifar100"])
    n = len(table.power_limits)
    for row, bs in enumerate(table.batch_sizes):
        ex_long, ex_short = TraceExecutor(table, 0.5, seed=1), TraceExecutor(table, 0.5, seed=1)
        ex_long.power_limit(row, recurrence=1, horizon=100)
        ex_short.power_limit(row, recurrence=20, horizon=20)  # the last recurrence
        assert ex_long._sweep[row][0] == 1.0
        share = ex_short._sweep[row][0]
        costs = [
            unit_cost(m, 0.5, table.max_power) for m in sorted(ex_short._profiles[row], key=lambda m: -m.power_limit)
        ]
        swept = round(share * n)
        assert not sweep_more(costs[:swept], n, 1.0) and all(sweep_more(costs[:k], n, 1.0) for k in range(swept))
        best = min(costs[:swept])
        chosen = ex_short.pl_state.predict(bs)
        assert chosen is not None and costs[list(table.power_limits)[::-1].index(chosen)] == best
    shares = []
    for row in range(len(table.batch_sizes)):
        ex = TraceExecutor(table, 0.5, seed=1)
        ex.power_limit(row, recurrence=1, horizon=1)
        shares.append(ex._sweep[row][0])
    assert min(shares) < 1.0 and np.isfinite(shares).all()  # some batch size's sweep stops early
