"""Real services the integration tests start themselves: an MLflow tracking server and a Pushgateway.

Each listens on a free loopback port, runs in its own process group (stopped
with it), and is waited for by polling its health endpoint, never by sleeping
a fixed time. Where the program is not installed the test skips and says how
to install it (scripts/install_integrations.sh).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.export.helpers import free_port

INSTALL = "run scripts/install_integrations.sh (Debian packages and the mlflow extra)"
#: How long a service may take to answer its health check on a loaded machine (unit: s).
START_LIMIT = 180.0


def need(program: str) -> str:
    """The path of ``program``, or skip the test naming it."""
    path = shutil.which(program)
    if path is None:
        pytest.skip(f"{program} is not installed: {INSTALL}")
    return path


def wait_ready(url: str, proc: subprocess.Popen, log: Path) -> None:
    """Poll ``url`` until it answers 200; fail with the log if the process exits or the limit passes."""
    deadline = time.monotonic() + START_LIMIT
    while True:
        with contextlib.suppress(OSError), urllib.request.urlopen(url, timeout=5) as r:
            if r.status == 200:
                return
        if proc.poll() is not None:
            pytest.fail(f"{proc.args} exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        if time.monotonic() > deadline:
            pytest.fail(f"{url} not ready after {START_LIMIT:.0f} s:\n{log.read_text()[-3000:]}")
        time.sleep(0.2)


class Service:
    """A started server: its URL, and ``stop()``/``start()`` to take it down and bring it back."""

    def __init__(self, argv: list[str], url: str, health: str, log: Path) -> None:
        self.argv, self.url, self.health, self.log = argv, url, health, log
        self.proc: subprocess.Popen | None = None

    def start(self) -> Service:
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(self.argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        wait_ready(self.url + self.health, self.proc, self.log)
        return self

    def stop(self) -> None:
        if self.proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self.proc = None
        # Down means refusing connections (its port stays ours: nothing else was started on it).
        with contextlib.suppress(OSError), urllib.request.urlopen(self.url + self.health, timeout=5):
            pytest.fail(f"{self.url} still answers after it was stopped")


@contextlib.contextmanager
def mlflow_server(tmp: Path) -> Iterator[Service]:
    """``mlflow server`` on a sqlite store in ``tmp``."""
    pytest.importorskip("mlflow", reason=f"mlflow is not installed: {INSTALL}")
    port = free_port()
    argv = [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", f"sqlite:///{tmp / 'server.db'}"]
    argv += ["--default-artifact-root", str(tmp / "artifacts"), "--host", "127.0.0.1", "--port", str(port), "-w", "1"]
    service = Service(argv, f"http://127.0.0.1:{port}", "/health", tmp / "mlflow-server.log")
    try:
        yield service.start()
    finally:
        service.stop()


@contextlib.contextmanager
def pushgateway(tmp: Path) -> Iterator[Service]:
    """Debian's prometheus-pushgateway, its metrics in a file of this test's own.

    Debian's build persists to /var/lib/prometheus/pushgateway.data by default: every run (and another
    checkout's) would read back the last one's series.
    """
    program = need("prometheus-pushgateway")
    port = free_port()
    argv = [program, f"--web.listen-address=127.0.0.1:{port}", f"--persistence.file={tmp / 'pushgateway.data'}"]
    service = Service(argv, f"http://127.0.0.1:{port}", "/-/ready", tmp / "pushgateway.log")
    try:
        yield service.start()
    finally:
        service.stop()
