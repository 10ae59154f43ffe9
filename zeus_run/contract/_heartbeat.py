"""The heartbeat file: rewritten by whatever runs a trial, so those who wait for it know it lives.

The trial agent (`zeus_run.trial.agent`) rewrites it every second; under ask/tell its
modification time also renews the ask's lease (`zeus_run.asktell`), and the
`zeus_run.train.Trial` helper rewrites it when it runs under an ask without an
agent. Standard library only.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
from pathlib import Path


def write_heartbeat(path: str | os.PathLike[str]) -> None:
    """Rewrite the heartbeat file atomically: ``{"pid", "host", "time"}`` (raises OSError)."""
    p = Path(path)
    tmp = p.with_name(f".{p.name}.{os.getpid()}.tmp")
    with contextlib.suppress(FileNotFoundError):
        os.remove(tmp)  # left by a killed writer with the same pid
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "time": time.time()}) + "\n")
        os.replace(tmp, p)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise


def heartbeat_time(path: str | os.PathLike[str]) -> float | None:
    """When the heartbeat file was last rewritten (its modification time, Unix seconds), None if never."""
    try:
        return os.stat(path).st_mtime
    except OSError:
        return None
