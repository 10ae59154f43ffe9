"""The run directory as ask/tell uses it: locked for a moment, with the asks in flight.

Every ask, tell and expiry opens the run directory as every door does
(`zeus_run.engine.opening.open_job`), with the lock that ``zeus-run run`` takes,
waiting at most `zeus_run.rundir.opener.LOCK_WAIT` seconds while another ask or tell
holds it, and never for a launcher. Under the lock it reads the history, settles what a
dead launcher left (`zeus_run.rundir.resume.recover`, adopting nothing), expires the asks whose
lease ran out, does its one change (a marker in ``running.json``, or a record
appended to ``history.jsonl`` and the marker removed) and lets go. So asks and
tells from several hosts on a shared filesystem see one history, folded in the
order the tells arrive.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import overload

from zeus_run.asktell._fold import JobFold, folded
from zeus_run.asktell._lease import expired_record, has_expired
from zeus_run.contract import RunningMarker
from zeus_run.engine.core import Engine
from zeus_run.engine.knobs import Knobs
from zeus_run.engine.ledger import Ledger
from zeus_run.engine.measure import PowerBasis
from zeus_run.engine.opening import locate, open_job
from zeus_run.engine.request import request_of
from zeus_run.engine.save import TrialSaver
from zeus_run.engine.warm import ensure_copy
from zeus_run.errors import BUSY_EXIT_CODE, RunDirBusy
from zeus_run.executors import recover_trials
from zeus_run.records import TrialRecord
from zeus_run.rundir.opener import stored_spec
from zeus_run.rundir.store import RunDir
from zeus_run.spec import JobSpec

logger = logging.getLogger(__name__)

#: The engine's recurrence limit under ask/tell: every ask gets the next trial, whatever
#: ``recurrences`` says (as ``run --next`` does); the optimizer still plans over ``recurrences``.
_NO_LIMIT = 2**31 - 1


def resolve_job(job: str | Path, run_dir: str | Path | None) -> tuple[JobSpec, Path]:
    """The spec and run directory an ask names (`zeus_run.engine.opening.locate`, the one opener).

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
        rd: The locked run directory.
        spec: The job.
        asks: The asks in flight (their markers), in trial order.
        history: Every record, in the order they were folded (None: read when first used).
        fold: The history folded (`zeus_run.asktell._fold`; None: fold ``history`` when asked).

    Attributes:
        expired: Records of the asks this session found expired (already appended).
    """

    def __init__(
        self,
        rd: RunDir,
        spec: JobSpec,
        asks: list[RunningMarker],
        history: list[TrialRecord] | None = None,
        fold: JobFold | None = None,
    ) -> None:
        self.rd = rd
        self.spec = spec
        self.asks = asks
        self._history = history
        self._fold = fold
        self.expired: list[TrialRecord] = []
        #: Saves this session's records (`zeus_run.engine.save`: the one saver of every door); its live exports are
        #: published once the session lets the run directory go.
        self.saver = TrialSaver(rd, spec.export)

    @property
    def history(self) -> Sequence[TrialRecord]:
        """Every record, in the order they were folded: read from disk the first time an item is used (an ask or
        tell that goes as usual needs only the fold)."""
        return _History(self)

    def _records(self) -> list[TrialRecord]:
        if self._history is None:
            self._history = list(self.rd.history.read(warn=False))
        return self._history

    @property
    def engine(self) -> Engine:
        """The job's engine (its optimizer and rules)."""
        return engine_of(self.spec, self.rd.path)

    def ledger(self) -> Ledger:
        """What the engine knows: the history folded, the asks in flight."""
        asks = [request_of(m, self.spec) for m in self.asks]
        if self._fold is None:
            return Ledger.from_history(self.engine, self.history, asks)
        self._fold = folded(self.rd.path, self.engine)  # with what this session appended
        return self._fold.ledger.branch(asks)

    def power(self) -> PowerBasis:
        """The measured trials' power, for imputing an unmeasured trial's energy (with what this session
        appended)."""
        if self._fold is None:
            return PowerBasis.of(self.history)
        self._fold = folded(self.rd.path, self.engine)
        return self._fold.power

    def expire(self, now: float | None = None) -> list[TrialRecord]:
        """Record every ask whose lease ran out as an infrastructure failure (appended, marker removed)."""
        t = time.time() if now is None else now
        out = []
        for m in list(self.asks):
            if has_expired(m, self.spec.lease, t):
                record = expired_record(self.spec, m, t, self.power())
                logger.warning(
                    "recurrence %d try %d (ask from %s): %s", m.recurrence, m.attempt, m.host or "?", record.message
                )
                self.record(record, m)
                out.append(record)
        self.expired += out
        return out

    def record(self, record: TrialRecord, marker: RunningMarker) -> None:
        """Save the record of an ask (`zeus_run.engine.save.TrialSaver`: appended, then its marker forgotten; a crash
        in between leaves it marked and recorded, and the next session sees the record and drops the marker)."""
        self.saver.save(record)
        if self._history is not None:
            self._history.append(record)
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


