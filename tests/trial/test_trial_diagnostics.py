"""What the launcher tells about a trial: the command it ran, a regex that never matches, provenance, CPU-time energy."""

from __future__ import annotations

import dataclasses
import logging
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.cli.test_run_cli import zeus
from tests.conftest import PYTHON, REPO
from tests.fake_nvml import FakeGpu, FakeNvml
from tests.test_escape import REGEX, job, record
from zeus_run import __version__
from zeus_run.energy import EstimatedEnergy, NvmlEnergy
from zeus_run.launcher.run import provenance, run_job
from zeus_run.spec import load_spec
from zeus_run.trial.metric_regex import NO_MATCH_LINES
from zeus_run.trial.proctree import ProcessTree, new_token
from zeus_run.trial.run import TrialPlan, run_trial


def test_a_regex_that_never_matches_is_named_with_the_scripts_lines(tmp_path):
    spec = job(
        tmp_path,
        f"""
        import time
        for i in range({NO_MATCH_LINES + 50}):
            print(f"epoch {{i}} accuracy: 0.{{i % 10}}", flush=True)
        time.sleep(120)
        """,
        REGEX + "timeout: 4\n",
    )
    r = zeus("run", str(spec), "--no-output")
    # The launcher's timeout cut it: never a spec error from timing (`zeus_run.engine.classify`), so the
    # default batch size failed, and the run says why.
    assert r.returncode == 1
    # Said while the script still ran (it only stops at the timeout)...
    assert "metric.regex 'val_acc=([0-9.]+)' matched none of the script's" in r.stderr
    assert "accuracy: 0." in r.stderr
    # ...and kept in the record.
    rec = record(spec)
    assert rec["stop_reason"] == "timeout" and rec["observed"] is True
    assert "val_acc=([0-9.]+)" in rec["message"] and "accuracy: 0." in rec["message"]


def test_a_regex_that_never_matches_a_script_that_ends_is_named(tmp_path):
    spec = job(tmp_path, 'print("loss 0.3", flush=True)\n', REGEX)
    r = zeus("run", str(spec), "--no-output")
    assert r.returncode == 2
    rec = record(spec)
    assert rec["stop_reason"] == "config_error" and rec["observed"] is False
    assert "matched none of the script's 1 output line(s)" in rec["message"] and "loss 0.3" in rec["message"]


def test_the_command_and_its_environment_additions_are_logged_at_debug(tmp_path, caplog):
    spec_path = job(tmp_path, 'print("val_acc=1.0")\n', REGEX)
    text = spec_path.read_text()
    spec_path.write_text(text.replace("env: {PYTHONPATH:", "env: {MY_FLAG: '{batch_size}', PYTHONPATH:"))
    spec = load_spec(spec_path)
    with caplog.at_level(logging.DEBUG, logger="zeus_run"):
        run_job(spec)
    launched = [r.getMessage() for r in caplog.records if r.getMessage().startswith("launching ")]
    assert len(launched) == 1
    line = launched[0]
    assert f"{PYTHON} {tmp_path / 'train.py'}" in line
    assert "MY_FLAG=2" in line and "ZEUS_BATCH_SIZE=2" in line and "ZEUS_TRIAL_TOKEN=" in line
    assert "PATH=" not in line.replace("PYTHONPATH=", "")  # additions only, not the inherited environment


def test_each_record_carries_provenance(tmp_path, monkeypatch):
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    spec = load_spec(job(tmp_path, 'print("val_acc=1.0")\n', REGEX))
    (rec,) = run_job(spec).new
    assert rec.provenance == {"zeus_run": __version__, "host": socket.gethostname(), "slurm_job_id": "4242"}
    monkeypatch.delenv("SLURM_JOB_ID")
    assert "slurm_job_id" not in provenance(EstimatedEnergy(10))


def test_provenance_names_the_measured_gpus():
    nv = FakeNvml([FakeGpu(uuid="GPU-aaaa"), FakeGpu(name="NVIDIA H100", uuid="GPU-bbbb")])
    with NvmlEnergy(None, nvml=nv, environ={"CUDA_VISIBLE_DEVICES": "1"}) as energy:
        where = provenance(energy)
    (gpu,) = where["gpus"]
    assert gpu == {"index": "1", "name": "NVIDIA H100", "uuid": "GPU-bbbb"}


BUSY = "import time\nend = time.process_time() + {cpu}\nwhile time.process_time() < end: pass\ntime.sleep({idle})\n"


@pytest.mark.parametrize("cpu", [0.3, 1.5], ids=["before-the-first-scan", "after-it"])
def test_cpu_time_estimate_charges_the_work_behind_a_wrapper_shell(tmp_path, cpu):
    """``sh -c 'python train.py; true'``: the work is the shell's child's, which the shell reaps just before it exits.

    The trial's last reading is taken from the exited shell before it is reaped (its reaped children's time
    is on it then); once reaped, that time is gone from /proc.
    """
    plan = _plan(tmp_path, BUSY.format(cpu=cpu, idle=0) + "print('val=1.0', flush=True)\n")
    plan = dataclasses.replace(plan, argv=("sh", "-c", f"{sys.executable} {tmp_path / 't.py'}; true"))
    out = run_trial(plan, EstimatedEnergy(100, basis="cpu-time"))
    assert out.reached
    charged = out.energy / 100  # CPU seconds charged
    assert cpu <= charged + 0.05 <= cpu + 0.6, charged  # the work, plus interpreter start-up


