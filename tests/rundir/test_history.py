"""The append-only history: durable appends, torn tails tolerated, corruption reported."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.factories import make_record
from zeus_run.errors import HistoryError
from zeus_run.records import _KINDS, TrialRecord, _check_field, _checked
from zeus_run.rundir.history import HistoryStore, read_history


def rec(i: int, **kw) -> TrialRecord:
    return make_record(i, **kw)


def test_append_and_read_round_trip(tmp_path):
    store = HistoryStore(tmp_path / "history.jsonl")
    records = [rec(0), rec(1, metrics=(0.5, 0.9), reached=False, stop_reason="max_epochs")]
    store.extend(records)
    assert list(store.read()) == records
    lines = (tmp_path / "history.jsonl").read_text().splitlines()
    assert len(lines) == 2 and json.loads(lines[1])["metrics"] == [0.5, 0.9]


def test_torn_last_line_is_ignored_with_a_warning_and_cut_before_appending(tmp_path, caplog):
    path = tmp_path / "history.jsonl"
    store = HistoryStore(path)
    store.extend([rec(0), rec(1)])
    with open(path, "ab") as f:
        f.write(b'{"job": "j", "recurrence": 3, "att')
    got = read_history(path)
    assert len(got) == 2 and got.torn is not None
    assert "torn" in caplog.text
    assert store.repair_tail() is True
    store.append(rec(2))
    assert [r.trial for r in read_history(path)] == [0, 1, 2]
    assert (tmp_path / "history.jsonl.torn").read_bytes().startswith(b'{"job": "j", "recurrence": 3')


@pytest.mark.parametrize(
    "tail",
    [b"\x00\x00\x00\x00\n", b'{"job": "j", "recur\n', b"\n".join([b"x" * 70_000, b"{garbage"]) + b"\n"],
    ids=["zeros-with-newline", "cut-json-with-newline", "long-line-then-garbage"],
)
def test_a_last_line_with_its_newline_that_is_no_json_is_cut_too(tmp_path, tail):
    """The repair reads only the file's end when it ends cleanly; a last line that is not JSON still goes."""
    path = tmp_path / "history.jsonl"
    store = HistoryStore(path)
    store.extend([rec(0), rec(1)])
    clean = path.read_bytes()
    assert store.repair_tail() is False and path.read_bytes() == clean  # a clean end: nothing to do
    with open(path, "ab") as f:
        f.write(tail)
    if tail.startswith(b"x"):  # a line that is no record in the middle: corruption, never cut
        with pytest.raises(HistoryError, match="line 3"):
            store.repair_tail()
        return
    assert store.repair_tail() is True
    assert path.read_bytes() == clean
    store.append(rec(2))
    assert [r.trial for r in read_history(path)] == [0, 1, 2]


def test_corrupt_line_in_the_middle_is_an_error(tmp_path):
    path = tmp_path / "history.jsonl"
    HistoryStore(path).extend([rec(0), rec(1)])
    lines = path.read_text().splitlines()
    path.write_text(lines[0] + "\n{garbage\n" + lines[1] + "\n")
    with pytest.raises(HistoryError, match="line 2"):
        read_history(path)


def test_missing_history_names_the_path(tmp_path):
    with pytest.raises(HistoryError, match="No history"):
        read_history(tmp_path)


def test_record_rejects_unknown_stop_reason():
    data = rec(0).to_json()
    data["stop_reason"] = "exploded"
    with pytest.raises(ValueError, match="stop_reason"):
        TrialRecord.from_json(data)


def test_reading_what_was_appended_leaves_a_line_still_being_written_for_the_next_read(tmp_path):
    path = tmp_path / "history.jsonl"
    store = HistoryStore(path)
    store.extend([rec(0), rec(1)])
    records, offset = store.read_from(0)
    assert [r.trial for r in records] == [0, 1] and offset == path.stat().st_size
    line = (json.dumps(rec(2).to_json()) + "\n").encode()
    with open(path, "ab") as f:
        f.write(line[:10])  # a record half written
    assert store.read_from(offset) == ([], offset)
    with open(path, "ab") as f:
        f.write(line[10:])
    records, after = store.read_from(offset)
    assert [r.trial for r in records] == [2] and after == path.stat().st_size


def test_a_character_cut_by_a_torn_write_and_a_bad_byte_in_the_middle(tmp_path):
    """The file is decoded at once where it is valid UTF-8; where it is not, each line alone (as before)."""
    path = tmp_path / "history.jsonl"
    HistoryStore(path).extend([rec(0), rec(1)])
    clean = path.read_bytes()
    path.write_bytes(clean + '{"job": "é'.encode()[:-1])  # the last line torn inside a character
    got = read_history(path, warn=False)
    assert [r.trial for r in got] == [0, 1] and got.torn is not None
    lines = clean.splitlines(keepends=True)
    path.write_bytes(lines[0] + b'{"job": "\xff"}\n' + lines[1])
    with pytest.raises(HistoryError, match="line 2"):
        read_history(path)


_FIELD_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=3),
    st.lists(st.one_of(st.none(), st.floats(allow_nan=True), st.integers(-3, 3), st.booleans()), max_size=3),
    st.dictionaries(st.text(max_size=2), st.integers(), max_size=2),
)


@settings(max_examples=300, deadline=None)
@given(values=st.dictionaries(st.sampled_from(sorted(_KINDS)), _FIELD_VALUES, max_size=8))
def test_the_fast_field_checks_decide_as_the_full_check(values):
    """`TrialRecord.from_json` decides the usual value of each field inline (`_checked`): it accepts, converts and
    refuses exactly what the full check (`_check_field`) does."""

    def outcome(check, key, value):
        try:
            return "ok", repr(check(key, value))  # repr: nan == nan, and 1 != 1.0
        except ValueError as exc:
            return "refused", str(exc)

    for key, value in values.items():
        fast = outcome(lambda k, v: _checked({k: v})[k], key, value)
        assert fast == outcome(_check_field, key, value), (key, value)


def test_a_history_that_starts_with_a_byte_order_mark_reads_as_it_did_before_626ffc0(tmp_path):
    path = tmp_path / "history.jsonl"
    records = [rec(0), rec(1)]
    text = "".join(json.dumps(r.to_json()) + "\n" for r in records)
    path.write_bytes(b"\xef\xbb\xbf" + text.encode())  # as an editor that saves "UTF-8 with BOM" writes it
    # What the reader did before 626ffc0: json.loads of each line's bytes, which skips the mark.
    assert [TrialRecord.from_json(json.loads(line)) for line in path.read_bytes().splitlines()] == records
    store = HistoryStore(path)
    assert list(store.read()) == records
    store.append(rec(2))
    assert list(store.read()) == [*records, rec(2)]
