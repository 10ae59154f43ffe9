"""Append-only JSON Lines history of trials.

One line per trial. An append takes an exclusive lock, writes the line in one
``write``, flushes and fsyncs before returning, so a record that `append`
returned for survives a crash. Reading tolerates a torn final line (a crash
mid-write) with a warning; a bad line in the middle is corruption and an error.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
from collections.abc import Iterable
from pathlib import Path

from zeus_run.errors import HistoryError
from zeus_run.records import TrialRecord

logger = logging.getLogger(__name__)

HISTORY_NAME = "history.jsonl"


class HistoryReadResult(list):
    """The records of a history file, plus what was skipped.

    Attributes:
        torn: The torn final line that was ignored, if any.
    """

    torn: str | None = None


def read_history(path: str | Path) -> HistoryReadResult:
    """Read every record of a history file.

    Args:
        path: A ``history.jsonl`` file, or a run directory holding one.

    Raises:
        HistoryError: The file is missing, or a line other than the last is not a record.
    """
    p = resolve_history_path(path)
    try:
        raw = p.read_bytes()
    except OSError as exc:
        raise HistoryError(f"Cannot read history {str(p)!r}: {exc}.") from exc
    return parse_history(raw, str(p))


def resolve_history_path(path: str | Path) -> Path:
    """The history file of a run directory, or the path itself if it is a file."""
    p = Path(path)
    if p.is_dir():
        p = p / HISTORY_NAME
    if not p.is_file():
        raise HistoryError(
            f"No history at {str(p)!r}. Pass a run directory (e.g. runs/demo) or its history.jsonl; "
            "a run directory gets its history once the first trial finishes."
        )
    return p


def parse_history(raw: bytes, label: str = "<history>") -> HistoryReadResult:
    """Parse history bytes. See `read_history`."""
    out = HistoryReadResult()
    lines = raw.split(b"\n")
    complete_end = raw.endswith(b"\n")
    # lines[-1] is b"" when the file ends with a newline.
    body = lines[:-1] if complete_end else lines
    last = len(body) - 1
    for i, line in enumerate(body):
        if not line.strip():
            continue
        try:
            out.append(TrialRecord.from_json(json.loads(line)))
        except (ValueError, UnicodeDecodeError) as exc:
            if i == last:
                out.torn = line.decode("utf-8", "replace")
                logger.warning(
                    "%s: ignoring a torn or corrupt last line (%d bytes; %s); earlier %d record(s) kept",
                    label,
                    len(line),
                    exc,
                    len(out),
                )
                break
            raise HistoryError(
                f"{label}: line {i + 1} is not a valid trial record ({exc}). The history is corrupt in the "
                "middle; restore it from a backup or move it aside to start a new run."
            ) from None
    return out


class HistoryStore:
    """Appends records to one history file, durably."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def read(self) -> HistoryReadResult:
        """All records so far (empty if the file does not exist yet)."""
        if not self.path.exists():
            return HistoryReadResult()
        return read_history(self.path)

    def repair_tail(self) -> bool:
        """Cut a torn final line so the next append starts on a fresh line.

        The cut bytes are kept in ``history.jsonl.torn`` for inspection.

        Returns:
            Whether anything was cut.
        """
        if not self.path.exists():
            return False
        with open(self.path, "rb+") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            data = f.read()
            if parse_history(data, str(self.path)).torn is None:
                return False
            cut = data.rstrip(b"\n").rfind(b"\n") + 1
            fragment = data[cut:]
            with open(str(self.path) + ".torn", "ab") as keep:
                keep.write(fragment + b"\n")
            f.truncate(cut)
            f.flush()
            os.fsync(f.fileno())
        logger.warning(
            "cut a torn last line (%d bytes) from %s; kept in %s.torn", len(fragment), self.path, self.path.name
        )
        return True

    def append(self, record: TrialRecord) -> None:
        """Append one record: lock, one write, flush, fsync.

        Raises:
            HistoryError: The write failed (disk full, permissions); nothing partial is left behind.
        """
        line = (json.dumps(record.to_json(), separators=(",", ":"), allow_nan=False) + "\n").encode()
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        except OSError as exc:
            raise HistoryError(f"Cannot open history {str(self.path)!r} for writing: {exc}.") from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            size = os.fstat(fd).st_size
            try:
                written = os.write(fd, line)
                if written != len(line):
                    raise OSError(f"short write ({written} of {len(line)} bytes)")
                os.fsync(fd)
            except OSError as exc:
                # Leave no half record behind.
                os.ftruncate(fd, size)
                raise HistoryError(
                    f"Could not write to {str(self.path)!r}: {exc}. Free disk space or fix permissions, "
                    "then run the same command again to resume."
                ) from exc
        finally:
            os.close(fd)

    def extend(self, records: Iterable[TrialRecord]) -> None:
        """Append several records (one durable append each)."""
        for r in records:
            self.append(r)
