"""``zeus-run history`` tells the story, one plain line each: a warm start (from where, how many trials), why the
optimizer did not explore, a trial in flight or orphaned (its launcher died). Real CLI processes."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from tests.cli.test_run_cli import spec_text, zeus
from tests.conftest import REPO


def test_a_warm_start_and_why_it_did_not_explore_are_told(write_spec, tmp_path):
    spec = write_spec(spec_text(body="recurrences: 2\n").replace("recurrences: 1\n", ""))
    r = zeus("run", str(spec), "--no-output")
    assert r.returncode == 0, r.stderr
    shown = zeus("history", str(spec.parent / "runs"))
    assert shown.returncode == 0, shown.stderr
    line = next(ln for ln in shown.stdout.splitlines() if ln.startswith("Did not explore"))
    assert "only batch size 2 ran in 2 recurrence(s)" in line and "the 2 recurrence(s) it plans over" in line
    assert "Started warm" not in shown.stdout
    # The same job elsewhere, started warm from this run directory.
    other = write_spec(spec_text().replace("run_dir: runs", "run_dir: warm-runs"), name="other.yaml")
    r = zeus("run", str(other), "--no-output", "--warm-from", str(spec.parent / "runs"))
    assert r.returncode == 0, r.stderr
    shown = zeus("history", str(spec.parent / "warm-runs"))
    line = next(ln for ln in shown.stdout.splitlines() if ln.startswith("Started warm"))
    assert f"from {spec.parent / 'runs'}: 2 trial(s) of it (2 reached the target)" in line, line


MARK = textwrap.dedent(
    """
    import sys
    from zeus_run.contract import RunningMarker
    from zeus_run.rundir.store import RunDir
    rd = RunDir.open(sys.argv[1])
    rd.mark_running(RunningMarker(2, 1, 1, 4, stage="pruning", started_at="2026-01-02T03:04:05Z", pid=rd_pid))
    print("marked", flush=True)
    sys.stdin.readline()  # hold the run directory (a launcher running its trial) until told
    """
).replace("rd_pid", "__import__('os').getpid()")


def test_a_trial_in_flight_and_one_orphaned_by_a_dead_launcher_are_told(write_spec):
    spec = write_spec(spec_text())
    assert zeus("run", str(spec), "--no-output").returncode == 0
    run_dir = spec.parent / "runs"
    launcher = subprocess.Popen(
        [sys.executable, "-c", MARK, str(run_dir)], cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert launcher.stdout is not None and launcher.stdout.readline().strip() == "marked"
        shown = zeus("history", str(run_dir))
        assert shown.returncode == 0, shown.stderr
        line = next(ln for ln in shown.stdout.splitlines() if ln.startswith("In flight:"))
        assert "recurrence 2 try 1 (trial #1), batch size 4, started 2026-01-02T03:04:05Z" in line
        assert f"pid {launcher.pid}" in line and "Orphaned" not in shown.stdout
    finally:
        launcher.kill()  # the launcher dies with its trial marked
        launcher.wait()
    shown = zeus("history", str(run_dir))
    line = next(ln for ln in shown.stdout.splitlines() if ln.startswith("Orphaned:"))
    assert "recurrence 2 try 1 (trial #1)" in line and "is gone (it died)" in line and "In flight" not in shown.stdout
