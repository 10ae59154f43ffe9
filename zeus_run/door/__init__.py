"""What every door shares: opening a job, saving its trials, the leases of its asks.

``zeus-run run`` (the launcher), ask/tell, ``exec``, the `zeus_run.Job` API, the callbacks and the server open a
job here, above the engine (which decides) and the exports (which publish):

* `zeus_run.door.opening`: `locate` (the run directory and the spec a door uses) and `open_job` (the whole
  sequence under the lock: a dead launcher's trials settled, the asks in flight settled by role, the spec kept, a
  change of rates noted, the warm start copied, the engine made), and the checks of a history against a spec;
* `zeus_run.door.save`: `TrialSaver`, the one saver of a finished trial (history, marker, live exports);
* `zeus_run.door.lease`: the records of asks whose lease ran out, and a launcher's settling of them;
* `zeus_run.door.fold`: a job's history folded once per process and brought up to date (ask/tell, the server).
"""

from __future__ import annotations

from zeus_run.door.lease import ask_provenance, expired_asks, expired_record
from zeus_run.door.opening import (
    OpenJob,
    choose_run_dir,
    compatibility,
    engine_of,
    history_mismatches,
    locate,
    open_job,
    pending_records,
)
from zeus_run.door.save import TrialSaver, live_exports

__all__ = [
    "OpenJob",
    "TrialSaver",
    "ask_provenance",
    "choose_run_dir",
    "compatibility",
    "engine_of",
    "expired_asks",
    "expired_record",
    "history_mismatches",
    "live_exports",
    "locate",
    "open_job",
    "pending_records",
]
