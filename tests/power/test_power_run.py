"""Power-limit optimization through run_job with the NVML double: profile, persist, reuse, restore, permission."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.cli.test_run_cli import zeus
from tests.fake_nvml import FakeGpu, FakeNvml
from zeus_run.energy import NvmlEnergy
from zeus_run.errors import PowerLimitPermissionError
from zeus_run.launcher import run_job
from zeus_run.optimizer.power_limit import best_power_limit
from zeus_run.power import ProfileStore
from zeus_run.rundir.history import read_history
from zeus_run.spec import parse_spec

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"
REPO = Path(__file__).resolve().parents[2]


def _spec(tmp_path, iters=100, extra="", recurrences=2, min_window_s=0.01):
    text = textwrap.dedent(f"""
        name: plt
        command: ["{{python}}", "{SCRIPTS / "step_train.py"}", "{iters}", "0.004"]
        workdir: {tmp_path}
        run_dir: {tmp_path / "run"}
        batch_sizes: [32]
        default_batch_size: 32
        target_metric: 0.9
        max_epochs: 4
        recurrences: {recurrences}
        eta: 0.5
        energy: {{source: nvml}}
        power_limit:
          step_watts: 50
          warmup_iters: 2
          measure_iters: 5
          min_window_s: {min_window_s}  # the fake counter is continuous; keep the test short
          settle_s: 0
          min_counter_updates: 1
        {extra}
    """)
    return parse_spec(text)


def _gpu():
    # Power follows the limit up to 220 W; the fake's throughput does not depend on it.
    return FakeGpu(min_mw=150_000, max_mw=300_000, limit_mw=250_000, power_fn=lambda t, lim: min(lim, 220.0))


def test_profiles_first_trial_persists_and_reuses(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    nv = FakeNvml([_gpu()])
    spec = _spec(tmp_path)
    with NvmlEnergy(None, nvml=nv, environ={}) as energy:
        res = run_job(spec, energy=energy)
    assert len(res.new) == 2 and all(r.reached for r in res.new)
    store = ProfileStore(tmp_path / "run")
    prof = store.get(32)
    # Two recurrences are a short horizon: the sweep walks down from the maximum and may stop
    # once two limits in a row measured costlier than the best (on a loaded host the fake's
    # throughput is noisy), so it holds the first three limits or all four.
    limits = [m.power_limit for m in prof]
    assert len(limits) >= 3 and limits == [300, 250, 200, 150][: len(limits)]
    expected = best_power_limit(prof, 0.5, 300.0)
    assert [r.power_limit for r in res.new] == [expected, expected]
    assert [r.energy_method for r in res.new] == ["counter", "counter"]
    assert res.new[0].energy > 0
    # The first trial's sweep is priced (at least 0: the fake runs as fast at every limit) and recorded in
    # the history; the second trial swept nothing.
    first, second = read_history(tmp_path / "run" / "history.jsonl")[-2:]
    assert first.profile_overhead is not None and 0 <= first.profile_overhead < first.cost
    assert second.profile_overhead is None
    assert res.new[0].profile_overhead == first.profile_overhead
    shown = zeus("history", str(tmp_path / "run"))
    assert shown.returncode == 0, shown.stderr
    assert "Power-limit sweeps: 1, costing" in " ".join(shown.stdout.split())
    sets = [c[2] for c in nv.calls if c[0] == "limit"]
    # permission probe (original), the profiled limits (3 or 4, above), the choice, restore; then trial 2:
    # choice, restore
    profiled = [limit * 1000 for limit in limits]
    assert sets == [250_000, *profiled, expected * 1000, 250_000, expected * 1000, 250_000]
    assert nv.gpus[0].limit_mw == 250_000 and nv.gpus[0].persistence == 0
    # step events were only written while profiling: trial 2 wrote none
    ev2 = (tmp_path / "run" / "trials" / "r0002-t01" / "events.jsonl").read_text()
    assert '"step"' not in ev2


def test_resume_reuses_stored_profile(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    nv = FakeNvml([_gpu()])
    with NvmlEnergy(None, nvml=nv, environ={}) as energy:
        run_job(_spec(tmp_path, recurrences=1), energy=energy)
    nv.calls.clear()
    with NvmlEnergy(None, nvml=nv, environ={}) as energy:
        res = run_job(_spec(tmp_path, recurrences=2), energy=energy)
    sets = [c[2] for c in nv.calls if c[0] == "limit"]
    chosen = res.new[0].power_limit
    assert sets == [250_000, chosen * 1000, 250_000]  # no profiling again


def test_observer_mode_keeps_maximum(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    nv = FakeNvml([_gpu()])
    # Open-ended, one recurrence per call: the full sweep runs (with one recurrence left the
    # short-horizon rule may end the sweep early on measurement noise, which is not under test here).
    spec = _spec(tmp_path, recurrences="null", extra="  observer_mode: true")
    with NvmlEnergy(None, nvml=nv, environ={}) as energy:
        res = run_job(spec, energy=energy, next_recurrences=1)
    sets = [c[2] for c in nv.calls if c[0] == "limit"]
    assert sets[-2:] == [300_000, 250_000]  # back to the maximum after profiling, then restored
    # The record keeps the limit the profile picks (what a non-observer run would set), though the GPU
    # ran at its maximum. The fake's throughput comes from wall time, so on a loaded host any limit may
    # measure best: the expectation is computed from the stored profile, and it was never the one set.
    prof = ProfileStore(tmp_path / "run").get(32)
    assert [m.power_limit for m in prof] == [300, 250, 200, 150]  # the full sweep ran
    picked = best_power_limit(prof, 0.5, 300.0)
    assert res.new[0].power_limit == picked
    assert "observer mode" in res.new[0].message


def test_no_permission_continue_runs_without_limits(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    nv = FakeNvml([_gpu()], root=False)
    with NvmlEnergy(None, nvml=nv, environ={}) as energy:
        res = run_job(_spec(tmp_path, recurrences=1), energy=energy)
    assert res.new[0].reached and res.new[0].power_limit is None
    assert "CAP_SYS_ADMIN" in caplog.text and "nvidia-smi -pm 1" in caplog.text
    assert not (tmp_path / "run" / "power_profiles.json").exists()


def test_no_permission_stop_refuses_before_first_trial(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    nv = FakeNvml([_gpu()], root=False)
    spec = _spec(tmp_path, recurrences=1, extra="  on_no_permission: stop")
    with NvmlEnergy(None, nvml=nv, environ={}) as energy, pytest.raises(PowerLimitPermissionError) as ei:
        run_job(spec, energy=energy)
    assert ei.value.exit_code == 2
    assert not (tmp_path / "run" / "trials").exists() or not any((tmp_path / "run" / "trials").iterdir())


def test_restore_when_the_trial_raises(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    nv = FakeNvml([_gpu()])
    import zeus_run.trial.agent as agent

    def boom(*a, **k):
        runner_prof = a[4] if len(a) > 4 else k.get("profiler")
        runner_prof.start()  # limits get changed, then the launcher fails
        raise RuntimeError("launcher bug")

    monkeypatch.setattr(agent, "run_trial", boom)
    with NvmlEnergy(None, nvml=nv, environ={}) as energy, pytest.raises(RuntimeError):
        run_job(_spec(tmp_path, recurrences=1), energy=energy)
    assert nv.gpus[0].limit_mw == 250_000 and nv.gpus[0].persistence == 0
    assert [c[2] for c in nv.calls if c[0] == "limit"][-2:] == [300_000, 250_000]


CHILD = """
import sys, logging
sys.path.insert(0, {tests!r})
from tests.fake_nvml import FakeGpu, FakeNvml
from zeus_run.energy import NvmlEnergy
from zeus_run.errors import Interrupted
from zeus_run.launcher import run_job
from zeus_run.spec import parse_spec
spec = parse_spec(open({spec!r}).read())
nv = FakeNvml([FakeGpu(min_mw=150_000, max_mw=300_000, limit_mw=250_000, power_fn=lambda t, l: min(l, 220.0))],
              log_path={log!r})
