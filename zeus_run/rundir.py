"""The run directory: one per job, holding everything a person needs to audit it.

Layout::

    runs/<job>/
      spec.yaml          the resolved spec the run was started with
      history.jsonl      one JSON record per trial (append-only)
      trials/r0003-t01/  per trial: output.log (stdout+stderr), events.jsonl
      running.json       present only while a trial runs (crash marker)
      .lock              the pid of the launcher holding the run

The launcher holding a run locks the directory itself (``flock`` on its fd),
which no one can delete from under it; ``.lock`` only names the holder. Run
directories can sit in shared places, so zeus-run refuses one that has
symbolic links (or files of the wrong type) where it writes, and writes every
file through `zeus_run._fs` (no links followed, temporaries with ``O_EXCL``).
"""

from __future__ import annotations

import errno
import fcntl
import json
import logging
import math
import os
import re
import shutil
import stat
import threading
from pathlib import Path
from typing import Any

from zeus_run import _fs
from zeus_run.cost import zeus_cost
from zeus_run.errors import HistoryError, RunDirError
from zeus_run.history import HISTORY_NAME, HistoryStore
from zeus_run.records import TrialRecord
from zeus_run.spec import DECISION_FIELDS, JobSpec
from zeus_run.spec._yaml import YamlLimitError, load_yaml

logger = logging.getLogger(__name__)

SPEC_NAME = "spec.yaml"
RUNNING_NAME = "running.json"
LOCK_NAME = ".lock"
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
#: Files zeus-run writes in each trial directory (``events.jsonl`` is the script's own).
TRIAL_FILES = ("output.log", "stop", "profile_done")
_MAX_RUNNING_BYTES = 4 * 1024 * 1024


class RunDir:
    """An opened, locked run directory."""

    def __init__(self, path: Path, lock_fd: int, info_fd: int = -1) -> None:
        self.path = path
        self._lock_fd = lock_fd
        self._info_fd = info_fd
        self.history = HistoryStore(path / HISTORY_NAME)
        #: The trials in flight (``trial -> info``), mirrored in ``running.json``.
        self._in_flight: dict[int, dict[str, Any]] = {}
        self._marker_lock = threading.Lock()

    @classmethod
    def open(cls, path: str | Path) -> RunDir:
        """Create (if needed), lock and check a run directory.

        Raises:
            RunDirError: It cannot be created or written, another launcher holds
                it, or it has links where zeus-run writes.
        """
        p = Path(path)
        try:
            p.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise RunDirError(
                f"Cannot create run directory {str(p)!r}: {exc.strerror or exc}. "
                "Choose a writable location with `run_dir` in the spec or --run-dir."
            ) from exc
        _refuse_world_writable(p)
        lock_fd = _lock(p)
        try:
            refuse_links(p)
            try:
                _fs.make_dir(p / TRIALS_NAME)
            except OSError as exc:
                raise _unusable(p / TRIALS_NAME, exc) from None
            check_writable(p)
            info_fd = _write_holder(p)
        except BaseException:
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
        return read_stored_spec(self.path)

    def save_spec(self, spec: JobSpec) -> None:
        """Write the resolved spec (atomically)."""
        import yaml

        header = "# Resolved job spec zeus-run started this run with (every default filled in).\n"
        atomic_write(self.spec_path, header + yaml.safe_dump(spec.to_dict(), sort_keys=False))

    # -- the in-flight marker ----------------------------------------------------
    def mark_running(self, info: dict[str, Any]) -> None:
        """Record (or update) a trial in flight in ``running.json``, atomically.

        One trial in flight: the file is its info. Several (``concurrency``): the file
        is ``{"in_flight": [info, ...]}`` in start order. Safe from several threads.
        """
        with self._marker_lock:
            self._in_flight[int(info["trial"])] = info
            self._write_markers()

    def clear_running(self, trial: int | None = None) -> None:
        """Forget one trial in flight (``trial``), or all of them (None)."""
        with self._marker_lock:
            if trial is None:
                self._in_flight.clear()
            else:
                self._in_flight.pop(trial, None)
            self._write_markers()

    def _write_markers(self) -> None:
        if self._in_flight:
            infos = [self._in_flight[k] for k in sorted(self._in_flight)]
            data: Any = infos[0] if len(infos) == 1 else {"in_flight": infos}
            atomic_write(self.path / RUNNING_NAME, json.dumps(data, indent=1) + "\n")
            return
        try:
            os.remove(self.path / RUNNING_NAME)
        except FileNotFoundError:
            pass
        except OSError as exc:
            logger.warning("cannot remove %s: %s", self.path / RUNNING_NAME, exc.strerror)

    def running_trials(self) -> list[dict[str, Any]] | None:
        """The trials a launcher had in flight (``running.json``): None if there is none, ``[]`` if it is unreadable.

        Only fields of the expected type are kept, since the launcher records a
        trial from them.
        """
        p = self.path / RUNNING_NAME
        if not os.path.lexists(p):
            return None
        try:
            with _fs.open_read(p) as f:
                data = json.loads(f.read(_MAX_RUNNING_BYTES + 1))
        except (OSError, ValueError, RecursionError) as exc:
            logger.warning("ignoring an unreadable %s (%s)", p, exc)
            return []
        if isinstance(data, dict) and isinstance(data.get("in_flight"), list):
            infos = [_running_fields(d, p) for d in data["in_flight"]]
        else:
            infos = [_running_fields(data, p)]
        return [i for i in infos if i]

    def trial_dir(self, recurrence: int, attempt: int) -> Path:
        """The directory of one trial, created if needed (never through a link).

        Raises:
            RunDirError: It is a link or cannot be created.
        """
        d = self.path / TRIALS_NAME / f"r{recurrence:04d}-t{attempt:02d}"
        for part in (d.parent, d):
            try:
                _fs.make_dir(part)
            except OSError as exc:
                raise _unusable(part, exc) from None
        for name in TRIAL_FILES:
            why = _fs.unsafe_entry(d / name)
            if why is not None:
                raise RunDirError(f"{why}. {_LINK_ADVICE}")
        return d


