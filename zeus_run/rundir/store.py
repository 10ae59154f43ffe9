"""The run directory: one per job, holding everything a person needs to audit it.

Layout::

    runs/<job>/
      spec.yaml          the resolved spec in force (the one the last run was started with)
      spec.N.yaml        the specs it replaced, oldest first (a resumable change: metric, command, ...)
      history.jsonl      one JSON record per trial (append-only)
      trials/r0003-t01/  per trial: output.log (stdout+stderr), events.jsonl
      running.json       present only while a trial runs (crash marker)
      joins/             requests of --next triggers that joined the launcher (`zeus_run.rundir.joins`)
      .lock              the holder: pid, host, since (UTC), role (`zeus_run.rundir.lock`)

The launcher holding a run locks the directory itself (``flock`` on its fd),
which no one can delete from under it; ``.lock`` only names the holder. Run
directories can sit in shared places, so zeus-run refuses one that has
symbolic links (or files of the wrong type) where it writes, and writes every
file through `zeus_run._fs` (no links followed, temporaries with ``O_EXCL``).
"""

from __future__ import annotations

import errno
import json
import logging
import os
import shutil
import stat
import threading
from pathlib import Path
from typing import Any

from zeus_run import _fs
from zeus_run.contract import RUNNING_NAME, RunningMarker, TrialFiles, markers_from_json, markers_to_json
from zeus_run.errors import RunDirError
from zeus_run.rundir.history import HISTORY_NAME, HistoryStore
from zeus_run.rundir.lock import _LINK_ADVICE, LOCK_NAME, _lock_waiting, _unusable, _write_holder
from zeus_run.rundir.ranout import resource_fix
from zeus_run.rundir.settings import SPEC_NAME, forget, read_settings
from zeus_run.spec import JobSpec

logger = logging.getLogger(__name__)

PROBE_NAME = ".write-probe"
TRIALS_NAME = "trials"
MIN_FREE_BYTES = 1 << 20

#: Files zeus-run writes at the top of a run directory (temporaries included).
WRITTEN_FILES = (
    HISTORY_NAME,
    HISTORY_NAME + ".torn",
    SPEC_NAME,
    SPEC_NAME + ".tmp",
    RUNNING_NAME,
    RUNNING_NAME + ".tmp",
    LOCK_NAME,
    PROBE_NAME,
    "power_profiles.json",
    "power_profiles.json.tmp",
)
_MAX_RUNNING_BYTES = 4 * 1024 * 1024


