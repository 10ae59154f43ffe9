"""Out of file descriptors with two recurrences in flight, every recurrence still runs once (issue 54, finding 8).

With ``concurrency: 2`` and a low ``ulimit -n``, one recurrence's trial could not start while the other's had: the
first was then never run (the same command went on past it), ``replay`` failed on the run directory from then on,
a try that never started stayed in ``running.json`` (recorded ``interrupted`` by the next run, using a try), and
the message said "free disk space or fix permissions". Each limit below runs the job once under it (its run may
stop, naming ``ulimit -n``), then the same command without it: recurrences 1-3 each reach the target once, no
marker of a trial that never started is left, and ``replay`` is exact.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

TRAIN = """
from zeus_run.train import Trial
t = Trial.from_env()
for e in t.epochs():
    t.report(0.95)
"""

#: Open-file limits to run under: low enough that a trial's start runs out at one point or another (which one
#: moves with the machine's load), high enough for the interpreter to start.
LIMITS = (14, 15, 16, 17, 18, 19, 20)


def _spec(tmp: Path) -> Path:
    (tmp / "train.py").write_text(TRAIN)
    spec = tmp / "job.yaml"
    spec.write_text(
        f"""
name: fds
command: ["{sys.executable}", "train.py"]
batch_sizes: [8, 16]
default_batch_size: 8
target_metric: 0.9
max_epochs: 3
recurrences: 3
concurrency: 2
energy: {{source: estimate, watts: 100, basis: wall-time}}
run_dir: {tmp / "runs"}
"""
    )
    return spec


def _zr(tmp: Path, line: str, limit: int | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED" and not k.startswith("ZEUS_")}
    cmd = f"{sys.executable} -m zeus_run {line}"
    if limit is not None:
        cmd = f"ulimit -n {limit} && {cmd}"
    return subprocess.run(["sh", "-c", cmd], cwd=tmp, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.heavy  # a matrix: a whole job under each file-descriptor limit (scripts/test_heavy.sh)
def test_every_recurrence_runs_once_whatever_ran_out(tmp_path):
    out_of_fds = 0
    for i, limit in enumerate(LIMITS):
        tmp = tmp_path / f"try{i}"
        tmp.mkdir()
        spec = _spec(tmp)
        first = _zr(tmp, f"run {spec} --no-output", limit)
        runs = tmp / "runs"
        if first.returncode != 0:
            out_of_fds += 1
            assert first.returncode == 2 and "ulimit -n" in first.stderr, (limit, first.stderr[-2000:])
            assert "Traceback" not in first.stderr, first.stderr[-2000:]
            assert not (runs / "running.json").exists(), (limit, (runs / "running.json").read_text())
        again = _zr(tmp, f"run {spec} --no-output")
        assert again.returncode == 0, (limit, again.stderr[-2000:])
        records = [json.loads(line) for line in (runs / "history.jsonl").read_text().splitlines()]
        reached = sorted(r["recurrence"] for r in records if r["stop_reason"] == "target_reached")
        assert reached == [1, 2, 3], (limit, [(r["recurrence"], r["attempt"], r["stop_reason"]) for r in records])
        for r in records:  # a try is used only by a trial that started
            assert r["stop_reason"] == "target_reached" or r["time"] > 0, (limit, r)
        replay = _zr(tmp, "replay runs")
        assert replay.returncode == 0, (limit, replay.stdout[-2000:], replay.stderr[-2000:])
    if out_of_fds == 0:
        pytest.skip(f"no run ran out of file descriptors under limits {LIMITS} on this machine")


def test_run_on_a_directory_without_a_spec_says_to_run_the_spec(tmp_path):
    """``zeus-run run DIR`` on a directory with no spec.yaml told the user to run ``zeus-run ask job.yaml``."""
    (tmp_path / "empty").mkdir()
    r = _zr(tmp_path, "run empty")
    assert r.returncode == 2 and "zeus-run run job.yaml" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr, r.stderr


@pytest.mark.parametrize(
    ("code", "named"),
    [("EMFILE", "ulimit -n"), ("ENOSPC", "disk is full"), ("ENOMEM", "out of memory"), ("EACCES", "permissions")],
)
def test_a_write_that_ran_out_names_what_ran_out(tmp_path, monkeypatch, code, named):
    import errno

    from zeus_run import _fs
    from zeus_run.errors import RunDirError
    from zeus_run.rundir.ranout import ran_out
    from zeus_run.rundir.store import atomic_write

    def fail(path, text):
        raise OSError(getattr(errno, code), os.strerror(getattr(errno, code)))

    monkeypatch.setattr(_fs, "atomic_write", fail)
    with pytest.raises(RunDirError) as failed:
        atomic_write(tmp_path / "running.json", "{}")
    assert named in str(failed.value), failed.value
    assert (ran_out(failed.value) is not None) == (code != "EACCES")  # the launcher's "nothing started" errors