# -- choosing, checking and resuming a run directory ---------------------------------------


def choose_run_dir(spec: JobSpec, run_dir: Path | None, new: bool, force: bool) -> tuple[Path, bool]:
    """Pick the run directory: the spec's (or ``run_dir``), or a sibling ``NAME-2``, ``NAME-3``, ...

    The same command on the same spec always picks the same directory: with
    ``force``, a sibling an earlier ``--force`` started for this spec is
    resumed rather than a new one started on every call.

    Returns:
        The directory and whether it already holds a compatible history to resume.

    Raises:
        RunDirError: The existing history was recorded under different
            decision settings and neither ``new`` nor ``force`` was given.
        HistoryError: The existing history is damaged.
    """
    base = Path(run_dir) if run_dir is not None else spec.run_dir
    if new:
        return fresh_sibling(base), False
    try:
        diffs, has_history = compatibility(base, spec)
    except RunDirError:
        if not force:
            raise
        diffs, has_history = ["damaged"], True
    if not diffs:
        return base, has_history
    if force:
        for sibling in _siblings(base):
            try:
                sib_diffs, sib_history = compatibility(sibling, spec)
            except (RunDirError, HistoryError):
                continue
            if not sib_diffs:
                logger.info("resuming %s, the run directory an earlier --force started for this spec", sibling)
                return sibling, sib_history
        return fresh_sibling(base), False
    lines = "\n".join(f"  - {d}" for d in diffs)
    raise RunDirError(
        f"The run in {str(base)!r} was recorded with different settings, so its history cannot be resumed:\n{lines}\n"
        "Restore those settings to resume, or pass --force to start a new run directory next to it "
        "(the old history is kept; the same command with --force resumes that new directory next time)."
    )


