"""The client's transport against a real server: retry with backoff through a restart, one log line per request."""

from __future__ import annotations

import threading

from tests.server.helpers import ServerProcess
from tests.slurm_helpers import wait_for


def test_a_client_retries_while_the_server_is_down_and_goes_on_after_a_restart(tmp_path):
    first = ServerProcess(tmp_path / "root")
    port, token = first.port, first.token
    client = first.client()
    assert client.request("GET", "/v1/jobs") == {"jobs": []}
    first.kill()
    answers: list[object] = []
    asked = threading.Thread(target=lambda: answers.append(client.request("GET", "/v1/jobs")))
    asked.start()
    # the client is now retrying against a closed port; a new server takes the port (and the root) back,
    # with the same token (a token file this time, as a restarted Deployment would have)
    (tmp_path / "tok").write_text(token)
    second = ServerProcess(tmp_path / "root", port=port, extra=("--token-file", str(tmp_path / "tok")))
    try:
        asked.join(180)
        assert answers == [{"jobs": []}]
    finally:
        second.stop()


def test_the_log_has_one_line_per_request_with_v(real_server):
    server = real_server  # the log a process writes (its stderr is no terminal)
    client = server.client()
    client.request("GET", "/v1/jobs")
    client.request("GET", "/v1/health")

    def logged() -> bool:
        lines = [ln for ln in server.lines if "/v1/" in ln]
        return any("GET /v1/jobs 200" in ln for ln in lines) and any("GET /v1/health 200" in ln for ln in lines)

    wait_for(logged, what="the two access lines")
    assert all("\x1b[" not in ln for ln in server.lines)  # plain text: no colour codes in a log file
