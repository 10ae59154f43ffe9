"""The connection guard (`zeus_run.server._protocol`) in-process, with its deadlines shortened: a trickled body is
cut off, a finished request has no deadline while the server works on it, and a connection over the cap is closed."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator

import pytest
import uvicorn

from zeus_run.server import _protocol

#: How long the test waits for the server to close a connection (unit: s); the deadlines here are 1 s.
WAIT_S = 30.0


async def slow_app(scope, receive, send) -> None:
    """Reads the whole body, then takes 2.5 s (longer than the deadlines) to answer."""
    if scope["type"] != "http":
        return
    more = True
    while more:
        message = await receive()
        if message["type"] != "http.request":
            return
        more = message.get("more_body", False)
    await asyncio.sleep(2.5)
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
    await send({"type": "http.response.body", "body": b"ok"})


@pytest.fixture
def port(monkeypatch) -> Iterator[int]:
    monkeypatch.setattr(_protocol, "HEADER_TIMEOUT_S", 1.0)
    monkeypatch.setattr(_protocol, "BODY_TIMEOUT_S", 1.0)
    monkeypatch.setattr(_protocol, "SWEEP_S", 0.2)
    monkeypatch.setattr(_protocol, "MAX_CONNECTIONS", 3)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    config = uvicorn.Config(slow_app, http=_protocol.GuardedProtocol, lifespan="off", log_config=None, loop="asyncio")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=lambda: asyncio.run(server.serve(sockets=[sock])), daemon=True)
    thread.start()
    deadline = time.monotonic() + WAIT_S
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.started
    yield sock.getsockname()[1]
    server.should_exit = True
    thread.join(WAIT_S)
    sock.close()


def closed_after(conn: socket.socket) -> float:
    """Seconds until the server closes ``conn`` (reading and dropping what it sends)."""
    t0 = time.monotonic()
    conn.settimeout(WAIT_S)
    while conn.recv(4096):
        pass
    return time.monotonic() - t0


def test_a_trickled_body_is_cut_off_and_a_finished_request_is_answered(port):
    trickle = socket.create_connection(("127.0.0.1", port))
    trickle.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n" + b"x" * 10)
    assert closed_after(trickle) < WAIT_S  # the body's deadline (1 s here) closed it
    trickle.close()
    whole = socket.create_connection(("127.0.0.1", port), timeout=WAIT_S)
    whole.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nhi")
    answer = b""
    while not answer.endswith(b"\r\n\r\nok"):  # the app takes 2.5 s, past both deadlines: none while it works
        chunk = whole.recv(4096)
        assert chunk, f"closed before the answer: {answer!r}"
        answer += chunk
    assert answer.startswith(b"HTTP/1.1 200")
    whole.close()


def test_a_connection_over_the_cap_is_closed_at_once(port, monkeypatch):
    monkeypatch.setattr(_protocol, "HEADER_TIMEOUT_S", 2 * WAIT_S)  # no deadline closes anything in this test
    held = [socket.create_connection(("127.0.0.1", port)) for _ in range(3)]
    for conn in held:
        conn.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n")  # half a request: held open until the header deadline
    extra = socket.create_connection(("127.0.0.1", port))
    assert closed_after(extra) < WAIT_S  # closed as soon as it opened, not by a deadline
    for conn in held:
        conn.close()
    extra.close()
