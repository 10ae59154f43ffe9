"""``zeus-run ask``, ``tell``, ``heartbeat`` and ``exec`` from the command line: formats, exit codes, refusals."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.asktell.test_asktell_api import spec_text
from tests.cli.test_run_cli import zeus
from zeus_run.asktell import expire
from zeus_run.contract import expires_at
from zeus_run.errors import BUSY_EXIT_CODE, LEASE_EXPIRED_EXIT_CODE
from zeus_run.rundir.store import read_running


def write(tmp_path: Path, text: str) -> Path:
    spec = tmp_path / "job.yaml"
    spec.write_text(text)
    return spec


def test_env_format_evals_in_sh_with_awkward_values(tmp_path):
    awkward = 'it\'s $(touch pwned) `x` "q" \\ ; & |'
    spec = write(tmp_path, spec_text(extra=f"env: {{AWKWARD: {json.dumps(awkward)}}}"))
    r = zeus("ask", str(spec), "--format", "env")
    assert r.returncode == 0, r.stderr
    assert all(line.startswith(("export ZEUS_", "export AWKWARD=")) for line in r.stdout.splitlines())
    shown = subprocess.run(
        [
            "sh",
            "-c",
            'eval "$1" && printf "%s\\n%s\\n%s" "$AWKWARD" "$ZEUS_BATCH_SIZE" "$ZEUS_COMMAND"',
            "sh",
            r.stdout,
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert shown.returncode == 0, shown.stderr
    value, bs, command = shown.stdout.split("\n")
    assert value == awkward and bs == "2" and "--batch-size 2" in command
    assert not (tmp_path / "pwned").exists()


def test_json_ask_then_tell_with_reported_figures(tmp_path):
    spec = write(tmp_path, spec_text())
    a = json.loads(zeus("ask", str(spec), "--format", "json").stdout)
    assert {"token", "run_dir", "trial_dir", "batch_size", "learning_rate", "power_limit", "seed", "recurrence"} <= set(
        a
    )
    assert {"try", "cost_threshold", "max_epochs", "command", "env"} <= set(a)
    r = zeus("tell", a["run_dir"], a["token"], "--exit-code", "0", "--energy", "1200", "--time", "60", "--json")
    assert r.returncode == 0, r.stderr
    rec = json.loads(r.stdout)
    assert rec["reported"] == "time energy" and rec["energy"] == 1200 and rec["energy_source"] == "reported"
    again = zeus("tell", a["run_dir"], a["token"])
    assert again.returncode == 2 and "already told" in again.stderr


def test_a_late_tell_is_refused_with_exit_code_3_and_kept(tmp_path):
    spec = write(tmp_path, spec_text(lease=600))
    a = json.loads(zeus("ask", str(spec), "--format", "json").stdout)
    heartbeat = Path(a["trial_dir"]) / "heartbeat"
    assert zeus("heartbeat", a["run_dir"], a["token"]).returncode == 0 and heartbeat.exists()
    # Nothing renews it now: the lease runs out. Rather than wait out a lease short enough for a test
    # (which a loaded machine outlasts before the heartbeat even starts), expire it as of its end.
    (marker,) = read_running(Path(a["run_dir"]))
    (expired,) = expire(a["run_dir"], now=expires_at(marker, 600) + 1)
    assert expired.stop_reason == "infrastructure"
    r = zeus("tell", a["run_dir"], a["token"], "--exit-code", "0", "--energy", "5", "--time", "1")
    assert r.returncode == LEASE_EXPIRED_EXIT_CODE, r.stderr
    assert "too late" in r.stderr and "Traceback" not in r.stderr
    assert json.loads((Path(a["trial_dir"]) / "late_tell.json").read_text())["energy"] == 5
    recs = [json.loads(line) for line in (Path(a["run_dir"]) / "history.jsonl").read_text().splitlines()]
    assert [r["stop_reason"] for r in recs] == ["infrastructure"]


def test_busy_and_bad_input_exit_codes(tmp_path):
    spec = write(tmp_path, spec_text())
    first = zeus("ask", str(spec))
    assert first.returncode == 0, first.stderr
    busy = zeus("ask", str(spec))
    assert busy.returncode == BUSY_EXIT_CODE and "1 ask(s) in flight" in busy.stderr
    run = zeus("run", str(spec), "--next")
    assert run.returncode == BUSY_EXIT_CODE and "ask(s) are in flight" in run.stderr
    assert "Error:" not in busy.stderr + run.stderr  # busy is the scheduler's skip, not an error
    for args, words in [
        (("ask", str(tmp_path / "missing.yaml")), "no such spec file or run directory"),
        (("tell", str(tmp_path / "runs"), "nope"), "token = 'nope'"),
        (("heartbeat", str(tmp_path / "runs"), "nope"), "token = 'nope'"),
        (("exec", "--", "true"), "exec needs an ask"),
        (("tell", str(tmp_path / "runs"), "x", "--energy", "-1"), "--energy"),
    ]:
        r = zeus(*args, timeout=60)
        assert r.returncode == 2, (args, r.stderr)
        assert words in r.stderr and "Traceback" not in r.stderr, r.stderr
    bad = write(tmp_path, spec_text(lease=0))
    r = zeus("ask", str(bad))
    assert r.returncode == 2 and "lease = 0" in r.stderr and "at least 1" in r.stderr


def test_the_training_helper_stays_light_with_the_python_api_in_the_package():
    r = subprocess.run(
        [sys.executable, "-c", "import sys, zeus_run.train; print(any(m == 'numpy' for m in sys.modules))"],
        capture_output=True,
        text=True,
    )
    assert r.stdout.strip() == "False"


def test_the_docs_ask_tell_step_keeps_the_done_and_busy_exit_codes(tmp_path):
    from tests.docs.test_docs_examples import REPO, blocks

    (step,) = [b for b in blocks(REPO / "docs" / "ask-tell.md") if b.name == "ask-tell-step.sh"]
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "zeus-run").write_text(f'#!/bin/sh\nexec {sys.executable} -m zeus_run "$@"\n')
    (bindir / "zeus-run").chmod(0o755)
    env = {"PATH": f"{bindir}:/usr/bin:/bin", "HOME": str(tmp_path)}

    def run_step(cwd: Path) -> subprocess.CompletedProcess:
        return subprocess.run(["sh", "-c", step.text], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)

    done = tmp_path / "done"
    done.mkdir()
    write(done, spec_text().replace("recurrences: 6", "recurrences: 1"))
    assert zeus("run", str(done / "job.yaml"), "-q").returncode == 0  # its one recurrence reaches the target
    r = run_step(done)
    assert r.returncode == 4, r.stderr  # the job is done: the step stops with ask's code
    asked = zeus("ask", str(done / "job.yaml"))
    assert asked.returncode == 4 and asked.stderr.strip() and "Error:" not in asked.stderr  # done is no error
    busy = tmp_path / "busy"
    busy.mkdir()
    write(busy, spec_text())
    assert zeus("ask", str(busy / "job.yaml"), "--format", "json").returncode == 0  # concurrency 1: one in flight
    r = run_step(busy)
    assert r.returncode == BUSY_EXIT_CODE == 75, r.stderr


def test_tell_metric_records_one_epoch_per_value_and_judges_the_target(tmp_path):
    """A shell user reports each epoch's metric with --metric (target 0.9; exponents accepted)."""
    spec = write(tmp_path, spec_text())
    a = json.loads(zeus("ask", str(spec), "--format", "json").stdout)
    r = zeus("tell", a["run_dir"], a["token"], "--exit-code", "0", "--metric", "4.2e-01", "--metric", "0.95", "--json")
    assert r.returncode == 0, r.stderr
    rec = json.loads(r.stdout)
    assert rec["metrics"] == [0.42, 0.95] and rec["epochs"] == 2 and rec["reached"] is True
    b = json.loads(zeus("ask", str(spec), "--format", "json").stdout)
    low = json.loads(zeus("tell", b["run_dir"], b["token"], "--exit-code", "0", "--metric", "0.5", "--json").stdout)
    assert low["metrics"] == [0.5] and low["reached"] is False
    bad = zeus("tell", b["run_dir"], b["token"], "--metric", "high")
    assert bad.returncode == 2 and "--metric" in bad.stderr and "Traceback" not in bad.stderr


