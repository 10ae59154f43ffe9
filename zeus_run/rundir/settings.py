"""The one reader of a run directory's settings (its resolved ``spec.yaml``).

Every door and view reads them here: the launcher (resuming), ask/tell and the
server (`zeus_run.asktell._session.spec_of`), replay and the audit
(`zeus_run.engine.knobs.Knobs.from_run_dir`), and ``history``, ``plot``,
``report`` and the exports (`RunSettings`). The file is read as every other
file of a run directory is: never through a link (`zeus_run._fs.open_read`), at
most `MAX_BYTES`, with the spec loader's bounded YAML (no aliases that multiply,
no nesting past its limit), so a damaged or hostile ``spec.yaml`` is an error
that names the file, never a hang or a traceback.

Within one trigger (`read_once`: a ``zeus-run run`` from locating its run directory to its summary, an ask, a
tell) each run directory's ``spec.yaml`` is read once: the later readers get the settings read first, until this
process writes it again (`forget`, called by `zeus_run.rundir.store.RunDir.save_spec`).
"""

from __future__ import annotations

import contextlib
import contextvars
import copy
import logging
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from zeus_run import _fs
from zeus_run.errors import RunDirError
from zeus_run.spec import YamlLimitError, load_yaml

logger = logging.getLogger(__name__)

SPEC_NAME = "spec.yaml"
#: Largest ``spec.yaml`` read (unit: bytes): a resolved spec is a few KiB.
MAX_BYTES = 1 << 20


#: The settings read in this trigger, per run directory (None: outside `read_once`, every call reads).
_READ: contextvars.ContextVar[dict[Path, dict[str, Any] | None] | None] = contextvars.ContextVar(
    "zeus_run_settings_read", default=None
)


@contextlib.contextmanager
def read_once() -> Iterator[None]:
    """Within: each run directory's ``spec.yaml`` is read at most once (see the module docstring). Nested: the
    outermost one holds."""
    if _READ.get() is not None:
        yield
        return
    token = _READ.set({})
    try:
        yield
    finally:
        _READ.reset(token)


def forget(path: Path) -> None:
    """This process wrote ``path``'s ``spec.yaml``: the next reader in this trigger reads it again."""
    read = _READ.get()
    if read is not None:
        read.pop(Path(path).absolute(), None)


def read_settings(path: Path) -> dict[str, Any] | None:
    """The resolved ``spec.yaml`` of run directory ``path``, or None if there is none (read once per trigger:
    `read_once`).

    Raises:
        RunDirError: It exists but cannot be read (a link, too large, damaged YAML), or it is not a
            mapping of settings.
    """
    read = _READ.get()
    if read is None:
        return _read(path)
    key = Path(path).absolute()
    if key not in read:
        read[key] = _read(path)  # an error is raised again by the next reader: it is not kept
    return copy.deepcopy(read[key])


def _read(path: Path) -> dict[str, Any] | None:
    spec_file = path / SPEC_NAME
    if not os.path.lexists(spec_file):
        return None
    fix = (
        f"Restore it, or move it aside: zeus-run then checks the history against your job spec and writes "
        f"{SPEC_NAME} again (or pass --force to start a fresh run directory next to it)."
    )
    try:
        with _fs.open_read(spec_file) as f:
            raw = _fs.read_at_most(f, MAX_BYTES + 1)
        if len(raw) > MAX_BYTES:
            raise RunDirError(f"{str(spec_file)!r} is larger than {MAX_BYTES} bytes: not a spec zeus-run wrote. {fix}")
        data = load_yaml(raw.decode("utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise RunDirError(f"Cannot read {str(spec_file)!r}: {exc}. {fix}") from None
    except YamlLimitError as exc:
        where = f" (line {exc.line})" if exc.line else ""
        raise RunDirError(f"{str(spec_file)!r} is damaged{where}: {exc.why}. {fix}") from None
    if not isinstance(data.data, dict):
        kind = "empty" if data.data is None else f"a {type(data.data).__name__}, not a mapping of settings"
        raise RunDirError(f"{str(spec_file)!r} is {kind}. {fix}")
    return data.data


@dataclass(frozen=True)
class RunSettings:
    """A run directory's settings read once, for the read-only views (``history``, ``plot``, ``report``).

    Attributes:
        path: The run directory.
        raw: Its settings (None: it has none, or they could not be read; ``error`` says why).
        error: Why they could not be read, or None.
    """

    path: Path
    raw: Mapping[str, Any] | None
    error: str | None = None

    @classmethod
    def read(cls, path: Path) -> RunSettings:
        """Read them; a missing or unreadable ``spec.yaml`` gives empty settings (logged), never an error."""
        try:
            return cls(path, read_settings(path))
        except RunDirError as exc:
            logger.info("%s", exc)
            return cls(path, None, str(exc))

    @property
    def default_batch_size(self) -> int | None:
        """b0, if the settings name one."""
        value = (self.raw or {}).get("default_batch_size")
        if isinstance(value, bool) or not isinstance(value, (int, str)):
            return None
        try:
            return int(value)
        except ValueError:
            return None

    @property
    def accounting(self) -> Mapping[str, Any] | None:
        """The ``accounting`` section, if any."""
        section = (self.raw or {}).get("accounting")
        return section if isinstance(section, Mapping) else None

    @property
    def lease(self) -> float | None:
        """The ask/tell lease (unit: s), if the settings name one."""
        value = (self.raw or {}).get("lease")
        return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None