def compatibility(path: Path, spec: JobSpec) -> tuple[list[str], bool]:
    """Why ``spec`` cannot continue the run in ``path`` (empty if it can), and whether it has history.

    With a stored ``spec.yaml`` its decision settings are compared. Without one
    (deleted) the history itself is checked against ``spec``: batch sizes,
    costs under ``eta``, targets, and a replay of every decision.

    Raises:
        RunDirError: ``spec.yaml`` is damaged.
        HistoryError: The history is damaged.
    """
    stored = read_stored_spec(path)
    records = list(HistoryStore(path / HISTORY_NAME).read(warn=False)) if (path / HISTORY_NAME).is_file() else []
    if stored is not None:
        diffs = spec_differences(stored, spec)
        if not diffs:
            diffs = [f"{SPEC_NAME} matches, but {p}" for p in history_mismatches(records, spec, full=False)]
        return diffs, bool(records)
    if not records:
        return [], False
    problems = history_mismatches(records, spec, full=True)
    if problems:
        return [f"{SPEC_NAME} is missing, and the history does not follow from this spec: {problems[0]}"], True
    logger.warning(
        "%s is missing from %s; its %d record(s) agree with this spec, so the run resumes (the spec is saved again)",
        SPEC_NAME,
        path,
        len(records),
    )
    return [], True


def history_mismatches(records: list[TrialRecord], spec: JobSpec, full: bool) -> list[str]:
    """Ways in which ``records`` could not have been produced under ``spec``.

    Args:
        records: The history.
        spec: The job spec to continue with.
        full: Check everything the history shows (used when ``spec.yaml`` is
            gone); otherwise only what would stop the optimizer from folding it.
    """
    out = []
    for i, r in enumerate(records):
        if r.batch_size not in spec.batch_sizes:
            out.append(f"line {i + 1}: batch size {r.batch_size} is not one of {list(spec.batch_sizes)}")
        elif full and r.trial != i:
            out.append(f"line {i + 1}: trial #{r.trial} is out of order")
    if out or not full:
        return out
    observed = 0
    for i, r in enumerate(records):
        if r.kind == "real" and r.seed is not None and r.seed != spec.seed + observed:
            out.append(f"line {i + 1}: the script's seed {r.seed} is not seed={spec.seed} + {observed} trials")
            break
        observed += r.observed
        if r.kind == "real" and r.observed and r.stop_reason != "skipped":
            expected = zeus_cost(r.energy, r.time, spec.eta, r.max_power)
            if not math.isclose(r.cost, expected, rel_tol=1e-6, abs_tol=1e-6):
                out.append(
                    f"line {i + 1}: its cost {r.cost:g} J is not eta={spec.eta:g} x energy + ... ({expected:g} J)"
                )
                break
        if r.kind == "real" and r.epochs > spec.max_epochs:
            out.append(f"line {i + 1}: {r.epochs} epochs is more than max_epochs={spec.max_epochs}")
            break
        hit = any(_hits(m, spec) for m in r.metrics)
        if r.kind == "real" and r.metrics and hit != r.reached:
            out.append(
                f"line {i + 1}: its metrics {list(r.metrics)} {'do not reach' if r.reached else 'reach'} the target"
            )
            break
    if out:
        return out
    from zeus_run.replay import Knobs, audit

    knobs = Knobs(
        batch_sizes=spec.batch_sizes,
        default_batch_size=spec.default_batch_size,
        eta=spec.eta,
        beta=spec.beta,
        seed=spec.seed,
        optimizer=spec.optimizer,
        target_metric=spec.target_metric,
        higher_is_better=spec.higher_is_better,
        max_epochs=spec.max_epochs,
        max_tries=spec.max_tries,
        horizon=spec.recurrences,
    )
    result = audit(records, knobs)
    if result.divergence is not None:
        out.append(f"replaying its decisions diverges at {result.divergence.describe()}")
    return out


def _hits(metric: float, spec: JobSpec) -> bool:
    return metric >= spec.target_metric if spec.higher_is_better else metric <= spec.target_metric


