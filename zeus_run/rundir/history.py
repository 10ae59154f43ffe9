"""Append-only JSON Lines history of trials.

One line per trial. An append takes an exclusive lock, writes the line in one
``write``, flushes and fsyncs before returning, so a record that `append`
returned for survives a crash. If the write fails (disk full, file too large,
an immutable file) the file is cut back to where it was and the error names
the file and the reason: every earlier record stays intact.

Reading tolerates a torn final line (a crash mid-write: not valid JSON) with a
warning. Any other line that is not a trial record (garbage, or valid JSON
that is not a record) is corruption, reported with its line number, and so is
a record out of its place (`TrialOrder`: a line copied twice, or lines swapped
by hand), which would otherwise be folded, and appended after, as if zeus-run
had written it: every reader refuses it, the doors that append (run, ask,
tell, exec, the server) as `zeus-run replay` does. A last
record without its newline is completed before the next append, so records
are never glued together. Files are opened through `zeus_run._fs`: never
through a symbolic link.
"""

from __future__ import annotations

import errno
import fcntl
import json
import logging
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any, BinaryIO

from zeus_run import _fs
from zeus_run.errors import HistoryError
from zeus_run.records import TrialRecord
from zeus_run.rundir.tails import TAILS_NAME, attach, read_tails

logger = logging.getLogger(__name__)

HISTORY_NAME = "history.jsonl"


class HistoryReadResult(list):
    """The records of a history file, plus what was skipped.

    Attributes:
        torn: The torn final line that was ignored, if any.
    """

    torn: str | None = None


def read_history(path: str | Path, warn: bool = True) -> HistoryReadResult:
    """Read every record of a history file.

    Args:
        path: A ``history.jsonl`` file, or a run directory holding one.
        warn: Log a warning for a torn last line.

    Each record has its trial's tail after its tell attached (``tails.jsonl`` beside the file:
    `zeus_run.rundir.tails`).

    Raises:
        HistoryError: The file is missing or unreadable, or a line is not a record (torn last line aside) or is
            out of its place (`TrialOrder`).
    """
    p = resolve_history_path(path)
    try:
        with _fs.open_read(p) as f:
            raw = f.read()
    except OSError as exc:
        raise HistoryError(f"Cannot read history {str(p)!r}: {exc.strerror or exc}.") from exc
    records = parse_history(raw, str(p), warn)
    tails = read_tails(p.parent / TAILS_NAME) if os.path.lexists(p.parent / TAILS_NAME) else {}
    if tails:  # what processes spent after telling their trials (`zeus_run.rundir.tails`)
        records[:] = attach(records, tails)
    return records


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


def parse_history(
    raw: bytes, label: str = "<history>", warn: bool = True, order: TrialOrder | None = None
) -> HistoryReadResult:
    """Parse history bytes. See `read_history`.

    Args:
        raw: The file's bytes.
        label: Names the file in errors.
        warn: Log a warning for a torn last line.
        order: The records before ``raw`` (`TrialOrder`), which the records of ``raw`` extend; None: ``raw``
            is a whole history.
    """
    return _parse(raw, label, warn, TrialOrder() if order is None else order)


def _parse(raw: bytes, label: str, warn: bool, order: TrialOrder | None) -> HistoryReadResult:
    out = HistoryReadResult()
    lines: list[Any]  # str, or bytes where the file is not valid UTF-8
    try:  # decoded once, not line by line (a torn write may cut a character: then each line is decoded alone)
        lines = raw.decode("utf-8").split("\n")
        if lines[0].startswith("\ufeff"):  # a byte-order mark an editor wrote: read as json.loads of bytes reads it
            lines[0] = lines[0][1:]
    except UnicodeDecodeError:
        lines = raw.split(b"\n")
    complete_end = raw.endswith(b"\n")
    # lines[-1] is b"" when the file ends with a newline.
    body: list[Any] = lines[:-1] if complete_end else lines
    last = len(body) - 1
    for i, line in enumerate(body):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except (ValueError, RecursionError) as exc:  # also UnicodeDecodeError
            if i == last:  # a torn write: a record's first bytes are never valid JSON
                out.torn = line if isinstance(line, str) else line.decode("utf-8", "replace")
                if warn:
                    logger.warning(
                        "%s: ignoring a torn or corrupt last line (%d bytes; %s); earlier %d record(s) kept",
                        label,
                        len(line),
                        exc,
                        len(out),
                    )
                break
            raise _corrupt(label, i, f"not JSON: {exc}") from None
        try:
            record = TrialRecord.from_json(data)
        except ValueError as exc:
            raise _corrupt(label, i, str(exc)) from None
        if order is not None:
            order.add(record, i, label)
        out.append(record)
    return out


