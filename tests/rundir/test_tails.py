"""`tails.jsonl`: what a process spent after telling its trial, attached to that trial as the history is read,
the history itself untouched (issue 46)."""

from __future__ import annotations

import json

import pytest

from tests.factories import make_record
from zeus_run.errors import TailConflict, UnknownToken
from zeus_run.rundir.history import HISTORY_NAME, HistoryStore, read_history
from zeus_run.rundir.tails import TAILS_NAME, append_tail, record_lost, record_tail


def _history(tmp_path, *records):
    store = HistoryStore(tmp_path / HISTORY_NAME)
    for r in records:
        store.append(r)
    return (tmp_path / HISTORY_NAME).read_bytes()


def test_a_tail_is_added_after_its_trials_point_and_the_history_is_not_rewritten(tmp_path):
    first = make_record(0, provenance={"ask_token": "a"}, energy=150.0, after_time=0.5, after_energy=50.0)
    second = make_record(1, provenance={"ask_token": "b"}, window={"by": "script", "from": "ask", "to": "close"})
    before = _history(tmp_path, first, second)
    append_tail(tmp_path, "b", 2.0, 400.0, "exit")
    append_tail(tmp_path, "a", 1.0, 200.0, "next-ask")
    append_tail(tmp_path, "a", 9.0, 900.0, "exit")  # a second tail of the same trial: the first counts
    append_tail(tmp_path, "nobody", 1.0, 1.0, "exit")  # no such trial: ignored
    assert (tmp_path / HISTORY_NAME).read_bytes() == before
    a, b = read_history(tmp_path)
    assert (a.after_time, a.after_energy) == (1.5, 250.0)
    assert a.window is not None and (a.window["to"], a.window["tail_s"], a.window["tail_j"]) == ("next-ask", 1.0, 200.0)
    assert (b.after_time, b.after_energy) == (2.0, 400.0)
    assert b.window == {"by": "script", "from": "ask", "to": "exit", "tail_s": 2.0, "tail_j": 400.0}
    assert (a.cost, b.cost) == (first.cost, second.cost)  # the cost counts to the point it was judged at


def test_the_estimated_share_is_of_the_whole_energy_with_its_tail(tmp_path):
    r = make_record(0, provenance={"ask_token": "a"}, energy=300.0, estimated=True, estimated_energy=100.0)
    _history(tmp_path, r)
    append_tail(tmp_path, "a", 1.0, 200.0, "exit")
    (read,) = read_history(tmp_path)
    assert read.estimated_share == pytest.approx(100.0 / 500.0)


def test_a_tail_line_that_is_not_one_is_skipped(tmp_path):
    _history(tmp_path, make_record(0, provenance={"ask_token": "a"}))
    with open(tmp_path / TAILS_NAME, "w") as f:
        f.write("not json\n")
        f.write(json.dumps({"token": "a", "time": -1, "energy": 5, "to": "exit"}) + "\n")
        f.write(json.dumps({"token": "a", "time": 1, "energy": 5, "to": "sometime"}) + "\n")
        f.write('{"token": "a", "time": 1, "ene')  # torn
    (r,) = read_history(tmp_path)
    assert r.after_time is None and r.after_energy is None


@pytest.mark.parametrize(
    ("time_s", "energy", "to"), [(-1.0, 1.0, "exit"), (1.0, float("nan"), "exit"), (1.0, 1.0, "later")]
)
def test_a_bad_tail_is_refused_naming_the_field(tmp_path, time_s, energy, to):
    with pytest.raises(ValueError, match=r"^(time|energy|to) = "):
        append_tail(tmp_path, "a", time_s, energy, to)
    assert not (tmp_path / TAILS_NAME).exists()


def test_a_torn_last_line_does_not_swallow_the_next_tail(tmp_path):
    """Issue 54, 6: a torn last line of tails.jsonl swallowed the next tail (the history has repair_tail)."""
    _history(tmp_path, make_record(0, provenance={"ask_token": "a"}), make_record(1, provenance={"ask_token": "b"}))
    record_tail(tmp_path, "a", 1.0, 10.0, "exit")
    with open(tmp_path / TAILS_NAME, "a") as f:
        f.write('{"token": "b", "time": 1, "ene')  # a writer died mid-line
    record_tail(tmp_path, "b", 2.0, 20.0, "exit")
    a, b = read_history(tmp_path)
    assert (a.after_energy, b.after_energy) == (10.0, 20.0)
    assert (tmp_path / (TAILS_NAME + ".torn")).read_text().startswith('{"token": "b"')


def _refusal(call, *args) -> Exception:
    """What ``call(*args)`` raised; where it took them, an assertion fails that says so (a planted bug is then
    caught by an assertion, never by pytest's "DID NOT RAISE")."""
    try:
        call(*args)
    except (UnknownToken, TailConflict) as exc:
        return exc
    raise AssertionError(f"{args!r} was recorded: it must be refused")


def test_a_tail_is_recorded_only_for_a_told_trial_and_once(tmp_path):
    _history(tmp_path, make_record(0, provenance={"ask_token": "a"}))
    unknown = _refusal(record_tail, tmp_path, "nobody", 1.0, 1.0, "exit")
    assert isinstance(unknown, UnknownToken) and "token = 'nobody'" in str(unknown), unknown
    assert not (tmp_path / TAILS_NAME).exists()
    record_tail(tmp_path, "a", 1.0, 10.0, "exit")
    record_tail(tmp_path, "a", 1.0, 10.0, "exit")  # the same again: accepted, written once
    other = _refusal(record_tail, tmp_path, "a", 5.0, 10.0, "exit")
    assert isinstance(other, TailConflict) and "already has its tail" in str(other), other
    assert len((tmp_path / TAILS_NAME).read_text().splitlines()) == 1


def test_tails_are_held_to_their_cap(tmp_path, monkeypatch):
    import errno

    from zeus_run.rundir import tails

    _history(tmp_path, *(make_record(i, provenance={"ask_token": f"t{i}"}) for i in range(5)))
    monkeypatch.setattr(tails, "MAX_TAILS_BYTES", 300)
    with pytest.raises(OSError) as full:
        for i in range(5):
            record_tail(tmp_path, f"t{i}", 1.0, 1.0, "exit")
    assert full.value.errno == errno.EFBIG and "cap" in str(full.value)
    assert (tmp_path / TAILS_NAME).stat().st_size <= 300


def test_a_lost_tail_is_marked_on_its_trial_and_adds_nothing(tmp_path):
    _history(tmp_path, make_record(0, provenance={"ask_token": "a"}, energy=100.0))
    record_lost(tmp_path, "a", "the energy counter could not be read at the exit")
    (r,) = read_history(tmp_path)
    assert r.window is not None and r.window["tail"] == "lost" and "counter" in r.window["tail_why"]
    assert r.after_energy is None
