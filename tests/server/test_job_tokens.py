"""Per-job credentials against the server (its application in-process; `zeus-run serve tokens` beside it): a job's token acts on its own job only; the operator's on every job."""

from __future__ import annotations

import json

import pytest

from tests.factories import zeus_run_cli
from tests.server.helpers import AppServer, http_request
from tests.server.test_security import TRIAL_SPEC
from tests.slurm_helpers import wait_for
from zeus_run.remote import ServerClient, ServerError

SPEC = TRIAL_SPEC.replace("lease: 1", "lease: 600").replace("recurrences: 1", "recurrences: 5")


def spec_of(job: str) -> str:
    return SPEC.replace("name: leases", f"name: {job}")


def refused(call) -> ServerError:
    with pytest.raises(ServerError) as exc:
        call()
    return exc.value


def zeus(server: AppServer, token: str, method: str, path: str, body: dict | None = None) -> tuple[int, dict]:
    """One request on Zeus's route (the token in the path, as Zeus's client sends it)."""
    data = None if body is None else json.dumps(body).encode()
    status, raw = http_request(server, method, f"/zeus/{token}{path}", data, [("Content-Type", "application/json")])
    return status, json.loads(raw) if raw else {}


def test_each_job_token_acts_on_its_own_job_and_gets_403_on_the_other(server):
    operator = server.client()
    a = operator.register("job-a", spec_of("job-a"))
    b = operator.register("job-b", spec_of("job-b"))
    assert a["created"] and a["job_token"].startswith("zrj_") and a["token_id"]
    assert b["job_token"] != a["job_token"]
    assert operator.register("job-a", spec_of("job-a"))["job_token"] is None  # shown once
    ca, cb = server.client(a["job_token"]), server.client(b["job_token"])

    asked = {"job-a": ca.ask("job-a"), "job-b": cb.ask("job-b")}  # each asks on its own job
    for mine, other, theirs in ((ca, "job-b", "job-a"), (cb, "job-a", "job-b")):
        tok = asked[other]["token"]
        calls = {
            "ask": lambda c, j, t: c.ask(j, wait_s=0),
            "report": lambda c, j, t: c.report(j, t, 1, 0.5, 1.0, 1.0),
            "finish": lambda c, j, t: c.finish(j, t),
            "heartbeat": lambda c, j, t: c.heartbeat(j, t),
            "cancel": lambda c, j, t: c.cancel(j, t),
            "history": lambda c, j, t: c.history(j),
            "register": lambda c, j, t: c.register(j, spec_of(j)),
            "delete": lambda c, j, t: c.request("DELETE", f"/v1/jobs/{j}"),
        }
        for name, call in calls.items():
            exc = refused(lambda call=call, mine=mine, other=other, tok=tok: call(mine, other, tok))
            assert (exc.status, exc.code) == (403, "forbidden"), name
            assert repr(other) in str(exc) and repr(theirs) in str(exc)
        assert mine.request("GET", "/v1/jobs") == {"jobs": [theirs]}  # the listing shows only its job
        # its own job's deletion needs the operator's token too
        exc = refused(lambda mine=mine, theirs=theirs: mine.request("DELETE", f"/v1/jobs/{theirs}"))
        assert (exc.status, exc.code) == (403, "operator_only")
        status, body = zeus(server, mine._token, "DELETE", f"/jobs?job_id={other}")
        assert (status, body["code"]) == (403, "operator_only")
        status, body = zeus(server, mine._token, "GET", f"/jobs/batch_size?job_id={other}")
        assert (status, body["code"]) == (403, "forbidden")

    # both jobs survive, their trials go on with their own tokens
    for client, job in ((ca, "job-a"), (cb, "job-b")):
        tok = asked[job]["token"]
        assert client.report(job, tok, 1, 0.95, 1.0, 10.0)["converged"]
        assert client.finish(job, tok, time_s=1.0, energy_j=10.0)["reached"]
        assert [r["reached"] for r in client.history(job)] == [True]
    assert operator.request("GET", "/v1/jobs") == {"jobs": ["job-a", "job-b"]}
    assert (server.root / "job-a" / "history.jsonl").is_file() and (server.root / "job-b" / "history.jsonl").is_file()
    # the operator deletes; the job's token goes with it
    operator.request("DELETE", "/v1/jobs/job-b")
    assert operator.request("GET", "/v1/jobs") == {"jobs": ["job-a"]}
    assert refused(lambda: cb.history("job-b")).status == 401
    stored = (server.root / ".serve.tokens.json").read_text()
    assert a["job_token"] not in stored and a["token_id"] in stored  # only hashes are kept
    assert oct((server.root / ".serve.tokens.json").stat().st_mode & 0o777) == "0o600"


