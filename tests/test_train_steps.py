"""The training helper's step events: silent unless profiling, batched, stopped by the launcher's file."""

from __future__ import annotations

import json

from zeus_run.train import Trial
from zeus_run.trial.events import EventLogTail


def _events(path):
    return [json.loads(l) for l in path.read_text().splitlines()]


def test_steps_are_silent_without_profiling(tmp_path):
    log = tmp_path / "ev.jsonl"
    t = Trial(32, event_log=str(log))
    for _ in range(1000):
        t.step()
    t.close()
    assert t.steps == 1000
    assert log.read_text() == ""


def test_profiling_steps_are_batched_and_counts_exact(tmp_path, monkeypatch):
    log = tmp_path / "ev.jsonl"
    now = [0.0]
    monkeypatch.setattr("zeus_run.train.time.monotonic", lambda: now[0])
    t = Trial(32, event_log=str(log), profile=True, profile_stop_file=str(tmp_path / "done"))
    for i in range(100):
        now[0] = i * 0.006  # 6 ms per iteration: at most one event per 20 ms -> every 4th
        t.step()
    steps = [e for e in _events(log) if e["event"] == "step"]
    assert [e["n"] for e in steps] == [
        1,
        5,
        9,
        13,
        17,
        21,
        25,
        29,
        33,
        37,
        41,
        45,
        49,
        53,
        57,
        61,
        65,
        69,
        73,
        77,
        81,
        85,
        89,
        93,
        97,
    ]
    (tmp_path / "done").touch()
    for i in range(100, 200):
        now[0] = i * 0.006
        t.step()
    t.close()
    after = [e for e in _events(log) if e["event"] == "step"]
    assert after[-1]["n"] == 129  # the file is noticed at the next check (every 0.25 s): t = 0.792 s
    assert t.steps == 200


def test_iterate_reports_iterations_per_epoch_and_steps(tmp_path):
    log = tmp_path / "ev.jsonl"
    t = Trial(32, event_log=str(log), profile=True)
    assert list(t.iterate(range(7))) == list(range(7))
    t.report(0.5)
    t.close()
    tail = EventLogTail(str(log))
    epochs = tail.finish()
    assert (
        tail.iters_per_epoch == 7 and tail.steps == 1 and tail.step_time is not None
    )  # first step only (20 ms batching)
    assert [e.epoch for e in epochs] == [1]
    assert t.steps == 7


def test_from_env_reads_profile_contract(tmp_path, monkeypatch):
    monkeypatch.setenv("ZEUS_EVENT_LOG", str(tmp_path / "ev.jsonl"))
    monkeypatch.setenv("ZEUS_PROFILE", "1")
    monkeypatch.setenv("ZEUS_PROFILE_STOP", str(tmp_path / "stop"))
    t = Trial.from_env()
    t.step()
    t.close()
    assert _events(tmp_path / "ev.jsonl")[0]["event"] == "step"


def test_from_env_by_hand_gives_usable_defaults(monkeypatch):
    for key in [k for k in __import__("os").environ if k.startswith("ZEUS_")]:
        monkeypatch.delenv(key)
    from zeus_run.train import DEFAULT_LEARNING_RATE

    t = Trial.from_env(batch_size=128)
    assert t.batch_size == 128 and t.learning_rate == DEFAULT_LEARNING_RATE
    assert not t.managed
    # The README's loop runs: arithmetic on the learning rate works, and epochs() ends.
    seen = []
    for epoch in t.epochs():
        seen.append(epoch * t.learning_rate)
        t.report(0.5)
    assert len(seen) == t.max_epochs


def test_from_env_empty_learning_rate_falls_back_to_the_default(monkeypatch):
    monkeypatch.setenv("ZEUS_LEARNING_RATE", "")
    monkeypatch.setenv("ZEUS_BATCH_SIZE", "64")
    t = Trial.from_env(batch_size=128, learning_rate=0.05)
    assert t.batch_size == 64 and t.learning_rate == 0.05
