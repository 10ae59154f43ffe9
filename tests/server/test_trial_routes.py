"""A trial's routes (ask, epoch reports, finish, fail), driven in-process through the one request path (the gate,
then FastAPI's routes): each good request and each kind of refusal, its status, and one log line a refusal."""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

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
    root: Path, script: Script, headers: list[list[tuple[bytes, bytes]]] | None = None
) -> tuple[list[tuple[str, int, bytes]], list[str]]:
    """The script's answers, and the steps FastAPI answered (the answers' headers added to ``headers``)."""
    server_root = ServerRoot(root)
    try:
        driver = Driver(create_app(JobService(server_root), TOKEN))
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


def test_every_trial_request_takes_the_one_path_and_gets_its_status(tmp_path):
    answers, via_fastapi = drive(tmp_path / "root", a_job_with_every_case)
    assert via_fastapi == [name for name, _, _ in answers]  # no request is answered past the routes
    statuses = {name: status for name, status, _ in answers}
    assert statuses["ask"] == statuses["report 2"] == statuses["finish"] == statuses["fail"] == 200
    assert statuses["ask, the same key again"] == 200 and statuses["report 1 again"] == 200
    assert statuses["report 1 after 2"] == 409 and statuses["report 3, key of 1"] == 409
    assert {statuses["report, no metric"], statuses["report, NaN energy"], statuses["fail, no message"]} == {422}
    assert statuses["ask, unknown field"] == statuses["report, a list"] == 422
    assert statuses["ask, bad key"] == 400 and statuses["report, unknown token"] == 404
    assert statuses["ask, unknown job"] == 404 and statuses["report, other route"] == 404
    asked = [json.loads(body) for name, _, body in answers if name in ("ask", "ask, the same key again")]
    assert asked[0]["token"] == asked[1]["token"]  # the retry is answered as the ask it repeats


def test_a_fault_is_a_500_logged_once(tmp_path, caplog):
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
    assert driver.reached_fastapi == 3  # the PUT, the ask and the report: one path


def test_a_refusal_is_one_line_in_the_log(tmp_path, caplog):
    async def script(call: Driver) -> list[tuple[str, int, bytes]]:
        await call("PUT", "/v1/jobs/lane", json.dumps({"spec": SPEC}).encode())
        return [("unknown", *(await call("POST", "/v1/jobs/lane/trials/abcdefghij/finish", b"{}")))]

    with caplog.at_level(logging.INFO, logger="zeus_run.server.access"):
        ((_, status, _),), _ = drive(tmp_path / "root", script)
    assert status == 404
    lines = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
    assert lines == ["POST /v1/jobs/lane/trials/abcdef~/finish refused: 404 " + lines[0].split(" 404 ", 1)[1]]
    assert not any(r.exc_info for r in caplog.records)
