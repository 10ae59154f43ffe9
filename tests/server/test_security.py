"""The server's security rules against a real server process: tokens, body limit, bad input, job names, one server per root."""

from __future__ import annotations

import http.client
import json
import os
from pathlib import Path

import pytest

from tests.server.helpers import AppServer, ServerProcess, http_request
from zeus_run.errors import BUSY_EXIT_CODE
from zeus_run.remote import ServerClient, ServerError


def raw(
    server: AppServer | ServerProcess,
    method: str,
    path: str,
    body: bytes | None = None,
    token: str | None = "",
    headers: dict[str, str] | None = None,
) -> tuple[int, dict]:
    """One request as sent, no client-side checks; the status and the JSON answer."""
    h = dict(headers or {})
    if token is not None:
        h["Authorization"] = f"Bearer {server.token if token == '' else token}"
    status, data = http_request(server, method, path, body, list(h.items()))
    return status, json.loads(data) if data else {}


def test_no_token_and_wrong_token_get_401_and_health_needs_none(server):
    assert raw(server, "GET", "/v1/health", token=None)[0] == 200
    for token in (None, "wrong-token", server.token + "x", server.token[:-1]):
        status, body = raw(server, "GET", "/v1/jobs", token=token)
        assert status == 401, token
        assert body["code"] == "unauthorized" and "Bearer" in body["error"]
    status, _ = raw(server, "GET", "/v1/jobs", token=None, headers={"Authorization": f"Basic {server.token}"})
    assert status == 401
    # the schema and unknown paths are behind the token too
    assert raw(server, "GET", "/v1/openapi.json", token=None)[0] == 401
    assert raw(server, "GET", "/v1/nothing-here", token=None)[0] == 401
    assert raw(server, "GET", "/v1/jobs")[0] == 200
    with pytest.raises(ServerError) as exc:
        server.client(token="wrong-token").request("GET", "/v1/jobs")
    assert exc.value.status == 401


def test_a_body_over_the_limit_gets_413(server):
    big = b'{"spec": "' + b"a" * 70_000 + b'"}'
    status, body = raw(server, "PUT", "/v1/jobs/demo", big)
    assert status == 413 and body["code"] == "body_too_large"
    assert not (server.root / "demo").exists()


def test_a_chunked_body_over_the_limit_gets_413_as_it_comes(real_server):
    """A chunked body (no Content-Length) is counted as it comes: over a socket, as a client sends it."""
    server = real_server
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
    chunks = (b"x" * 8192 for _ in range(20))
    conn.request(
        "PUT",
        "/v1/jobs/chunked",
        body=chunks,
        encode_chunked=True,
        headers={"Authorization": f"Bearer {server.token}", "Transfer-Encoding": "chunked"},
    )
    assert conn.getresponse().status == 413
    conn.close()
    assert not (server.root / "chunked").exists()


def test_malformed_json_unknown_fields_and_out_of_range_values_get_4xx_naming_the_field(server):
    path = "/v1/jobs/demo/trials/some-token/epochs"
    status, body = raw(server, "POST", path, b'{"epoch": 1, "metric": ')
    assert status == 400 and body["code"] == "malformed_json" and "not valid JSON" in body["error"]
    status, body = raw(server, "POST", path, b'{"epoch": 1, "metric": 0.5, "bogus": 1}')
    assert status == 422 and body["code"] == "unknown_field" and body["field"] == "body.bogus"
    assert "body.bogus: unknown field" in body["error"]
    status, body = raw(server, "POST", path, b'{"epoch": 0, "metric": 0.5}')
    assert status == 422 and body["field"] == "body.epoch" and "body.epoch = 0" in body["error"]
    status, body = raw(server, "POST", path, b'{"epoch": 1, "metric": 0.5, "energy": -3}')
    assert status == 422 and body["field"] == "body.energy"
    status, body = raw(server, "POST", path, b'{"epoch": 1, "metric": NaN}')
    assert status == 422 and body["field"] == "body.metric"
    status, body = raw(server, "POST", path, b"[1, 2]")
    assert status == 422 and body["field"] == "body"
    status, body = raw(server, "PUT", "/v1/jobs/demo", b'{"spec": "name: demo\\nbatch_sizes: []\\n"}')
    assert status == 422 and body["code"] == "invalid_spec"
    # never a traceback, never a 500
    for status, body in [raw(server, "POST", path, b"\xff\xfe"), raw(server, "PUT", "/v1/jobs/demo", b"{}")]:
        assert 400 <= status < 500 and "Traceback" not in body["error"]


@pytest.mark.parametrize(
    "path",
    [
        "/v1/jobs/..%2F..%2Fetc",
        "/v1/jobs/..%2Fescape",
        "/v1/jobs/%2E%2E",
        "/v1/jobs/.hidden",
        "/v1/jobs/a%2Fb",
        "/v1/jobs/x%00y",
        "/v1/jobs/" + "n" * 101,
    ],
)
def test_a_job_name_that_would_leave_the_root_gets_400(server, path):
    status, body = raw(server, "PUT", path, b'{"spec": "name: x\\n"}')
    assert status == 400, body
    assert body["code"] == "bad_job_name" and "job name" in body["error"].lower()
    assert sorted(p.name for p in server.root.parent.iterdir()) == ["root"]
    assert sorted(p.name for p in server.root.iterdir()) == [".serve.lock", ".serve.token"]


