"""``belief.json``: what the engine believed after the last record it folded, kept beside the history.

Every door that saves a trial writes it after folding that trial (`zeus_run.door.save.TrialSaver.note`): the
batch size the optimizer treats as best (its leader) and the recurrences that ran slow across the board. The
views read it (`zeus_run.views.recommend.saved_belief`) instead of folding the history under a new engine: it is
current when it covers every record of the history (their count and the last one's trial). Storage only: what
it holds is the engine's.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

from zeus_run import _fs

logger = logging.getLogger(__name__)

BELIEF_NAME = "belief.json"
#: Largest ``belief.json`` read (unit: bytes).
MAX_BYTES = 1 << 20


@dataclass(frozen=True)
class SavedBelief:
    """The engine's belief after folding ``folded`` records, the last of them trial ``last_trial``.

    Attributes:
        folded: Records folded.
        last_trial: The ``trial`` of the last record folded.
        leader: The batch size the optimizer treats as best (None: no belief yet, or a policy without one).
        slow: Recurrences that ran slow across the board -> slowdown factor.
    """

    folded: int
    last_trial: int
    leader: int | None
    slow: dict[int, float] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(
            {
                "folded": self.folded,
                "last_trial": self.last_trial,
                "leader": self.leader,
                "slow": {str(k): v for k, v in sorted(self.slow.items())},
            }
        )


def write_belief(run_dir: Path, belief: SavedBelief) -> None:
    """Write ``belief.json`` (the caller holds the run directory's lock): replaced whole, not synced to disk. It
    is derived from the history, which is: a crash that loses or tears it leaves a belief that does not cover the
    history (or none), and the views replay the records instead."""
    path = Path(run_dir) / BELIEF_NAME
    tmp = path.with_name(BELIEF_NAME + ".tmp")
    with contextlib.suppress(FileNotFoundError):
        os.unlink(tmp)  # a link planted there is removed, never followed
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644)
    try:
        _fs.write_all(fd, (belief.to_json() + "\n").encode("utf-8"))
    finally:
        os.close(fd)
    os.replace(tmp, path)


def read_belief(run_dir: Path) -> SavedBelief | None:
    """The saved belief, or None where there is none or it cannot be read (a view then has none to show)."""
    path = Path(run_dir) / BELIEF_NAME
    try:
        with _fs.open_read(path) as f:
            d = json.loads(_fs.read_at_most(f, MAX_BYTES))
        leader = d["leader"]
        return SavedBelief(
            int(d["folded"]),
            int(d["last_trial"]),
            None if leader is None else int(leader),
            {int(k): float(v) for k, v in dict(d.get("slow") or {}).items()},
        )
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        logger.debug("%s cannot be read (%s): no saved belief", path, exc)
        return None
