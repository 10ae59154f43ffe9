"""Zeus 0.16's batch-size protocol on ``zeus-run serve`` (``/zeus/<token>/...``), spoken with the stdlib.

The bodies are the ones Zeus's client sends (``zeus.optimizer.batch_size.common``);
`tests/server/test_zeus_client.py` drives the real client over a socket; here the server's application is
driven in-process. Also here: what a
server trial leaves on disk, and a job registered without ``command``.
"""

from __future__ import annotations

import json
import urllib.parse
from typing import Any

from tests.factories import zeus_run_cli
from tests.server.helpers import AppServer, http_request

JOB = {
    "job_id": "mnist-nightly",
    "job_id_prefix": "mnist",
    "batch_sizes": [128, 32, 64],
    "default_batch_size": 64,
    "eta_knob": 0.5,
    "beta_knob": 2.0,
    "target_metric": 0.9,
    "higher_is_better_metric": True,
    "max_epochs": 10,
    "num_pruning_rounds": 2,
    "window_size": 0,
    "mab_prior_mean": 0.0,
    "mab_prior_precision": 0.0,
    "mab_num_explorations": 2,
    "mab_seed": 1,
    "max_power": 300.0,
    "number_of_gpus": 1,
    "gpu_model": "NVIDIA A100-SXM4-40GB",
}


class Zeus:
    """Zeus's client's requests, on one connection, under ``/zeus/<token>``."""

    def __init__(self, server: AppServer, token: str | None = None) -> None:
        self.base = f"/zeus/{server.token if token is None else token}"
        self.server = server

    def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> tuple[int, Any]:
        data = None if body is None else json.dumps(body).encode()
        status, answer = http_request(self.server, method, self.base + path, data)  # no header: as Zeus's client
        return status, json.loads(answer or b"null")

    def batch_size(self, job_id: str) -> tuple[int, Any]:
        return self.call("GET", "/jobs/batch_size?" + urllib.parse.urlencode({"job_id": job_id}))

    def report(self, trial: dict[str, Any], epoch: int, metric: float, time: float, energy: float) -> dict[str, Any]:
        body = {**trial, "time": time, "energy": energy, "metric": metric, "current_epoch": epoch}
        status, answer = self.call("POST", "/report", body)
        assert status == 200, answer
        return answer


def test_zeus_protocol_end_to_end(server: AppServer):
    """register (201, then 200) -> batch size -> reports -> stop and record -> PATCH; the token never logged."""
    zeus = Zeus(server)
    status, job = zeus.call("POST", "/jobs", JOB)
    assert status == 201 and job["job_id"] == "mnist-nightly" and job["gpu_model"] == JOB["gpu_model"]
    assert zeus.call("POST", "/jobs", JOB)[0] == 200  # the same spec again
    status, trial = zeus.batch_size("mnist-nightly")
    assert status == 200 and trial == {"job_id": "mnist-nightly", "batch_size": 64, "trial_number": 1}
    assert zeus.report(trial, 1, 0.5, 10.0, 2000.0) == {
        "stop_train": False,
        "converged": False,
        "message": "go on",
    }
    answer = zeus.report(trial, 2, 0.95, 20.0, 4000.0)
    assert answer["stop_train"] and answer["converged"]
    records = server.client().history("mnist-nightly")
    assert len(records) == 1  # told at the stop: Zeus's client tells nothing after it
    (rec,) = records
    assert rec["reached"] and rec["epochs"] == 2 and rec["time"] == 20.0 and rec["energy"] == 4000.0
    assert set(rec["reported"].split()) == {"time", "energy"} and rec["max_power"] == 300.0
    assert zeus.call("PATCH", "/trials", trial)[0] == 200  # the client's atexit: nothing more to record
    assert len(server.client().history("mnist-nightly")) == 1
    again = zeus.report(trial, 2, 0.95, 20.0, 4000.0)  # a repeat: the recorded answer, nothing twice
    assert again["stop_train"] and again["converged"]
    token = server.token
    assert not [line for line in server.lines if token in line]
    assert any("/zeus/report" in line for line in server.lines)


def test_zeus_patch_before_a_stop_is_a_failure_and_unknowns_are_refused(server: AppServer):
    zeus = Zeus(server)
    assert zeus.call("POST", "/jobs", JOB)[0] == 201
    _, trial = zeus.batch_size("mnist-nightly")
    zeus.report(trial, 1, 0.5, 10.0, 2000.0)
    assert zeus.call("PATCH", "/trials", trial)[0] == 200  # the script ended before any stop
    (rec,) = server.client().history("mnist-nightly")
    assert rec["stop_reason"] == "crashed" and "PATCH /trials" in rec["message"]
    result = {"time": 20.0, "energy": 4000.0, "metric": 0.5, "current_epoch": 2}
    status, body = zeus.call("POST", "/report", {**trial, **result, "batch_size": 32})
    assert status == 422 and body["field"] == "body.batch_size"
    status, body = zeus.call("POST", "/report", {**trial, **result, "trial_number": 9})
    assert status == 404 and body["code"] == "unknown_trial"
    assert zeus.batch_size("nope")[0] == 404
    assert zeus.call("POST", "/jobs", {**JOB, "job_id": "other-1"})[0] == 422  # not under its prefix
    assert zeus.call("POST", "/jobs", {**JOB, "target_metric": 0.8})[0] == 409  # a conflicting spec
    assert Zeus(server, token="not-the-token").call("POST", "/jobs", JOB)[0] == 401


def test_zeus_register_without_an_id_makes_one_and_delete_keeps_the_history(server: AppServer):
    zeus = Zeus(server)
    status, job = zeus.call("POST", "/jobs", {**JOB, "job_id": None})
    name = job["job_id"]
    assert status == 201 and name.startswith("mnist-") and name != "mnist-nightly"
    assert zeus.call("DELETE", "/jobs?job_id=" + name)[0] == 200
    assert name not in server.client().request("GET", "/v1/jobs")["jobs"]
    assert [p.name.split(".")[0] for p in (server.root / ".deleted").iterdir()] == [name]
    assert zeus.call("DELETE", "/jobs?job_id=" + name)[0] == 404


def test_a_server_trial_leaves_one_history_line_and_replay_passes(server: AppServer):
    """No trial directory stays behind a told server trial (its record has it all); replay is exact."""
    client = server.client()
    spec = "name: lean\nbatch_sizes: [8, 16, 32]\ndefault_batch_size: 16\ntarget_metric: 0.9\nmax_epochs: 4\nseed: 1\n"
    client.register("lean", spec)  # no `command`: the server launches nothing
    for i in range(4):
        a = client.ask("lean")
        client.heartbeat("lean", a["token"])
        client.report("lean", a["token"], 1, 0.5, 1.0, 100.0)
        if i == 3:
            client.fail("lean", a["token"], "boom")
        else:
            client.report("lean", a["token"], 2, 0.95, 2.0, 200.0)
            client.finish("lean", a["token"], time_s=2.0, energy_j=200.0)
    job = server.root / "lean"
    assert len(client.history("lean")) == 4
    assert sorted(p.name for p in job.iterdir() if not p.name.startswith(".")) == [
        "belief.json",  # what the engine believes after the last record, for the views (`zeus_run.rundir.belief`)
        "history.jsonl",
        "spec.yaml",
        "trials",
    ]
    assert list((job / "trials").iterdir()) == []
    assert (job / "history.jsonl").stat().st_size < 4 * 4096
    audit = zeus_run_cli("replay", job)
    assert audit.returncode == 0, audit.stdout + audit.stderr
    assert "registered on a zeus-run server without a command" in (job / "spec.yaml").read_text()