class RunDir:
    """An opened, locked run directory."""

    def __init__(self, path: Path, lock_fd: int, info_fd: int = -1) -> None:
        self.path = path
        self._lock_fd = lock_fd
        self._info_fd = info_fd
        self.history = HistoryStore(path / HISTORY_NAME)
        #: The trials in flight (``trial -> info``), mirrored in ``running.json``.
        self._in_flight: dict[int, RunningMarker] = {}
        self._marker_lock = threading.Lock()

    @classmethod
    def open(cls, path: str | Path, wait: float = 0.0, role: str = "run", scan_trials: bool = True) -> RunDir:
        """Create (if needed), lock and check a run directory.

        Args:
            path: The run directory.
            wait: Seconds to wait for the lock while a *brief* holder has it (an ask or a
                tell, which hold it for a moment); a launcher's lock (role ``run``) is
                never waited for. 0: do not wait.
            role: What this holder does, written into ``.lock``: ``run`` (a launcher, held
                for the whole run) or a brief role (``ask``, ``tell``, ``expire``).
            scan_trials: Check every trial directory for links (`refuse_links`). A brief
                holder that touches one trial checks that one itself (`trial_dir`), so a
                server's per-request cost does not grow with the number of trials.

        Raises:
            RunDirError: It cannot be created or written, another launcher holds
                it, or it has links where zeus-run writes.
            RunDirBusy: Another launcher holds it (or a brief holder kept it past ``wait``).
        """
        p = Path(path)
        try:
            _fs.make_dirs(p)  # 0755 whatever the umask (`umask 000` would make it writable by everyone)
        except OSError as exc:
            raise RunDirError(
                f"Cannot create run directory {str(p)!r}: {exc.strerror or exc}. "
                "Choose a writable location with `run_dir` in the spec or --run-dir."
            ) from exc
        _refuse_world_writable(p)
        lock_fd = _lock_waiting(p, wait)
        info_fd = -1
        try:
            # NOTE: the name first: until it is written, another process that finds the directory held cannot
            # tell a launcher (which a --next trigger joins, `zeus_run.rundir.joins`) from a brief holder.
            try:
                info_fd = _write_holder(p, role)
            except RunDirError:
                refuse_links(p, scan=scan_trials)  # names every entry it cannot write safely, .lock among them
                raise
            refuse_links(p, scan=scan_trials)
            try:
                _fs.make_dir(p / TRIALS_NAME)
            except OSError as exc:
                raise _unusable(p / TRIALS_NAME, exc) from None
            if role == "run":
                check_writable(p)
            else:  # a brief holder writes a file or two at once, and each write that fails says which and why
                check_free(p)
        except BaseException:
            if info_fd >= 0:
                os.close(info_fd)
            os.close(lock_fd)
            raise
        return cls(p, lock_fd, info_fd)

    def close(self) -> None:
        """Release the lock."""
        for fd in (self._info_fd, self._lock_fd):
            if fd >= 0:
                os.close(fd)  # closing the fd releases its flock
        self._lock_fd = self._info_fd = -1

    def __enter__(self) -> RunDir:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- spec --------------------------------------------------------------------
    @property
    def spec_path(self) -> Path:
        return self.path / SPEC_NAME

    def stored_spec(self) -> dict[str, Any] | None:
        """The resolved spec saved when the run started, if any.

        Raises:
            RunDirError: It exists but is not a readable mapping of settings.
        """
        return read_settings(self.path)

    def save_spec(self, spec: JobSpec) -> None:
        """Write the resolved spec (atomically)."""
        import yaml

        header = "# Resolved job spec zeus-run started this run with (every default filled in).\n"
        atomic_write(self.spec_path, header + yaml.safe_dump(spec.to_dict(), sort_keys=False))
        forget(self.path)

    def keep_spec(self, spec: JobSpec) -> Path | None:
        """Make ``spec`` the spec in force (``spec.yaml``), keeping the one it replaces as ``spec.<n>.yaml``.

        The caller has checked that ``spec`` may continue this history (a resumable change: a new
        ``metric``, ``command`` or ``accounting``, never a decision setting). Where it was started from
        (``source``) is no setting, and settings the stored spec lacks (an older zeus-run's) are not
        compared (`_differs`): a spec that differs only there leaves ``spec.yaml`` as it is.

        Returns:
            The kept old spec's path, None when nothing was replaced (a new job, or no change).

        Raises:
            RunDirError: The stored spec is damaged (`stored_spec`).
            OSError: A file could not be written.
        """
        import yaml

        stored = self.stored_spec()
        if stored is None:
            self.save_spec(spec)
            return None
        now = yaml.safe_load(yaml.safe_dump(spec.to_dict(), sort_keys=False))
        if not _differs(stored, now):
            return None
        n = 1
        while os.path.lexists(self.path / f"spec.{n}.yaml"):
            n += 1
        kept = self.path / f"spec.{n}.yaml"
        _fs.atomic_write(kept, self.spec_path.read_bytes())  # the old one, as it was
        self.save_spec(spec)
        logger.info("the spec changed: %s is the spec in force, the one before it is kept as %s", SPEC_NAME, kept)
        return kept

    # -- the in-flight marker ----------------------------------------------------
    def mark_running(self, marker: RunningMarker) -> None:
        """Record (or update) a trial in flight in ``running.json``, atomically.

        One trial in flight: the file is its marker. Several (``concurrency``): the file
        is ``{"in_flight": [marker, ...]}`` in start order. Safe from several threads.
        """
        with self._marker_lock:
            before = self._in_flight.get(marker.trial)
            self._in_flight[marker.trial] = marker
            try:
                self._write_markers()
            except BaseException:  # not written (too many open files, disk full): not in flight either, so that
                if before is None:  # the next trial's write does not name a trial that never started
                    self._in_flight.pop(marker.trial, None)
                else:
                    self._in_flight[marker.trial] = before
                raise

    def replace_running(self, markers: list[RunningMarker]) -> None:
        """Make ``markers`` the trials in flight, in one atomic write of ``running.json`` (none: it is removed)."""
        with self._marker_lock:
            self._in_flight = {m.trial: m for m in markers}
            self._write_markers()

    def track_running(self, markers: list[RunningMarker]) -> None:
        """Take ``markers`` as the trials in flight, as ``running.json`` has them already (nothing is written)."""
        with self._marker_lock:
            self._in_flight = {m.trial: m for m in markers}

    def clear_running(self, trial: int | None = None) -> None:
        """Forget one trial in flight (``trial``), or all of them (None)."""
        with self._marker_lock:
            if trial is None:
                self._in_flight.clear()
            else:
                self._in_flight.pop(trial, None)
            self._write_markers()

    def sync_running(self) -> None:
        """Write ``running.json`` as the trials in flight are now (a marker whose removal could not be written
        earlier, out of file descriptors, is dropped)."""
        with self._marker_lock:
            self._write_markers()

    def _write_markers(self) -> None:
        if self._in_flight:
            data = markers_to_json(list(self._in_flight.values()))
            atomic_write(self.path / RUNNING_NAME, json.dumps(data, indent=1) + "\n")
            return
        try:
            os.remove(self.path / RUNNING_NAME)
        except FileNotFoundError:
            pass
        except OSError as exc:
            logger.warning("cannot remove %s: %s", self.path / RUNNING_NAME, exc.strerror)

    def running_trials(self) -> list[RunningMarker] | None:
        """The trials a launcher had in flight (``running.json``): None if there is none, ``[]`` if it is unreadable.

        Only fields of the expected type are kept (`zeus_run.contract.RunningMarker.from_json`),
        since the launcher records a trial from them.
        """
        return read_running(self.path)

    def trial_path(self, recurrence: int, attempt: int) -> Path:
        """The directory of one trial (not created)."""
        return self.path / TRIALS_NAME / TrialFiles.dir_name(recurrence, attempt)

    def trial_dir(self, recurrence: int, attempt: int) -> Path:
        """The directory of one trial, created if needed (never through a link).

        Raises:
            RunDirError: It is a link or cannot be created.
        """
        d = self.trial_path(recurrence, attempt)
        for part in (d.parent, d):
            try:
                _fs.make_dir(part)
            except OSError as exc:
                raise _unusable(part, exc) from None
        for name in TrialFiles.WRITTEN:
            why = _fs.unsafe_entry(d / name)
            if why is not None:
                raise RunDirError(f"{why}. {_LINK_ADVICE}")
        return d


