"""Views read, they do not re-decide (issue 48): the belief a view shows is what the engine saved beside the
history after folding its last record (``belief.json``), not a new engine folding the history."""

from __future__ import annotations

import json

import pytest

from tests.launcher.test_faults import spec_text
from zeus_run.asktell import ask, tell
from zeus_run.engine.ledger import Ledger
from zeus_run.launcher import run_job
from zeus_run.rundir.belief import BELIEF_NAME, read_belief
from zeus_run.rundir.history import read_history
from zeus_run.spec import load_spec
from zeus_run.views.jobs import load_job


class _Refold(Exception):
    pass


def _no_engine(monkeypatch) -> None:
    def refuse(self, *args, **kwargs):
        raise _Refold("a view folded the history")

    monkeypatch.setattr(Ledger, "fold", refuse)


def test_a_run_saves_its_belief_and_a_view_reads_it_without_an_engine(write_spec, monkeypatch):
    spec = load_spec(write_spec(spec_text().replace("recurrences: 1", "recurrences: 3")))
    result = run_job(spec)
    saved = read_belief(result.run_dir)
    records = list(read_history(result.run_dir))
    assert saved is not None and saved.folded == len(records) and saved.last_trial == records[-1].trial
    assert saved.leader is None or saved.leader in spec.batch_sizes
    _no_engine(monkeypatch)
    job = load_job(result.run_dir)  # refolding would raise
    assert job.records == tuple(records) and job.summary.slow == saved.slow


def test_a_tell_saves_the_belief_with_its_record(write_spec, monkeypatch):
    spec = load_spec(write_spec(spec_text().replace("recurrences: 1", "recurrences: 3")))
    run = run_job(spec, next_recurrences=1)
    a = ask(run.run_dir)
    tell(a.run_dir, a.token, exit_code=1)  # a crash, told: recorded and folded
    records = list(read_history(run.run_dir))
    saved = read_belief(run.run_dir)
    assert saved is not None and (saved.folded, saved.last_trial) == (len(records), a.trial)
    _no_engine(monkeypatch)
    load_job(run.run_dir)


def test_a_belief_that_does_not_cover_the_history_is_not_shown_as_current(write_spec, monkeypatch):
    spec = load_spec(write_spec(spec_text().replace("recurrences: 1", "recurrences: 2")))
    result = run_job(spec)
    path = result.run_dir / BELIEF_NAME
    d = json.loads(path.read_text(encoding="utf-8"))
    path.write_text(json.dumps({**d, "folded": d["folded"] - 1}), encoding="utf-8")  # stale: a record since
    _no_engine(monkeypatch)
    with pytest.raises(_Refold):  # it is replayed from the records instead
        load_job(result.run_dir)
