"""What a hostile or careless client meets: a clean log, strict types and physical bounds, deadlines on slow
requests, and answers in the job's terms (no path or interpreter of the server's)."""

from __future__ import annotations

import json
import socket
import sys
import time

import pytest

from tests.server.helpers import AppServer, ServerProcess, http_request
from tests.server.test_security import TRIAL_SPEC
from tests.slurm_helpers import wait_for
from zeus_run.remote import ServerError
from zeus_run.server._limits import HEADER_TIMEOUT_S

SPEC = TRIAL_SPEC.replace("lease: 1", "lease: 600").replace("recurrences: 1", "recurrences: 5")
#: The issue's bound: a connection that never finishes its headers is closed within this (unit: s).
CLOSED_WITHIN_S = 20.0


def send(server: AppServer | ServerProcess, method: str, path: str, body: bytes | None = None, headers=(), token=None):
    """One request with the headers exactly as given (repeats allowed); (status, JSON answer)."""
    given = [("Authorization", f"Bearer {token or server.token}"), *headers]
    status, raw = http_request(server, method, path, body or b"", given)
    return status, json.loads(raw) if raw else {}


def test_a_forged_line_or_escape_in_the_path_reaches_the_log_escaped(real_server):
    server = real_server  # the request line as sent on a socket, the log as the process writes it
    forged = "/v1/jobs/x%0A2026-01-01%2000:00:00%20INFO%20forged%20line%1B%5B31mred%E2%80%A8sep"
    for token in ("wrong-token", None):  # refused without a token, and answered with one
        conn = socket.create_connection(("127.0.0.1", server.port), timeout=60)
        auth = f"Authorization: Bearer {token or server.token}\r\n"
        conn.sendall(f"GET {forged} HTTP/1.1\r\nHost: x\r\n{auth}Connection: close\r\n\r\n".encode())
        while conn.recv(65536):
            pass
        conn.close()
    wait_for(lambda: sum("forged" in line for line in server.lines) >= 2, what="the two access lines")
    log = "".join(server.lines)
    assert "\x1b" not in log and "\u2028" not in log
    assert not [line for line in server.lines if line.startswith("2026-01-01")]  # no forged record
    assert "\\x0a2026-01-01 00:00:00 INFO forged line\\x1b[31mred\\u2028sep" in log


def test_no_token_in_the_log_after_refusals(server):
    operator = server.client()
    job_token = operator.register("leases", SPEC)["job_token"]
    client = server.client(job_token)
    told = client.ask("leases")
    assert client.report("leases", told["token"], 1, 0.95, 1.0, 10.0)["converged"]
    client.finish("leases", told["token"], time_s=1.0, energy_j=10.0)
    with pytest.raises(ServerError):
        client.finish("leases", told["token"])  # 409 already_told
    unknown = "0123456789abcdef01234567"
    with pytest.raises(ServerError):
        client.finish("leases", unknown)  # 404 unknown_trial
    cancelled = client.ask("leases")
    client.cancel("leases", cancelled["token"])
    with pytest.raises(ServerError):
        client.report("leases", cancelled["token"], 1, 0.5, 1.0, 1.0)  # 410 after the cancel
    wait_for(lambda: "refused: 410" in "".join(server.lines), what="the 410's refusal line")
    log = "".join(server.lines)
    assert "refused: 409" in log and "refused: 404" in log
    for secret in (told["token"], cancelled["token"], unknown, job_token, server.token):
        assert secret not in log, secret
    assert f"{told['token'][:6]}~" in log and "job-token:" in log  # short ids instead


@pytest.mark.parametrize(
    "body",
    [
        {"epoch": "1", "metric": 0.5},
        {"epoch": True, "metric": 0.5},
        {"epoch": 1.0, "metric": 0.5},
        {"epoch": 1, "metric": "0.5"},
        {"epoch": 1, "metric": 0.5, "time": 1.0, "energy": 1e308},
        {"epoch": 1, "metric": 0.5, "time": 1e308, "energy": 1.0},
        {"epoch": 1, "metric": 0.5, "time": 1.0, "energy": 1e9},  # 1 GJ in 1 s of a 100 W job
    ],
)
def test_mistyped_and_unphysical_reports_get_422_naming_the_field(server, body):
    client = server.client()
    client.register("leases", SPEC)
    asked = client.ask("leases")
    status, answer = send(server, "POST", f"/v1/jobs/leases/trials/{asked['token']}/epochs", json.dumps(body).encode())
    assert status == 422, answer
    assert answer["code"] == "invalid_field" and answer["field"] in {f"body.{k}" for k in body}
    assert not (server.root / "leases" / "trials" / "r0001-t01" / "events.jsonl").exists()  # nothing recorded
    assert client.report("leases", asked["token"], 1, 0.95, 1.0, 100.0)["converged"]  # a sound report goes on