def fresh_sibling(base: Path) -> Path:
    """``base`` if it is missing or empty, else the first free ``NAME-2``, ``NAME-3``, ..."""
    if not base.exists() or not any(base.iterdir()):
        return base
    for i in range(2, 10_000):
        cand = base.with_name(f"{base.name}-{i}")
        if not cand.exists():
            logger.info("starting a new run directory %s (the old one is kept)", cand)
            return cand
    raise RunDirError(f"Too many run directories next to {str(base)!r}; clean some up or pass --run-dir.")


def first_missing(path: Path) -> Path | None:
    """The topmost of ``path`` and its parents that does not exist yet (what creating ``path`` creates), or None."""
    missing = None
    for p in (path, *path.parents):
        if os.path.lexists(p):
            return missing
        missing = p
    return missing


def remove_if_unused(rd: RunDir, created: Path | None = None) -> None:
    """Remove a run directory this launcher created, if nothing was recorded in it (a run that failed at start).

    Only zeus-run's own files may be there: the lock, the spec, empty trial directories.
    The parents it created along with it (up to ``created``, `first_missing`) go too while empty.
    """
    if (rd.path / HISTORY_NAME).exists() or os.path.lexists(rd.path / RUNNING_NAME):
        return
    own = {LOCK_NAME, SPEC_NAME, PROBE_NAME, TRIALS_NAME}
    try:
        if not {e.name for e in os.scandir(rd.path)} <= own:
            return
        trials = rd.path / TRIALS_NAME
        for d in list(os.scandir(trials)) if trials.is_dir() else []:
            if not d.is_dir(follow_symlinks=False) or any(os.scandir(d.path)):
                return
        shutil.rmtree(rd.path)
        logger.debug("removed %s: nothing was recorded in it", rd.path)
        parent = rd.path.parent
        while created is not None and created != rd.path and (parent == created or created in parent.parents):
            os.rmdir(parent)  # only while empty: OSError otherwise, and the rest stays
            parent = parent.parent
    except OSError as exc:
        logger.debug("could not remove the unused run directory %s: %s", rd.path, exc)


