"""RAPL CPU and DRAM energy against a fake powercap tree."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.fake_nvml import FakeGpu, FakeNvml
from tests.fake_powercap import FakePowercap
from zeus_run.cli import app
from zeus_run.energy import (
    EstimatedEnergy,
    NvmlEnergy,
    RaplEnergy,
    SumEnergy,
    gpu_source,
    open_energy_source,
    rapl_status,
)
from zeus_run.errors import EnergyError, SpecError
from zeus_run.spec import EnergySettings, parse_spec


@pytest.fixture
def powercap(tmp_path: Path) -> FakePowercap:
    return FakePowercap(tmp_path / "powercap", packages=2)


def test_finds_packages_and_dram_not_core(powercap):
    src = RaplEnergy(root=powercap.root)
    assert sorted(z.name for z in src.zones) == ["dram", "dram", "package-0", "package-1"]
    assert src.max_power == 250.0  # two packages' constraint_0_max_power_uw
    assert "whole machine" in src.describe()
    assert [z.name for z in RaplEnergy(("dram",), powercap.root).zones] == ["dram", "dram"]


def test_counts_deltas_across_a_wraparound(tmp_path):
    fake = FakePowercap(tmp_path / "pc", dram=False, range_uj=1_000_000)  # wraps every 1 J
    fake.set("intel-rapl:0", 900_000)
    src = RaplEnergy(("cpu",), fake.root)
    assert src.read() == 0.0
    fake.add("intel-rapl:0", 300_000)  # 900k -> 200k after the wrap
    assert src.read() == pytest.approx(0.3)
    fake.add("intel-rapl:0", 500_000)
    assert src.read() == pytest.approx(0.8)


def test_unreadable_counters_say_why_and_how(powercap, monkeypatch):
    original = Path.read_text

    def deny(self, *a, **kw):
        if self.name == "energy_uj":
            raise PermissionError(13, "Permission denied")
        return original(self, *a, **kw)

    monkeypatch.setattr(Path, "read_text", deny)
    with pytest.raises(EnergyError, match="CVE-2020-8694"):
        RaplEnergy(root=powercap.root)
    with pytest.raises(EnergyError, match=r"energy\.source: estimate"):
        open_energy_source(EnergySettings(source="rapl"), powercap=powercap.root)
    assert "present but unusable" in rapl_status(powercap.root) and "estimate" in rapl_status(powercap.root)


def test_source_rapl_without_zones_is_an_error(tmp_path):
    with pytest.raises(EnergyError, match="No RAPL"):
        open_energy_source(EnergySettings(source="rapl"), powercap=tmp_path / "none")


def test_auto_without_gpu_measures_rapl_else_estimates(powercap, tmp_path, caplog):
    no_gpu = FakeNvml(driver=False)
    src = open_energy_source(EnergySettings(source="auto"), nvml=no_gpu, powercap=powercap.root)
    assert isinstance(src, RaplEnergy) and not src.estimated and src.name == "rapl"
    with caplog.at_level(logging.INFO, logger="zeus_run.energy"):
        src = open_energy_source(EnergySettings(source="auto"), nvml=no_gpu, powercap=tmp_path / "none")
    assert isinstance(src, EstimatedEnergy)
    assert "RAPL unusable" in caplog.text and "using an estimate" in caplog.text


def test_include_adds_cpu_and_dram_to_gpu_energy(powercap):
    nvml = FakeNvml([FakeGpu()])
    src = open_energy_source(
        EnergySettings(source="nvml", include=("gpu", "cpu", "dram")), nvml=nvml, powercap=powercap.root
    )
    assert isinstance(src, SumEnergy) and src.name == "nvml+rapl"
    assert isinstance(gpu_source(src), NvmlEnergy)  # power limits still find the GPUs
    assert src.max_power == 300.0 + 250.0
    before = src.read()
    nvml.gpus[0].energy_mj += 5_000.0  # 5 J on the GPU
    powercap.add("intel-rapl:0", 2_000_000)  # 2 J on package 0
    powercap.add("intel-rapl:1:1", 1_000_000)  # 1 J on package 1's DRAM
    assert src.read() - before == pytest.approx(8.0)
    src.close()


def test_include_unreadable_warns_and_counts_the_gpus(tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="zeus_run.energy"):
        src = open_energy_source(
            EnergySettings(source="nvml", include=("gpu", "cpu")), nvml=FakeNvml(), powercap=tmp_path / "none"
        )
    assert isinstance(src, NvmlEnergy) and "counting the GPUs only" in caplog.text


def test_spec_include():
    base = "name: j\ncommand: [python, t.py]\nbatch_sizes: [8]\ndefault_batch_size: 8\ntarget_metric: 0.5\n"
    spec = parse_spec(base + "energy: {source: rapl, include: [cpu]}\n")
    assert spec.energy.source == "rapl" and spec.energy.include == ("cpu",)
    with pytest.raises(SpecError) as info:
        parse_spec(base + "energy: {include: [gpu, disk]}\n")
    assert [p.field for p in info.value.problems] == ["energy.include"]


def test_check_says_when_rapl_is_there(powercap, write_spec, monkeypatch):
    spec = write_spec(
        "name: j\ncommand: [python, t.py]\nbatch_sizes: [8]\ndefault_batch_size: 8\ntarget_metric: 0.5\n"
        "energy: {source: estimate}\n"
    )
    monkeypatch.setenv("ZEUS_RUN_POWERCAP_ROOT", str(powercap.root))
    res = CliRunner().invoke(app, ["check", str(spec)])
    assert res.exit_code == 0, res.output
    assert "RAPL: package-0, dram, package-1, dram readable" in res.output
    monkeypatch.setenv("ZEUS_RUN_POWERCAP_ROOT", str(powercap.root / "nowhere"))
    res = CliRunner().invoke(app, ["check", str(spec)])
    assert "RAPL: none here" in res.output
