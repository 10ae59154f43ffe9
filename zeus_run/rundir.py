"""The run directory: one per job, holding everything a person needs to audit it.

Layout::

    runs/<job>/
      spec.yaml          the resolved spec the run was started with
      history.jsonl      one JSON record per trial (append-only)
      trials/r0003-t01/  per trial: output.log (stdout+stderr), events.jsonl
      running.json       present only while a trial runs (crash marker)
      .lock              advisory lock held by the running launcher
"""

from __future__ import annotations

import errno
import fcntl
import json
import logging
import os
import shutil
from pathlib import Path
from typing import Any

import yaml

from zeus_run.errors import RunDirError
from zeus_run.history import HISTORY_NAME, HistoryStore
from zeus_run.spec import DECISION_FIELDS, JobSpec

logger = logging.getLogger(__name__)

SPEC_NAME = "spec.yaml"
RUNNING_NAME = "running.json"
LOCK_NAME = ".lock"
MIN_FREE_BYTES = 1 << 20


class RunDir:
    """An opened, locked run directory."""

    def __init__(self, path: Path, lock_fd: int) -> None:
        self.path = path
        self._lock_fd = lock_fd
        self.history = HistoryStore(path / HISTORY_NAME)

    @classmethod
    def open(cls, path: str | Path) -> RunDir:
        """Create (if needed) and lock a run directory.

        Raises:
            RunDirError: It cannot be created or written, or another launcher holds it.
        """
        p = Path(path)
        try:
            p.mkdir(parents=True, exist_ok=True)
            (p / "trials").mkdir(exist_ok=True)
        except OSError as exc:
            raise RunDirError(
                f"Cannot create run directory {str(p)!r}: {exc.strerror or exc}. "
                "Choose a writable location with `run_dir` in the spec or --run-dir."
            ) from exc
        check_writable(p)
        lock_path = p / LOCK_NAME
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            holder = _read_pid(fd)
            os.close(fd)
            if exc.errno in (errno.EAGAIN, errno.EACCES):
                raise RunDirError(
                    f"Run directory {str(p)!r} is in use by another zeus-run launcher (pid {holder}). "
                    "Wait for it to finish, stop it, or use a different --run-dir."
                ) from None
            raise
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        return cls(p, fd)

    def close(self) -> None:
        """Release the lock."""
        if self._lock_fd >= 0:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            os.close(self._lock_fd)
            self._lock_fd = -1

    def __enter__(self) -> RunDir:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- spec --------------------------------------------------------------------
    @property
    def spec_path(self) -> Path:
        return self.path / SPEC_NAME

    def stored_spec(self) -> dict[str, Any] | None:
        """The resolved spec saved when the run started, if any."""
        if not self.spec_path.exists():
            return None
        return yaml.safe_load(self.spec_path.read_text(encoding="utf-8"))

    def save_spec(self, spec: JobSpec) -> None:
        """Write the resolved spec (atomically)."""
        header = "# Resolved job spec zeus-run started this run with (every default filled in).\n"
        atomic_write(self.spec_path, header + yaml.safe_dump(spec.to_dict(), sort_keys=False))

    # -- the in-flight marker ----------------------------------------------------
    def mark_running(self, info: dict[str, Any]) -> None:
        atomic_write(self.path / RUNNING_NAME, json.dumps(info, indent=1) + "\n")

    def running(self) -> dict[str, Any] | None:
        p = self.path / RUNNING_NAME
        if not p.exists():
            return None
        try:
            return json.loads(p.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}

    def clear_running(self) -> None:
        try:
            os.remove(self.path / RUNNING_NAME)
        except FileNotFoundError:
            pass

    def trial_dir(self, recurrence: int, attempt: int) -> Path:
        d = self.path / "trials" / f"r{recurrence:04d}-t{attempt:02d}"
        d.mkdir(parents=True, exist_ok=True)
        return d


def spec_differences(stored: dict[str, Any], spec: JobSpec) -> list[str]:
    """Decision-relevant settings that differ between a stored and a new spec."""
    new = spec.to_dict()
    out = []
    for key in DECISION_FIELDS:
        old_v, new_v = stored.get(key), new.get(key)
        if isinstance(old_v, dict) and isinstance(new_v, dict):
            for sub in sorted(set(old_v) | set(new_v)):
                if old_v.get(sub) != new_v.get(sub):
                    out.append(f"{key}.{sub}: {old_v.get(sub)!r} -> {new_v.get(sub)!r}")
        elif old_v != new_v:
            out.append(f"{key}: {old_v!r} -> {new_v!r}")
    return out


def check_writable(path: Path) -> None:
    """Fail early if a trial's results could not be saved.

    Raises:
        RunDirError: The directory is not writable or the disk is (nearly) full.
    """
    probe = path / ".write-probe"
    try:
        with open(probe, "wb") as f:
            f.write(b"ok")
            f.flush()
            os.fsync(f.fileno())
        os.remove(probe)
    except OSError as exc:
        raise RunDirError(
            f"Run directory {str(path)!r} is not writable: {exc.strerror or exc}. "
            "Fix its permissions or free space, or choose another with --run-dir."
        ) from exc
    free = shutil.disk_usage(path).free
    if free < MIN_FREE_BYTES:
        raise RunDirError(
            f"Run directory {str(path)!r} has only {free} bytes free. Free some disk space, then run the same command to resume."
        )


def atomic_write(path: Path, text: str) -> None:
    """Write a file via a temporary file and ``os.replace``."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _read_pid(fd: int) -> str:
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        return os.read(fd, 32).decode().strip() or "unknown"
    except OSError:
        return "unknown"
