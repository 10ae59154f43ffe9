"""What every exporter shares: the `Exporter` base, trial ids and the live hook."""

from __future__ import annotations

import abc
import contextlib
import fcntl
import logging
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from zeus_run import _fs
from zeus_run.errors import UsageError, ZeusRunError

if TYPE_CHECKING:
    from zeus_run.records import TrialRecord
    from zeus_run.spec import ExportSettings
    from zeus_run.views.jobs import JobView

logger = logging.getLogger(__name__)


class ExportError(ZeusRunError):
    """A sink (tracking server, Pushgateway, file) refused or could not be reached."""

    exit_code = 1


def trial_id(record: TrialRecord) -> str:
    """The trial's stable id: its job and its 0-based trial number, unique within a run directory.

    Example: ``demo:12``. It never changes once the trial is recorded, so an
    export keyed on it adds each trial once, however often it runs.
    """
    return f"{record.job}:{record.trial}"


class Exporter(abc.ABC):
    """A sink that mirrors whole run directories."""

    #: Sink name, as in the spec's ``export`` section and ``zeus-run export NAME``.
    name: str = ""

    @abc.abstractmethod
    def export(self, jobs: Sequence[JobView]) -> str:
        """Bring the sink up to date with ``jobs``; idempotent.

        Returns:
            One line for people saying what was written.

        Raises:
            ExportError: The sink failed; nothing in the run directories changed.
            UsageError: The exporter's extra is not installed.
        """

    @abc.abstractmethod
    def command(self, run_dir: Path) -> str:
        """The ``zeus-run export`` command line that does what this exporter does for ``run_dir``.

        A live export's failure names it, so it must run as printed (every option the sink needs).
        """


#: The file whose lock makes one process at a time sync a run directory's live exports.
EXPORT_LOCK_NAME = ".export.lock"
#: Most syncs in a row by the process that holds the export lock while others append (each catches every trial
#: appended before it read the run directory).
MAX_SYNCS = 10


class LiveExports:
    """The live exports of a job (spec section ``export``), called after each trial is saved, whatever the door
    (`zeus_run.door.save.TrialSaver`).

    Each sink is synced with the whole run directory, so one that was down
    catches up at the next trial. A failure is logged as a warning; it never
    fails the recurrence.

    One process at a time syncs a run directory (a lock on `EXPORT_LOCK_NAME`): two tells told at once would
    otherwise both find a trial missing from MLflow and both add it. A process that finds another one syncing
    leaves it to that one, which looks at the history again once it is done and syncs again if it grew.
    """

    def __init__(self, exporters: Sequence[Exporter], run_dir: Path) -> None:
        self.exporters = tuple(exporters)
        self.run_dir = run_dir

    @classmethod
    def from_settings(cls, settings: ExportSettings, run_dir: Path) -> LiveExports:
        """The sinks ``settings`` names (none: a no-op).

        Raises:
            UsageError: The spec asks for MLflow, which is not installed (checked before any trial runs).
        """
        exporters: list[Exporter] = []
        if settings.mlflow is not None:
            import importlib.util

            if importlib.util.find_spec("mlflow") is None:
                from zeus_run.export._mlflow import INSTALL_HINT

                raise UsageError(
                    f"export.mlflow.tracking_uri = {settings.mlflow.tracking_uri!r}: live MLflow logging needs mlflow, "
                    f"which is not installed. Install the extra: {INSTALL_HINT}, or remove export.mlflow from the spec."
                )
            from zeus_run.export._mlflow import MlflowExporter

            exporters.append(MlflowExporter(settings.mlflow.tracking_uri, settings.mlflow.experiment))
        if settings.prometheus is not None:
            from zeus_run.export._prometheus import PrometheusExporter

            exporters.append(PrometheusExporter(push_url=settings.prometheus.push))
        return cls(exporters, run_dir)

    def after_trial(self, record: TrialRecord) -> None:
        """Sync every sink with the run directory, now that ``record`` is in its history."""
        if not self.exporters:
            return
        for _ in range(MAX_SYNCS):
            with self._syncing() as mine:
                if not mine:
                    return  # another process syncs, and looks at the history again when it is done
                size = self._history_size()
                self._sync(record)
            if self._history_size() == size:  # nothing appended while syncing (checked after letting go)
                return

    def _history_size(self) -> int:
        from zeus_run.rundir.history import HISTORY_NAME

        try:
            return os.stat(self.run_dir / HISTORY_NAME).st_size
        except OSError:
            return -1

    @contextlib.contextmanager
    def _syncing(self) -> Iterator[bool]:
        """Whether this process may sync now (True while it holds the export lock; where the lock file cannot
        be opened it syncs unlocked)."""
        try:
            fd = _fs.open_fd(self.run_dir / EXPORT_LOCK_NAME, os.O_RDWR | os.O_CREAT)
        except OSError as exc:
            logger.info("export: no lock on %s (%s); syncing without it", self.run_dir, exc)
            yield True
            return
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                yield False
                return
            yield True
        finally:
            os.close(fd)  # lets the lock go

    def _sync(self, record: TrialRecord) -> None:
        from zeus_run.views.jobs import load_job

        try:
            job = load_job(self.run_dir)
        except ZeusRunError as exc:
            logger.warning("export: cannot read %s after trial %s: %s", self.run_dir, trial_id(record), exc)
            return
        for exporter in self.exporters:
            try:
                logger.debug("export %s: %s", exporter.name, exporter.export([job]))
            except Exception as exc:  # any sink failure: warn and retry at the next trial
                logger.warning(
                    "export %s failed after trial %s (%s: %s); it is retried after the next trial, or run: %s",
                    exporter.name,
                    trial_id(record),
                    type(exc).__name__,
                    exc,
                    exporter.command(self.run_dir),
                )
