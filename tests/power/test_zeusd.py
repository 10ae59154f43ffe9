"""Power limits without root through zeusd, against a double of its Unix-socket API (zeusd 0.5.0)."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from tests.fake_nvml import FakeGpu, FakeNvml
from tests.fake_zeusd import FakeZeusd
from tests.power.test_power_run import REPO, _spec
from zeus_run.energy import NvmlEnergy
from zeus_run.errors import PowerLimitPermissionError
from zeus_run.launcher import run_job
from zeus_run.power import ProfileStore
from zeus_run.power._zeusd import ZeusdClient, ZeusdError, ZeusdPermissionError, zeusd_socket
from zeus_run.spec import parse_spec


@pytest.fixture
def sock() -> str:
    # A short folder: a Unix socket path must fit in 108 bytes.
    return str(Path(tempfile.mkdtemp(prefix="zd-")) / "zeusd.sock")


def _gpus() -> list[FakeGpu]:
    return [FakeGpu(min_mw=150_000, max_mw=300_000, limit_mw=250_000, power_fn=lambda t, lim: min(lim, 220.0))]


def test_run_sets_profiles_and_restores_limits_through_zeusd_without_root(tmp_path, sock, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    nv = FakeNvml(_gpus(), root=False)  # this process may not set limits itself
    spec = _spec(tmp_path, recurrences=1, extra=f"  via: zeusd\n          socket: {sock}")
    with FakeZeusd(sock, nv) as zd, NvmlEnergy(None, nvml=nv, environ={}) as energy:
        res = run_job(spec, energy=energy)
    assert res.new[0].reached and res.new[0].power_limit is not None
    sets = [int(p["power_limit_mw"]) for path, p in zd.requests if path == "/gpu/set_power_limit"]
    # The probe, then the sweep from the top: with one recurrence the sweep may end before the lowest
    # limit once two limits measured costlier than the best (`sweep_more`); on a loaded machine the
    # measured throughputs differ, so how far it goes is the measurement's, not this test's.
    swept = [int(m.power_limit * 1000) for m in ProfileStore(tmp_path / "run").get(32)]
    assert len(swept) >= 3 and swept == [300_000, 250_000, 200_000, 150_000][: len(swept)]
    assert sets[: 1 + len(swept)] == [250_000, *swept]
    assert sets[1 + len(swept)] == int(res.new[0].power_limit * 1000)  # the choice, set through zeusd
    assert sets[-1] == 250_000 and nv.gpus[0].limit_mw == 250_000  # restored through zeusd
    assert all(p["gpu_ids"] == "0" and p["block"] == "true" for _, p in zd.requests)
    assert nv.gpus[0].persistence == 0  # persistence mode put back too


def test_zeusd_sock_path_selects_zeusd(tmp_path, sock, monkeypatch):
    assert zeusd_socket("auto", None, {}) is None
    assert zeusd_socket("auto", None, {"ZEUSD_SOCK_PATH": sock}) == sock
    assert zeusd_socket("nvml", None, {"ZEUSD_SOCK_PATH": sock}) is None
    assert zeusd_socket("zeusd", None, {}) == "/run/zeusd/zeusd.sock"
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    monkeypatch.setenv("ZEUSD_SOCK_PATH", sock)
    nv = FakeNvml(_gpus(), root=False)
    with FakeZeusd(sock, nv) as zd, NvmlEnergy(None, nvml=nv, environ={}) as energy:
        res = run_job(_spec(tmp_path, recurrences=1), energy=energy)
    assert res.new[0].power_limit is not None and zd.requests


@pytest.mark.parametrize(
    ("daemon", "needle"),
    [
        (None, "zeusd is not running"),
        ({"nvml_no_permission": True}, "no permission to set GPU power limits"),
        ({"token": "s3cret"}, "lack of a token (ZEUSD_TOKEN)"),
        ({"gpu_control": False}, "gpu-control API group"),
    ],
)
def test_daemon_errors_become_clear_messages_with_on_no_permission(tmp_path, sock, monkeypatch, daemon, needle):
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    monkeypatch.delenv("ZEUSD_TOKEN", raising=False)
    nv = FakeNvml(_gpus(), root=False)
    stop = _spec(
        tmp_path, recurrences=1, extra=f"  via: zeusd\n          socket: {sock}\n          on_no_permission: stop"
    )
    with FakeZeusd(sock, nv, **(daemon or {})) if daemon is not None else _Nothing():
        with NvmlEnergy(None, nvml=nv, environ={}) as energy, pytest.raises(PowerLimitPermissionError) as ei:
            run_job(stop, energy=energy)
        assert needle in str(ei.value) and "zeusd serve" in str(ei.value)
        assert ei.value.exit_code == 2
        (tmp_path / "go").mkdir(exist_ok=True)
        go_on = _spec(tmp_path / "go", recurrences=1, extra=f"  via: zeusd\n          socket: {sock}")
        with NvmlEnergy(None, nvml=nv, environ={}) as energy:
            res = run_job(go_on, energy=energy)
        assert res.new[0].reached and res.new[0].power_limit is None  # ran on without limits


def test_token_is_sent_and_unknown_gpu_is_named(sock, monkeypatch):
    nv = FakeNvml(_gpus())
    nv.nvmlInit()
    with FakeZeusd(sock, nv, token="s3cret") as zd:
        monkeypatch.setenv("ZEUSD_TOKEN", "s3cret")
        ZeusdClient(sock).set_power_limit([0], 200_000)
        assert nv.gpus[0].limit_mw == 200_000 and zd.requests[-1][1]["power_limit_mw"] == "200000"
        with pytest.raises(ZeusdError, match="GPU index 3 does not exist"):
            ZeusdClient(sock).set_power_limit([3], 200_000)
        with pytest.raises(ZeusdError, match="GPU 0: NVML error: Invalid Argument"):
            ZeusdClient(sock).set_power_limit([0], 10)
        assert ZeusdClient(sock).discover()["gpus"][0]["name"] == "NVIDIA A40"
    with pytest.raises(ZeusdError, match="not running"):
        ZeusdClient(sock).discover()
    assert not issubclass(ZeusdError, ZeusdPermissionError)


def test_spec_fields():
    base = "name: j\ncommand: [python, t.py]\nbatch_sizes: [8]\ndefault_batch_size: 8\ntarget_metric: 0.5\n"
    spec = parse_spec(base + "power_limit: {via: zeusd, socket: /run/z.sock}\n")
    assert (spec.power_limit.via, spec.power_limit.socket) == ("zeusd", "/run/z.sock")


class _Nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None