def settle_asks(rd: RunDir, spec: JobSpec, history: list[TrialRecord]) -> list[TrialRecord]:
    """For a launcher (``zeus-run run``) that holds ``rd``: expire the asks whose lease ran out, and refuse to
    run beside the asks that live (the launcher would decide without them).

    Args:
        rd: The run directory the launcher holds.
        spec: The job.
        history: The history as the launcher read it; expired asks' records are appended to it.

    Returns:
        The records of the asks that expired.

    Raises:
        RunDirBusy: Asks are in flight and their leases live.
    """
    asks = sorted((m for m in rd.running_trials() or [] if m.asked), key=lambda m: m.trial)
    if not asks:
        return []
    session = Session(rd, spec, asks, history)
    expired = session.expire()
    session.saver.publish()  # the launcher holds the directory: its exports go now
    if session.asks:
        first = session.asks[0]
        raise RunDirBusy(
            f"Run directory {str(rd.path)!r} is busy: {len(session.asks)} ask(s) are in flight (recurrence "
            f"{first.recurrence} try {first.attempt}, asked from {first.host or '?'} at {first.started_at}). "
            f"Nothing was run (exit code {BUSY_EXIT_CODE}); tell them back (zeus-run tell), or wait for their "
            "lease to expire."
        )
    return expired


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
    # A dead launcher's trials are recorded as interrupted (ask/tell's executors adopt none).
    with open_job(path, spec, role, cleanup=lambda markers: recover_trials(markers, None)) as job:
        rd = job.rd
        fold = folded(rd.path, engine_of(spec, rd.path))
        live = [m for m in job.asks if m.trial not in fold.recorded]
        rd.track_running(live)
        if len(live) < len(job.asks):  # recorded, then the process died before the marker went
            rd.replace_running(live)
            logger.info("dropped %d marker(s) of asks already recorded", len(job.asks) - len(live))
        session = Session(rd, spec, live, fold=fold)
        yield session
    session.saver.publish()  # after the lock is let go: a slow sink never holds up another ask or tell


def engine_of(spec: JobSpec, path: Path) -> Engine:
    """The engine of a job under ask/tell in its run directory ``path`` (one per parsed spec and directory: a
    server asks it for every request). The caller holds the run directory's lock: a warm start's source is
    copied into it the first time (`zeus_run.engine.warm.ensure_copy`)."""
    key = (id(spec), str(path))
    with _ENGINES_LOCK:
        hit = _ENGINES.get(key)
        if hit is not None and hit[0] is spec:
            return hit[1]
    total = spec.recurrences
    knobs = dataclasses.replace(Knobs.from_spec(spec), warm=ensure_copy(path, spec))
    engine = knobs.engine(_NO_LIMIT if total is None else total)
    with _ENGINES_LOCK:
        _ENGINES[key] = (spec, engine)  # the spec is kept, so its id is not reused while here
        while len(_ENGINES) > 64:
            _ENGINES.pop(next(iter(_ENGINES)))
    return engine


_ENGINES: dict[tuple[int, str], tuple[JobSpec, Engine]] = {}
_ENGINES_LOCK = threading.Lock()
