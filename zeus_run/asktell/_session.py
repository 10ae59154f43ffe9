"""The run directory as ask/tell uses it: locked for a moment, with the asks in flight.

Every ask, tell and expiry opens the run directory as every door does
(`zeus_run.door.open_job`), with the lock that ``zeus-run run`` takes,
waiting at most `zeus_run.rundir.opener.LOCK_WAIT` seconds while another ask or tell
holds it, and never for a launcher. Under the lock it reads the history, settles what a
dead launcher left (`zeus_run.rundir.resume.recover`, adopting nothing), expires the asks whose
lease ran out, does its one change (a marker in ``running.json``, or a record
appended to ``history.jsonl`` and the marker removed) and lets go. So asks and
tells from several hosts on a shared filesystem see one history, folded in the
order the tells arrive.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import overload

from zeus_run.contract import RunningMarker
from zeus_run.door.fold import JobFold, folded
from zeus_run.door.lease import expire
from zeus_run.door.opening import OpenJob, locate, open_job
from zeus_run.door.save import TrialSaver
from zeus_run.engine.core import Engine
from zeus_run.engine.ledger import Ledger
from zeus_run.engine.measure import PowerBasis
from zeus_run.engine.request import request_of
from zeus_run.records import TrialRecord
from zeus_run.rundir.opener import stored_spec
from zeus_run.spec import JobSpec

logger = logging.getLogger(__name__)


def resolve_job(job: str | Path, run_dir: str | Path | None) -> tuple[JobSpec, Path]:
    """The spec and run directory an ask names (`zeus_run.door.locate`, the one opener).

    Raises:
        SpecError: The spec is invalid.
        UsageError: ``job`` is neither a spec file nor a run directory with a ``spec.yaml``.
        RunDirError: The run directory's history was recorded under other settings.
    """
    where = locate(job, run_dir)
    return where.spec, where.path


#: The spec a run directory was started with (`zeus_run.rundir.opener.stored_spec`).
spec_of = stored_spec


class Session:
    """A run directory locked by an ask, a tell or an expiry.

    Args:
        job: The job as `zeus_run.door.open_job` opened it: the locked run directory, the asks in flight (their
            markers, in trial order), the engine and the history folded.

    Attributes:
        expired: Records of the asks this session found expired (already appended).
    """

    def __init__(self, job: OpenJob) -> None:
        assert job.engine is not None and job.fold is not None and job.saver is not None
        self.rd = job.rd
        self.spec = job.spec
        self.asks = job.asks
        self._job = job
        self._fold: JobFold = job.fold
        self.expired: list[TrialRecord] = []
        #: Saves this session's records (`zeus_run.door.save`: the one saver of every door); its live exports are
        #: published once the session lets the run directory go.
        self.saver: TrialSaver = job.saver

    @property
    def history(self) -> Sequence[TrialRecord]:
        """Every record, in the order they were folded: read from disk the first time an item is used (an ask or
        tell that goes as usual needs only the fold)."""
        return _History(self)

    def _records(self) -> list[TrialRecord]:
        return self._job.records()

    @property
    def engine(self) -> Engine:
        """The job's engine (its optimizer and rules)."""
        return self._fold.engine

    def ledger(self) -> Ledger:
        """What the engine knows: the history folded, the asks in flight."""
        asks = [request_of(m, self.spec) for m in self.asks]
        self._fold = folded(self.rd.path, self.engine)  # with what this session appended
        return self._fold.ledger.branch(asks)

    def power(self) -> PowerBasis:
        """The measured trials' power, for imputing an unmeasured trial's energy (with what this session
        appended)."""
        self._fold = folded(self.rd.path, self.engine)
        return self._fold.power

    def expire(self, now: float | None = None) -> list[TrialRecord]:
        """Record every ask whose lease ran out as an infrastructure failure (appended, marker removed)."""
        out, self.asks = expire(self.spec, self.asks, self.saver, self.power(), now)
        if self._job.history is not None:
            self._job.history.extend(out)
        self.expired += out
        return out

    def record(self, record: TrialRecord, marker: RunningMarker) -> None:
        """Save the record of an ask (`zeus_run.door.save.TrialSaver`: appended, then its marker forgotten; a crash
        in between leaves it marked and recorded, and the next session sees the record and drops the marker)."""
        self.saver.save(record)
        if self._job.history is not None:
            self._job.history.append(record)
        self.asks = [m for m in self.asks if m.trial != marker.trial]

    def add(self, marker: RunningMarker) -> None:
        """Count a new ask in flight (written to ``running.json`` at once)."""
        self.asks.append(marker)
        self.rd.mark_running(marker)


class _History(Sequence[TrialRecord]):
    """A session's history, read when first used."""

    def __init__(self, session: Session) -> None:
        self._session = session

    @overload
    def __getitem__(self, i: int) -> TrialRecord: ...
    @overload
    def __getitem__(self, i: slice) -> Sequence[TrialRecord]: ...
    def __getitem__(self, i: int | slice) -> TrialRecord | Sequence[TrialRecord]:
        return self._session._records()[i]

    def __len__(self) -> int:
        return len(self._session._records())

    def __iter__(self) -> Iterator[TrialRecord]:
        return iter(self._session._records())

    def __reversed__(self) -> Iterator[TrialRecord]:
        return reversed(self._session._records())


@contextmanager
def open_session(path: Path, spec: JobSpec | None = None, role: str = "ask") -> Iterator[Session]:
    """Lock the run directory for one ask, tell or expiry, and read it.

    Args:
        path: The run directory.
        spec: The job (None: the run directory's own ``spec.yaml``).
        role: Written into ``.lock`` (a brief holder others wait for).

    Raises:
        RunDirBusy: A launcher holds it, or another ask or tell held it past `LOCK_WAIT`.
        RunDirError, HistoryError: It cannot be used.
    """
    if spec is None:
        spec = spec_of(path)
    # The one opener: a dead launcher's trials recorded as interrupted (ask/tell's executors adopt none), the asks
    # already recorded dropped, an ask's spec kept and its rates noted, the engine with the history folded.
    with open_job(path, spec, role) as job:
        session = Session(job)
        yield session
        last = session.saver.last
        if last is not None:  # what the engine believes with what this session saved, for the views (belief.json)
            session.saver.note(folded(job.rd.path, session.engine).ledger, last.trial)
    session.saver.publish()  # after the lock is let go: a slow sink never holds up another ask or tell
