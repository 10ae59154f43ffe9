"""The server as an operator runs it: quiet 4xx on a kept-alive connection, the documented API, tokens out of the
log, a clean stop, and a client that says at once which server it cannot reach."""

from __future__ import annotations

import http.client
import json
import logging
import re
import signal
import socket

import pytest

from tests.server.helpers import ServerProcess, http_exchange, http_request
from tests.server.test_security import TRIAL_SPEC
from tests.slurm_helpers import wait_for
from zeus_run.remote import ServerClient, ServerError


def request(conn: http.client.HTTPConnection, token: str, method: str, path: str, body: bytes | None = None):
    conn.request(method, path, body=body, headers={"Authorization": f"Bearer {token}"})
    resp = conn.getresponse()
    data = resp.read()
    assert not resp.will_close, f"{method} {path}: the server closed the connection ({resp.status})"
    return resp.status, json.loads(data) if data else {}


def test_every_4xx_keeps_the_connection_and_logs_no_traceback(real_server):
    server = real_server  # a kept-alive connection: a socket (the one test of this module on the real server)
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=120)
    token = server.token
    spec = json.dumps({"spec": TRIAL_SPEC.replace("lease: 1", "lease: 600")}).encode()
    seen = {}
    status, body = request(conn, token, "PUT", "/v1/jobs/.hidden", spec)
    seen[body["code"]] = status
    status, body = request(conn, token, "PUT", "/v1/jobs/x", b'{"spec": "name: x\\nbatch_sizes: []\\n"}')
    seen[body["code"]] = status
    assert request(conn, token, "PUT", "/v1/jobs/leases", spec)[0] == 200
    sock = conn.sock
    status, asked = request(conn, token, "POST", "/v1/jobs/leases/trials", b"{}")
    assert status == 200
    status, body = request(conn, token, "POST", "/v1/jobs/leases/trials", b"{}")  # concurrency 1
    seen[body["code"]] = status
    status, body = request(conn, token, "POST", "/v1/jobs/leases/trials/no-such-token/finish", b"{}")
    seen[body["code"]] = status
    trial = f"/v1/jobs/leases/trials/{asked['token']}"
    assert request(conn, token, "POST", f"{trial}/epochs", b'{"epoch": 1, "metric": 0.95}')[1]["converged"]
    assert request(conn, token, "POST", f"{trial}/finish", b"{}")[0] == 200
    status, body = request(conn, token, "POST", f"{trial}/finish", b"{}")
    seen[body["code"]] = status
    status, body = request(conn, token, "POST", "/v1/jobs/leases/trials", b"{}")
    seen[body["code"]] = status
    assert seen == {
        "bad_job_name": 400,
        "invalid_spec": 422,
        "busy": 409,
        "unknown_trial": 404,
        "already_told": 409,
        "job_complete": 409,
    }
    assert request(conn, token, "GET", "/v1/jobs") == (200, {"jobs": ["leases"]})  # a good request after them
    assert conn.sock is sock  # the one connection throughout
    conn.close()
    log = "".join(server.lines)
    assert "Traceback" not in log and "ERROR" not in log
    assert len(re.findall(r"refused: 4\d\d", log)) >= 5  # one line per refusal (-v)


def test_error_texts_speak_http_and_name_no_server_path(server):
    client = server.client()
    client.register("leases", TRIAL_SPEC.replace("lease: 1", "lease: 600"))
    client.ask("leases")
    texts = []
    for call in (
        lambda: client.ask("leases", wait_s=0),
        lambda: client.finish("leases", "no-such-token"),
        lambda: client.register("leases", TRIAL_SPEC.replace("target_metric: 0.9", "target_metric: 0.8")),
        lambda: client.register("bad", "name: bad\nbatch_sizes: []\n"),
    ):
        with pytest.raises(ServerError) as exc:
            call()
        texts.append(str(exc.value))
    for text in texts:
        assert str(server.root) not in text and "exit code" not in text, text
    assert "'leases' is busy" in texts[0]
    assert "target_metric" in texts[2]


def test_the_openapi_document_declares_the_bearer_scheme_and_the_answers(server):
    status, raw = http_request(server, "GET", "/v1/openapi.json", headers=[("Authorization", f"Bearer {server.token}")])
    assert status == 200
    schema = json.loads(raw)
    assert schema["components"]["securitySchemes"]["bearer"] == {
        "type": "http",
        "scheme": "bearer",
        "description": schema["components"]["securitySchemes"]["bearer"]["description"],
    }
    assert schema["security"] == [{"bearer": []}] and schema["paths"]["/v1/health"]["get"]["security"] == []

    def answer(path: str, method: str = "post") -> str:
        return schema["paths"][path][method]["responses"]["200"]["content"]["application/json"]["schema"]["$ref"]

    assert answer("/v1/jobs/{job}/trials").endswith("/AskAnswer")
    assert answer("/v1/jobs/{job}/trials/{token}/finish").endswith("/TrialRecord")
    assert answer("/v1/jobs/{job}/trials/{token}/fail").endswith("/TrialRecord")
    assert answer("/v1/jobs/{job}/trials/{token}", "delete").endswith("/TrialRecord")
    assert "batch_size" in schema["components"]["schemas"]["AskAnswer"]["properties"]
    params = schema["paths"]["/v1/jobs/{job}/trials/{token}/finish"]["post"]["parameters"]
    assert any(p["name"] == "Idempotency-Key" and p["in"] == "header" for p in params)
    # /docs: one page from the package, no script or style from elsewhere, readable without the token
    status, headers, body = http_exchange(server, "GET", "/docs")
    page = body.decode()
    assert status == 200 and headers["content-type"].startswith("text/html")
    assert "/v1/openapi.json" in page and "<script" in page
    assert not re.search(r"<(script|link)[^>]+(src|href)=", page) and "cdn" not in page.lower()
    assert "http://" not in page and "https://" not in page


