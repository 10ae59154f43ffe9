"""A failed recurrence never stops the job: a night whose every try ran out of memory is recorded as failed, and
the next trigger, whatever its door, runs the next recurrence (exit 0), with every decision re-derived by the audit.

Real CLI processes (``run --next``, ``exec --job``, ``ask`` + the script + ``tell``), without PYTHONUNBUFFERED;
the script (`tests/scripts/night_train.py`) runs out of GPU memory while a file says so.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli.test_run_cli import zeus
from tests.engine.doors import ask_tell, audit_exact, bad_night, exec_job, history, night_job, run_n, run_next
from zeus_run.errors import RECURRENCE_FAILED_EXIT_CODE

#: A matrix run end to end (minutes in all): not in .ci/run; scripts/test_heavy.sh runs it.
pytestmark = pytest.mark.heavy


def fail_night_by(door: str, spec: Path) -> None:
    """Night 2, every try out of memory, through ``door``; its last trigger exits `RECURRENCE_FAILED_EXIT_CODE`."""
    bad_night(spec, True)
    if door == "next":
        r = run_next(spec)  # both tries in one trigger
        assert r.returncode == RECURRENCE_FAILED_EXIT_CODE, r.stderr
        assert "Recurrence 2 failed: 2 of max_tries 2 tries without the target" in r.stderr
        assert "goes on with the next recurrence" in r.stderr and "Traceback" not in r.stderr
    elif door == "exec":
        first = exec_job(spec)
        assert first.returncode == 1, first.stderr  # a try without the target: the next ask retries
        last = exec_job(spec)
        assert last.returncode == RECURRENCE_FAILED_EXIT_CODE, last.stderr
    else:
        for _ in range(2):
            asked, told, a = ask_tell(spec)
            assert asked.returncode == 0 and told is not None and told.returncode == 0, (asked.stderr, told)
            assert a["recurrence"] == 2
        assert "recurrence 2 failed" in told.stderr
    bad_night(spec, False)


def next_night_by(door: str, spec: Path) -> int:
    """Night 3 through ``door`` (the GPU is free again); returns the recurrence it ran."""
    if door == "next":
        r = run_next(spec)
        assert r.returncode == 0, r.stderr
        assert r.stdout == "" and r.stderr == ""  # -q: a good night says nothing
    elif door == "exec":
        r = exec_job(spec)
        assert r.returncode == 0, r.stderr
    else:
        asked, told, a = ask_tell(spec)
        assert asked.returncode == 0, asked.stderr
        assert told is not None and told.returncode == 0, told.stderr
        return a["recurrence"]
    return history(spec)[-1]["recurrence"]


@pytest.mark.parametrize(
    ("failing", "then"), [("next", "next"), ("next", "ask"), ("next", "exec"), ("exec", "ask"), ("ask", "next")]
)
def test_a_night_that_failed_every_try_never_stops_the_job(tmp_path, failing, then):
    spec = night_job(tmp_path, recurrences="null", max_tries=2)
    assert run_next(spec).returncode == 0  # night 1
    fail_night_by(failing, spec)
    recs = history(spec)
    second = [r for r in recs if r["recurrence"] == 2]
    assert [r["stop_reason"] for r in second] == ["crashed", "crashed"]
    assert all(r["observed"] for r in second)  # the optimizer learns from the tries, as before
    assert "recurrence_failed" not in second[0]
    assert second[1]["recurrence_failed"].startswith("2 of max_tries 2 tries without the target; the last: crashed")
    assert "out of memory" in second[1]["recurrence_failed"]
    assert next_night_by(then, spec) == 3  # the next trigger goes on: recurrence 3, exit 0
    recs = history(spec)
    assert recs[-1]["recurrence"] == 3 and recs[-1]["reached"] is True
    assert next_night_by("next", spec) == 4  # and so does every trigger after
    audit_exact(spec)


def test_a_finite_job_counts_a_failed_recurrence_among_its_recurrences(tmp_path):
    # recurrences: 3 and night 2 fails: the job is over after recurrence 3 (3 recurrences ran, 2 models).
    spec = night_job(tmp_path, recurrences="3", max_tries=2)
    assert run_next(spec).returncode == 0
    fail_night_by("next", spec)
    assert next_night_by("next", spec) == 3
    asked = ask_tell(spec)[0]
    assert asked.returncode == 4 and "All 3 recurrences" in asked.stderr  # done: nothing to ask
    audit_exact(spec)


def test_run_n_goes_on_past_a_failed_recurrence_and_exits_5(tmp_path):
    spec = night_job(tmp_path, recurrences="null", max_tries=1)
    assert run_n(spec, 1).returncode == 0
    bad_night(spec, True)
    # One try per recurrence: -n 3 runs recurrences 2 and 3, both fail, and the run does not stop at the first.
    r = run_n(spec, 3)
    assert r.returncode == RECURRENCE_FAILED_EXIT_CODE, r.stderr
    for n in (2, 3):  # said when it failed, and again as the run ends
        assert f"recurrence {n} failed: 1 of max_tries 1 tries without the target" in r.stderr
        assert f"Recurrence {n} failed: 1 of max_tries 1 tries without the target" in r.stderr
    bad_night(spec, False)
    recs = history(spec)
    assert [(x["recurrence"], x.get("recurrence_failed") is not None) for x in recs] == [
        (1, False),
        (2, True),
        (3, True),
    ]
    assert run_n(spec, 4).returncode == 0 and history(spec)[-1]["recurrence"] == 4
    audit_exact(spec)
    shown = zeus("history", str(spec.parent / "runs"))
    assert shown.returncode == 0 and shown.stdout.count("failed: crashed (RuntimeError: CUDA out of memory") == 2


def test_a_history_wedged_by_an_earlier_version_goes_on(tmp_path):
    """Recorded before failures were marked: the failed night's last try says nothing, and that version's
    next triggers all exited 1 ("Recurrence 2 did not reach the target in 2 tries"). Now the next trigger
    counts its tries against max_tries and goes on, and the audit re-derives it."""
    spec = night_job(tmp_path, recurrences="null", max_tries=2)
    assert run_next(spec).returncode == 0
    fail_night_by("next", spec)
    path = spec.parent / "runs" / "history.jsonl"
    old = [json.loads(line) for line in path.read_text().splitlines()]
    for rec in old:
        rec.pop("recurrence_failed", None)
    path.write_text("".join(json.dumps(rec) + "\n" for rec in old))
    r = run_next(spec)
    assert r.returncode == 0, r.stderr
    assert history(spec)[-1]["recurrence"] == 3 and history(spec)[-1]["reached"] is True
    audit_exact(spec)
