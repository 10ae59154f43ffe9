"""A real ``zeus-run serve`` process on loopback for the server tests (free port, temporary root)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

from zeus_run.remote import ServerClient

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
