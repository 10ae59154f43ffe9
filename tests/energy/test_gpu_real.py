"""Real NVML tests: run only where an NVIDIA GPU and driver are present (``pytest -m gpu``); skipped elsewhere."""

from __future__ import annotations

import time

import pytest

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def nvml():
    try:
        import pynvml
    except ImportError:
        pytest.skip("nvidia-ml-py (pynvml) is not installed")
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # NVMLError: no driver / no GPU
        pytest.skip(f"NVML does not initialize here ({exc}); no NVIDIA GPU")
    yield pynvml
    pynvml.nvmlShutdown()


def test_energy_reads_and_never_decreases(nvml):
    from zeus_run.energy import NvmlEnergy

    with NvmlEnergy(["0"], nvml=nvml, environ={}) as src:
        assert src.max_power > 0
        first = src.read()
        time.sleep(0.5)
        second = src.read()
        assert 0 <= first <= second
        # An idle or busy GPU draws between a few W and its max limit.
        assert second - first <= src.max_power * 0.5 * 1.5 + 1
        print(src.describe(), f"{second - first:.2f} J in 0.5 s")


def test_power_limit_range_and_permission_are_detected(nvml):
    from zeus_run.energy import NvmlEnergy
    from zeus_run.power import PowerLimitController

    with NvmlEnergy(["0"], nvml=nvml, environ={}) as src:
        ctl = PowerLimitController([g.gpu for g in src.gpus])
        assert 0 < ctl.min_limit <= ctl.max_limit
        limits = ctl.candidate_limits(25)
        assert limits[0] == ctl.max_limit and limits[-1] == ctl.min_limit
        original = nvml.nvmlDeviceGetPowerManagementLimit(src.gpus[0].handle)
        if not ctl.check_permission():
            pytest.skip(f"cannot set power limits here: {ctl.reason}")
        try:
            assert ctl.set(ctl.min_limit)
            assert abs(nvml.nvmlDeviceGetPowerManagementLimit(src.gpus[0].handle) - ctl.min_limit * 1000) <= 1000
        finally:
            ctl.restore()
        assert nvml.nvmlDeviceGetPowerManagementLimit(src.gpus[0].handle) == original