def test_the_access_log_shows_the_job_and_a_short_trial_id_never_the_token(server):
    client = server.client()
    client.register("leases", TRIAL_SPEC.replace("lease: 1", "lease: 600"))
    asked = client.ask("leases")
    client.report("leases", asked["token"], 1, 0.5, 1.0, 1.0)
    client.heartbeat("leases", asked["token"])
    want = f"/v1/jobs/leases/trials/{asked['token'][:6]}~/heartbeat"
    # The access line is written after the answer: wait until the server's output holds it.
    wait_for(lambda: want in "".join(server.lines), what="the heartbeat's access line")
    log = "".join(server.lines)
    assert asked["token"] not in log and server.token not in log
    assert f"/v1/jobs/leases/trials/{asked['token'][:6]}~/epochs" in log


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_stops_the_server_with_a_line_and_exit_0(tmp_path, sig):
    proc = ServerProcess(tmp_path / "root")
    proc.wait_ready()
    proc.proc.send_signal(sig)
    assert proc.exit_code() == 0
    assert f"stopped ({sig.name})" in "".join(proc.lines)


def test_the_client_says_at_once_which_server_it_cannot_reach_and_gives_up_after_zeus_server_timeout(
    monkeypatch, caplog
):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    monkeypatch.setenv("ZEUS_SERVER_TIMEOUT", "0.5")
    client = ServerClient(f"http://127.0.0.1:{port}", "t")
    assert client.retry_s == 0.5
    with caplog.at_level(logging.INFO, logger="zeus_run.remote"), pytest.raises(ServerError) as exc:
        client.report("job", "tok", 1, 0.5, 1.0, 1.0)
    assert exc.value.status == 0 and "ZEUS_SERVER_TIMEOUT" in str(exc.value)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, warnings  # once, however many retries
    assert f"http://127.0.0.1:{port}" in warnings[0] and "ConnectionRefusedError" in warnings[0]
    monkeypatch.setenv("ZEUS_SERVER_TIMEOUT", "soon")
    with pytest.raises(ServerError, match="ZEUS_SERVER_TIMEOUT"):
        ServerClient(f"http://127.0.0.1:{port}", "t")


def test_delete_releases_a_lost_ask_as_infrastructure(server):
    client = server.client()
    client.register("leases", TRIAL_SPEC.replace("lease: 1", "lease: 600"))
    lost = client.ask("leases")
    with pytest.raises(ServerError) as busy:
        client.ask("leases", wait_s=0)
    assert busy.value.code == "busy"
    record = client.cancel("leases", lost["token"])
    assert record["stop_reason"] == "infrastructure" and not record["observed"]
    assert "DELETE" in record["message"]
    again = client.ask("leases")
    assert (again["recurrence"], again["try"]) == (1, 2)
    with pytest.raises(ServerError) as twice:
        client.cancel("leases", lost["token"])
    assert (twice.value.status, twice.value.code) == (409, "already_told")
    with pytest.raises(ServerError) as unknown:
        client.cancel("leases", "no-such-token")
    assert (unknown.value.status, unknown.value.code) == (404, "unknown_trial")
    with pytest.raises(ServerError) as late:
        client.report("leases", lost["token"], 1, 0.5, 1.0, 1.0)
    assert late.value.status == 410


def test_a_real_fault_is_a_500_and_its_traceback_is_logged_once(tmp_path, caplog):
    """Driven in-process through the ASGI interface: a route whose call raises something that is no library
    error."""
    import asyncio

    from zeus_run.server._app import create_app
    from zeus_run.server._jobs import JobService
    from zeus_run.server._root import ServerRoot

    root = ServerRoot(tmp_path / "root")
    service = JobService(root)

    def broken() -> list[str]:
        raise RuntimeError("disk on fire")

    service.jobs = broken  # type: ignore[method-assign]
    app = create_app(service, "t" * 20)
    sent: list[dict] = []

    async def receive() -> dict:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "method": "GET",
        "path": "/v1/jobs",
        "raw_path": b"/v1/jobs",
        "query_string": b"",
        "headers": [(b"authorization", b"Bearer " + b"t" * 20)],
        "http_version": "1.1",
        "scheme": "http",
        "server": ("127.0.0.1", 1),
        "client": ("127.0.0.1", 2),
        "root_path": "",
    }
    try:
        with caplog.at_level(logging.INFO):
            asyncio.run(app(scope, receive, send))  # type: ignore[arg-type]
    finally:
        root.close()
    assert sent[0]["status"] == 500
    body = json.loads(b"".join(m.get("body", b"") for m in sent[1:]))
    assert body["code"] == "internal" and "disk on fire" not in body["error"]
    logged = [r for r in caplog.records if r.exc_info]
    assert len(logged) == 1 and "disk on fire" in str(logged[0].exc_info[1])
