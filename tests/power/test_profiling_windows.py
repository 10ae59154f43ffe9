"""Profiling windows by time against the NVML double's counter that updates every k ms."""

from __future__ import annotations

import pytest

from tests.fake_nvml import FakeClock, FakeGpu, FakeNvml
from zeus_run.energy import NvmlEnergy
from zeus_run.optimizer.power_limit import PowerLimitMeasurement, best_power_limit
from zeus_run.power import JitProfiler
from zeus_run.power._profiler import MIN_COUNTER_UPDATES

POLL = 0.05  # the launcher reads every 50 ms
LIMITS = [300.0, 275.0, 250.0, 225.0, 200.0, 175.0, 150.0]


def power_at(limit: float) -> float:  # W: the GPU draws 90% of its limit
    return 0.9 * limit


def thr_at(limit: float) -> float:  # iterations/s: flat above 225 W, linear below
    return 10.0 * min(1.0, limit / 225.0)


# At eta 0.5 and 300 W the cost per iteration is lowest at 225 W, 4.5% below 250 W and 7% below 200 W:
# a measurement within a few percent picks it; one at the counter's granularity may not.


def profile_on_counter(update_ms: float, min_window_s: float, settle_s: float = 0.5, max_time: float = 3600.0):
    """Drive a JitProfiler with readings of NvmlEnergy on a fake GPU whose counter updates every ``update_ms``."""
    clock = FakeClock()
    gpu = FakeGpu(power_fn=lambda t, limit: power_at(limit), update_ms=update_ms)
    nvml = FakeNvml([gpu], clock=clock)
    src = NvmlEnergy(None, nvml=nvml, environ={}, clock=clock)
    calls: list[float] = []

    def set_limit(w: float) -> bool:
        nvml.nvmlDeviceSetPowerManagementLimit(0, int(w * 1000))
        calls.append(w)
        return True

    prof = JitProfiler(
        LIMITS,
        lambda p: best_power_limit(p, 0.5, 300.0),
        set_limit,
        warmup_iters=2,
        measure_iters=3,  # the old floor: 3 iterations (~0.3 s) would be a handful of counter steps
        min_window_s=min_window_s,
        settle_s=settle_s,
    )
    prof.start()
    steps, fractional = 0, 0.0
    while not prof.done and clock() < max_time:
        clock.advance(POLL)
        fractional += thr_at(gpu.limit_mw / 1000.0) * POLL
        steps, fractional = steps + int(fractional), fractional - int(fractional)
        prof.observe(steps, clock(), clock(), src.read())
    src.close()
    return prof, calls


@pytest.mark.parametrize("update_ms", [10, 100, 250])
def test_windows_span_the_minimum_and_pick_the_true_best(update_ms):
    prof, calls = profile_on_counter(update_ms, min_window_s=5.0)
    truth = [PowerLimitMeasurement(lim, power_at(lim), thr_at(lim)) for lim in LIMITS]
    assert prof.complete and [m.power_limit for m in prof.profile] == LIMITS
    for m, t in zip(prof.profile, truth, strict=True):
        assert m.window_s is not None and m.window_s >= 5.0
        assert m.samples is not None and m.samples >= MIN_COUNTER_UPDATES
        assert m.avg_power == pytest.approx(t.avg_power, rel=0.05)  # <= 2 steps of 250 ms in 5 s
    assert prof.chosen == best_power_limit(truth, 0.5, 300.0) and calls[-1] == prof.chosen


def test_a_window_shorter_than_the_counter_allows_is_never_used():
    """A 500 ms counter: a 2 s minimum would see 4 steps; every window stretches to 20 steps (>= 10 s)."""
    prof, _ = profile_on_counter(500, min_window_s=2.0)
    assert prof.complete
    for m in prof.profile:
        assert m.samples is not None and m.samples >= MIN_COUNTER_UPDATES
        assert m.window_s is not None and m.window_s >= (MIN_COUNTER_UPDATES - 2) * 0.5  # >> the 2 s minimum
    truth = [PowerLimitMeasurement(lim, power_at(lim), thr_at(lim)) for lim in LIMITS]
    assert prof.chosen == best_power_limit(truth, 0.5, 300.0)


def test_a_counter_that_does_not_advance_chooses_nothing():
    prof, calls = profile_on_counter(10_000_000, min_window_s=1.0)  # never updates within the test
    assert prof.done and not prof.complete and prof.chosen is None and prof.profile == []
    assert calls[-1] == max(LIMITS)  # back at the maximum for the rest of the trial


def test_settle_time_passes_before_measuring():
    prof, _ = profile_on_counter(100, min_window_s=1.0, settle_s=3.0)
    # Each limit: >= 3 s settling + >= 1 s measuring, so the whole profile takes >= 7 x 4 s.
    assert prof.complete and prof._done_at is not None and prof._done_at.time >= len(LIMITS) * 4.0


def test_profile_store_keeps_window_and_samples(tmp_path):
    from zeus_run.power._store import ProfileStore

    ProfileStore(tmp_path, "1 x NVIDIA A40").put(
        64, [PowerLimitMeasurement(300.0, 250.0, 10.0, window_s=5.2, samples=52)]
    )
    ProfileStore(tmp_path, "2 x NVIDIA A100").put(64, [PowerLimitMeasurement(400.0, 600.0, 20.0)])
    assert ProfileStore(tmp_path, "1 x NVIDIA A40").get(64) == [PowerLimitMeasurement(300.0, 250.0, 10.0, 5.2, 52)]
    assert ProfileStore(tmp_path, "2 x NVIDIA A100").get(64) == [PowerLimitMeasurement(400.0, 600.0, 20.0)]
    assert ProfileStore(tmp_path, "1 x NVIDIA H100").get(64) is None  # another model measures its own


def test_version_1_profiles_are_read_as_their_gpu_model(tmp_path):
    from zeus_run.power._store import PROFILES_NAME, ProfileStore

    (tmp_path / PROFILES_NAME).write_text(
        '{"version": 1, "gpus": "NVML: 1 x NVIDIA A40 (GPUs 0; total energy counter; power limits 100-300 W)", '
        '"profiles": {"32": [{"power_limit": 300.0, "avg_power": 200.0, "throughput": 5.0}]}}'
    )
    assert ProfileStore(tmp_path, "1 x NVIDIA A40").get(32) == [PowerLimitMeasurement(300.0, 200.0, 5.0)]


def test_history_shows_each_window(tmp_path):
    from typer.testing import CliRunner

    from tests.sim_helpers import write_tiny_traces
    from zeus_run.cli import app
    from zeus_run.power._store import ProfileStore

    traces = write_tiny_traces(tmp_path / "traces")
    runner = CliRunner()
    res = runner.invoke(
        app, ["simulate", "squad", "--traces", str(traces), "--gpu", "tiny", "--run-dir", str(tmp_path)]
    )
    assert res.exit_code == 0, res.output
    run = next(p for p in tmp_path.iterdir() if p.name.startswith("squad"))
    ProfileStore(run, "1 x NVIDIA A40").put(8, [PowerLimitMeasurement(300.0, 250.0, 10.0, window_s=5.2, samples=52)])
    res = runner.invoke(app, ["history", str(run)])
    assert (
        "Power profile of batch size 8 on 1 x NVIDIA A40: 300 W: 250.0 W, 10 it/s, 5.2 s window, 52 counter updates"
        in res.stdout
    )