try:
    with NvmlEnergy(None, nvml=nv, environ={{}}) as energy:
        run_job(spec, energy=energy)
except Interrupted as exc:
    print("interrupted", exc.exit_code)
    sys.exit(exc.exit_code)
"""


def test_restore_on_sigterm(tmp_path):
    spec = _spec(tmp_path, iters=100000, recurrences=1)  # one endless epoch
    d = spec.to_dict()
    d.pop("source", None)
    (tmp_path / "job.yaml").write_text(__import__("yaml").safe_dump(d))
    log = tmp_path / "nvml.jsonl"
    code = CHILD.format(tests=str(Path(__file__).resolve().parents[1]), spec=str(tmp_path / "job.yaml"), log=str(log))
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.Popen(
        [sys.executable, "-c", code], env=env, cwd=str(REPO), stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:  # wait until profiling has lowered the limit
        if log.exists() and any(
            json.loads(l)[:1] == ["limit"] and json.loads(l)[2] < 250_000 for l in log.read_text().splitlines()
        ):
            break
        time.sleep(0.05)
    else:
        proc.kill()
        pytest.fail("the child never changed the limit: " + proc.communicate()[0].decode())
    proc.send_signal(signal.SIGTERM)
    out = proc.communicate(timeout=20)[0].decode()
    assert proc.returncode == 128 + signal.SIGTERM, out
    calls = [json.loads(l) for l in log.read_text().splitlines()]
    limits = [c for c in calls if c[0] == "limit"]
    pers = [c for c in calls if c[0] == "persistence"]
    assert limits[-1] == ["limit", 0, 250_000]  # the original limit, not the max
    assert pers[-1] == ["persistence", 0, 0]


def test_training_shorter_than_a_window_warms_each_trial_and_measures_nothing(tmp_path, monkeypatch, caplog):
    # Seen on a real H200: a job whose training lasts about 1.5 s never completed a 2 s window; each
    # trial started the 700 W window again, and only the per-epoch scaling note said anything.
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    nv = FakeNvml([_gpu()])
    spec = _spec(tmp_path, iters=20, min_window_s=3600)
    with caplog.at_level("WARNING"), NvmlEnergy(None, nvml=nv, environ={}) as energy:
        res = run_job(spec, energy=energy)
    assert len(res.new) == 2 and all(r.reached for r in res.new)
    stalls = [r.getMessage() for r in caplog.records if "no power limit measured in this trial" in r.getMessage()]
    assert len(stalls) == 2, stalls
    assert "a window at 300 W needs 0 s to settle, then at least 3600 s" in stalls[0]
    assert "power_limit.min_window_s" in stalls[0]
    assert ProfileStore(tmp_path / "run").get(32) is None