def read_running(path: Path) -> list[RunningMarker] | None:
    """The trials in flight that a run directory's ``running.json`` names (read-only; see `RunDir.running_trials`)."""
    p = path / RUNNING_NAME
    if not os.path.lexists(p):
        return None
    try:
        with _fs.open_read(p) as f:
            data = json.loads(_fs.read_at_most(f, _MAX_RUNNING_BYTES + 1))
    except (OSError, ValueError, RecursionError) as exc:
        logger.warning("ignoring an unreadable %s (%s)", p, exc)
        return []
    markers, damaged = markers_from_json(data)
    if damaged:
        logger.warning("ignoring %d damaged trial(s) in %s", damaged, p)
    return markers


# -- checks and writes ------------------------------------------------------------------------


def refuse_links(path: Path, scan: bool = True) -> None:
    """Refuse a run directory with links (or files of the wrong type) where zeus-run writes
    (``scan``: in every trial directory too).

    Raises:
        RunDirError: Lists every such entry.
    """
    odd = _odd_entries(path)  # one listing, not a stat per name: a server's every ask and tell checks
    found = [why for name in WRITTEN_FILES if name in odd and (why := _fs.unsafe_entry(path / name)) is not None]
    trials = path / TRIALS_NAME
    why = _fs.unsafe_entry(trials, want_dir=True) if TRIALS_NAME in odd else None
    if why is not None:
        found.append(why)
    elif scan and trials.is_dir():
        try:
            entries = list(os.scandir(trials))
        except OSError as exc:
            raise _unusable(trials, exc) from None
        for entry in entries:
            if entry.is_symlink() or not entry.is_dir(follow_symlinks=False):
                found.append(_fs.unsafe_entry(entry.path, want_dir=True) or entry.path)
                continue
            found += [
                why for name in TrialFiles.WRITTEN if (why := _fs.unsafe_entry(Path(entry.path) / name)) is not None
            ]
    if found:
        shown = "\n".join(f"  - {f}" for f in found[:10]) + (
            f"\n  ... and {len(found) - 10} more" if len(found) > 10 else ""
        )
        raise RunDirError(
            f"Run directory {str(path)!r} has entries zeus-run cannot write safely:\n{shown}\n{_LINK_ADVICE}"
        )


_CHECKED = frozenset(WRITTEN_FILES)


def _odd_entries(path: Path) -> set[str]:
    """The names of `WRITTEN_FILES` and ``trials`` in ``path`` that its listing shows as a link or of the wrong
    type (each then looked at with `zeus_run._fs.unsafe_entry`); all of them where it cannot be listed."""
    odd = set()
    try:
        with os.scandir(path) as entries:
            for entry in entries:
                if entry.name == TRIALS_NAME:
                    if entry.is_symlink() or not entry.is_dir(follow_symlinks=False):
                        odd.add(entry.name)
                elif entry.name in _CHECKED and (entry.is_symlink() or not entry.is_file(follow_symlinks=False)):
                    odd.add(entry.name)
    except OSError:
        return {*WRITTEN_FILES, TRIALS_NAME}
    return odd