def test_serve_tokens_lists_rotates_and_revokes_on_a_running_server(server):
    operator = server.client()
    first = operator.register("job-a", spec_of("job-a"))["job_token"]
    old = server.client(first)
    assert old.request("GET", "/v1/jobs") == {"jobs": ["job-a"]}
    listed = zeus_run_cli("serve", "tokens", "list", "--root", str(server.root), "--format", "json")
    assert listed.returncode == 0, listed.stderr
    rows = json.loads(listed.stdout)
    assert [r["job"] for r in rows] == ["job-a"] and first not in listed.stdout

    rotated = zeus_run_cli("serve", "tokens", "rotate", "--root", str(server.root), "job-a")
    assert rotated.returncode == 0, rotated.stderr
    new = rotated.stdout.strip()
    assert new.startswith("zrj_") and new != first and "old token no longer works" in rotated.stderr
    assert server.client(new).request("GET", "/v1/jobs") == {"jobs": ["job-a"]}  # at once
    wait_for(lambda: _status(old) == 401, what="the rotated-out token refused")

    revoked = zeus_run_cli("serve", "tokens", "revoke", "--root", str(server.root), "job-a")
    assert revoked.returncode == 0, revoked.stderr
    wait_for(lambda: _status(server.client(new)) == 401, what="the revoked token refused")
    again = zeus_run_cli("serve", "tokens", "revoke", "--root", str(server.root), "job-a")
    assert again.returncode == 2 and "has no token" in again.stderr
    # the operator's next registration of a job without a token makes one
    assert operator.register("job-a", spec_of("job-a"))["job_token"].startswith("zrj_")
    log = "".join(server.lines)
    assert first not in log and new not in log


def test_a_token_made_for_a_name_registers_that_job_only(server):
    made = zeus_run_cli("serve", "tokens", "rotate", "--root", str(server.root), "zeus-job")
    assert made.returncode == 0 and "not registered yet" in made.stderr
    token = made.stdout.strip()
    spec = {
        "job_id": "zeus-job",
        "job_id_prefix": "zeus",
        "batch_sizes": [8, 16],
        "default_batch_size": 16,
        "target_metric": 0.9,
        "max_power": 300.0,
        "number_of_gpus": 1,
        "gpu_model": "test",
    }
    status, body = zeus(server, token, "POST", "/jobs", spec)
    assert status == 201 and body["job_id"] == "zeus-job" and "job_token" not in body
    status, body = zeus(server, token, "POST", "/jobs", {**spec, "job_id": "zeus-other"})
    assert (status, body["code"]) == (403, "forbidden")
    status, body = zeus(server, token, "POST", "/jobs", {**spec, "job_id": None})  # a fresh id: a new job
    assert (status, body["code"]) == (403, "forbidden")
    assert sorted(p.name for p in server.root.iterdir() if not p.name.startswith(".")) == ["zeus-job"]
    exc = refused(lambda: server.client(token).register("other", spec_of("other")))
    assert exc.status == 403
    # the operator's token registers any job on the Zeus route, and hands out its token there
    status, body = zeus(server, server.token, "POST", "/jobs", {**spec, "job_id": "zeus-two"})
    assert status == 201 and body["job_token"].startswith("zrj_")


def _status(client: ServerClient) -> int:
    try:
        client.request("GET", "/v1/jobs")
    except ServerError as exc:
        return exc.status
    return 200
