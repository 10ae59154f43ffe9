"""Every request is safe to retry: a server killed between applying a request and answering it, then restarted,
answers the client's retry as the request it repeats.

The server runs with the fault hook (`zeus_run.server._faults`): it exits right after the first ask, report,
finish or fail is on disk, before the answer goes out. The client (`tests/scripts/server_train.py`, the unchanged
`zeus_run.train.Trial`) retries against the restarted server with the same idempotency key and carries on.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.server.helpers import ServerProcess
from tests.server.test_server_jobs import TOKEN, check_complete, clients, demo_spec, finish
from zeus_run.server._faults import FAULT_ENV, FAULT_EXIT

#: How long a server may take to die by the fault hook on a loaded machine (unit: s); waited for, never asserted on.
FAULT_TIMEOUT_S = 600


def start(tmp_path: Path, port: int = 0, fault: str | None = None) -> ServerProcess:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    env = {FAULT_ENV: fault} if fault else {FAULT_ENV: ""}
    proc = ServerProcess(tmp_path / "root", port=port, extra=("--token-file", str(token_file)), env=env)
    proc.wait_ready()
    return proc


def epochs_of(trial_dir: Path) -> list[int]:
    events = trial_dir / "events.jsonl"
    if not events.exists():
        return []
    return [e["epoch"] for e in map(json.loads, events.read_text().splitlines()) if e.get("event") == "epoch"]


@pytest.mark.parametrize("fault", ["ask", "report", "finish", "fail"])
def test_a_server_killed_between_applying_and_answering_is_retried_to_the_same_answer(tmp_path, fault):
    server = start(tmp_path, fault=fault)
    server.client(TOKEN).register("demo", demo_spec(2, concurrency=1))
    procs = clients(server.url, 1, "demo", *(["--fail-first"] if fault == "fail" else []))
    assert server.exit_code(FAULT_TIMEOUT_S) == FAULT_EXIT  # applied, then gone before answering
    assert f"fault hook {FAULT_ENV}={fault}" in "".join(server.lines)
    run_dir = server.root / "demo"
    restarted = start(tmp_path, port=server.port)
    try:
        outs = finish(procs)  # the client carried on: exit 0
        assert "job complete" in outs[0]
        recs = check_complete(run_dir, 2)  # each recurrence once, no trial twice, replay passes
        # nothing lost: no ask was orphaned (an orphan would have expired as infrastructure, or kept it busy)
        assert [r["stop_reason"] for r in recs if r["stop_reason"] == "infrastructure"] == []
        for trial_dir in (run_dir / "trials").iterdir():
            epochs = epochs_of(trial_dir)
            assert epochs == sorted(set(epochs)), f"{trial_dir.name}: an epoch recorded twice: {epochs}"
        if fault == "fail":
            assert recs[0]["stop_reason"] == "crashed" and "boom" in (recs[0]["message"] or "")
        log = "".join(restarted.lines)
        assert "Traceback" not in log and "already_told" not in log and "busy" not in log
    finally:
        restarted.stop()


def test_a_repeated_request_gets_its_first_answer_and_a_reused_key_with_another_body_is_409(server):
    from tests.server.test_security import TRIAL_SPEC, raw

    client = server.client()
    client.register("leases", TRIAL_SPEC.replace("lease: 1", "lease: 600"))
    key = {"Idempotency-Key": "ask-1"}
    status, first = raw(server, "POST", "/v1/jobs/leases/trials", b"{}", headers=key)
    assert status == 200
    status, again = raw(server, "POST", "/v1/jobs/leases/trials", b"{}", headers=key)
    assert status == 200 and again["token"] == first["token"] and again["batch_size"] == first["batch_size"]
    status, other = raw(server, "POST", "/v1/jobs/leases/trials", b'{"host": "elsewhere"}', headers=key)
    assert status == 409 and other["code"] == "key_reused"
    trial = f"/v1/jobs/leases/trials/{first['token']}"
    epoch = {"Idempotency-Key": "epoch-1"}
    body = b'{"epoch": 1, "metric": 0.5}'
    assert raw(server, "POST", f"{trial}/epochs", body, headers=epoch) == raw(
        server, "POST", f"{trial}/epochs", body, headers=epoch
    )
    status, reused = raw(server, "POST", f"{trial}/epochs", b'{"epoch": 2, "metric": 0.5}', headers=epoch)
    assert status == 409 and reused["code"] == "key_reused"
    assert raw(server, "POST", f"{trial}/epochs", b'{"epoch": 2, "metric": 0.95}')[1]["converged"]
    status, twice = raw(server, "POST", f"{trial}/epochs", b'{"epoch": 2, "metric": 0.95}')  # no key: still once
    assert status == 200 and twice["converged"]
    status, lower = raw(server, "POST", f"{trial}/epochs", b'{"epoch": 1, "metric": 0.95}')
    assert status == 409 and lower["code"] == "epoch_out_of_order"
    assert "epoch = 1" in lower["error"] and "epoch 2" in lower["error"]
    done = {"Idempotency-Key": "finish-1"}
    status, record = raw(server, "POST", f"{trial}/finish", b'{"time": 2.0, "energy": 20.0}', headers=done)
    assert status == 200 and record["reached"] and record["metrics"] == [0.5, 0.95]
    assert raw(server, "POST", f"{trial}/finish", b'{"time": 2.0, "energy": 20.0}', headers=done) == (200, record)
    status, changed = raw(server, "POST", f"{trial}/finish", b'{"time": 3.0, "energy": 20.0}', headers=done)
    assert status == 409 and changed["code"] == "key_reused"
    status, told = raw(server, "POST", f"{trial}/finish", b'{"time": 2.0, "energy": 20.0}')  # no key: a second tell
    assert status == 409 and told["code"] == "already_told"
    assert len(client.history("leases")) == 1
    status, bad = raw(server, "POST", "/v1/jobs/leases/trials", b"{}", headers={"Idempotency-Key": "a b"})
    assert status == 400 and bad["code"] == "bad_idempotency_key"