def _refuse_world_writable(path: Path) -> None:
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        raise _unusable(path, exc) from None
    if mode & stat.S_IWOTH:
        raise RunDirError(
            f"Run directory {str(path)!r} is writable by every user (mode {stat.filemode(mode)}), so anyone could "
            "plant links or files in it. Use a directory of your own (e.g. run_dir: runs/<name>), or `chmod o-w` it."
        )


def check_writable(path: Path) -> None:
    """Fail early if a trial's results could not be saved: write and fsync a probe (a file system may report a
    full disk only then), and check the free space (`check_free`).

    Raises:
        RunDirError: The directory is not writable or the disk is (nearly) full.
    """
    probe = path / PROBE_NAME
    with _PROBE_LOCK:  # trials on several slots check at once
        _probe(path, probe)
    check_free(path)


def check_free(path: Path) -> None:
    """Fail early if the disk under ``path`` is (nearly) full.

    Raises:
        RunDirError: It has less than `MIN_FREE_BYTES` free.
    """
    free = shutil.disk_usage(path).free
    if free < MIN_FREE_BYTES:
        raise RunDirError(
            f"Run directory {str(path)!r} has only {free} bytes free. Free some disk space, then run the same command to resume."
        )


_PROBE_LOCK = threading.Lock()


def _probe(path: Path, probe: Path) -> None:
    try:
        try:
            os.unlink(probe)  # a stale probe, or a link planted in its place (unlink removes the link itself)
        except FileNotFoundError:
            pass
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        try:
            _fs.write_all(fd, b"ok")
            os.fsync(fd)
        finally:
            os.close(fd)
            os.remove(probe)
    except OSError as exc:
        raise RunDirError(
            f"Run directory {str(path)!r} is not writable: {exc.strerror or exc}. "
            + (
                f"{resource_fix(exc)[0].upper()}{resource_fix(exc)[1:]}, then run the same command again."
                if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOMEM)
                else "Fix its permissions or free space, or choose another with --run-dir."
            )
        ) from exc


def atomic_write(path: Path, text: str) -> None:
    """Write a file via an ``O_EXCL`` temporary and ``os.replace`` (see `zeus_run._fs.atomic_write`).

    Raises:
        RunDirError: It could not be written; names the file and why. The old content is kept.
    """
    try:
        _fs.atomic_write(path, text)
    except OSError as exc:
        raise RunDirError(
            f"Could not write {str(path)!r}: {exc.strerror or exc}. Nothing recorded so far is lost; "
            f"{resource_fix(exc)}, then run the same command again to resume."
        ) from exc


def _differs(stored: dict[str, Any], now: dict[str, Any]) -> bool:
    """Whether the resolved spec ``now`` changes a setting the stored spec has (``source`` is none).

    A setting the stored spec lacks is not compared: a run directory written by an older zeus-run has no
    ``optimizer.revision`` (revision 1, which a resumed run keeps) and no sections that came later, and it is
    left as it was rather than rewritten for them.
    """
    for key, value in now.items():
        if key == "source" or key not in stored:
            continue
        old = stored[key]
        if isinstance(old, dict) and isinstance(value, dict):
            if any(sub in old and old[sub] != v for sub, v in value.items()):
                return True
        elif old != value:
            return True
    return False


def changed_fields(stored: dict[str, Any] | None, spec: JobSpec, section: str) -> str | None:
    """The fields of ``spec``'s ``section`` that differ from the stored spec's, e.g. ``metric.regex, metric.source``.

    Args:
        stored: The stored ``spec.yaml`` (`RunDir.stored_spec`); None: a new job (nothing changed).
        spec: The spec the run goes on with.
        section: A section of the spec (``metric``).

    Returns:
        The changed fields, comma-separated; None when none changed.
    """
    import yaml

    if stored is None or not isinstance(stored.get(section), dict):
        return None
    now = yaml.safe_load(yaml.safe_dump(spec.to_dict()[section], sort_keys=False)) or {}
    before = stored[section]
    keys = [k for k in now if now.get(k) != before.get(k)] + [k for k in before if k not in now]
    return ", ".join(f"{section}.{k}" for k in keys) or None
