"""The fast lane (`zeus_run.server._lane`): a trial's well-formed requests skip FastAPI, and every request gets
the answer it gets through FastAPI, byte for byte where the answer does not hold a clock or a fresh token."""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest

from zeus_run.server._app import create_app
from zeus_run.server._gate import Gate
from zeus_run.server._jobs import JobService
from zeus_run.server._root import ServerRoot

TOKEN = "t" * 24
SPEC = """
name: lane
command: ["python", "train.py"]
batch_sizes: [8, 16, 32]
default_batch_size: 16
target_metric: 0.9
max_epochs: 5
recurrences: 3
lease: 600
energy: {source: estimate, watts: 100, basis: wall-time}
"""
#: Keys of an answer that hold a clock, a fresh token or what follows from them.
_VARYING = re.compile(r"[0-9a-f]{16,}|\d+\.\d+(e[-+]?\d+)?")


class Driver:
    """Calls an ASGI app in-process (one event loop for the whole test) and counts the requests that reach
    FastAPI behind the gate."""

    def __init__(self, app: Gate) -> None:
        self.app = app
        self.reached_fastapi = 0
        self.left_to_fastapi: list[str] = []
        self.headers: list[list[tuple[bytes, bytes]]] = []  # of each answer, but its length
        inner = app.app

        async def counted(scope: Any, receive: Any, send: Any) -> None:
            self.reached_fastapi += 1
            await inner(scope, receive, send)

        app.app = counted

    async def __call__(
        self, method: str, path: str, body: bytes = b"", headers: tuple[tuple[bytes, bytes], ...] = ()
    ) -> tuple[int, bytes]:
        sent: list[dict[str, Any]] = []
        done = False

        async def receive() -> dict[str, Any]:
            nonlocal done
            if done:
                await asyncio.sleep(3600)
            done = True
            return {"type": "http.request", "body": body, "more_body": False}

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        raw = path.encode()
        scope = {
            "type": "http",
            "method": method,
            "path": re.sub(r"%2[fF]", "/", path),
            "raw_path": raw,
            "query_string": b"",
            "headers": [(b"authorization", b"Bearer " + TOKEN.encode()), *headers],
            "http_version": "1.1",
            "scheme": "http",
            "server": ("127.0.0.1", 1),
            "client": ("127.0.0.1", 2),
            "root_path": "",
        }
        await self.app(scope, receive, send)  # type: ignore[arg-type]
        start = next(m for m in sent if m["type"] == "http.response.start")
        self.headers.append(sorted((k, v) for k, v in start["headers"] if k != b"content-length"))
        return start["status"], b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")


Script = Callable[[Driver], Coroutine[Any, Any, list[tuple[str, int, bytes]]]]


def drive(
    root: Path, script: Script, fast_lane: bool, headers: list[list[tuple[bytes, bytes]]] | None = None
) -> tuple[list[tuple[str, int, bytes]], list[str]]:
    """The script's answers, and the steps FastAPI answered (the answers' headers added to ``headers``)."""
    server_root = ServerRoot(root)
    try:
        driver = Driver(create_app(JobService(server_root), TOKEN, fast_lane=fast_lane))
        answers = asyncio.run(script(driver))
        if headers is not None:
            headers.extend(driver.headers)
        return answers, driver.left_to_fastapi
    finally:
        server_root.close()


async def a_job_with_every_case(call: Driver) -> list[tuple[str, int, bytes]]:
    """Good requests and refusals of each kind the trial routes give, in one job's life."""
    out: list[tuple[str, int, bytes]] = []

    async def step(name: str, method: str, path: str, body: bytes = b"", key: bytes | None = None) -> bytes:
        headers = ((b"idempotency-key", key),) if key is not None else ()
        before = call.reached_fastapi
        status, answer = await call(method, path, body, headers)
        out.append((name, status, answer))
        if call.reached_fastapi > before:
            call.left_to_fastapi.append(name)
        return answer

    assert (await call("PUT", "/v1/jobs/lane", json.dumps({"spec": SPEC}).encode()))[0] == 200
    jobs = "/v1/jobs/lane/trials"
    await step("ask, unknown job", "POST", "/v1/jobs/nope/trials")
    await step("ask, hidden job", "POST", "/v1/jobs/.hidden/trials")
    await step("ask, escaped slash", "POST", "/v1/jobs/..%2Fx/trials")
    await step("ask, not JSON", "POST", jobs, b"{")
    await step("ask, unknown field", "POST", jobs, b'{"hots": "a"}')
    await step("ask, bad key", "POST", jobs, b"", key=b"\x01" * 3)
    first = json.loads(await step("ask", "POST", jobs, b"", key=b"ask-1"))
    await step("ask, the same key again", "POST", jobs, b"", key=b"ask-1")
    trial = f"{jobs}/{first['token']}"
    await step("report, unknown token", "POST", f"{jobs}/no-such-token/epochs", b'{"epoch": 1, "metric": 0.1}')
    await step("report, epoch 0", "POST", f"{trial}/epochs", b'{"epoch": 0, "metric": 0.1}')
    await step("report, no metric", "POST", f"{trial}/epochs", b'{"epoch": 1}')
    await step("report, a list", "POST", f"{trial}/epochs", b"[1, 0.1]")
    await step("report, NaN energy", "POST", f"{trial}/epochs", b'{"epoch": 1, "metric": 0.1, "energy": NaN}')
    await step("report 1", "POST", f"{trial}/epochs", b'{"epoch": 1, "metric": 0.1, "time": 1, "energy": 50}', b"r1")
    await step("report 1 again", "POST", f"{trial}/epochs", b'{"epoch": 1, "metric": 0.1, "time": 1, "energy": 50}')
    await step("report 2", "POST", f"{trial}/epochs", b'{"epoch": 2, "metric": 0.2, "time": 2, "energy": 100}')
    await step("report 1 after 2", "POST", f"{trial}/epochs", b'{"epoch": 1, "metric": 0.3, "time": 3}')
    await step("report 3, key of 1", "POST", f"{trial}/epochs", b'{"epoch": 3, "metric": 0.3}', b"r1")
    await step("report, other route", "POST", f"{trial}/epoch", b'{"epoch": 3, "metric": 0.3}')
    await step("finish, bad exit code", "POST", f"{trial}/finish", b'{"exit_code": 999}')
    await step("finish", "POST", f"{trial}/finish", b'{"time": 3.0, "energy": 150.0}')
    await step("finish again", "POST", f"{trial}/finish", b"{}")
    await step("report after finish", "POST", f"{trial}/epochs", b'{"epoch": 3, "metric": 0.3}')
    second = json.loads(await step("ask with a host", "POST", jobs, b'{"host": "node-1"}'))
    await step("fail, no message", "POST", f"{jobs}/{second['token']}/fail", b"{}")
    await step("fail", "POST", f"{jobs}/{second['token']}/fail", b'{"message": "CUDA out of memory", "exit_code": 1}')
    await step("fail, GET", "GET", f"{jobs}/{second['token']}/fail")
    return out


