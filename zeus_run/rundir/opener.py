"""How every door locks a job's run directory, and reads the spec it was started with.

``zeus-run run`` (and ``--next``), ``ask``, ``tell``, ``heartbeat``, ``exec``, the Python `Job`, and the
server find a job's run directory with `zeus_run.door.opening.locate` and open it with
`zeus_run.door.opening.open_job`, which locks it here:

* `lock`: a launcher (role ``run``) holds the lock for its whole run and waits
  for no one; an ask, a tell, an expiry or a registration holds it for a
  moment and waits at most `LOCK_WAIT` for another brief holder.
* `stored_spec`: a run directory's own ``spec.yaml`` (read by `zeus_run.rundir.settings`), parsed.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from pathlib import Path

import yaml

from zeus_run.errors import RunDirError
from zeus_run.rundir.settings import SPEC_NAME, read_settings
from zeus_run.rundir.store import RunDir
from zeus_run.spec import JobSpec, parse_spec

#: Seconds a brief holder (an ask, a tell, an expiry, a registration) waits for another brief holder.
LOCK_WAIT = 30.0


@dataclass(frozen=True)
class JobDir:
    """A job and its run directory.

    Attributes:
        spec: The job.
        path: Its run directory.
        resumed: Whether it already holds a history this spec continues.
    """

    spec: JobSpec
    path: Path
    resumed: bool


def lock(path: Path, role: str) -> RunDir:
    """Create (if needed), lock and check a job's run directory (`RunDir.open`) as ``role`` holds it.

    Args:
        path: The run directory (`locate`'s).
        role: ``run`` (a launcher: never waits), or a brief holder: ``ask``, ``tell``, ``expire``, ``register``.

    Raises:
        RunDirBusy: A launcher holds it, or a brief holder kept it past `LOCK_WAIT`.
        RunDirError: It cannot be used.
    """
    if role == "run":
        return RunDir.open(path)
    return RunDir.open(path, wait=LOCK_WAIT, role=role, scan_trials=False)


def stored_spec(path: Path) -> JobSpec:
    """The job spec a run directory was started with (its resolved ``spec.yaml``).

    Parsed once per version of the file (its inode, size and modification time): a
    server answers many reports of one job, and each would otherwise parse it anew.

    Raises:
        RunDirError: It has none, or it cannot be read.
    """
    try:
        st = os.stat(path / SPEC_NAME)
    except OSError:
        return _parse_stored(str(path), None)
    return _parse_stored(str(path), (st.st_ino, st.st_size, st.st_mtime_ns))


@functools.lru_cache(maxsize=64)
def _parse_stored(path_text: str, version: tuple[int, int, int] | None) -> JobSpec:
    """`stored_spec` for one version of ``spec.yaml`` (None: not there; an error is never cached).

    A `JobSpec` is immutable, so one parsed copy is safely shared.
    """
    path = Path(path_text)
    data = read_settings(path)
    if data is None:
        raise RunDirError(
            f"run_dir = {str(path)!r} has no {SPEC_NAME}: it is not a run directory zeus-run started. Pass the job "
            "spec the first time (zeus-run run job.yaml, zeus-run ask job.yaml; the Job API: zeus_run.Job('job.yaml')); "
            "later commands can name the run directory."
        )
    data.pop("source", None)
    return parse_spec(yaml.safe_dump(data, sort_keys=False), source=path / SPEC_NAME)
