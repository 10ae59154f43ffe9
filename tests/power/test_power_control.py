"""PowerLimitController against the NVML double: permission, ranges, restore."""

from __future__ import annotations

import pytest

from tests.fake_nvml import FakeGpu, FakeNvml
from zeus_run.energy import NvmlEnergy
from zeus_run.power import PowerLimitController, PowerLimitRangeError


def _open(nv):
    """The GPUs of an NVML energy source over the double, as the controller takes them."""
    return [g.gpu for g in NvmlEnergy(None, nvml=nv, environ={}).gpus]


def _gpus(n=2, **kw):
    return [FakeGpu(uuid=f"GPU-{i}", min_mw=125_000, max_mw=300_000, limit_mw=280_000, **kw) for i in range(n)]


def test_candidate_limits_max_to_min_in_steps():
    nv = FakeNvml(_gpus(1))
    ctl = PowerLimitController(_open(nv))
    assert ctl.candidate_limits(25) == [300, 275, 250, 225, 200, 175, 150, 125]
    assert ctl.candidate_limits(50) == [300, 250, 200, 150, 125]  # the minimum is always profiled


def test_range_is_the_intersection_over_gpus():
    a = FakeGpu(uuid="GPU-a", min_mw=100_000, max_mw=300_000)
    b = FakeGpu(uuid="GPU-b", min_mw=150_000, max_mw=250_000)
    ctl = PowerLimitController(_open(FakeNvml([a, b])))
    assert (ctl.min_limit, ctl.max_limit) == (150, 250)


def test_set_and_restore_limits_and_persistence():
    nv = FakeNvml(_gpus(2))
    ctl = PowerLimitController(_open(nv))
    assert ctl.check_permission()
    assert ctl.set(200)
    assert [g.limit_mw for g in nv.gpus] == [200_000, 200_000]
    assert [g.persistence for g in nv.gpus] == [1, 1]  # enabled while limits are changed
    ctl.restore()
    assert [g.limit_mw for g in nv.gpus] == [280_000, 280_000]  # original, not the max
    assert [g.persistence for g in nv.gpus] == [0, 0]
    n = len(nv.calls)
    ctl.restore()  # idempotent: nothing more is touched
    assert len(nv.calls) == n


def test_limits_out_of_range_are_refused_before_nvml():
    nv = FakeNvml(_gpus(1))
    ctl = PowerLimitController(_open(nv))
    with pytest.raises(PowerLimitRangeError, match="outside"):
        ctl.set(100)
    with pytest.raises(PowerLimitRangeError):
        ctl.set(301)
    assert nv.calls == []


def test_no_permission_detected_up_front():
    nv = FakeNvml(_gpus(1), root=False)
    ctl = PowerLimitController(_open(nv))
    assert not ctl.check_permission()
    assert not ctl.usable and "no permission" in ctl.reason
    assert ctl.set(200) is False  # never raises mid-run
    assert nv.gpus[0].limit_mw == 280_000
    assert "cannot be set" in ctl.describe()


def test_nvml_failure_mid_run_disables_and_restores():
    nv = FakeNvml(_gpus(2), fail_set_after=3)  # permission check uses 2 sets
    ctl = PowerLimitController(_open(nv))
    assert ctl.check_permission()
    assert ctl.set(200) is False  # second GPU fails
    assert not ctl.usable
    assert [g.limit_mw for g in nv.gpus] == [200_000, 280_000]  # the restore of GPU 0 failed too
    nv.fail_set_after = None
    ctl.restore()  # the failed restore is retried
    assert [g.limit_mw for g in nv.gpus] == [280_000, 280_000]
    assert [g.persistence for g in nv.gpus] == [0, 0]
    assert ctl.set(250) is False


def test_restore_on_exception_via_context_manager():
    nv = FakeNvml(_gpus(1))
    with pytest.raises(RuntimeError), PowerLimitController(_open(nv)) as ctl:
        ctl.set(150)
        assert nv.gpus[0].limit_mw == 150_000
        raise RuntimeError("training blew up")
    assert nv.gpus[0].limit_mw == 280_000
    assert nv.gpus[0].persistence == 0


def test_check_reports_gpus_method_range_and_permission():
    from zeus_run.cli.check import gpu_report
    from zeus_run.energy import EstimatedEnergy

    a = FakeGpu(uuid="GPU-a", name="Tesla V100", min_mw=150_000, max_mw=250_000)
    b = FakeGpu(uuid="GPU-b", name="Tesla P100", has_counter=False, min_mw=125_000, max_mw=250_000)
    src = NvmlEnergy(None, nvml=FakeNvml([a, b], root=False), environ={}, poll_interval=3600)
    text = "\n".join(gpu_report(src, True))
    src.close()
    assert "GPUs: 2" in text
    assert "GPU 0: Tesla V100; energy: total energy counter; power limit range 150-250 W" in text
    assert "GPU 1: Tesla P100; energy: power sampling" in text
    assert "Max power for the cost: 500 W" in text
    assert "cannot be set: no permission" in text and "CAP_SYS_ADMIN" in text
    src = NvmlEnergy(None, nvml=FakeNvml([FakeGpu()]), environ={})
    assert "limits can be set (100-300 W)" in "\n".join(gpu_report(src, True))
    src.close()
    assert "estimate" in gpu_report(EstimatedEnergy(50), True)[0]