def test_a_told_crash_is_the_batch_sizes_and_a_told_import_error_is_the_environments(tmp_path):
    spec = write(tmp_path, spec_text())
    a = json.loads(zeus("ask", str(spec), "--format", "json").stdout)
    # Told long after the ask (as after a slow start): timing is no evidence; only the exit code is.
    r = zeus("tell", a["run_dir"], a["token"], "--exit-code", "1", "--time", "3600", "--json")
    assert r.returncode == 0, r.stderr
    crashed = json.loads(r.stdout)
    assert crashed["stop_reason"] == "crashed" and crashed["observed"] is True
    b = json.loads(zeus("ask", str(spec), "--format", "json").stdout)
    log = tmp_path / "train.log"
    log.write_text(
        "Traceback (most recent call last):\n  File 'train.py'\nModuleNotFoundError: No module named 'torchvision'\n"
    )
    r = zeus("tell", b["run_dir"], b["token"], "--exit-code", "1", "--log", str(log), "--json")
    assert r.returncode == 0, r.stderr  # recorded; the error says what to fix
    env = json.loads(r.stdout)
    assert env["stop_reason"] == "environment_error" and env["observed"] is False
    assert env["cause"] == "ModuleNotFoundError: No module named 'torchvision'"
    assert "pip install torchvision" in r.stderr and "the environment, not the batch size" in r.stderr
