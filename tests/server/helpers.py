"""A real ``zeus-run serve`` process on loopback for the server tests (free port, temporary root)."""

from __future__ import annotations

import asyncio
import http.client
import logging
import os
import re
import signal
import subprocess
import sys
import threading
import urllib.parse
from pathlib import Path
from typing import Any

from zeus_run.remote import ServerClient
from zeus_run.server._logs import SafeFormatter

REPO = Path(__file__).resolve().parents[2]
_LISTENING = re.compile(r"listening on (http://\S+)")
#: How long a server may take to start on a loaded machine (unit: s); waited for, never asserted on.
START_TIMEOUT_S = 120


class ServerProcess:
    """``zeus-run serve --root ROOT`` in a child process; its stderr is kept in `lines`."""

    def __init__(
        self,
        root: Path,
        port: int = 0,
        extra: tuple[str, ...] = (),
        env: dict[str, str] | None = None,
        umask: int = -1,
    ):
        self.root = root
        cmd = [sys.executable, "-m", "zeus_run", "serve", "--root", str(root), "--port", str(port), "-v", *extra]
        self.proc = subprocess.Popen(
            cmd,
            cwd=REPO,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})},
            umask=umask,  # -1: the test's own
        )
        self.lines: list[str] = []
        self._url: list[str] = []
        self._ready = threading.Event()
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line)
            m = _LISTENING.search(line)
            if m and not self._url:
                self._url.append(m.group(1))
                self._ready.set()
        self._ready.set()  # exited: wait_ready sees no URL

    def wait_ready(self) -> str:
        """The server's URL once it listens.

        Raises:
            AssertionError: It exited (or stayed silent) first; its log is in the message.
        """
        self._ready.wait(START_TIMEOUT_S)
        assert self._url, f"server did not start (exit {self.proc.poll()}):\n{''.join(self.lines)}"
        return self._url[0]

    @property
    def url(self) -> str:
        return self.wait_ready()

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])

    @property
    def token(self) -> str:
        return (self.root / ".serve.token").read_text().strip()

    def client(self, token: str | None = None, retry_s: float = 120.0) -> ServerClient:
        return ServerClient(self.url, self.token if token is None else token, retry_s=retry_s)

    def exit_code(self, timeout: float = START_TIMEOUT_S) -> int:
        """Wait for the process to end by itself; its exit code."""
        code = self.proc.wait(timeout)
        self._ready.wait(5)
        return code

    def kill(self) -> None:
        """SIGKILL: nothing gets a chance to flush or clean up."""
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.kill()


def http_request(
    server: ServerProcess | AppServer,
    method: str,
    path: str,
    body: bytes | None = None,
    headers: list[tuple[str, str]] | tuple[tuple[str, str], ...] = (),
) -> tuple[int, bytes]:
    """One request with the headers exactly as given (repeats allowed): the status and the body.

    On a `ServerProcess` over a socket (http.client); on an `AppServer` through the ASGI interface.
    """
    status, _, answer = http_exchange(server, method, path, body, headers)
    return status, answer


def http_exchange(
    server: ServerProcess | AppServer,
    method: str,
    path: str,
    body: bytes | None = None,
    headers: list[tuple[str, str]] | tuple[tuple[str, str], ...] = (),
) -> tuple[int, dict[str, str], bytes]:
    """`http_request`, with the answer's headers (names in lower case)."""
    if isinstance(server, AppServer):
        return server.exchange(method, path, body or b"", headers)
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
    try:
        conn.putrequest(method, path, skip_accept_encoding=True)
        for name, value in headers:
            conn.putheader(name, value)
        if body is not None:
            conn.putheader("Content-Length", str(len(body)))
        conn.endheaders(body)
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


class _Lines(logging.Handler):
    """The server's log lines, as ``zeus-run serve -v`` writes them (its formatter, wrapped as serve wraps it)."""

    def __init__(self, lines: list[str], token: str) -> None:
        super().__init__(logging.DEBUG)
        self.lines = lines
        self.setFormatter(
            SafeFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s", "%Y-%m-%d %H:%M:%S"), (token,))
        )

    def emit(self, record: logging.LogRecord) -> None:
        if record.name.startswith("zeus_run.remote"):
            return  # the client's lines are the test's, not the server's
        self.lines.append(self.format(record) + "\n")


