"""The server's client on its own (`zeus_run.remote`): against a stdlib HTTP stub on a port it picks itself.

The flows through a real ``zeus-run serve`` are in tests/server; these pin the client's own rules: its paths,
its token, its errors, its retries with one idempotency key, and that it needs nothing beyond the standard
library.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from zeus_run.remote import ServerClient, ServerError, job_path, read_token


class _Stub:
    """Answers each request with the next (status, body) of ``answers``, and keeps what it was sent."""

    def __init__(self, answers: list[tuple[int, object]]) -> None:
        self.answers = answers
        self.seen: list[tuple[str, str, dict[str, str], bytes]] = []


@pytest.fixture
def stub() -> Iterator[tuple[ThreadingHTTPServer, _Stub]]:
    state = _Stub([])

    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            state.seen.append((self.command, self.path, dict(self.headers), body))
            status, payload = state.answers.pop(0)
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_PUT = do_DELETE = _answer

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)  # a port of its own: two checkouts never meet
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server, state
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def _client(server: ThreadingHTTPServer, token: str | None = "tok", retry_s: float = 30.0) -> ServerClient:
    host, port = server.server_address[:2]
    return ServerClient(f"http://{host!s}:{port}", token, retry_s=retry_s)


def test_job_paths_quote_every_part():
    assert job_path("my job/1", "trials", "t?") == "/v1/jobs/my%20job%2F1/trials/t%3F"


def test_the_token_comes_from_the_argument_then_the_environment_then_the_file(tmp_path, monkeypatch):
    f = tmp_path / "token"
    f.write_text("from-file\n")
    monkeypatch.delenv("ZEUS_SERVER_TOKEN", raising=False)
    assert read_token(None, str(f)) == "from-file"
    monkeypatch.setenv("ZEUS_SERVER_TOKEN", " from-env ")
    assert read_token(None, str(f)) == "from-env"
    assert read_token(" given ", str(f)) == "given"
    monkeypatch.delenv("ZEUS_SERVER_TOKEN")
    with pytest.raises(ServerError, match="Cannot read the server token file"):
        read_token(None, str(tmp_path / "missing"))


def test_a_request_carries_the_token_and_an_error_keeps_the_server_fields(stub):
    server, state = stub
    state.answers += [
        (200, {"status": "ok"}),
        (409, {"error": "spec conflict", "code": "spec_conflict", "field": "body.spec.eta"}),
    ]
    client = _client(server)
    assert client.health() == {"status": "ok"}
    with pytest.raises(ServerError) as err:
        client.register("j", "name: j")
    assert (err.value.status, err.value.code, err.value.field) == (409, "spec_conflict", "body.spec.eta")
    (_, path, headers, _), (method, path2, headers2, body) = state.seen
    assert path == "/v1/health" and headers["Authorization"] == "Bearer tok"
    assert (method, path2) == ("PUT", "/v1/jobs/j") and headers2["Authorization"] == "Bearer tok"
    assert json.loads(body)["spec"] == "name: j"
    client.close()


def test_a_retried_request_repeats_its_idempotency_key(stub):
    server, state = stub
    state.answers += [(503, {"error": "restarting"}), (200, {"ok": True})]
    client = _client(server)
    assert client.request("POST", job_path("j", "trials"), {"host": "h"}, key="k-1") == {"ok": True}
    keys = [headers.get("Idempotency-Key") for _, _, headers, _ in state.seen]
    assert keys == ["k-1", "k-1"]
    client.close()


def test_an_unreachable_server_is_an_error_that_names_the_timeout(stub):
    server, state = stub
    state.answers += [(503, {"error": "down"})] * 50
    client = _client(server, retry_s=0.0)
    with pytest.raises(ServerError, match=r"unreachable .*ZEUS_SERVER_TIMEOUT"):
        client.health()
    client.close()


def test_a_url_that_is_not_http_is_refused():
    with pytest.raises(ServerError, match="is not an http"):
        ServerClient("ftp://somewhere")


def test_the_client_needs_only_the_standard_library():
    code = (
        "import sys; before = set(sys.modules); import zeus_run.remote; "
        "print(sorted({m.split('.')[0] for m in set(sys.modules) - before} - set(sys.stdlib_module_names) - {'zeus_run'}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr
