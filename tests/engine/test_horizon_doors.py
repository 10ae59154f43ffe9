"""The horizon is the job's, never the invocation's: ``run -n``, ``run --next``, ask/tell and ``exec`` decide alike
on the same history, and a history that mixes them replays exactly.

Real CLI processes, as a user types them, without PYTHONUNBUFFERED (`tests.engine.doors`).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.engine.doors import ask_tell, audit_exact, exec_job, history, night_job, run_n, run_next

#: A matrix run end to end (minutes in all): not in .ci/run; scripts/test_heavy.sh runs it.
pytestmark = pytest.mark.heavy


def prefix_copy(spec: Path, k: int, where: Path) -> Path:
    """A copy of ``spec``'s job whose run directory holds the first ``k`` records of its history."""
    where.mkdir()
    copy = where / "job.yaml"
    copy.write_text(spec.read_text())
    runs = where / "runs"
    runs.mkdir()
    shutil.copy(spec.parent / "runs" / "spec.yaml", runs / "spec.yaml")
    lines = (spec.parent / "runs" / "history.jsonl").read_text().splitlines(keepends=True)
    (runs / "history.jsonl").write_text("".join(lines[:k]))
    return copy


def decision(rec: dict) -> tuple:
    return rec["recurrence"], rec["attempt"], rec["batch_size"], rec.get("cost_threshold"), rec["stage"]


def test_run_n_and_run_next_decide_alike_on_a_job_with_no_end(tmp_path):
    # `run -n 4` used to plan over 4 recurrences (recorded horizon 4: batch size 16 four times), where four
    # `run --next` planned over the job's open-ended life and explored. Both now plan over the job's.
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a, b = night_job(tmp_path / "a"), night_job(tmp_path / "b")
    r = run_n(a, 4)
    assert r.returncode == 0, r.stderr
    for _ in range(4):
        r = run_next(b)
        assert r.returncode == 0, r.stderr
    by_n, by_next = history(a), history(b)
    assert [x["recurrence"] for x in by_n] == [x["recurrence"] for x in by_next] == [1, 2, 3, 4]
    for rec in by_n + by_next:  # open-ended, the default lifetime: the records say so by carrying neither
        assert "horizon" not in rec and "lifetime" not in rec
    assert len({x["batch_size"] for x in by_n}) > 1  # -n 4 explores too
    assert by_n[1]["batch_size"] == by_next[1]["batch_size"] == 8  # the walk's first step, either way
    # The same history gives the same decision through either door: each prefix of one door's history,
    # continued by the other door, takes the decision the first door recorded next.
    for k in (1, 2, 3):
        cont = prefix_copy(a, k, tmp_path / f"next-after-{k}")
        r = run_next(cont)
        assert r.returncode == 0, r.stderr
        assert decision(history(cont)[k]) == decision(by_n[k]), k
        cont = prefix_copy(b, k, tmp_path / f"n-after-{k}")
        r = run_n(cont, k + 1)
        assert r.returncode == 0, r.stderr
        assert decision(history(cont)[k]) == decision(by_next[k]), k
    audit_exact(a)
    audit_exact(b)


@pytest.mark.parametrize(
    ("recurrences", "body", "carried"),
    [("null", "", {}), ("null", "lifetime: 30", {"lifetime": 30}), ("12", "", {"horizon": 12})],
)
def test_a_history_mixing_every_door_passes_replay(tmp_path, recurrences, body, carried):
    spec = night_job(tmp_path, recurrences=recurrences, body=body)
    r = run_n(spec, 2)  # recurrences 1 and 2
    assert r.returncode == 0, r.stderr
    asked, told, a = ask_tell(spec)  # recurrence 3
    assert asked.returncode == 0 and told is not None and told.returncode == 0, (asked.stderr, told)
    assert a["recurrence"] == 3
    r = exec_job(spec)  # recurrence 4
    assert r.returncode == 0, r.stderr
    r = run_next(spec)  # recurrence 5
    assert r.returncode == 0, r.stderr
    recs = history(spec)
    assert [x["recurrence"] for x in recs] == [1, 2, 3, 4, 5]
    for rec in recs:  # every door planned over the job's horizon, which its record carries
        assert {k: rec[k] for k in ("horizon", "lifetime") if k in rec} == carried
    audit_exact(spec)
