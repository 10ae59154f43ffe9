"""Fixtures of the server tests (skipped without the server extra).

``server``: the server's application on a temporary root, driven in-process through its ASGI interface
(`tests.server.helpers.AppServer`): the routes, the gate and the jobs with no process or socket.
``real_server``: one ``zeus-run serve`` process per test module, for what needs a socket or a process (the
protocol, the log a process writes, clients that connect by URL); its tests use job names of their own.
Workers, restarts and signals start their own `tests.server.helpers.ServerProcess`.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.server.helpers import AppServer, ServerProcess

pytest.importorskip("fastapi", reason="the server extra is not installed: pip install -e '.[server]'")
pytest.importorskip("uvicorn", reason="the server extra is not installed: pip install -e '.[server]'")


@pytest.fixture
def server(tmp_path: Path) -> Iterator[AppServer]:
    """The server's application on ``tmp_path/root``, in-process; stopped after the test."""
    app = AppServer(tmp_path / "root")
    yield app
    app.stop()


@pytest.fixture(scope="module")
def real_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """``zeus-run serve`` on loopback, a free port and a temporary root, shared by the tests of a module."""
    proc = ServerProcess(tmp_path_factory.mktemp("served") / "root")
    proc.wait_ready()
    yield proc
    proc.stop()