def test_a_crash_behind_a_wrapper_shell_is_charged_up_to_the_shells_exit(tmp_path):
    """No metric, so the trial's figures are read at the shell's exit: after it reaped its script."""
    plan = _plan(tmp_path, BUSY.format(cpu=0.5, idle=0))
    plan = dataclasses.replace(plan, argv=("sh", "-c", f"{sys.executable} {tmp_path / 't.py'}; exit 3"))
    out = run_trial(plan, EstimatedEnergy(100, basis="cpu-time"))
    assert out.exit_code == 3 and not out.reached
    charged = out.energy / 100
    assert 0.5 <= charged + 0.05 <= 1.1, charged


def test_process_tree_cpu_time_counts_children_and_the_dead():
    token = new_token()
    child = BUSY.format(cpu=0.4, idle=0)
    script = f"import subprocess, sys\nsubprocess.run([sys.executable, '-c', {child!r}])\n" + BUSY.format(
        cpu=0.3, idle=0.5
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script], env={"ZEUS_TRIAL_TOKEN": token, "PATH": "/usr/bin:/bin"}, start_new_session=True
    )
    tree = ProcessTree(token, proc.pid)
    readings = []
    while proc.poll() is None:
        readings.append(tree.cpu_seconds())
        time.sleep(0.02)
    readings.append(tree.cpu_seconds())
    assert readings == sorted(readings)  # never decreases
    # 0.4 s in the child + 0.3 s in the script + two interpreter start-ups (slower on a loaded machine)
    assert 0.6 <= readings[-1] <= 2.5


def _plan(tmp_path: Path, source: str) -> TrialPlan:
    script = tmp_path / "t.py"
    script.write_text(textwrap.dedent(source))
    return TrialPlan(
        argv=(sys.executable, str(script)),
        workdir=tmp_path,
        env={"PYTHONPATH": str(REPO)},
        log_path=tmp_path / "out.log",
        event_path=tmp_path / "events.jsonl",
        stop_path=tmp_path / "stop",
        max_epochs=1,
        target_metric=0.9,
        metric_regex=r"val=([0-9.]+)",
        token=new_token(),
    )


@pytest.mark.parametrize("cpu, idle", [(0.6, 0.0), (0.0, 0.8)])
def test_cpu_time_estimate_charges_work_not_waiting(tmp_path, cpu, idle):
    plan = _plan(tmp_path, BUSY.format(cpu=cpu, idle=idle) + "print('val=1.0', flush=True)\n")
    out = run_trial(plan, EstimatedEnergy(100, basis="cpu-time"))
    assert out.reached
    charged = out.energy / 100  # CPU seconds charged
    assert charged <= out.time + 1e-9  # never more than wall time
    assert cpu <= charged + 0.05 <= cpu + 0.6  # the work, plus interpreter start-up; not the idle time


def test_a_burst_of_epochs_reads_the_scripts_cpu_time_about_once_per_clock_tick(tmp_path, monkeypatch):
    """Every epoch is metered, and the CPU-time estimate reads the script's CPU time from /proc: it used to read
    its ``stat`` and its children twice per epoch. Now a reading is taken at most once per clock tick (the
    resolution of the kernel's CPU times), and the children at most once per launcher tick."""
    import collections

    from zeus_run.trial import proctree

    stats: collections.Counter[int] = collections.Counter()
    kids: collections.Counter[int] = collections.Counter()
    read_stat, children = proctree._read_stat, proctree._children
    monkeypatch.setattr(proctree, "_read_stat", lambda pid: (stats.update([pid]), read_stat(pid))[1])
    monkeypatch.setattr(proctree, "_children", lambda pid: (kids.update([pid]), children(pid))[1])
    epochs = 1000
    plan = _plan(tmp_path, f"import sys\nsys.stdout.write('val=0.5\\n' * {epochs - 1} + 'val=1.0\\n')\n")
    plan = dataclasses.replace(plan, max_epochs=epochs)
    out = run_trial(plan, EstimatedEnergy(100, basis="cpu-time"))
    assert out.reached and out.epochs == epochs
    ticks = out.time / 0.05 + 10  # the launcher wakes every 50 ms: a reading each (and the first and last ones)
    root_reads = max(stats.values())  # the script's own stat (a full scan reads every other process once)
    assert root_reads <= min(ticks + epochs / 10, epochs / 4), (root_reads, out.time)
    assert max(kids.values(), default=0) <= min(ticks, epochs / 4), (kids, out.time)