def _comparable(answer: bytes, tokens: list[str]) -> str:
    text = answer.decode()
    for token in tokens:
        text = text.replace(token, "TOKEN").replace(token[:6], "TOKEN")
    return _VARYING.sub("N", text)


def test_the_lane_gives_fastapis_answers(tmp_path):
    headers: tuple[list[Any], list[Any]] = ([], [])
    lane, via_lane = drive(tmp_path / "lane", a_job_with_every_case, True, headers[0])
    slow, via_fastapi = drive(tmp_path / "fastapi", a_job_with_every_case, False, headers[1])
    assert headers[0] == headers[1]
    assert [(name, status) for name, status, _ in lane] == [(name, status) for name, status, _ in slow]
    statuses = {name: status for name, status, _ in lane}
    assert statuses["ask"] == statuses["report 2"] == statuses["finish"] == statuses["fail"] == 200
    assert statuses["report 1 after 2"] == 409 and statuses["report 3, key of 1"] == 409
    assert {statuses["report, no metric"], statuses["report, NaN energy"], statuses["fail, no message"]} == {422}
    tokens = [json.loads(body)["token"] for name, _, body in lane + slow if name.startswith("ask") and b"token" in body]
    assert len(tokens) == 6
    for (name, _, mine), (_, _, theirs) in zip(lane, slow, strict=True):
        assert _comparable(mine, tokens) == _comparable(theirs, tokens), name
    assert via_fastapi == [name for name, _, _ in slow]
    # the lane answered the well-formed trial requests (refusals by the job included), FastAPI the rest
    assert via_lane == [
        "ask, escaped slash",
        "ask, not JSON",
        "ask, unknown field",
        "report, epoch 0",
        "report, no metric",
        "report, a list",
        "report, NaN energy",
        "report, other route",
        "finish, bad exit code",
        "fail, no message",
        "fail, GET",
    ]


def test_a_fault_in_the_lane_is_a_500_logged_once(tmp_path, caplog):
    server_root = ServerRoot(tmp_path / "root")
    service = JobService(server_root)

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("disk on fire")

    service.report = broken
    driver = Driver(create_app(service, TOKEN))

    async def script(call: Driver) -> tuple[int, bytes]:
        await call("PUT", "/v1/jobs/lane", json.dumps({"spec": SPEC}).encode())
        asked = json.loads((await call("POST", "/v1/jobs/lane/trials"))[1])
        return await call("POST", f"/v1/jobs/lane/trials/{asked['token']}/epochs", b'{"epoch": 1, "metric": 0.5}')

    try:
        with caplog.at_level(logging.INFO):
            status, body = asyncio.run(script(driver))
    finally:
        server_root.close()
    assert status == 500
    answer = json.loads(body)
    assert answer["code"] == "internal" and "disk on fire" not in answer["error"]
    logged = [r for r in caplog.records if r.exc_info]
    assert len(logged) == 1 and "disk on fire" in str(logged[0].exc_info[1])
    assert driver.reached_fastapi == 1  # the PUT; the ask and the report were the lane's


@pytest.mark.parametrize("fast_lane", [True, False])
def test_a_refusal_is_one_line_in_the_log_either_way(tmp_path, caplog, fast_lane):
    async def script(call: Driver) -> list[tuple[str, int, bytes]]:
        await call("PUT", "/v1/jobs/lane", json.dumps({"spec": SPEC}).encode())
        return [("unknown", *(await call("POST", "/v1/jobs/lane/trials/abcdefghij/finish", b"{}")))]

    with caplog.at_level(logging.INFO, logger="zeus_run.server.access"):
        ((_, status, _),), _ = drive(tmp_path / "root", script, fast_lane)
    assert status == 404
    lines = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
    assert lines == ["POST /v1/jobs/lane/trials/abcdef~/finish refused: 404 " + lines[0].split(" 404 ", 1)[1]]
    assert not any(r.exc_info for r in caplog.records)