def read_stored_spec(path: Path) -> dict[str, Any] | None:
    """The resolved ``spec.yaml`` of a run directory, or None if there is none.

    Raises:
        RunDirError: It exists but cannot be read or is not a mapping of settings.
    """
    spec_file = path / SPEC_NAME
    if not os.path.lexists(spec_file):
        return None
    fix = (
        f"Restore it, or move it aside: zeus-run then checks the history against your job spec and writes "
        f"{SPEC_NAME} again (or pass --force to start a fresh run directory next to it)."
    )
    try:
        with _fs.open_read(spec_file) as f:
            data = load_yaml(f.read(1 << 20).decode("utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise RunDirError(f"Cannot read {str(spec_file)!r}: {exc}. {fix}") from None
    except YamlLimitError as exc:
        where = f" (line {exc.line})" if exc.line else ""
        raise RunDirError(f"{str(spec_file)!r} is damaged{where}: {exc.why}. {fix}") from None
    if not isinstance(data.data, dict):
        kind = "empty" if data.data is None else f"a {type(data.data).__name__}, not a mapping of settings"
        raise RunDirError(f"{str(spec_file)!r} is {kind}. {fix}")
    return data.data


def spec_differences(stored: dict[str, Any], spec: JobSpec) -> list[str]:
    """Decision-relevant settings that differ between a stored and a new spec."""
    new = spec.to_dict()
    if isinstance(stored.get("optimizer"), dict) and "revision" not in stored["optimizer"]:
        stored = {**stored, "optimizer": {**stored["optimizer"], "revision": 1}}  # recorded before revisions
    out = []
    for key in DECISION_FIELDS:
        old_v, new_v = stored.get(key), new.get(key)
        if isinstance(old_v, dict) and isinstance(new_v, dict):
            for sub in sorted(set(old_v) | set(new_v), key=str):
                if old_v.get(sub) != new_v.get(sub):
                    out.append(f"{key}.{sub}: {old_v.get(sub)!r} -> {new_v.get(sub)!r}")
        elif old_v != new_v:
            out.append(f"{key}: {old_v!r:.200} -> {new_v!r}")
    return out


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


def _siblings(base: Path) -> list[Path]:
    pattern = re.compile(re.escape(base.name) + r"-([0-9]{1,6})")
    try:
        names = [(int(m.group(1)), e.name) for e in base.parent.iterdir() if (m := pattern.fullmatch(e.name))]
    except OSError:
        return []
    return [base.with_name(name) for _, name in sorted(names) if (base.parent / name).is_dir()]


# -- checks and writes ------------------------------------------------------------------------

_LINK_ADVICE = (
    "zeus-run does not follow symbolic links in a run directory: whoever planted one could make it overwrite "
    "the link's target. Remove it, or choose another run directory."
)


def refuse_links(path: Path) -> None:
    """Refuse a run directory with links (or files of the wrong type) where zeus-run writes.

    Raises:
        RunDirError: Lists every such entry.
    """
    found = [why for name in WRITTEN_FILES if (why := _fs.unsafe_entry(path / name)) is not None]
    trials = path / TRIALS_NAME
    why = _fs.unsafe_entry(trials, want_dir=True)
    if why is not None:
        found.append(why)
    elif trials.is_dir():
        try:
            entries = list(os.scandir(trials))
        except OSError as exc:
            raise _unusable(trials, exc) from None
        for entry in entries:
            if entry.is_symlink() or not entry.is_dir(follow_symlinks=False):
                found.append(_fs.unsafe_entry(entry.path, want_dir=True) or entry.path)
                continue
            found += [why for name in TRIAL_FILES if (why := _fs.unsafe_entry(Path(entry.path) / name)) is not None]
    if found:
        shown = "\n".join(f"  - {f}" for f in found[:10]) + (
            f"\n  ... and {len(found) - 10} more" if len(found) > 10 else ""
        )
        raise RunDirError(
            f"Run directory {str(path)!r} has entries zeus-run cannot write safely:\n{shown}\n{_LINK_ADVICE}"
        )


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


def _lock(path: Path) -> int:
    """Lock the directory itself; fall back to a lock file where directories cannot be locked."""
    try:
        return _fs.lock_dir(path)
    except BlockingIOError:
        raise _in_use(path) from None
    except OSError as exc:
        if exc.errno not in (errno.EBADF, errno.ENOLCK, errno.EINVAL, errno.EOPNOTSUPP):
            raise _unusable(path, exc) from None
    # NOTE: some network file systems emulate flock with byte-range locks, which
    # need a file open for writing. The lock file is re-checked after locking:
    # if it was replaced in between, the lock is taken again on the new one.
    logger.debug("cannot lock the directory %s itself; locking %s", path, LOCK_NAME)
    lock_path = path / LOCK_NAME
    for _ in range(10):
        try:
            fd = _fs.open_fd(lock_path, os.O_RDWR | os.O_CREAT)
        except OSError as exc:
            raise _unusable(lock_path, exc) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise _in_use(path) from None
        try:
            same = os.path.samestat(os.fstat(fd), os.lstat(lock_path))
        except OSError:
            same = False
        if same:
            return fd
        os.close(fd)
    raise RunDirError(
        f"Cannot lock {str(lock_path)!r}: it keeps being replaced. Is another program using the run directory?"
    )


def _in_use(path: Path) -> RunDirError:
    holder = "unknown"
    try:
        with _fs.open_read(path / LOCK_NAME) as f:
            holder = f.read(32).decode("ascii", "replace").strip() or "unknown"
    except OSError:
        pass
    return RunDirError(
        f"Run directory {str(path)!r} is in use by another zeus-run launcher (pid {holder}). "
        "Wait for it to finish, stop it, or use a different --run-dir."
    )


def _write_holder(path: Path) -> int:
    """Write this launcher's pid into ``.lock`` (for the message another launcher shows)."""
    lock_path = path / LOCK_NAME
    try:
        fd = _fs.open_fd(lock_path, os.O_RDWR | os.O_CREAT)
    except OSError as exc:
        raise _unusable(lock_path, exc) from None
    try:
        os.ftruncate(fd, 0)
        _fs.write_all(fd, f"{os.getpid()}\n".encode())
    except OSError as exc:
        os.close(fd)
        raise _unusable(lock_path, exc) from None
    return fd


def _unusable(path: Path, exc: OSError) -> RunDirError:
    if isinstance(exc, _fs.UnsafePathError):
        return RunDirError(f"{exc.strerror}. {_LINK_ADVICE}")
    return RunDirError(
        f"Cannot use {str(path)!r}: {exc.strerror or exc}. Fix its permissions or free space, or choose another "
        "run directory with --run-dir."
    )


def check_writable(path: Path) -> None:
    """Fail early if a trial's results could not be saved.

    Raises:
        RunDirError: The directory is not writable or the disk is (nearly) full.
    """
    probe = path / PROBE_NAME
    with _PROBE_LOCK:  # trials on several slots check at once
        _probe(path, probe)
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
            "Fix its permissions or free space, or choose another with --run-dir."
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
            f"Could not write {str(path)!r}: {exc.strerror or exc}. Nothing recorded so far is lost; free disk "
            "space or fix permissions, then run the same command again to resume."
        ) from None


_RUNNING_TYPES: dict[str, tuple[type, ...]] = {
    "recurrence": (int,),
    "attempt": (int,),
    "trial": (int,),
    "batch_size": (int,),
    "seed": (int,),
    "pid": (int,),
    "learning_rate": (int, float),
    "max_power": (int, float),
    "cost_threshold": (int, float),
    "stage": (str,),
    "detail": (str,),
    "started_at": (str,),
    "energy_source": (str,),
    "token": (str,),
    "event_log": (str,),
    "estimated": (bool,),
    # concurrent runs: the decision's context (`zeus_run.engine.TrialRequest.stamp`)
    "seen": (int,),
    "in_flight": (list,),
    "draw": (int,),
    "probe": (bool,),
    # the executor that ran it, and what it needs to find the trial again
    "executor": (str,),
    "slot": (int,),
    "job_name": (str,),
    "job_prefix": (str,),
    "trial_dir": (str,),
    "slurm_job_id": (str,),
    "heartbeat_timeout": (int, float),
}


def _running_fields(data: Any, path: Path) -> dict[str, Any]:
    if not isinstance(data, dict):
        logger.warning("ignoring %s: not a JSON object", path)
        return {}
    out: dict[str, Any] = {}
    for key, types in _RUNNING_TYPES.items():
        v = data.get(key)
        if isinstance(v, bool) and bool not in types:
            continue
        if isinstance(v, types):
            if isinstance(v, int) and not 0 <= v < 2**63:
                continue
            if isinstance(v, float) and not math.isfinite(v):
                continue
            if isinstance(v, list) and not all(isinstance(x, int) and not isinstance(x, bool) for x in v):
                continue
            out[key] = v
    required = ("recurrence", "attempt", "trial", "batch_size")
    if any(k in data for k in required) and not all(k in out for k in required):
        logger.warning("ignoring %s: its trial fields are damaged", path)
        return {}
    return out
