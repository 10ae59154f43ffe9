"""``max-slowdown`` across batch sizes: the reference time is a pure function of the history, charged
the same way in real, simulated and replayed runs (the engine's ``charge``)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tests.factories import make_record
from tests.fake_nvml import FakeGpu, FakeNvml
from zeus_run.cost import zeus_cost
from zeus_run.energy import NvmlEnergy
from zeus_run.engine.core import Engine
from zeus_run.launcher import run_job
from zeus_run.objective import PENALTY_WEIGHT, Objective, SlowdownCharge, charge_for, history_reference_time
from zeus_run.optimizer import PowerLimitMeasurement, make_optimizer
from zeus_run.power import ProfileStore
from zeus_run.records import TrialRecord
from zeus_run.spec import OptimizerSettings, parse_spec

MS = Objective("max-slowdown", factor=1.1)
STRICT = Objective("max-slowdown", factor=1.0)
B0_PROFILE = (PowerLimitMeasurement(300, 280, 2.0), PowerLimitMeasurement(200, 190, 1.0))  # 200 W: half speed
SCRIPTS = Path(__file__).resolve().parent / "scripts"
REPO = Path(__file__).resolve().parents[1]


def rec(bs: int, time: float, reached: bool = True, limit: float | None = 300.0, **kw) -> TrialRecord:
    energy = 100.0 * time
    fields = dict(
        job="j",
        recurrence=1,
        attempt=1,
        trial=0,
        batch_size=bs,
        stage="x",
        epochs=3,
        time=time,
        energy=energy,
        max_power=300.0,
        cost=zeus_cost(energy, time, 1.0, 300.0),
        reached=reached,
        stop_reason="target_reached" if reached else "max_epochs",
        power_limit=limit,
    )
    fields.update(kw)
    return make_record(**fields)  # type: ignore[arg-type]


def test_reference_is_b0s_converged_time_scaled_to_the_max_limit():
    assert history_reference_time([rec(64, 10.0)], 32) is None  # b0 has not converged
    assert history_reference_time([rec(32, 50.0, reached=False)], 32) is None
    assert history_reference_time([rec(32, 10.0), rec(32, 20.0)], 32) == 15.0  # at the max limit
    # At 200 W b0 ran at half the max limit's throughput: 40 s there is 20 s at the max limit.
    assert history_reference_time([rec(32, 40.0, limit=200.0)], 32, B0_PROFILE) == 20.0
    assert history_reference_time([rec(32, 40.0, limit=200.0)], 32) == 40.0  # no profile: as if at the max
    assert history_reference_time([rec(32, 40.0, limit=None)], 32, B0_PROFILE) == 40.0


def test_charge_penalises_time_beyond_the_bound_against_the_history_so_far():
    charge = SlowdownCharge(MS, 32, lambda: B0_PROFILE)
    history = [rec(32, 40.0, limit=200.0)]  # reference 20 s; the bound is 22 s
    within, over = rec(64, 22.0), rec(64, 30.0)
    assert charge(history, within).cost == within.cost
    assert charge(history, over).cost == pytest.approx(over.energy + PENALTY_WEIGHT * 300.0 * (30.0 - 22.0))
    assert charge([], over) is over  # before b0 converged: energy alone
    assert charge(history, charge(history, over)) == charge(history, over)  # idempotent (replays)
    skipped = rec(64, 0.0, reached=False, stop_reason="skipped", cost=123.0)
    assert charge(history, skipped) is skipped
    assert charge_for(Objective("cost"), 32) is None and charge_for(Objective("energy"), 32) is None


def test_the_engine_charges_each_record_against_the_records_before_it():
    times = {32: 10.0, 64: 30.0}

    def execute(req):
        return rec(req.decision.batch_size, times[req.decision.batch_size], recurrence=req.recurrence, trial=req.trial)

    opt = make_optimizer(OptimizerSettings(), [32, 64], 32, 1, 12)
    engine = Engine(opt, 12, 20, None, charge=charge_for(MS, 32))
    records = engine.run([], execute)
    assert records[0].batch_size == 32 and records[0].cost == records[0].energy
    probes = [r for r in records if r.batch_size == 64]
    assert probes, "the policy never tried 64"
    for r in probes:  # 30 s against a 10 s reference: 19 s over the bound
        assert r.cost == pytest.approx(r.energy + PENALTY_WEIGHT * 300.0 * (30.0 - 11.0))


def test_a_real_run_charges_the_same_as_simulation(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    spec = parse_spec(
        textwrap.dedent(f"""
        name: ms
        command: ["{{python}}", "{SCRIPTS / "step_train.py"}", "{{batch_size}}", "0.004"]
        workdir: {tmp_path}
        run_dir: {tmp_path / "run"}
        batch_sizes: [32, 64]
        default_batch_size: 32
        target_metric: 0.9
        max_epochs: 4
        recurrences: 4
        objective: {{kind: max-slowdown, factor: 1.0}}
        optimizer: {{revision: 3}}  # the probe of 64 is the point; revision 4's budget skips it in 4 recurrences
        energy: {{source: nvml}}
        power_limit: {{step_watts: 50, warmup_iters: 2, measure_iters: 5, min_window_s: 0.01, settle_s: 0,
                      min_counter_updates: 1}}
    """)
    )
    gpu = FakeGpu(min_mw=150_000, max_mw=300_000, limit_mw=250_000, power_fn=lambda t, lim: min(lim, 220.0))
    with NvmlEnergy(None, nvml=FakeNvml([gpu]), environ={}) as energy:
        res = run_job(spec, energy=energy)
    # b0's sweep may not finish in its short trial (then it is stored partial, and not used)
    profile = ProfileStore(tmp_path / "run", "1 x NVIDIA A40").get(32) or ()
    assert any(r.batch_size == 64 for r in res.new), "the policy never tried 64"
    seen: list[TrialRecord] = []
    for r in res.new:
        ref = history_reference_time([*seen, r], 32, profile)
        assert ref is not None  # b0 runs (and converges) first
        assert r.cost == pytest.approx(STRICT.trial_cost(r.energy, r.time, r.max_power, ref))
        seen.append(r)
        if r.batch_size == 64:  # twice b0's iterations: always beyond the 1.0 x bound
            assert r.cost > r.energy