def test_a_job_name_that_is_a_link_is_refused(server, tmp_path):
    (tmp_path / "elsewhere").mkdir()
    os.symlink(tmp_path / "elsewhere", server.root / "linked")
    status, body = raw(server, "PUT", "/v1/jobs/linked", b'{"spec": "name: linked\\n"}')
    assert status == 400 and "link" in body["error"]
    assert not list((tmp_path / "elsewhere").iterdir())


def test_a_second_server_on_the_same_root_is_refused(real_server):
    server = real_server
    second = ServerProcess(server.root)
    assert second.exit_code() == BUSY_EXIT_CODE
    log = "".join(second.lines)
    assert "in use by another zeus-run server" in log and f"pid {server.proc.pid}" in log
    assert "Traceback" not in log
    assert raw(server, "GET", "/v1/jobs")[0] == 200  # the first one goes on


def test_without_a_token_file_only_loopback_may_be_bound(tmp_path):
    refused = ServerProcess(tmp_path / "root", extra=("--host", "0.0.0.0"))
    assert refused.exit_code() == 2
    assert "--token-file" in "".join(refused.lines)
    assert not (tmp_path / "root").exists()


def test_a_token_file_sets_the_token(tmp_path):
    token_file = tmp_path / "token"
    token_file.write_text("s3cret-token-of-enough-length\n")
    token_file.chmod(0o600)
    proc = ServerProcess(tmp_path / "root", extra=("--token-file", str(token_file)))
    try:
        url = proc.wait_ready()
        assert not (tmp_path / "root" / ".serve.token").exists()
        assert ServerClient(url, "s3cret-token-of-enough-length").request("GET", "/v1/jobs") == {"jobs": []}
        with pytest.raises(ServerError) as exc:
            ServerClient(url, "s3cret-token-of-enough-lengtH").request("GET", "/v1/jobs")
        assert exc.value.status == 401
    finally:
        proc.stop()
    (tmp_path / "short").write_text("abc\n")
    short = ServerProcess(tmp_path / "root2", extra=("--token-file", str(tmp_path / "short")))
    assert short.exit_code() == 2 and "16+ characters" in "".join(short.lines)


def test_the_openapi_schema_is_published(server):
    status, schema = raw(server, "GET", "/v1/openapi.json")
    assert status == 200 and schema["openapi"].startswith("3.")
    paths = set(schema["paths"])
    assert {
        "/v1/jobs/{job}",
        "/v1/jobs/{job}/trials",
        "/v1/jobs/{job}/trials/{token}/epochs",
        "/v1/jobs/{job}/trials/{token}/heartbeat",
        "/v1/jobs/{job}/trials/{token}/finish",
        "/v1/jobs/{job}/trials/{token}/fail",
        "/v1/jobs/{job}/history",
        "/v1/health",
    } <= paths
    report = schema["components"]["schemas"]["EpochReport"]
    assert report["additionalProperties"] is False and report["properties"]["epoch"]["minimum"] == 1


def test_the_client_gives_up_on_a_server_that_is_not_there(tmp_path):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(ServerError) as exc:
        ServerClient(f"http://127.0.0.1:{port}", "t", retry_s=0.3).request("GET", "/v1/jobs")
    assert exc.value.status == 0 and "unreachable" in str(exc.value)
    assert isinstance(tmp_path, Path)


TRIAL_SPEC = """
name: leases
command: ["python", "train.py"]
batch_sizes: [8, 16]
default_batch_size: 16
target_metric: 0.9
recurrences: 1
lease: 1
energy: {source: estimate, watts: 100, basis: wall-time}
"""


def test_trial_refusals_name_the_case_unknown_late_told_twice_and_complete(server):
    import time

    client = server.client()
    client.register("leases", TRIAL_SPEC)
    with pytest.raises(ServerError) as unknown:
        client.finish("leases", "no-such-token")
    assert (unknown.value.status, unknown.value.code) == (404, "unknown_trial")
    late = client.ask("leases")
    while time.time() <= late["expires_at"] + 0.05:  # the lease runs out: nothing renews it
        time.sleep(0.05)
    with pytest.raises(ServerError) as expired:
        client.finish("leases", late["token"], time_s=1.0, energy_j=10.0)
    assert (expired.value.status, expired.value.code) == (410, "lease_expired")
    retry = client.ask("leases")  # the same recurrence, asked again
    assert (retry["recurrence"], retry["try"]) == (1, 2)
    assert client.report("leases", retry["token"], 1, 0.95, 1.0, 10.0)["converged"]
    client.finish("leases", retry["token"], time_s=1.0, energy_j=10.0)
    with pytest.raises(ServerError) as twice:
        client.finish("leases", retry["token"], time_s=1.0, energy_j=10.0)
    assert (twice.value.status, twice.value.code) == (409, "already_told")
    with pytest.raises(ServerError) as done:
        client.ask("leases")  # its one recurrence reached the target
    assert (done.value.status, done.value.code) == (409, "job_complete")
    assert "All 1 recurrences of job 'leases' are done" in str(done.value)