class AppServer:
    """The server's application (``zeus-run serve``'s, on a temporary root) driven in-process through its ASGI
    interface on one event loop of its own: no process, no socket. The routes, the gate and the jobs are the ones
    ``serve`` runs; what needs a socket or a process (the protocol's deadlines, workers, restarts, signals) is
    tested on a `ServerProcess`.

    ``client()`` is a `ServerClient` whose requests go through the ASGI interface; `lines` holds the log lines
    the server would write with ``-v``.
    """

    url = "http://in-process.invalid"

    def __init__(self, root: Path, allow_paths: tuple[Path, ...] = ()) -> None:
        from zeus_run.server._app import create_app
        from zeus_run.server._jobs import JobService
        from zeus_run.server._root import LOCAL_TOKEN_NAME, ServerRoot
        from zeus_run.server._security import local_token

        self.root = root
        self._root = ServerRoot(root)
        token, _, _ = local_token(self._root.path, LOCAL_TOKEN_NAME)
        self.app = create_app(JobService(self._root, allowed=tuple(allow_paths)), token)
        self.lines: list[str] = []
        self._handler = _Lines(self.lines, token)
        self._logger = logging.getLogger("zeus_run")
        self._level = self._logger.level
        self._logger.addHandler(self._handler)
        self._logger.setLevel(logging.DEBUG)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="in-process server", daemon=True)
        self._thread.start()

    @property
    def token(self) -> str:
        return (self.root / ".serve.token").read_text().strip()

    def client(self, token: str | None = None, retry_s: float = 120.0) -> ServerClient:
        return _AppClient(self, self.token if token is None else token, retry_s)

    def exchange(
        self,
        method: str,
        path: str,
        body: bytes = b"",
        headers: list[tuple[str, str]] | tuple[tuple[str, str], ...] = (),
    ) -> tuple[int, dict[str, str], bytes]:
        """One request through the ASGI interface, as uvicorn would hand it over: the status, the headers (names in
        lower case) and the body."""
        future = asyncio.run_coroutine_threadsafe(self._call(method, path, body, headers), self._loop)
        return future.result(START_TIMEOUT_S)

    async def _call(
        self, method: str, target: str, body: bytes, headers: list[tuple[str, str]] | tuple[tuple[str, str], ...]
    ) -> tuple[int, dict[str, str], bytes]:
        sent: list[dict[str, Any]] = []
        answered = asyncio.Event()
        given = False

        async def receive() -> dict[str, Any]:
            nonlocal given
            if given:
                await answered.wait()
                return {"type": "http.disconnect"}
            given = True
            return {"type": "http.request", "body": body, "more_body": False}

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)
            if message["type"] == "http.response.body" and not message.get("more_body", False):
                answered.set()

        raw_path, _, query = target.partition("?")
        raw = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers]
        if body and not any(k == b"content-length" for k, _ in raw):
            raw.append((b"content-length", str(len(body)).encode()))
        scope = {
            "type": "http",
            "asgi": {"version": "3.0", "spec_version": "2.3"},
            "method": method,
            "path": urllib.parse.unquote(raw_path),
            "raw_path": raw_path.encode("latin-1"),
            "query_string": query.encode("latin-1"),
            "headers": [(b"host", b"127.0.0.1"), *raw],
            "http_version": "1.1",
            "scheme": "http",
            "server": ("127.0.0.1", 7787),
            "client": ("127.0.0.1", 40000),
            "root_path": "",
        }
        await self.app(scope, receive, send)  # type: ignore[arg-type]
        start = next(m for m in sent if m["type"] == "http.response.start")
        answer = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
        return start["status"], {k.decode().lower(): v.decode() for k, v in start["headers"]}, answer

    def stop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(30)
        self._loop.close()
        self._logger.removeHandler(self._handler)
        self._logger.setLevel(self._level)
        self._root.close()


class _AppClient(ServerClient):
    """A `ServerClient` whose requests reach an `AppServer` through the ASGI interface instead of a socket."""

    def __init__(self, server: AppServer, token: str, retry_s: float) -> None:
        super().__init__(server.url, token, retry_s=retry_s)
        self._server = server

    def _send(self, method: str, path: str, data: bytes | None, headers: dict[str, str]) -> tuple[int, bytes]:
        status, _, answer = self._server.exchange(method, path, data or b"", list(headers.items()))
        return status, answer
