"""Exact replay after crashes: SIGKILL the launcher at many moments; after each resume the audit passes."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest

from tests.cli.test_run_cli import alive, zeus
from tests.conftest import PYTHON, SCRIPTS
from tests.launcher.test_faults import launch, wait_for
from zeus_run.engine.replay import Knobs, audit
from zeus_run.launcher import run_job
from zeus_run.rundir.history import read_history
from zeus_run.spec import load_spec
from zeus_run.trial.proctree import find_marked

#: A matrix run end to end (minutes in all): not in .ci/run; scripts/test_heavy.sh runs it.
pytestmark = pytest.mark.heavy

FAKE = str(SCRIPTS / "fake_train.py")

SPEC = f"""
name: k
command: ["{PYTHON}", "{FAKE}", "--batch-size", "{{batch_size}}", "--needs", "1:0,2:2,4:3,8:2", "--epoch-time", "0.08"]
batch_sizes: [1, 2, 4, 8]
default_batch_size: 2
target_metric: 0.9
max_epochs: 4
recurrences: 24
beta: 1.6
max_early_stops: 1
energy: {{source: estimate, watts: 100, basis: wall-time}}
run_dir: runs
stop: {{term_grace: 0.2, kill_grace: 2}}
"""

# (trials this launcher finishes first, then seconds to wait): between trials, early in a
# trial, late in one, in the first recurrence, in later ones and in retries.
MOMENTS = [(0, 0.25), (0, 0.5), (1, 0.0), (1, 0.3), (2, 0.05), (0, 0.8), (1, 0.15), (3, 0.0), (1, 0.45), (2, 0.2)]


def lines(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


def check_audit(run_dir: Path) -> list:
    records = read_history(run_dir)
    result = audit(records, Knobs.from_run_dir(run_dir))
    assert result.divergence is None, result.divergence.describe()
    assert result.checked == len(records)
    return records


def test_sigkill_at_ten_moments_then_resume_always_audits(write_spec):
    spec = write_spec(SPEC)
    run_dir = spec.parent / "runs"
    hist = run_dir / "history.jsonl"
    running = run_dir / "running.json"
    for done_first, delay in MOMENTS:
        start = lines(hist)
        proc = launch(spec)
        # A resumed launcher first records the trial its predecessor died in.
        base = start + (1 if running.exists() else 0)
        try:
            wait_for(
                lambda b=base + done_first, p=proc: (lines(hist) >= b and running.exists()) or p.poll() is not None,
                timeout=60,
            )
        except AssertionError:
            proc.kill()
            raise AssertionError(f"the launcher did not get there: {proc.communicate()[1]}") from None
        time.sleep(delay)
        info = json.loads(running.read_text()) if running.exists() else {}
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        if hist.exists():
            check_audit(run_dir)  # the history a dead launcher left is consistent as it stands
        assert proc.returncode == -signal.SIGKILL, f"the run ended before moment {done_first, delay}"
        left = find_marked(info["token"]) if info.get("token") else []
        run_job(load_spec(spec).with_overrides(recurrences=1))  # resume: recovers, then has nothing to run
        records = check_audit(run_dir)
        for pid in left:
            assert not alive(pid), "the resumed launcher must kill the dead launcher's trial"
        interrupted = [x for x in records if x.stop_reason == "interrupted"]
        for x in interrupted:
            assert x.stage and x.detail, "an interrupted record carries the engine's decision"
    r = zeus("run", str(spec), "--no-output")
    assert r.returncode == 0, r.stderr
    records = check_audit(run_dir)
    assert len({x.recurrence for x in records if x.reached}) == 24
    interrupted = [x for x in records if x.stop_reason == "interrupted"]
    assert len(interrupted) >= 5
    # killed in a later recurrence (the default policy cuts only batch sizes that never converged,
    # so most later trials run without a threshold)
    assert any(x.recurrence > 1 for x in interrupted)
    rep = zeus("replay", str(run_dir))
    assert rep.returncode == 0, rep.stderr
