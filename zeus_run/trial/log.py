"""A trial's output log: appended to without following links; a write that fails is reported, not raised."""

from __future__ import annotations

import logging
import os
from pathlib import Path

from zeus_run import _fs

logger = logging.getLogger(__name__)


class TrialLog:
    """The trial's output log. A write that fails (disk full) is reported once and logging stops; the trial goes on."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.error: str | None = None
        self._fd = -1
        self._relayed = False
        try:
            _fs.make_dirs(path.parent)
            self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            self._fail(exc)

    def hand_over(self) -> int:
        """The log's file descriptor, for the output's relay to write (`zeus_run.trial.output`): `write` writes
        nothing until `take_back`. -1 where the log could not be opened."""
        self._relayed = self._fd >= 0
        return self._fd

    def take_back(self) -> None:
        """The relay is done: `write` writes again."""
        self._relayed = False

    def failed(self, exc: OSError) -> None:
        """A write into the log failed elsewhere (the relay's): reported as one of ours."""
        self._fail(exc)

    def write(self, data: bytes) -> None:
        if self._relayed:
            return
        view = memoryview(data)
        while self._fd >= 0 and view:
            try:
                n = os.write(self._fd, view)
            except OSError as exc:
                self._fail(exc)
                return
            view = view[n:]

    def _fail(self, exc: OSError) -> None:
        self.error = f"could not write the trial's output to {str(self.path)!r} ({exc.strerror or exc}); the rest of its output was not logged"
        logger.warning("%s; the trial goes on", self.error)
        self.close()

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def log_tail(path: Path, limit: int = 1500) -> str:
    """The last ``limit`` bytes of a trial's log as text (``(no log)`` if it cannot be read)."""
    try:
        with _fs.open_read(path) as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(size - limit, 0))
            return f.read().decode("utf-8", "replace").strip()
    except OSError:
        return "(no log)"
