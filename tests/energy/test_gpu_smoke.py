"""``scripts/gpu_smoke.py`` against the NVML double, so that it runs before it meets a GPU (its first run on a
real GPU raised a TypeError: it gave the power-limit controller the energy source, not its GPUs)."""

from __future__ import annotations

import functools
import importlib.util
import sys
from pathlib import Path

import pytest

import zeus_run.energy
from tests.fake_nvml import FakeGpu, FakeNvml

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "gpu_smoke.py"


def _script():
    spec = importlib.util.spec_from_file_location("gpu_smoke", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("case", ["read-only", "no permission"])
def test_the_smoke_script_measures_and_reads_the_limits_through_nvml(monkeypatch, capsys, case):
    gpu = FakeGpu(name="NVIDIA H200", min_mw=200_000, max_mw=700_000)
    nv = FakeNvml([gpu], root=case != "no permission")
    monkeypatch.setattr(
        zeus_run.energy, "NvmlEnergy", functools.partial(zeus_run.energy.NvmlEnergy, nvml=nv, environ={})
    )
    smoke = _script()

    def work() -> None:
        gpu.energy_mj += 5_000  # 5 J per iteration

    monkeypatch.setattr(smoke, "_workload", lambda: (work, "a stand-in workload"))
    argv = ["gpu_smoke.py", "--seconds", "0.05", "--window", "0.02", "--settle", "0"]
    argv += ["--read-only", "--windows", "2"] if case == "read-only" else []
    monkeypatch.setattr(sys, "argv", argv)
    assert smoke.main() == 0
    out = capsys.readouterr().out
    assert "NVIDIA H200" in out and "iterations in" in out
    assert "power limits 200-700 W" in out
    # The double's counter advances at every iteration: the script counts it changing at every read.
    assert "energy counter: " in out and " at every read " in out
    if case == "read-only":
        assert "no power limit or persistence mode set" in out
        # Two windows at the current limit, unchanged, measured as the profiler measures a limit: 5 J an iteration.
        rows = [r for r in map(str.split, out.splitlines()) if len(r) == 5 and r[0] in ("1", "2")]
        assert len(rows) == 2 and all(float(r[3]) >= 0.02 and int(r[4]) >= 20 for r in rows), out
        assert "windows at one limit differ by" in out
    else:
        assert "power limits cannot be set" in out
    assert gpu.limit_mw == 700_000 and gpu.persistence == 0  # as they were
