"""A job's history folded once and brought up to date by what was appended since (asks and tells).

Every ask and tell decides on the whole history folded (`zeus_run.engine.core.Ledger`).
Re-reading and re-folding it each time costs time that grows with the history,
which a server answering many reports of long-lived jobs cannot afford. So this
process keeps, per run directory, the ledger folded so far and the byte offset
of ``history.jsonl`` it covers, and each session (under the run-directory lock)
folds only the lines appended since, by anyone: this process, a ``zeus-run
tell`` on another host, a launcher that resumed the job. The fold is a pure
function of the records, so this is the same ledger a fresh fold gives; the
file is re-read whole whenever it is not the file the fold came from (another
inode, shorter, or other bytes where the fold ended), or under another spec.

What is kept per job is the ledger, the set of recorded trial numbers and the
measured trials' power (`zeus_run.engine.measure.PowerBasis`), not the
records; at most `MAX_JOBS` jobs are kept (the least recently used goes).
"""

from __future__ import annotations

import collections
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path

from zeus_run import _fs
from zeus_run.engine.core import Engine
from zeus_run.engine.ledger import Ledger
from zeus_run.engine.measure import PowerBasis
from zeus_run.errors import HistoryError
from zeus_run.rundir.history import HISTORY_NAME, TrialOrder, parse_appended, read_history

#: Jobs whose fold one process keeps.
MAX_JOBS = 128
#: Bytes before the fold's offset compared to tell an appended file from a rewritten one.
_TAIL = 64


@dataclass
class JobFold:
    """The history of one run directory, folded up to ``offset``.

    Attributes:
        engine: The engine the records were folded under.
        ledger: The records folded, nothing in flight (`Ledger.branch` it to decide).
        recorded: The ``trial`` of every record.
        file_id: ``(st_dev, st_ino)`` of the history file folded (None: there was none).
        offset: Bytes of it folded (complete lines).
        tail: Its last bytes before ``offset``.
        power: The measured trials' power, for a tell to impute an unmeasured trial's energy.
        order: Where the records folded stand (`TrialOrder`): appended lines are checked against them.
    """

    engine: Engine
    ledger: Ledger
    recorded: set[int] = field(default_factory=set)
    file_id: tuple[int, int] | None = None
    offset: int = 0
    tail: bytes = b""
    power: PowerBasis = field(default_factory=PowerBasis)
    order: TrialOrder = field(default_factory=TrialOrder)


_FOLDS: collections.OrderedDict[str, JobFold] = collections.OrderedDict()
_FOLDS_LOCK = threading.Lock()


def folded(path: Path, engine: Engine) -> JobFold:
    """The fold of ``path``'s history under ``engine``, brought up to date.

    The caller holds the run directory's lock, so nothing appends meanwhile; the fold
    returned is this session's (not shared with another thread until it is put back).

    Args:
        path: The run directory.
        engine: The engine of the job's current spec (another engine than the kept
            fold's: the history is folded afresh).

    Raises:
        HistoryError: The history cannot be read, or a line is not a record.
    """
    key = str(path.absolute())
    with _FOLDS_LOCK:
        fold = _FOLDS.pop(key, None)
    if fold is None or fold.engine is not engine:
        fold = JobFold(engine, Ledger(engine))
    fold = _catch_up(path / HISTORY_NAME, fold)
    with _FOLDS_LOCK:
        _FOLDS[key] = fold
        while len(_FOLDS) > MAX_JOBS:
            _FOLDS.popitem(last=False)
    return fold


def _catch_up(history: Path, fold: JobFold) -> JobFold:
    try:
        f = _fs.open_read(history)
    except FileNotFoundError:
        return fold if fold.file_id is None else JobFold(fold.engine, Ledger(fold.engine))
    except OSError as exc:
        raise HistoryError(f"Cannot read history {str(history)!r}: {exc.strerror or exc}.") from exc
    with f:
        st = os.fstat(f.fileno())
        file_id = (st.st_dev, st.st_ino)
        if not _continues(f.fileno(), file_id, st.st_size, fold):
            fold = JobFold(fold.engine, Ledger(fold.engine))
        f.seek(fold.offset)
        new = f.read()
    try:
        records, end = parse_appended(new, str(history), fold.order)
    except HistoryError:
        read_history(history, warn=False)  # the same error, with the line number in the whole file
        raise
    fold.ledger.extend(records)
    fold.recorded.update(r.trial for r in records)
    fold.power.extend(records)
    fold.file_id = file_id
    fold.offset += end
    fold.tail = (fold.tail + new[:end])[-_TAIL:]
    return fold


def _continues(fd: int, file_id: tuple[int, int], size: int, fold: JobFold) -> bool:
    """Whether the file is the one ``fold`` folded, with only lines appended since."""
    if fold.offset == 0:
        return True
    if fold.file_id != file_id or size < fold.offset:
        return False
    n = len(fold.tail)
    return os.pread(fd, n, fold.offset - n) == fold.tail
