"""The one opener of a job's run directory, for every door.

``zeus-run run`` (and ``--next``), ``ask``, ``tell``, ``heartbeat``, ``exec``,
the Python `Job`, and the server all find a job's run directory and its spec
with `locate`, and lock it with `lock`:

* `locate`: a job spec (a file or a parsed `JobSpec`) names its ``run_dir`` (or
  the one given), checked against the history it holds (`choose_run_dir`: a
  history recorded under other decision settings is refused, or with
  ``force`` a sibling is started); a run directory names itself, and its spec is
  its own ``spec.yaml`` (`stored_spec`, read by `zeus_run.rundir.settings`).
* `lock`: a launcher (role ``run``) holds the lock for its whole run and waits
  for no one; an ask, a tell, an expiry or a registration holds it for a
  moment and waits at most `LOCK_WAIT` for another brief holder.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from pathlib import Path

import yaml

from zeus_run.errors import RunDirError, UsageError
from zeus_run.rundir.resume import choose_run_dir, keep_recorded_revision, keep_recorded_warm_start
from zeus_run.rundir.settings import SPEC_NAME, read_settings
from zeus_run.rundir.store import RunDir
from zeus_run.spec import JobSpec, load_spec, parse_spec

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


def locate(
    job: str | Path | JobSpec, run_dir: str | Path | None = None, *, new: bool = False, force: bool = False
) -> JobDir:
    """The run directory a door uses for ``job``, and the job's spec.

    Args:
        job: A parsed spec, a spec file (YAML), or a run directory that has a ``spec.yaml``.
        run_dir: The run directory, if not the spec's ``run_dir`` (or, for a run directory, itself).
        new: Start a fresh sibling whatever the history (``run --new``).
        force: Start (or resume) a sibling when the history was recorded under other settings.

    Raises:
        SpecError: The spec is invalid.
        UsageError: ``job`` is neither a spec file nor a run directory.
        RunDirError: The run directory's history or settings cannot be used with this spec.
    """
    if isinstance(job, JobSpec):
        base = Path(run_dir) if run_dir is not None else None
        if not new and not force:  # an upgrade's new default revision goes on under the recorded one
            job = keep_recorded_revision(job, (base or job.run_dir).absolute())
            job = keep_recorded_warm_start(job, (base or job.run_dir).absolute())
        path, resumed = choose_run_dir(job, base, new, force)
        return JobDir(job, path, resumed)
    p = Path(job)
    if p.is_dir():
        return JobDir(stored_spec(p), Path(run_dir) if run_dir is not None else p, True)
    if not p.is_file():
        raise UsageError(
            f"job = {str(p)!r}: no such spec file or run directory. Pass a job spec (job.yaml) or a run directory "
            "that has a spec.yaml."
        )
    return locate(load_spec(p), run_dir, new=new, force=force)


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
            "spec (zeus-run ask job.yaml) the first time; later asks and tells can name the run directory."
        )
    data.pop("source", None)
    return parse_spec(yaml.safe_dump(data, sort_keys=False), source=path / SPEC_NAME)
