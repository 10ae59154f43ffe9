"""The run directory's ``starts.jsonl``: each trigger's start plan and, after its run, what happened.

One JSON object a line, appended (`append_start`) by the door that plans a trigger
(`zeus_run.door.start.record_plan`, `zeus_run.door.start.record_outcome`), read back by `read_starts` for
``history``, the report and the exports (`zeus_run.views.starts`). The file is there only for a job with a
``start`` section; without it every reader sees no entry.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

from zeus_run._fs import open_append

logger = logging.getLogger(__name__)

#: The run directory's record of each trigger's plan and what happened.
STARTS_NAME = "starts.jsonl"


def read_starts(run_dir: Path) -> list[dict[str, Any]]:
    """The run directory's ``starts.jsonl`` entries (none: empty; a damaged line is skipped)."""
    path = Path(run_dir) / STARTS_NAME
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError:
        return []
    out = []
    for line in lines:
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict):
            out.append(entry)
    return out


def append_start(run_dir: Path, entry: dict[str, Any]) -> None:
    """Append ``entry`` to ``starts.jsonl`` (fsynced); a failure to write is a warning, never an error."""
    path = Path(run_dir) / STARTS_NAME
    try:
        Path(run_dir).mkdir(parents=True, exist_ok=True)
        with open_append(path) as f:  # as every run-directory file: a link in its place is refused, not followed
            f.write((json.dumps(entry, sort_keys=False) + "\n").encode("utf-8"))
            f.flush()
            os.fsync(f.fileno())
    except OSError as exc:
        logger.warning("Cannot record the start plan in %s: %s", path, exc.strerror or exc)
