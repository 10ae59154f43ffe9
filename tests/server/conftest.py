"""Fixtures of the server tests: a running server on a temporary root (skipped without the server extra)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.server.helpers import ServerProcess

pytest.importorskip("fastapi", reason="the server extra is not installed: pip install -e '.[server]'")
pytest.importorskip("uvicorn", reason="the server extra is not installed: pip install -e '.[server]'")


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    """``zeus-run serve`` on loopback, a free port and ``tmp_path/root``; stopped after the test."""
    proc = ServerProcess(tmp_path / "root")
    proc.wait_ready()
    yield proc
    proc.stop()
