"""NvmlEnergy against the pynvml-shaped double: counters, resets, power sampling, device selection, MIG."""

from __future__ import annotations

import logging

import pytest

from tests.fake_nvml import FakeClock, FakeGpu, FakeNvml
from zeus_run.energy import EstimatedEnergy, NvmlEnergy, open_energy_source, visible_gpu_ids
from zeus_run.errors import EnergyError
from zeus_run.spec import EnergySettings


def _gpus(n=2, **kw):
    return [FakeGpu(uuid=f"GPU-{i:08d}-aaaa", **kw) for i in range(n)]


def test_counter_deltas_sum_all_selected_gpus():
    nv = FakeNvml(_gpus(3))
    for g, e in zip(nv.gpus, (1_000_000, 2_000_000, 9_000_000), strict=False):
        g.energy_mj = e
    src = NvmlEnergy(["0", "1"], nvml=nv, environ={})
    assert src.read() == 0.0
    nv.gpus[0].energy_mj += 1500  # 1.5 J
    nv.gpus[1].energy_mj += 2500  # 2.5 J
    nv.gpus[2].energy_mj += 999_000  # not the job's GPU
    assert src.read() == pytest.approx(4.0)
    nv.gpus[0].energy_mj += 1000
    assert src.read() == pytest.approx(5.0)
    assert src.max_power == pytest.approx(600.0)  # 2 x 300 W max limit
    src.close()
    assert nv.init_count == 0


def test_counter_going_backwards_invalidates_window_not_negative(caplog):
    nv = FakeNvml(_gpus(2))
    nv.gpus[0].energy_mj = 50_000
    nv.gpus[1].energy_mj = 50_000
    src = NvmlEnergy(None, nvml=nv, environ={})
    nv.gpus[0].energy_mj += 10_000
    nv.gpus[1].energy_mj += 10_000
    assert src.read() == pytest.approx(20.0)
    nv.gpus[0].energy_mj = 3_000  # driver reload: GPU 0 restarts from ~0
    nv.gpus[1].energy_mj += 1_000
    with caplog.at_level(logging.WARNING):
        e = src.read()
    assert e == pytest.approx(21.0)  # GPU 0's window is dropped, never negative
    assert src.invalid_windows == 1
    assert "went backwards" in caplog.text
    nv.gpus[0].energy_mj += 2_000  # counting resumes from the new baseline
    assert src.read() == pytest.approx(23.0)
    src.close()


def test_power_sampling_integrates_synthetic_curve():
    clock = FakeClock()
    # A ramp 100 W -> 300 W over 10 s, sampled every 0.1 s: trapezoids are exact for a line.
    g = FakeGpu(has_counter=False, power_fn=lambda t, lim: 100.0 + 20.0 * t)
    nv = FakeNvml([g], clock=clock)
    src = NvmlEnergy(None, nvml=nv, environ={}, poll_interval=3600, clock=clock)  # thread never fires
    sampler = src._sampler
    assert sampler is not None
    for _ in range(100):
        clock.advance(0.1)
        sampler.sample()
    assert src.read() == pytest.approx(100 * 10 + 0.5 * 20 * 10 * 10, rel=1e-5)  # 2000 J (mW rounding)
    assert "power sampling" in src.describe()
    src.close()
    assert not sampler._thread.is_alive()


def test_power_sampling_thread_runs_and_stops_cleanly():
    import time

    from tests.slurm_helpers import wait_for

    g = FakeGpu(has_counter=False, power_mw=200_000)
    nv = FakeNvml([g])
    began = time.monotonic()
    src = NvmlEnergy(None, nvml=nv, environ={}, poll_interval=0.01)
    # A state, not a duration: the samples add up past 0.1 s of 200 W; never more than 200 W for the time it ran
    # (a loaded machine may stall the test between the reads, never the energy past what was drawn).
    wait_for(lambda: src.read() > 200 * 0.1, what="0.1 s of samples")
    e = src.read()
    ran = time.monotonic() - began
    thread = src._sampler._thread
    src.close()
    assert 200 * 0.1 < e <= 200 * (ran + 0.01)
    assert not thread.is_alive()


def test_mixed_counter_and_sampled_gpus_are_summed():
    clock = FakeClock()
    a = FakeGpu(uuid="GPU-a")
    b = FakeGpu(uuid="GPU-b", has_counter=False, power_mw=50_000)
    nv = FakeNvml([a, b], clock=clock)
    src = NvmlEnergy(None, nvml=nv, environ={}, poll_interval=3600, clock=clock)
    a.energy_mj += 7_000
    clock.advance(2.0)
    assert src.read() == pytest.approx(7.0 + 100.0)
    assert "energy counter + power sampling" in src.describe()
    src.close()


