"""The NVML double as hard as a GPU (`tests.fake_nvml.GpuTruth`): its figures against hand-computed ones.

The double is the truth the door tests and scripts/job_life.py measure zeus-run against, so it is checked here
on its own: one counter for every process, power that follows the marks, an update period, power sampled part of
the time, and a GPU given only ``draw_w`` still drawing that constant power.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.fake_nvml import FakeClock, FakeGpu, FakeNvml, GpuTruth

FAKE_PYNVML = Path(__file__).resolve().parent / "fake_pynvml"


def _marks(path: Path, *marks: tuple[float, object]) -> str:
    with open(path, "a", encoding="utf-8") as f:
        for t, what in marks:
            f.write(json.dumps({"t": t, **({"w": what} if isinstance(what, (int, float)) else {"phase": what})}) + "\n")
    return str(path)


def _nvml(truth: GpuTruth, clock: FakeClock) -> FakeNvml:
    nvml = FakeNvml([FakeGpu(truth=truth)], clock=clock)
    nvml.nvmlInit()
    return nvml


def test_power_follows_the_marks_and_the_counter_integrates_it(tmp_path):
    marks = _marks(tmp_path / "m.jsonl", (10.0, "startup"), (11.5, "train"), (14.0, "tail"), (15.0, 40.0))
    truth = GpuTruth(marks=marks, phases={"startup": 80.0, "train": 250.0, "tail": 120.0}, idle_w=60.0, t0=5.0)
    clock = FakeClock(16.0)
    nvml = _nvml(truth, clock)
    # 5 s idle at 60 W, 1.5 s at 80, 2.5 s at 250, 1 s at 120, 1 s at 40 (by hand).
    want = 5 * 60 + 1.5 * 80 + 2.5 * 250 + 1 * 120 + 1 * 40
    assert nvml.nvmlDeviceGetTotalEnergyConsumption(0) == pytest.approx(want * 1000, abs=1)
    assert truth.true_energy(10.0, 14.0) == pytest.approx(1.5 * 80 + 2.5 * 250)
    clock.t = 12.0
    assert nvml.nvmlDeviceGetPowerUsage(0) == 250_000


def test_the_counter_updates_every_period_and_reports_its_last_update(tmp_path):
    truth = GpuTruth(marks=None, idle_w=200.0, t0=0.0, update_ms=50.0)
    clock = FakeClock(1.049)
    nvml = _nvml(truth, clock)
    assert nvml.nvmlDeviceGetTotalEnergyConsumption(0) == pytest.approx(200 * 1.0 * 1000, abs=1)  # the 1.000 update
    clock.t = 1.051
    assert nvml.nvmlDeviceGetTotalEnergyConsumption(0) == pytest.approx(200 * 1.05 * 1000, abs=1)


def test_power_sampled_a_quarter_of_the_time_misses_a_change_in_the_unsampled_part(tmp_path):
    # Period 100 ms, sampled in its first 25 ms: a step to 300 W at 0.05 s (unsampled) is not seen in the first
    # period; from 0.1 s on every sample is 300 W.
    marks = _marks(tmp_path / "m.jsonl", (0.05, 300.0))
    truth = GpuTruth(marks=marks, idle_w=100.0, t0=0.0, update_ms=100.0, sample_share=0.25)
    clock = FakeClock(0.3)
    nvml = _nvml(truth, clock)
    assert nvml.nvmlDeviceGetTotalEnergyConsumption(0) == pytest.approx((100 * 0.1 + 300 * 0.2) * 1000, abs=1)
    assert truth.true_energy(0.0, 0.3) == pytest.approx(100 * 0.05 + 300 * 0.25)
    clock.t = 0.35
    assert nvml.nvmlDeviceGetPowerUsage(0) == 300_000
    # Inside the sampled part it is seen, in proportion.
    marks2 = _marks(tmp_path / "m2.jsonl", (0.0125, 300.0))
    t2 = GpuTruth(marks=marks2, idle_w=100.0, t0=0.0, update_ms=100.0, sample_share=0.25)
    assert t2.counter_j(0.1) == pytest.approx((100 * 0.0125 + 300 * 0.0125) / 0.25)


def test_a_mark_written_late_by_another_process_moves_every_reader(tmp_path):
    path = tmp_path / "m.jsonl"
    truth = GpuTruth(marks=str(path), idle_w=50.0, t0=0.0)
    assert truth.counter_j(2.0) == pytest.approx(100.0)
    _marks(path, (1.0, 150.0))
    assert truth.counter_j(2.0) == pytest.approx(50.0 + 150.0)


def _read_in_subprocess(nodes: Path) -> tuple[float, float]:
    code = (
        "import pynvml, json, sys\n"
        "from tests.fake_nvml import boot_clock\n"
        "pynvml.nvmlInit()\n"
        "t = boot_clock(); e = pynvml.nvmlDeviceGetTotalEnergyConsumption(pynvml.nvmlDeviceGetHandleByIndex(0))\n"
        "print(json.dumps([t, e]))\n"
    )
    env = {
        **os.environ,
        "PYTHONPATH": f"{FAKE_PYNVML}{os.pathsep}{FAKE_PYNVML.parents[1]}",
        "FAKE_NVML_NODES": str(nodes),
    }
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    t, e = json.loads(out)
    return float(t), float(e)


def test_every_process_on_the_gpu_reads_one_counter(tmp_path):
    """Two processes, one after the other, read one counter: the second's reading is the first's plus what the
    GPU drew in between (a counter per process would start again near 0)."""
    nodes = tmp_path / "nodes.json"
    t0 = time.clock_gettime(time.CLOCK_BOOTTIME) - 100.0  # the counter began 100 s ago (seconds since boot)
    nodes.write_text(json.dumps({"local": {"gpus": [{"draw_w": 200, "t0": t0}]}}))
    (ta, ea), (tb, eb) = _read_in_subprocess(nodes), _read_in_subprocess(nodes)
    assert ea >= 200 * 100 * 1000  # 100 s of 200 W before either process started
    assert eb - ea == pytest.approx(200 * (tb - ta) * 1000, rel=0.02, abs=200)


def test_a_gpu_given_only_draw_w_draws_it_constantly(tmp_path):
    nodes = tmp_path / "nodes.json"
    nodes.write_text(json.dumps({"local": {"gpus": [{"draw_w": 123}]}}))
    code = (
        "import pynvml, time\npynvml.nvmlInit(); h = pynvml.nvmlDeviceGetHandleByIndex(0)\n"
        "a = pynvml.nvmlDeviceGetTotalEnergyConsumption(h); t = time.monotonic(); time.sleep(0.2)\n"
        "b = pynvml.nvmlDeviceGetTotalEnergyConsumption(h); d = time.monotonic() - t\n"
        "print((b - a) / d / 1000, pynvml.nvmlDeviceGetPowerUsage(h))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(FAKE_PYNVML), "FAKE_NVML_NODES": str(nodes)}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    watts, power_mw = out.split()
    assert float(watts) == pytest.approx(123, rel=0.02) and int(power_mw) == 123_000


def test_settings_out_of_range_are_refused():
    with pytest.raises(ValueError, match="sample_share"):
        GpuTruth(sample_share=0.0)
    with pytest.raises(ValueError, match="update_ms"):
        GpuTruth(update_ms=0.0)
