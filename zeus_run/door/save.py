"""The one place a finished trial is saved, whatever the door.

Saving a trial is three things, always together (and a fourth once the engine folded it: what it believes
now, `TrialSaver.note`, for the views): its record appended to ``history.jsonl``
(durably: `zeus_run.rundir.history`), its marker taken out of ``running.json``, and the job's
live exports (spec section ``export``: MLflow, a Prometheus Pushgateway; `zeus_run.export.LiveExports`)
brought up to date with the run directory. The launcher's loop (``run``, ``run --next``, Slurm),
every tell (ask/tell, ``exec``, the `Job` API, the callbacks, the server), an expired lease and a
cancel save through `TrialSaver`, so a trial reaches the exports whichever door it came through.

Saving and exporting are two steps. `TrialSaver.save` writes under the run directory's lock;
`TrialSaver.publish` talks to the sinks, which may be slow or down: an ask/tell session publishes
after it lets the lock go (`zeus_run.asktell._session.open_session`), so a tracking server never
holds up another ask or tell. A sink that fails is a warning, and the next publish (any door's)
brings it up to date: each export syncs the whole run directory.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import TYPE_CHECKING

from zeus_run.errors import UsageError

if TYPE_CHECKING:
    from zeus_run.engine.ledger import Ledger
    from zeus_run.export import LiveExports
    from zeus_run.records import TrialRecord
    from zeus_run.rundir.store import RunDir
    from zeus_run.spec import ExportSettings

logger = logging.getLogger(__name__)


def live_exports(settings: ExportSettings, rd: RunDir) -> LiveExports:
    """The live exports the spec's ``export`` section names for ``rd`` (none: a no-op).

    Raises:
        UsageError: The spec asks for MLflow, which is not installed (a door checks it before a trial starts).
    """
    from zeus_run.export import LiveExports  # the exporters load only where a trial is saved

    return LiveExports.from_settings(settings, rd.path)


class TrialSaver:
    """Saves the finished trials of one run directory (see the module docstring).

    Args:
        rd: The run directory, locked by the caller.
        settings: The spec's ``export`` section.
        exports: The live exports, if the caller built them already (the launcher does, to refuse a missing
            MLflow before any trial runs); None: built at the first `publish`, where a missing MLflow is a
            warning (a tell must never lose its record over an export).
    """

    def __init__(self, rd: RunDir, settings: ExportSettings, exports: LiveExports | None = None) -> None:
        self.rd = rd
        self.settings = settings
        self._exports = exports
        #: The last record saved and not yet published (None: nothing to publish).
        self.pending: TrialRecord | None = None
        #: The last record saved (None: none yet).
        self.last: TrialRecord | None = None

    def check_exports(self) -> None:
        """Make the live exports now, so that a door refuses a missing MLflow before any trial runs.

        Raises:
            UsageError: The spec asks for MLflow, which is not installed.
        """
        if self._exports is None:
            self._exports = live_exports(self.settings, self.rd)

    def save(self, record: TrialRecord) -> None:
        """Append ``record`` to the history (durably) and take its trial's marker out of ``running.json``.

        The record is on disk when this returns, before anything else: a crash after it leaves a marker
        whose trial is recorded, which the next opener drops.
        """
        self.rd.history.append(record)
        self.rd.clear_running(record.trial)
        self.pending = self.last = record

    def note(self, ledger: Ledger, last_trial: int) -> None:
        """Keep what the engine believes after folding the saved records (``belief.json``,
        `zeus_run.rundir.belief`): the views show it without folding the history again."""
        from zeus_run.rundir.belief import SavedBelief, write_belief

        leader = ledger.leader()  # never one out-of-memory crashes shut out (`zeus_run.engine.memory`)
        write_belief(self.rd.path, SavedBelief(ledger.folded, last_trial, leader, dict(ledger.slow)))

    def publish(self) -> None:
        """Bring the live exports up to date with the run directory, if anything was saved since the last call.

        Never raises for a sink: a failure is logged and retried at the next publish.
        """
        record, self.pending = self.pending, None
        if record is None or (self.settings.mlflow is None and self.settings.prometheus is None):
            return
        if self._exports is None:
            try:
                self._exports = live_exports(self.settings, self.rd)
            except UsageError as exc:  # MLflow is missing here: the other sinks still get the trial
                logger.warning("export: trial %s is saved but not exported to MLflow: %s", record.trial, exc)
                self._exports = live_exports(dataclasses.replace(self.settings, mlflow=None), self.rd)
        self._exports.after_trial(record)
