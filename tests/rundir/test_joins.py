"""The join protocol (`zeus_run.rundir.joins`): requests, claims, withdrawals and dead joiners, without processes."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys

from zeus_run.rundir import joins
from zeus_run.rundir.joins import JoinDesk


def test_a_claim_grants_the_next_recurrences_and_a_claimed_request_cannot_be_withdrawn(tmp_path):
    told = []
    desk = JoinDesk(tmp_path, 4, told.append)
    first = joins.request(tmp_path, 2, "2026-11-23T02:00:00+00:00")
    second = joins.request(tmp_path, 1, "2026-11-23T03:00:00+00:00")
    assert joins.status(tmp_path, first) == first and not first.granted  # pending
    assert desk.claim() == 3 and told == [6]
    a, b = joins.status(tmp_path, first), joins.status(tmp_path, second)
    assert a is not None and b is not None
    assert a.granted == (4, 5) and b.granted == (6,)  # oldest first, numbered after the launcher's own
    assert a.holder.startswith(f"{os.getpid()}@")
    assert desk.triggers == {4: first.triggered_at, 5: first.triggered_at, 6: second.triggered_at}
    assert joins.withdraw(tmp_path, first) is False  # the holder's now
    assert desk.claim() == 0  # nothing claimed twice
    joins.forget(tmp_path, a)
    assert joins.status(tmp_path, first) is None


def test_a_withdrawn_request_is_never_claimed(tmp_path):
    desk = JoinDesk(tmp_path, 2)
    req = joins.request(tmp_path, 1, "2026-11-23T02:00:00+00:00")
    assert joins.withdraw(tmp_path, req) is True
    assert desk.claim() == 0 and joins.status(tmp_path, req) is None


def test_the_request_of_a_joiner_that_died_is_dropped_not_run(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    req = joins.request(tmp_path, 1, "2026-11-23T02:00:00+00:00")
    path = tmp_path / "joins" / f"{req.id}.json"
    path.write_text(json.dumps(dataclasses.replace(req, pid=int(dead.stdout)).to_json()))
    assert JoinDesk(tmp_path, 2).claim() == 0
    assert not path.exists()


def test_a_damaged_request_is_dropped(tmp_path):
    req = joins.request(tmp_path, 1, "2026-11-23T02:00:00+00:00")
    (tmp_path / "joins" / f"{req.id}.json").write_text("{not json")
    assert JoinDesk(tmp_path, 2).claim() == 0
    assert not list((tmp_path / "joins").iterdir())