def parse_appended(
    raw: bytes, label: str = "<history>", order: TrialOrder | None = None
) -> tuple[HistoryReadResult, int]:
    """The records in the complete lines of ``raw`` (bytes appended to a history since an earlier read),
    and how many bytes of ``raw`` they take.

    A last line without its newline (still being written), or a last line that is no record
    (a torn write, which the repair cuts), is left for the next read.

    Args:
        raw: The bytes appended.
        label: Names the file in errors.
        order: The records read before (`TrialOrder`), to check the new ones against (and extended with
            them); None: not checked (a reader that only watches for its own records).

    Raises:
        HistoryError: A line before the last is not a record, or a record is out of its place (line numbers
            count from ``raw``'s start).
    """
    end = raw.rfind(b"\n") + 1
    if end == 0:
        return HistoryReadResult(), 0
    records = _parse(raw[:end], label, False, order)
    if records.torn is not None:
        end = raw[:end].rstrip(b"\n").rfind(b"\n") + 1
    return records, end


def _ends_cleanly(f: BinaryIO) -> bool:
    """Whether the file ends with a record and its newline (read from its end: no need to read it whole)."""
    size = os.fstat(f.fileno()).st_size
    if size == 0:
        return True
    start = max(0, size - _LAST_LINE_MAX)
    f.seek(start)
    tail = f.read()
    if not tail.endswith(b"\n"):
        return False
    cut = tail.rfind(b"\n", 0, len(tail) - 1)
    if cut < 0 and start > 0:
        return False  # a last line longer than we read: let the whole read judge it
    try:
        json.loads(tail[cut + 1 :])
    except (ValueError, RecursionError):
        return False
    return True


#: Bytes read from a history's end to find its last line (a record is about 1 KB).
_LAST_LINE_MAX = 64 * 1024


def _corrupt(label: str, index: int, why: str) -> HistoryError:
    return HistoryError(
        f"{label}: line {index + 1} is not a valid trial record ({why}). The history is damaged; restore it "
        "from a backup, or fix or delete that line (every line must be one record written by zeus-run)."
    )


class TrialOrder:
    """Where each record may stand, checked as a history is read: one line per trial, in the order written.

    Trials are numbered in the order they start (``trial``), and each record is appended when its
    trial ends. A trial's decision saw a prefix of the history (its ``seen`` records; a serial
    record, without ``seen``, saw every line before it), and every trial in that prefix had ended,
    so started, before it: each has a lower number. So a record must not repeat a trial number
    (a line copied twice), must not claim to have seen more lines than come before it, and must
    have a higher number than every trial it saw (lines swapped). Checked in one pass, a few
    operations per record; `zeus_run.engine.replay.audit` checks the decisions themselves.
    """

    __slots__ = ("_line", "_prefix_max")

    def __init__(self) -> None:
        #: The line (0-based) of each trial number read.
        self._line: dict[int, int] = {}
        #: ``_prefix_max[k]``: the highest trial number among the first ``k`` records (-1 for none).
        self._prefix_max: list[int] = [-1]

    def add(self, record: TrialRecord, line: int, label: str) -> None:
        """Take the next record (at 0-based ``line`` of its file), or raise `HistoryError` if it is out of place."""
        trial, before = record.trial, len(self._prefix_max) - 1
        seen = before if record.seen is None else record.seen
        if trial in self._line:
            raise _misplaced(
                label, line, f"it repeats trial #{trial} of line {self._line[trial] + 1}: copied twice?", _REPEATED
            )
        if seen > before:
            raise _misplaced(
                label,
                line,
                f"trial #{trial} was decided after {seen} record(s) but follows only {before}: lines moved?",
                _SWAPPED,
            )
        latest = self._prefix_max[seen]
        if latest >= trial:
            raise _misplaced(
                label,
                line,
                f"trial #{trial} comes after trial #{latest} of line {self._line[latest] + 1}, which started after it: "
                "lines swapped?",
                _SWAPPED,
            )
        self._line[trial] = line
        self._prefix_max.append(max(self._prefix_max[-1], trial))


_REPEATED = "delete the repeated line"
_SWAPPED = "put the lines back in the order zeus-run appended them (by each line's `ended_at`)"


