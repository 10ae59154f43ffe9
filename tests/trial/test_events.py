"""Class 1 of the hardening issue: every field a training script writes is untrusted.

Unit tests feed hostile lines to the event and regex readers; the end-to-end
tests run a script that reports NaN, 1e999 and junk through the real CLI.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.cli.test_run_cli import zeus
from tests.conftest import PYTHON, SCRIPTS
from zeus_run.rundir.history import read_history
from zeus_run.trial.events import EventLogTail, RegexMetricReader, parse_count, parse_metric

HOSTILE = str(SCRIPTS / "hostile_train.py")


def tail_of(tmp_path: Path, *lines: str | bytes) -> EventLogTail:
    path = tmp_path / "events.jsonl"
    with open(path, "ab") as f:
        for line in lines:
            f.write((line.encode() if isinstance(line, str) else line) + b"\n")
    return EventLogTail(str(path))


def strict_json(line: str) -> object:
    """json.loads that refuses NaN and Infinity, as any other JSON reader would."""

    def refuse(const: str) -> object:
        raise ValueError(f"non-standard JSON constant {const}")

    return json.loads(line, parse_constant=refuse)


@pytest.mark.parametrize(
    "literal", ["NaN", "Infinity", "-Infinity", "1e999", "-1e999", "9" * 400, '"nan"', '"inf"', '"1e999"']
)
def test_non_finite_metric_is_a_diverged_epoch(tmp_path, literal):
    tail = tail_of(tmp_path, f'{{"event": "epoch", "epoch": 1, "metric": {literal}}}')
    (ev,) = tail.finish()
    assert ev.epoch == 1 and math.isnan(ev.metric)
    assert tail.malformed == 0 and tail.diverged == 1


@pytest.mark.parametrize(
    "line",
    [
        '{"event": "epoch", "metric": 0.5, "epoch": 1e999}',
        '{"event": "epoch", "metric": 0.5, "epoch": ' + "9" * 400 + "}",
        '{"event": "epoch", "metric": 0.5, "epoch": -1}',
        '{"event": "epoch", "metric": 0.5, "epoch": "x"}',
        '{"event": "step", "n": 1e999}',
        '{"event": "step", "n": NaN}',
        '{"event": "step", "n": 3, "time": 1e999}',
        '{"event": "info", "iters_per_epoch": Infinity}',
        '{"event": "info", "iters_per_epoch": "lots"}',
        '{"event": "epoch", "metric": [1, 2]}',
        '{"event": "epoch", "metric": true}',
        '{"event": "epoch", "metric": "fast"}',
        '{"event": "epoch"}',
        '{"event": 7}',
        '{"metric": 0.5}',
        "[1, 2]",
        "null",
        "42",
        '"epoch"',
        "{not json",
        "[" * 60000,
        '{"a":' * 30000 + "1" + "}" * 30000,
        '{"event": "epoch", "metric": ' + "1" * 5000 + "}",
        b'{"event": "epoch", "metric": 0.5, "x": "\xff\xfe"}',
    ],
)
def test_invalid_event_is_skipped_counted_and_the_trial_goes_on(tmp_path, line, caplog):
    tail = tail_of(tmp_path, line, '{"event": "epoch", "epoch": 1, "metric": 0.75}')
    events = tail.finish()
    assert [(e.epoch, e.metric) for e in events] == [(1, 0.75)]
    assert tail.malformed == 1
    assert "skipping an invalid event" in caplog.text


def test_steps_keep_their_last_valid_value(tmp_path):
    tail = tail_of(tmp_path, '{"event": "step", "n": 40, "time": 5.0}', '{"event": "step", "n": 1e999}')
    assert tail.finish() == [] and tail.steps == 40 and tail.step_time == 5.0 and tail.malformed == 1


def test_a_fifo_in_place_of_the_event_log_does_not_block(tmp_path):
    path = tmp_path / "events.jsonl"
    os.mkfifo(path)
    tail = EventLogTail(str(path))
    assert tail.poll() == [] and tail.finish() == []


@pytest.mark.parametrize(
    "text, metrics, malformed",
    [
        ("val_acc=nan", [math.nan], 0),
        ("val_acc=inf", [math.nan], 0),
        ("val_acc=1e999", [math.nan], 0),
        ("val_acc=" + "9" * 400, [math.nan], 0),
        ("val_acc=0.5.5", [], 1),
        ("val_acc=0.25", [0.25], 0),
    ],
)
def test_regex_metric_reader(text, metrics, malformed):
    reader = RegexMetricReader(r"val_acc=(\S+)")
    got = [e.metric for e in reader.feed_line(text.encode())]
    assert len(got) == len(metrics) and all(
        g == m or (math.isnan(g) and math.isnan(m)) for g, m in zip(got, metrics, strict=True)
    )
    assert reader.malformed == malformed


def test_parse_helpers_reject_what_is_not_a_number():
    assert parse_count(3.0, "epoch") == 3 and parse_count("12", "n") == 12
    for bad in (True, -1, 2**63, 1.5, math.inf, "1" * 30, None, [1]):
        with pytest.raises(ValueError):
            parse_count(bad, "epoch")
    for bad in (True, None, [0.5], {"a": 1}, "fast"):
        with pytest.raises(ValueError):
            parse_metric(bad)


def hostile_spec(write_spec, *args: str, body: str = "", recurrences: int = 3) -> Path:
    argv = ", ".join(f'"{a}"' for a in (PYTHON, HOSTILE, "--needs", "1:2,2:2,4:2", *args))
    return write_spec(
        f"""
        name: h
        command: [{argv}]
        batch_sizes: [1, 2, 4]
        default_batch_size: 2
        target_metric: 0.9
        max_epochs: 3
        recurrences: {recurrences}
        beta: null
        optimizer: {{revision: 3}}  # these tests need the probes; revision 4's budget skips them in 3 recurrences
        energy: {{source: estimate, watts: 100}}
        run_dir: runs
        {body}
        """
    )


def check_history_is_strict_json(run_dir: Path) -> list[dict]:
    lines = (run_dir / "history.jsonl").read_text().splitlines()
    records = [strict_json(line) for line in lines]
    assert len(read_history(run_dir)) == len(records)
    return records  # type: ignore[return-value]


@pytest.mark.parametrize(
    "args, body",
    [
        (("--nan-bs", "1"), ""),
        (("--nan-bs", "1", "--metric-literal", "1e999"), ""),
        (("--nan-bs", "1", "--metric-literal", "9" * 400), ""),
        (("--nan-bs", "1", "--mode", "print"), "metric: {source: regex, regex: 'val_acc=(\\S+)'}"),
    ],
    ids=["nan", "1e999", "400-digits", "regex-nan"],
)
def test_diverging_batch_size_is_a_failed_trial_not_a_crash(write_spec, args, body):
    spec = hostile_spec(write_spec, *args, body=body)
    r = zeus("run", str(spec), "--no-output")
    assert r.returncode == 0, r.stderr
    assert "internal error" not in r.stderr
    records = check_history_is_strict_json(spec.parent / "runs")
    diverged = [rec for rec in records if rec["batch_size"] == 1]
    assert diverged, "pruning should have tried batch size 1"
    for rec in diverged:
        assert rec["reached"] is False and rec["observed"] is True
        assert rec["stop_reason"] == "max_epochs" and rec["metrics"] == [None, None, None]
    assert sum(rec["reached"] for rec in records) == 3
    # The history reads back, and the diverged epochs are NaN again.
    (back,) = [r for r in read_history(spec.parent / "runs") if r.batch_size == 1][:1]
    assert all(math.isnan(m) for m in back.metrics)
    r = zeus("history", str(spec.parent / "runs"), "--format", "json")
    assert r.returncode == 0, r.stderr
    strict_json(r.stdout)


def test_junk_events_are_skipped_with_a_count(write_spec):
    spec = hostile_spec(write_spec, "--junk", recurrences=1)
    r = zeus("run", str(spec), "--no-output")
    assert r.returncode == 0, r.stderr
    assert "skipping an invalid event" in r.stderr
    assert "ignored 24 malformed" in r.stderr  # 12 junk lines before each of the 2 epochs
    (rec,) = check_history_is_strict_json(spec.parent / "runs")
    assert rec["reached"] is True and rec["epochs"] == 2


def test_event_times_and_ask_figures_are_read_leniently(tmp_path):
    log = tmp_path / "events.jsonl"
    huge = "9" * 400
    log.write_text(
        '{"event": "start", "time": 100.0}\n'
        f'{{"event": "epoch", "epoch": 1, "metric": 0.5, "time": {huge}}}\n'
        '{"event": "epoch", "epoch": 2, "metric": 0.7, "time": 103.5, "elapsed": 3.5, "energy": -1}\n'
        '{"event": "stop", "reason": "cost_threshold"}\n'
    )
    tail = EventLogTail(str(log))
    first, second = tail.finish()
    assert first.time is None and tail.malformed == 0  # a time too large for a float is no time, not an error
    assert (second.time, second.elapsed, second.energy) == (103.5, 3.5, None)
    assert tail.started == 100.0 and tail.stop == "cost_threshold"


def test_a_trial_under_an_ask_counts_from_its_process_start(tmp_path, monkeypatch):
    """The helper's start event carries the process's start; a plain tell then counts the imports too, as exec does."""
    import time

    from zeus_run.contract import Env
    from zeus_run.train import Trial

    log = tmp_path / "events.jsonl"
    monkeypatch.setenv(Env.EVENT_LOG, str(log))
    monkeypatch.setenv(Env.HEARTBEAT, str(tmp_path / "heartbeat"))
    before = time.time()
    trial = Trial.from_env()
    trial.close()
    tail = EventLogTail(str(log))
    tail.finish()
    assert tail.started is not None and tail.started < before  # this process began before the test did
    # A start that claims a process start after the event itself is not believed.
    later = tmp_path / "later.jsonl"
    later.write_text('{"event": "start", "time": 100.0, "process_start": 250.0}\n')
    odd = EventLogTail(str(later))
    odd.finish()
    assert odd.started == 100.0


def test_the_last_reading_is_the_exits_and_a_close_after_it_does_not_replace_it(tmp_path):
    log = tmp_path / "events.jsonl"
    log.write_text(
        '{"event": "end", "at": "close", "elapsed": 4.0, "energy": 40.0, "time": 1.0}\n'
        '{"event": "end", "at": "exit", "elapsed": 4.5, "energy": 45.0, "exit_code": 1, "output": "OOM", "time": 2}\n'
        '{"event": "end", "at": "close", "elapsed": 9.0, "energy": 90.0, "time": 3.0}\n'
        '{"event": "end", "at": "exit", "elapsed": "x", "energy": 1.0, "time": 4.0}\n'
    )
    tail = EventLogTail(str(log))
    assert tail.finish() == [] and tail.malformed == 0
    end = tail.end
    assert (end.reading, end.at, end.exit_code, end.output, end.carried) == ((4.5, 45.0), "exit", 1, "OOM", None)


def test_the_exit_reading_is_carried_to_the_moment_the_process_was_gone_at_its_power(tmp_path):
    log = tmp_path / "events.jsonl"
    log.write_text(
        '{"event": "end", "at": "exit", "elapsed": 4.0, "energy": 40.0, "power": 200.0, "time": 10.0}\n'
        '{"event": "exited", "time": 12.5}\n'
        '{"event": "exited", "time": 99.0}\n'  # only the first counts
    )
    tail = EventLogTail(str(log))
    tail.finish()
    assert tail.end.reading == (6.5, 540.0) and tail.end.carried == (2.5, 500.0)


def test_a_meters_window_is_passed_on_and_checked_where_it_is_kept(tmp_path):
    from zeus_run.engine.measure import window_of

    log = tmp_path / "events.jsonl"
    window = {"by": "script", "from": "process-start", "extended_s": 1.5, "extended_j": -3, "extended_at": 7, "x": 1}
    measured = {"source": "nvml", "estimated": False, "max_power": 300, "window": window}
    log.write_text(json.dumps({"event": "info", "measured": measured}) + "\n")
    tail = EventLogTail(str(log))
    tail.finish()
    assert tail.measured is not None and tail.measured["window"] == window
    assert window_of(window) == {"by": "script", "from": "process-start", "extended_s": 1.5}


def test_a_script_a_launcher_measures_dates_its_exit_in_its_event_log(tmp_path):
    """Where a trial whose launcher died ended (`zeus_run.engine.measure.unwatched_span` reads it)."""
    log = tmp_path / "events.jsonl"
    code = "from zeus_run.train import Trial\nt = Trial.from_env()\nt.report(0.5)\nt.close()\n"
    env = {k: v for k, v in os.environ.items() if not k.startswith("ZEUS_")} | {"ZEUS_EVENT_LOG": str(log)}
    before = time.time()
    subprocess.run([sys.executable, "-c", code], env=env, check=True, cwd=Path(__file__).resolve().parents[2])
    events = [json.loads(x) for x in log.read_text().splitlines()]
    assert [e["event"] for e in events] == ["start", "epoch", "exited"]
    assert before <= events[-1]["time"] <= time.time() and events[-1]["time"] >= events[1]["time"]
