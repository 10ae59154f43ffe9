"""Resume adopts every trial in flight that goes on (its job and agent alive) or wrote its outcome.

The kill-moment harness of tests/launcher/test_crash_replay.py, with 2 and 4 trials in flight under the fake
Slurm (tests/fake_slurm.py, whose jobs really run and outlive the launcher): the launcher is killed
with SIGKILL at many moments and resumed each time. Replay must audit the history every time, and no
trial may run twice: each is submitted once, and a trial that had finished when its launcher died is
recorded from its own outcome.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from tests.concurrency_helpers import in_flight
from tests.executors.test_slurm_executor import calls, check_audit, fake, live_jobs, spec_text, wait_for  # noqa: F401
from tests.launcher.test_faults import launch
from zeus_run.contract import StopReason
from zeus_run.door.opening import pending_records
from zeus_run.engine.replay import Knobs, audit
from zeus_run.launcher import run_job
from zeus_run.rundir.history import read_history
from zeus_run.spec import load_spec
from zeus_run.trial.agent import read_outcome

#: A matrix run end to end (minutes in all): not in .ci/run; scripts/test_heavy.sh runs it.
pytestmark = pytest.mark.heavy

# (records this launcher appends first, then seconds to wait once enough trials are in flight).
MOMENTS = [(0, 0.0), (0, 0.3), (1, 0.1), (0, 0.6), (2, 0.0), (1, 0.4)]


def lines(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


@pytest.mark.parametrize("concurrency", [2, 4])
def test_sigkill_at_many_moments_adopts_every_trial_in_flight(write_spec, fake, concurrency):  # noqa: F811
    text = spec_text(needs="1:0,2:2,4:3,8:2", epoch_time=0.15, recurrences=30) + f"concurrency: {concurrency}\n"
    spec = write_spec(text)
    run_dir = spec.parent / "runs"
    hist = run_dir / "history.jsonl"
    finished: dict[tuple[int, int], StopReason] = {}  # trials whose outcome was written when their launcher died
    adopted_at_once = 0
    finished_logs: list[int] = []
    for done_first, delay in MOMENTS:
        start = lines(hist)
        proc = launch(spec)

        def ready(p=proc, want=start + done_first) -> bool:
            submitted = [m for m in in_flight(run_dir) if m.slurm_job_id]
            return (lines(hist) >= want and len(submitted) >= 2) or p.poll() is not None

        wait_for(ready, "two trials in flight", timeout=120)
        assert proc.poll() is None, f"the run ended before its moment: {proc.communicate()[1]}"
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        (spec.parent / f"launcher-{len(finished_logs)}.log").write_text(proc.communicate(timeout=10)[1])
        finished_logs.append(1)
        markers = in_flight(run_dir)
        for m in markers:
            outcome = read_outcome(Path(str(m.trial_dir))) if m.trial_dir else None
            if outcome is not None:
                finished[(m.recurrence, m.attempt)] = outcome.stop_reason
        adopted_at_once = max(adopted_at_once, sum(1 for m in markers if m.slurm_job_id in live_jobs(fake)))
        if hist.exists():  # the history a dead launcher left, with the trials it had in flight, audits as it stands
            records = read_history(run_dir)
            result = audit(records, Knobs.from_run_dir(run_dir), pending_records(run_dir, records))
            assert result.divergence is None, result.divergence.describe()
    run_job(load_spec(spec))  # resume to the end
    records = check_audit(run_dir)
    assert len({r.recurrence for r in records if r.reached}) == 30
    keys = [(r.recurrence, r.attempt) for r in records]
    assert len(keys) == len(set(keys))
    submitted = [c.split("--job-name=")[1].split()[0] for c in calls(fake) if c.startswith("sbatch")]
    assert len(submitted) == len(set(submitted)), "a trial was submitted twice"
    assert len(submitted) <= len(records)  # a trial killed before its sbatch is recorded interrupted
    by_key = {(r.recurrence, r.attempt): r for r in records}
    for key, reason in finished.items():
        assert by_key[key].stop_reason is reason, f"finished trial {key} was not recorded from its outcome"
        assert "taken over" in (by_key[key].message or "")
    taken = [r for r in records if "taken over" in (r.message or "")]
    assert len(taken) >= 2 and adopted_at_once >= 2  # several trials in flight were adopted at once
    assert live_jobs(fake) == []
    assert not (run_dir / "running.json").exists()