def test_unphysical_tells_get_422_and_two_idempotency_keys_400(server):
    client = server.client()
    client.register("leases", SPEC)
    asked = client.ask("leases")
    path = f"/v1/jobs/leases/trials/{asked['token']}"
    for body in ({"energy": 1e308}, {"time": 2.0, "energy": 1e12}, {"exit_code": True}):
        status, answer = send(server, "POST", f"{path}/finish", json.dumps(body).encode())
        assert status == 422, (body, answer)
    keys = [("Idempotency-Key", "a" * 8), ("Idempotency-Key", "b" * 8)]
    for method, where, body in (
        ("POST", f"{path}/epochs", b'{"epoch": 1, "metric": 0.5}'),
        ("POST", "/v1/jobs/leases/trials", b"{}"),
        ("POST", f"{path}/finish", b"{}"),
    ):
        status, answer = send(server, method, where, body, headers=keys)
        assert (status, answer["code"], answer["field"]) == (400, "bad_idempotency_key", "header.Idempotency-Key")
    record = client.finish("leases", asked["token"], time_s=2.0, energy_j=200.0)
    assert record["energy"] == 200.0 and record["epochs"] == 0


def test_a_connection_that_never_finishes_its_headers_is_closed(real_server):
    server = real_server  # the protocol: a socket
    opened = []
    for first in (b"GET /v1/health HTTP/1.1\r\nHost: x\r\nX-Slow: ", b""):  # half a request, and nothing at all
        conn = socket.create_connection(("127.0.0.1", server.port), timeout=CLOSED_WITHIN_S)
        conn.sendall(first)
        opened.append((conn, time.monotonic()))
    for conn, since in opened:
        got = conn.recv(1024)  # b"": the server closed it (a timeout here raises and fails the test)
        waited = time.monotonic() - since
        conn.close()
        assert got == b"" and HEADER_TIMEOUT_S - 1 <= waited < CLOSED_WITHIN_S, waited
    assert send(server, "GET", "/v1/jobs")[0] == 200  # the server serves on
    wait_for(lambda: "did not arrive within" in "".join(server.lines), what="the closing's log line")


def test_an_ask_answer_names_no_server_path_or_interpreter(server, tmp_path):
    spec = SPEC.replace(
        'command: ["python", "train.py"]',
        'command: ["{python}", "train.py", "--log-dir", "{log_dir}", "--bs", "{batch_size}"]',
    ).replace("recurrences: 5", "recurrences: 5\nenv: {OUT: '{log_dir}/out'}")
    client = server.client()
    client.register("leases", spec)
    status, raw = send(server, "POST", "/v1/jobs/leases/trials", b"{}")
    assert status == 200
    text = json.dumps(raw)
    for server_side in (str(server.root), str(tmp_path), sys.executable):
        assert server_side not in text, server_side
    assert '"/' not in text  # no absolute path at all
    assert raw["workdir"] is None and raw["command"][0] == "{python}" and raw["command"][3] == "{log_dir}"
    assert (
        raw["env"]["OUT"] == "{log_dir}/out" and "ZEUS_RUN_DIR" not in raw["env"] and "ZEUS_LOG_DIR" not in raw["env"]
    )
    assert raw["env"]["ZEUS_BATCH_SIZE"] == str(raw["batch_size"]) and raw["run_dir"] == "leases"
    # the client fills in its own interpreter and directory
    client.cancel("leases", raw["token"])
    mine = client.ask("leases")
    import os

    assert mine["command"][:4] == [sys.executable, "train.py", "--log-dir", os.getcwd()]
    assert mine["workdir"] == os.getcwd() and mine["env"]["OUT"] == os.getcwd() + "/out"


def test_an_accounting_series_is_checked_at_registration(tmp_path):
    allowed = tmp_path / "grid"
    allowed.mkdir()
    (allowed / "carbon.csv").write_text("time,value\n2026-01-01T00:00:00Z,350\n")
    (allowed / "notes.txt").write_text('{"not": "a series"}\n')
    server = AppServer(tmp_path / "root", allow_paths=(allowed,))
    try:
        client = server.client()
        client.register("leases", SPEC)
        assert (server.root / "leases").is_dir()
        cases = {
            "history.jsonl": "one of the files zeus-run keeps",
            "./trials/x.csv": "one of the files zeus-run keeps",
            str(allowed / "notes.txt"): "timestamp,value rows",
            str(allowed / "missing.csv"): "Cannot read",
        }
        for value, why in cases.items():
            status, answer = send(
                server,
                "PUT",
                "/v1/jobs/leases",
                json.dumps({"spec": SPEC + f"accounting: {{carbon_g_per_kwh: '{value}'}}\n"}).encode(),
            )
            assert (status, answer["field"]) == (422, "body.spec.accounting.carbon_g_per_kwh"), answer
            assert why in answer["error"] and str(server.root) not in answer["error"]
        good = client.register("leases", SPEC + f"accounting: {{carbon_g_per_kwh: '{allowed / 'carbon.csv'}'}}\n")
        assert good["changed"] == ["accounting.carbon_g_per_kwh"]
    finally:
        server.stop()
