"""The one GPU device layer: energy and power reach the GPUs only through `zeus_run.device`."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.fake_nvml import FakeGpu, FakeNvml
from zeus_run.device import NvidiaGpus
from zeus_run.energy import NvmlEnergy
from zeus_run.power._session import make_controller
from zeus_run.power._zeusd import ZeusdClient, ZeusdError, ZeusdGpu
from zeus_run.spec import PowerLimitSettings

PACKAGE = Path(__file__).resolve().parents[2] / "zeus_run"


def test_only_the_device_layer_calls_nvml():
    calls = re.compile(r"\bnvml(Device\w+|Init|Shutdown)\s*\(|^\s*(import|from) pynvml", re.M)
    outside = [
        str(p.relative_to(PACKAGE))
        for p in PACKAGE.rglob("*.py")
        if p.parent.name != "device" and calls.search(p.read_text(encoding="utf-8"))
    ]
    assert outside == []


def test_energy_and_power_share_one_gpu_object_per_device():
    nv = FakeNvml([FakeGpu(uuid=f"GPU-{i}", min_mw=100_000, max_mw=300_000) for i in range(2)])
    with NvmlEnergy(None, nvml=nv, environ={}) as energy:
        ctl, _ = make_controller(PowerLimitSettings(via="nvml"), energy)
        assert [g.gpu for g in ctl.gpus] == [g.gpu for g in energy.gpus]
        assert ctl.writer == "NVML" and (ctl.min_limit, ctl.max_limit) == (100.0, 300.0)
        assert ctl.set(150.0)
        assert [g.gpu.power_limit_mw() for g in energy.gpus] == [150_000, 150_000]
        ctl.restore()


def test_zeusd_gpu_reads_through_nvml_and_refuses_a_gpu_named_by_uuid():
    nv = FakeNvml([FakeGpu(uuid="GPU-a", min_mw=100_000, max_mw=300_000)])
    session = NvidiaGpus(nv)
    try:
        by_uuid = ZeusdGpu(session.open("GPU-a"), ZeusdClient("/nonexistent/zeusd.sock"))
        assert by_uuid.limit_constraints_mw() == (100_000, 300_000) and by_uuid.writer == "zeusd"
        with pytest.raises(ZeusdError, match="names GPUs by NVML index, and this job names GPU 'GPU-a' by UUID"):
            by_uuid.set_power_limit_mw(150_000)
    finally:
        session.close()