def _misplaced(label: str, index: int, why: str, mend: str) -> HistoryError:
    return HistoryError(
        f"{label}: line {index + 1} is out of place ({why}). The history is damaged; restore it from a backup, "
        f"or {mend}; `zeus-run replay` on the run directory checks the result. zeus-run appends nothing to it until then."
    )


class HistoryStore:
    """Appends records to one history file, durably."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def read(self, warn: bool = True) -> HistoryReadResult:
        """All records so far (empty if the file does not exist yet)."""
        if not os.path.lexists(self.path):
            return HistoryReadResult()
        return read_history(self.path, warn)

    def read_from(self, offset: int) -> tuple[HistoryReadResult, int]:
        """The records appended since byte ``offset`` (`parse_appended`), and the offset after them."""
        if not os.path.lexists(self.path):
            return HistoryReadResult(), offset
        try:
            with _fs.open_read(self.path) as f:
                f.seek(offset)
                raw = f.read()
        except OSError as exc:
            raise HistoryError(f"Cannot read history {str(self.path)!r}: {exc.strerror or exc}.") from exc
        records, used = parse_appended(raw, str(self.path))
        return records, offset + used

    def repair_tail(self) -> bool:
        """Make the file end cleanly so the next append starts on a fresh line.

        A torn final line is cut (its bytes are kept in ``history.jsonl.torn``);
        a complete last record without its newline gets one.

        Returns:
            Whether anything changed.

        Raises:
            HistoryError: The file cannot be opened or repaired; names it and why.
        """
        if not os.path.lexists(self.path):
            return False
        try:
            with _fs.open_update(self.path) as f:
                fcntl.flock(f, fcntl.LOCK_EX)
                if _ends_cleanly(f):
                    return False
                f.seek(0)
                data = f.read()
                if parse_history(data, str(self.path), warn=False).torn is None:
                    if not data or data.endswith(b"\n"):
                        return False
                    f.seek(0, os.SEEK_END)
                    f.write(b"\n")
                    f.flush()
                    os.fsync(f.fileno())
                    logger.info("%s: added the missing newline after the last record", self.path)
                    return True
                cut = data.rstrip(b"\n").rfind(b"\n") + 1
                fragment = data[cut:]
                with _fs.open_append(str(self.path) + ".torn") as keep:
                    keep.write(fragment + b"\n")
                f.truncate(cut)
                f.flush()
                os.fsync(f.fileno())
        except OSError as exc:
            raise self._write_error("repair", exc) from None
        logger.warning(
            "cut a torn last line (%d bytes) from %s; kept in %s.torn", len(fragment), self.path, self.path.name
        )
        return True

    def append(self, record: TrialRecord) -> None:
        """Append one record: lock, one write, flush, fsync.

        Raises:
            HistoryError: The write failed (disk full, file too large, permissions, immutable file);
                nothing partial is left behind and earlier records are intact.
        """
        line = (json.dumps(record.to_json(), separators=(",", ":"), allow_nan=False) + "\n").encode()
        try:
            fd = _fs.open_fd(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT)
        except OSError as exc:
            raise self._write_error("open", exc) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            size = os.fstat(fd).st_size
            if size and os.pread(fd, 1, size - 1) != b"\n":
                line = b"\n" + line  # never glue a record onto one that lacks its newline
            try:
                _fs.write_all(fd, line)
                os.fsync(fd)
            except OSError as exc:
                try:
                    os.ftruncate(fd, size)  # leave no half record behind
                except OSError as cut_exc:
                    logger.error("could not cut a partial record from %s: %s", self.path, cut_exc.strerror)
                raise self._write_error("append to", exc) from None
        finally:
            os.close(fd)

    def _write_error(self, what: str, exc: OSError) -> HistoryError:
        why = exc.strerror or str(exc)
        hint = {
            errno.ENOSPC: "Free disk space",
            errno.EDQUOT: "Free space in your quota",
            errno.EFBIG: "Raise the file-size limit (ulimit -f)",
            errno.EPERM: "Make it writable (is it immutable? lsattr / chattr -i)",
            errno.EACCES: "Fix its permissions",
            errno.EROFS: "Use a writable file system",
        }.get(exc.errno or 0, "Fix the cause")
        if isinstance(exc, _fs.UnsafePathError):
            hint = "Remove the link or file, or choose another run directory"
        return HistoryError(
            f"Could not {what} the history {str(self.path)!r}: {why}. Every record written before is intact. "
            f"{hint}, then run the same command again to resume."
        )

    def extend(self, records: Iterable[TrialRecord]) -> None:
        """Append several records (one durable append each)."""
        for r in records:
            self.append(r)