@pytest.mark.parametrize(
    "env, expected",
    [
        ({"CUDA_VISIBLE_DEVICES": "2,0"}, ["2", "0"]),
        ({"CUDA_VISIBLE_DEVICES": "GPU-00000001-aaaa"}, ["GPU-00000001-aaaa"]),
        ({"CUDA_VISIBLE_DEVICES": "1,-1,0"}, ["1"]),
        ({"CUDA_VISIBLE_DEVICES": ""}, []),
        ({}, None),
    ],
)
def test_visible_gpu_ids_from_environment(env, expected):
    assert visible_gpu_ids(None, env) == expected


def test_spec_gpus_win_over_environment():
    assert visible_gpu_ids(("3",), {"CUDA_VISIBLE_DEVICES": "0"}) == ["3"]


def test_device_selection_by_index_and_uuid():
    nv = FakeNvml(_gpus(3))
    for i, g in enumerate(nv.gpus):
        g.name = f"GPU model {i}"
    src = NvmlEnergy(None, nvml=nv, environ={"CUDA_VISIBLE_DEVICES": "2"})
    assert [g.handle for g in src.gpus] == [2]
    src.close()
    src = NvmlEnergy(None, nvml=nv, environ={"CUDA_VISIBLE_DEVICES": "GPU-00000001-aaaa,0"})
    assert [g.handle for g in src.gpus] == [1, 0]
    src.close()
    with pytest.raises(EnergyError, match="not found"):
        NvmlEnergy(None, nvml=nv, environ={"CUDA_VISIBLE_DEVICES": "GPU-nope"})
    with pytest.raises(EnergyError, match="not found"):
        NvmlEnergy(None, nvml=nv, environ={"CUDA_VISIBLE_DEVICES": "7"})
    assert nv.init_count == 0  # failures shut NVML down again


def test_index_order_warning_only_with_mixed_models(caplog):
    nv = FakeNvml(_gpus(2))
    nv.gpus[1].name = "NVIDIA A100"  # mixed models: CUDA's fastest-first order may differ from NVML's
    with caplog.at_level("WARNING", logger="zeus_run.energy._nvml"):
        NvmlEnergy(None, nvml=nv, environ={"CUDA_VISIBLE_DEVICES": "1"}).close()
    assert "CUDA_DEVICE_ORDER=PCI_BUS_ID" in caplog.text and "NVIDIA A100" in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING", logger="zeus_run.energy._nvml"):
        NvmlEnergy(None, nvml=nv, environ={"CUDA_VISIBLE_DEVICES": "1", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}).close()
        NvmlEnergy(None, nvml=nv, environ={"CUDA_VISIBLE_DEVICES": "GPU-00000001-aaaa"}).close()
        NvmlEnergy(None, nvml=FakeNvml(_gpus(2)), environ={"CUDA_VISIBLE_DEVICES": "1"}).close()
    assert "CUDA_DEVICE_ORDER" not in caplog.text


def test_mig_devices_are_refused():
    with pytest.raises(EnergyError, match="MIG"):
        visible_gpu_ids(None, {"CUDA_VISIBLE_DEVICES": "MIG-4b6b1c2e-aaaa"})
    nv = FakeNvml([FakeGpu(mig=True)])
    with pytest.raises(EnergyError, match="MIG mode enabled"):
        NvmlEnergy(None, nvml=nv, environ={})
    # auto does not silently fall back for MIG: the user must decide
    with pytest.raises(EnergyError, match="MIG"):
        open_energy_source(EnergySettings(source="auto"), nvml=nv)


def test_auto_falls_back_to_estimate_without_driver():
    src = open_energy_source(EnergySettings(source="auto", watts=70), nvml=FakeNvml(driver=False))
    assert isinstance(src, EstimatedEnergy) and src.max_power == 70
    with pytest.raises(EnergyError, match="did not initialize"):
        open_energy_source(EnergySettings(source="nvml"), nvml=FakeNvml(driver=False))


def test_describe_names_gpus_method_and_limits():
    nv = FakeNvml(_gpus(2, name="NVIDIA A100-SXM4-40GB", min_mw=100_000, max_mw=400_000))
    src = NvmlEnergy(None, nvml=nv, environ={})
    d = src.describe()
    assert "2 x NVIDIA A100-SXM4-40GB" in d and "total energy counter" in d and "100-400 W" in d
    src.close()
