"""Faults and bad input, with real subprocesses and real signals (the launcher is never mocked)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.cli.test_run_cli import alive, history
from tests.cli.test_run_cli import zeus_in as zeus
from tests.conftest import PYTHON, SCRIPTS
from tests.factories import job_spec
from zeus_run.errors import BUSY_EXIT_CODE

FAKE = str(SCRIPTS / "fake_train.py")


def spec_text(args: str = "", body: str = "") -> str:
    """`tests.factories.job_spec` for job ``f`` (6 epochs at most, no early stop), ``args`` added to the script's
    command line."""
    return job_spec(body, args=args.split(), name="f", max_epochs=6, beta=None, energy="{source: estimate, watts: 100}")


def launch(spec: Path, *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "zeus_run", "run", str(spec), "--no-output", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "COLUMNS": "200"},
    )


def wait_for(cond, timeout: float = 30.0) -> None:
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            raise AssertionError("condition not reached in time")
        time.sleep(0.02)


def decisions(records: list[dict]) -> list[tuple]:
    return [(r["recurrence"], r["batch_size"], r["reached"], r["stage"]) for r in records if r["observed"]]


@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_signal_interrupts_records_and_resumes(write_spec, sig, code, tmp_path):
    pidfile = tmp_path / "pids"
    spec = write_spec(
        spec_text(f"--epoch-time 0.3 --pid-file {pidfile}", "recurrences: 2\n").replace("recurrences: 1\n", "")
    )
    proc = launch(spec)
    running = spec.parent / "runs" / "running.json"
    wait_for(lambda: running.exists() and pidfile.exists())
    pid, child = (int(x) for x in pidfile.read_text().split())
    proc.send_signal(sig)
    _out, err = proc.communicate(timeout=30)
    assert proc.returncode == code, err
    assert "Run the same command again to resume" in err and "Traceback" not in err
    (rec,) = history(spec)
    assert rec["stop_reason"] == "interrupted" and rec["observed"] is False
    assert not alive(pid) and not alive(child)
    # Resume: the interrupted trial is re-run as the next try of the same recurrence.
    r = zeus("run", str(spec), "--no-output")
    assert r.returncode == 0, r.stderr
    recs = history(spec)
    assert recs[1]["recurrence"] == 1 and recs[1]["attempt"] == 2 and recs[1]["batch_size"] == 2
    assert recs[1]["reached"] is True
    h = zeus("history", str(spec.parent / "runs"))
    assert "interrupted" in h.stdout


def test_sigkill_mid_trial_then_resume_equals_an_uninterrupted_run(write_spec, tmp_path):
    # The paper's pruning decides its first round (these 2 recurrences) from convergence alone, so
    # two real runs agree decision for decision whatever the machine's load does to their measured
    # costs (round 2 starts at the cheapest batch size: that depends on the load).
    body = "recurrences: 2\noptimizer: {policy: zeus}\n"
    pidfile = tmp_path / "pids"
    args = f"--epoch-time 0.1 --pid-file {pidfile}"
    ref = write_spec(spec_text(args, body).replace("recurrences: 1\n", ""), name="ref.yaml")
    ref_text = ref.read_text().replace("run_dir: runs", "run_dir: ref-runs")
    ref.write_text(ref_text)
    r = zeus("run", str(ref), "--no-output")
    assert r.returncode == 0, r.stderr
    reference = [json.loads(x) for x in (tmp_path / "ref-runs" / "history.jsonl").read_text().splitlines()]

    spec = write_spec(spec_text(args, body).replace("recurrences: 1\n", ""))
    proc = launch(spec)
    hist = spec.parent / "runs" / "history.jsonl"
    running = spec.parent / "runs" / "running.json"
    # Kill the launcher in the middle of its third trial.
    wait_for(lambda: hist.exists() and len(hist.read_text().splitlines()) >= 2 and running.exists())
    time.sleep(0.15)
    wait_for(pidfile.exists)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    orphan, orphan_child = (int(x) for x in pidfile.read_text().split())
    before = history(spec)
    r = zeus("run", str(spec), "--no-output")
    assert r.returncode == 0, r.stderr
    after = history(spec)
    assert after[: len(before)] == before  # nothing lost or rewritten
    interrupted = [x for x in after if x["stop_reason"] == "interrupted"]
    assert len(interrupted) == 1 and "died" in interrupted[0]["message"]
    assert decisions(after) == decisions(reference)
    assert not alive(orphan) and not alive(orphan_child)  # the dead launcher's script was cleaned up
    assert [x["trial"] for x in after] == list(range(len(after)))


def test_second_launcher_is_refused_naming_the_holder(write_spec):
    # Epochs long enough that the first launcher still holds the lock when the
    # second one has started, even on a loaded machine.
    spec = write_spec(spec_text("--epoch-time 3"))
    proc = launch(spec)
    wait_for(lambda: (spec.parent / "runs" / "running.json").exists())
    r = zeus("run", str(spec), "--no-output")
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=30)
    assert r.returncode == BUSY_EXIT_CODE == 75
    assert "in use by another zeus-run launcher" in r.stderr
    assert f"pid {proc.pid} on {socket.gethostname()}, since " in r.stderr


def test_per_trial_timeout(write_spec, tmp_path):
    pidfile = tmp_path / "pids"
    spec = write_spec(
        # zeus: its pruning runs batch size 1 in recurrence 2 (zeus-voi does not explore with one recurrence left)
        # Batch size 1 hangs after its first epoch, so only the timeout ends it; the others
        # finish in well under the timeout however loaded the machine is.
        spec_text(
            f"--hang-bs 1 --pid-file {pidfile}", "recurrences: 2\ntimeout: 5.0\noptimizer: {policy: zeus}\n"
        ).replace("recurrences: 1\n", "")
    )
    r = zeus("run", str(spec), "--no-output")
    assert r.returncode == 0, r.stderr
    timed_out = [x for x in history(spec) if x["stop_reason"] == "timeout"]
    assert timed_out and timed_out[0]["batch_size"] == 1 and timed_out[0]["observed"] is True
    assert 5.0 <= timed_out[0]["time"] < 8.0
    h = zeus("history", str(spec.parent / "runs"))
    assert "timeout" in h.stdout


def test_torn_history_tail_is_tolerated_on_resume(write_spec):
    spec = write_spec(spec_text(body="recurrences: 2\n").replace("recurrences: 1\n", ""))
    assert zeus("run", str(spec), "--no-output", "-n", "1").returncode == 0
    hist = spec.parent / "runs" / "history.jsonl"
    with open(hist, "ab") as f:
        f.write(b'{"job": "f", "recurr')
    r = zeus("run", str(spec), "--no-output")
    assert r.returncode == 0, r.stderr
    assert "torn" in r.stderr
    recs = history(spec)
    assert recs[0]["recurrence"] == 1 and {x["recurrence"] for x in recs if x["reached"]} == {1, 2}


def test_changed_spec_is_refused_with_the_differences(write_spec):
    spec = write_spec(spec_text())
    assert zeus("run", str(spec), "--no-output").returncode == 0
    spec.write_text(spec.read_text().replace("beta: null", "beta: 3.0").replace("max_epochs: 6", "max_epochs: 7"))
    r = zeus("run", str(spec), "--no-output")
    assert r.returncode == 2
    assert "beta: None -> 3.0" in r.stderr and "max_epochs: 6 -> 7" in r.stderr and "--force" in r.stderr
    r = zeus("run", str(spec), "--no-output", "--force")
    assert r.returncode == 0, r.stderr
    assert (spec.parent / "runs-2" / "history.jsonl").exists()
    assert len(history(spec)) == 1  # the old history is untouched


def _max_child_rss_kb(args: list[str]) -> int:
    code = (
        "import resource, subprocess, sys; subprocess.run(sys.argv[1:], capture_output=True); "
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)"
    )
    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120)
    return int(out.stdout.strip())


def test_megabytes_of_output_keep_memory_flat(write_spec, tmp_path):
    quiet = write_spec(spec_text(), name="quiet.yaml")
    loud = write_spec(spec_text("--spam 20000000").replace("run_dir: runs", "run_dir: loud"), name="loud.yaml")
    base = _max_child_rss_kb([sys.executable, "-m", "zeus_run", "run", str(quiet)])
    big = _max_child_rss_kb([sys.executable, "-m", "zeus_run", "run", str(loud), "--no-output"])
    log = next((tmp_path / "loud" / "trials").glob("*/output.log"))
    assert log.stat().st_size > 30_000_000  # two epochs x 20 MB went to the log...
    assert big - base < 30_000  # ...but not into the launcher's memory (KiB)


def test_very_long_line_and_malformed_events_are_ignored(write_spec, tmp_path):
    script = tmp_path / "weird.py"
    script.write_text(
        "import os, sys\n"
        "print('y' * 5_000_000)\n"
        "with open(os.environ['ZEUS_EVENT_LOG'], 'a') as f:\n"
        '    f.write(\'not json\\n{"event": "epoch"}\\n{"event": "epoch", "metric": "abc"}\\n\')\n'
        '    f.write(\'{"event": "epoch", "epoch": 1, "metric": 0.95}\\n\')\n'
    )
    spec = write_spec(
        spec_text().replace(f'"{FAKE}", "--batch-size", "{{batch_size}}", "--needs", "1:0,2:2,4:3"', f'"{script}"')
    )
    r = zeus("run", str(spec), "--no-output")
    assert r.returncode == 0, r.stderr
    (rec,) = history(spec)
    assert rec["reached"] is True and rec["metrics"] == [0.95]
    assert "ignored 3 malformed" in r.stderr


def test_non_executable_command(write_spec, tmp_path):
    script = tmp_path / "train.sh"
    script.write_text("#!/bin/sh\necho hi\n")
    spec = write_spec(spec_text().replace(f'"{PYTHON}", "{FAKE}", ', f'"{script}", '))
    r = zeus("run", str(spec))
    assert r.returncode == 2 and "is not executable" in r.stderr and "chmod +x" in r.stderr
    spec = write_spec(spec_text().replace(f'"{PYTHON}"', '"no-such-program-xyz"'))
    r = zeus("run", str(spec))
    assert r.returncode == 2 and "not found on PATH" in r.stderr


def test_placeholders_are_never_evaluated_by_a_shell(write_spec, tmp_path):
    marker = tmp_path / "pwned"
    script = tmp_path / "echo_args.py"
    script.write_text(
        "import json, os, sys\n"
        "open(os.path.join(os.environ['ZEUS_LOG_DIR'], 'argv.json'), 'w').write(json.dumps(sys.argv[1:]))\n"
        "f = open(os.environ['ZEUS_EVENT_LOG'], 'a'); f.write('{\"event\": \"epoch\", \"metric\": 1}\\n')\n"
    )
    spec = write_spec(
        spec_text().replace(
            f'"{FAKE}", "--batch-size", "{{batch_size}}", "--needs", "1:0,2:2,4:3"',
            f'"{script}", "$(touch {marker})", "{{{{x}}}}", "--bs={{batch_size}}"',
        )
    )
    r = zeus("run", str(spec), "--no-output")
    assert r.returncode == 0, r.stderr
    argv = json.loads(next((spec.parent / "runs" / "trials").glob("*/argv.json")).read_text())
    assert argv == [f"$(touch {marker})", "{x}", "--bs=2"]
    assert not marker.exists()


def test_full_disk_is_detected_before_a_trial(tmp_path, monkeypatch):
    import shutil

    from zeus_run.errors import RunDirError
    from zeus_run.rundir.store import check_writable

    real = shutil.disk_usage
    monkeypatch.setattr(shutil, "disk_usage", lambda p: real(p)._replace(free=1000))
    with pytest.raises(RunDirError, match="only 1000 bytes free"):
        check_writable(tmp_path)
