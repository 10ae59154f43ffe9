"""The fold a process keeps per job (`zeus_run.door.fold`): always the ledger a fresh fold of the file gives."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

from tests.asktell.test_asktell_api import audited, spec_text, train_by_reports
from zeus_run.asktell import ask, tell
from zeus_run.door import engine_of
from zeus_run.door.fold import folded
from zeus_run.engine.core import Ledger
from zeus_run.rundir.history import read_history
from zeus_run.rundir.opener import stored_spec as spec_of


def fresh(run_dir: Path) -> Ledger:
    engine = engine_of(spec_of(run_dir), run_dir)
    path = run_dir / "history.jsonl"
    return Ledger.from_history(engine, list(read_history(path)) if path.exists() else [])


def same(kept: Ledger, new: Ledger) -> None:
    """The two ledgers hold the same knowledge: the same tallies, and the same next decision."""
    assert (kept.folded, kept.observed, kept.started, kept.min_cost) == (
        new.folded,
        new.observed,
        new.started,
        new.min_cost,
    )
    assert kept.converged == new.converged and repr(kept.state) == repr(new.state)
    a, b = kept.branch(), new.branch()
    rec = a.next_recurrence()
    assert rec == b.next_recurrence()
    if rec is not None:
        assert a.start(rec) == b.start(rec)


def kept(run_dir: Path) -> Ledger:
    return folded(run_dir, engine_of(spec_of(run_dir), run_dir)).ledger


def test_the_kept_fold_matches_a_fresh_fold_through_random_asks_and_tells(write_spec):
    spec = write_spec(spec_text(concurrency=3, extra="recurrences: null").replace("recurrences: 6\n", ""))
    rng = random.Random(7)
    first = ask(spec)
    run_dir = first.run_dir
    flight = [first]
    for _ in range(24):
        if flight and (len(flight) == 3 or rng.random() < 0.5):
            a = flight.pop(rng.randrange(len(flight)))
            if rng.random() < 0.2:
                tell(a.run_dir, a.token, exit_code=1, energy=50.0, time=1.0, message="boom")
            else:
                train_by_reports(a)
                tell(a.run_dir, a.token, exit_code=0)
            same(kept(run_dir), fresh(run_dir))
        else:
            flight.append(ask(run_dir))
    for a in flight:
        train_by_reports(a)
        tell(a.run_dir, a.token, exit_code=0)
    same(kept(run_dir), fresh(run_dir))
    audited(run_dir, spec)  # every decision re-derived from scratch


def test_the_kept_fold_follows_appends_by_others_and_refolds_a_rewritten_history(write_spec):
    spec = write_spec(spec_text())
    for _ in range(4):
        a = ask(spec)
        train_by_reports(a)
        tell(a.run_dir, a.token)
    run_dir = a.run_dir
    path = run_dir / "history.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    same(kept(run_dir), fresh(run_dir))

    # Restored from a backup with fewer records (a new file in its place): folded afresh.
    tmp = run_dir / "restore.tmp"
    tmp.write_bytes(b"".join(lines[:2]))
    os.replace(tmp, path)
    assert kept(run_dir).folded == 2
    same(kept(run_dir), fresh(run_dir))

    # Cut back in place and another record of the second trial written after the first: folded afresh.
    other = json.dumps({**json.loads(lines[1]), "energy": json.loads(lines[1])["energy"] + 1.0}).encode() + b"\n"
    assert len(other) != len(lines[1]) or other != lines[1]
    with open(path, "r+b") as f:
        f.truncate(len(lines[0]))
        f.seek(0, os.SEEK_END)
        f.write(other)
    assert kept(run_dir).folded == 2
    same(kept(run_dir), fresh(run_dir))
    with open(path, "r+b") as f:
        f.truncate(len(lines[0]) + len(lines[1]))
        f.seek(len(lines[0]))
        f.write(lines[1])

    # Appended by someone else (another host's tell, a launcher): the next session folds it too.
    with open(path, "ab") as f:
        f.writelines(lines[2:])
    assert kept(run_dir).folded == 4
    same(kept(run_dir), fresh(run_dir))
    new = fresh(run_dir)
    expected = new.start(new.next_recurrence())
    b = ask(run_dir)
    assert (b.trial, b.recurrence, b.attempt, b.batch_size) == (
        4,
        expected.recurrence,
        expected.attempt,
        expected.decision.batch_size,
    )
