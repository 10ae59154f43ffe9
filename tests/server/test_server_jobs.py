"""Jobs through a real server: the demo job by three clients, a SIGKILL in the middle, the audit after.

The clients are `tests/scripts/server_train.py` processes: the unchanged
`zeus_run.train.Trial` helper with ``ZEUS_SERVER`` set, looping until the
server says the job is complete.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from tests.factories import zeus_run_cli
from tests.server.helpers import REPO, ServerProcess
from zeus_run.contract import StopReason

CLIENT = REPO / "tests" / "scripts" / "server_train.py"
TOKEN = "test-token-0123456789abcdef"
#: How long the clients may take on a loaded machine (unit: s); waited for, never asserted on.
CLIENTS_TIMEOUT_S = 600


def demo_spec(recurrences: int = 10, concurrency: int = 3) -> str:
    """configs/demo.yaml as the user wrote it, for ``recurrences`` recurrences, ``concurrency`` trials at once."""
    text = (REPO / "configs" / "demo.yaml").read_text()
    assert "recurrences: 20" in text
    return text.replace("recurrences: 20", f"recurrences: {recurrences}\nconcurrency: {concurrency}")


def start(tmp_path: Path, port: int = 0) -> ServerProcess:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    proc = ServerProcess(tmp_path / "root", port=port, extra=("--token-file", str(token_file)))
    proc.wait_ready()
    return proc


def clients(url: str, n: int, job: str = "demo", *args: str) -> list[subprocess.Popen]:
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "ZEUS_SERVER": url,
        "ZEUS_SERVER_TOKEN": TOKEN,
        "ZEUS_SERVER_JOB": job,
    }
    return [
        subprocess.Popen(
            [sys.executable, str(CLIENT), *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        for _ in range(n)
    ]


def finish(procs: list[subprocess.Popen]) -> list[str]:
    outs = []
    for p in procs:
        out, _ = p.communicate(timeout=CLIENTS_TIMEOUT_S)
        assert p.returncode == 0, out
        outs.append(out)
    return outs


def records(run_dir: Path) -> list[dict]:
    path = run_dir / "history.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def check_complete(run_dir: Path, recurrences: int) -> list[dict]:
    """Every recurrence ended once, no trial is recorded twice, every epoch once, and the audit passes."""
    recs = records(run_dir)
    keys = [(r["recurrence"], r["attempt"]) for r in recs]
    assert len(keys) == len(set(keys)), f"a trial recorded twice: {keys}"
    assert len({r["trial"] for r in recs}) == len(recs)
    final = [r for r in recs if StopReason.parse(r["stop_reason"]).finishing]
    assert sorted({r["recurrence"] for r in recs}) == list(range(1, recurrences + 1))
    for r in recs:
        assert len(r["metrics"]) == r["epochs"] or r["stop_reason"] == "infrastructure", r
    assert {r["recurrence"] for r in final} == set(range(1, recurrences + 1))
    audit = zeus_run_cli("replay", run_dir)
    assert audit.returncode == 0, audit.stdout + audit.stderr
    return recs


def test_three_clients_run_the_demo_job_through_the_server_to_ten_recurrences_and_the_audit_passes(tmp_path):
    server = start(tmp_path)
    try:
        client = server.client(TOKEN)
        first = client.register("demo", demo_spec(10))
        resolved = first["spec"]
        assert first["created"] and first["changed"] == []
        assert resolved["recurrences"] == 10 and resolved["run_dir"] == "demo"  # relative to the root
        again = client.register("demo", demo_spec(10))  # the same spec again: a no-op
        assert again == {**first, "created": False, "job_token": None}  # the token is shown once
        outs = finish(clients(server.url, 3))
        assert sum("job complete" in o for o in outs) == 3
        run_dir = server.root / "demo"
        recs = check_complete(run_dir, 10)
        served = client.history("demo")
        # The history served is the one stored, each trial with the tail its process spent after its tell (its own
        # line in tails.jsonl, `zeus_run.rundir.tails`) added to its after_time and after_energy.
        tail = ("after_time", "after_energy", "window", "estimated_share")
        assert [{k: v for k, v in r.items() if k not in tail} for r in served] == [
            {k: v for k, v in r.items() if k not in tail} for r in recs
        ]
        for got, raw in zip(served, recs, strict=True):
            assert (got["after_time"] or 0.0) >= (raw["after_time"] or 0.0), (got, raw)
        # the run directory is zeus-run's own: `history` reads it as any other
        shown = zeus_run_cli("history", run_dir, "--format", "json")
        assert shown.returncode == 0, shown.stderr
    finally:
        server.stop()


def test_a_server_killed_mid_run_and_restarted_loses_and_duplicates_nothing(tmp_path):
    server = start(tmp_path)
    server.client(TOKEN).register("demo", demo_spec(10))
    procs = clients(server.url, 3, "demo", "--epoch-time", "0.05")
    run_dir = server.root / "demo"
    deadline = time.monotonic() + CLIENTS_TIMEOUT_S
    while len(records(run_dir)) < 3 and time.monotonic() < deadline:
        assert all(p.poll() is None for p in procs), "a client ended before the kill"
        time.sleep(0.05)
    server.kill()  # SIGKILL with trials in flight: they go on reporting into a retrying client
    before = records(run_dir)
    assert 3 <= len(before) < 10
    restarted = start(tmp_path, port=server.port)
    try:
        finish(procs)
        recs = check_complete(run_dir, 10)
        assert recs[: len(before)] == before  # nothing recorded before the kill changed
        for trial_dir in (run_dir / "trials").iterdir():
            events = trial_dir / "events.jsonl"
            if events.exists():
                epochs = [
                    e["epoch"] for e in map(json.loads, events.read_text().splitlines()) if e.get("event") == "epoch"
                ]
                assert epochs == sorted(set(epochs)), f"{trial_dir.name}: an epoch recorded twice: {epochs}"
    finally:
        restarted.stop()


def test_jobs_are_independent(tmp_path):
    """Two jobs on one server: each has its own run directory and history; neither waits for the other."""
    server = start(tmp_path)
    try:
        client = server.client(TOKEN)
        for job in ("a", "b"):
            client.register(job, demo_spec(2).replace("name: demo", f"name: {job}"))
        procs = clients(server.url, 1, "a") + clients(server.url, 1, "b")
        finish(procs)
        for job in ("a", "b"):
            check_complete(server.root / job, 2)
        assert client.request("GET", "/v1/jobs") == {"jobs": ["a", "b"]}
    finally:
        server.stop()


def test_a_job_stuck_on_its_disk_holds_one_worker_and_another_job_is_served(tmp_path):
    """Many requests of a job whose run directory is held (as a slow disk or a long tell would) wait for that job's
    turn without taking the server's workers, so another job's ask is answered meanwhile."""
    import http.client
    import threading

    from zeus_run.rundir.store import RunDir

    server = start(tmp_path)
    try:
        client = server.client(TOKEN)
        for job in ("stuck", "free"):
            client.register(job, demo_spec(2).replace("name: demo", f"name: {job}"))
        host, port = server.url.removeprefix("http://").rsplit(":", 1)
        answers: list[int] = []

        def ask_stuck() -> None:
            conn = http.client.HTTPConnection(host, int(port), timeout=CLIENTS_TIMEOUT_S)
            conn.request("POST", "/v1/jobs/stuck/trials", body=b"{}", headers={"Authorization": f"Bearer {TOKEN}"})
            answers.append(conn.getresponse().status)
            conn.close()

        with RunDir.open(server.root / "stuck", role="tell", scan_trials=False):  # a brief holder: asks wait for it
            stuck = [threading.Thread(target=ask_stuck, daemon=True) for _ in range(48)]  # more than any thread pool
            for t in stuck:
                t.start()
            free = client.ask("free")  # answered while every request of "stuck" still waits
            assert free["recurrence"] == 1 and not answers
        for t in stuck:
            t.join(CLIENTS_TIMEOUT_S)
        assert len(answers) == 48 and 500 not in answers  # each answered once the lock is free (asked, or busy)
    finally:
        server.stop()
