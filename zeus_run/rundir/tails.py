"""What a trial's process spent after it told its trial: appended later, attached to the trial's record as it is read.

A process that tells its own trial (the `zeus_run.Job` block, the server's client) goes on after the tell: it
saves, evaluates, tears its framework down, or asks for its next trial. Under ``zeus-run run`` all of that is the
trial's (its script is measured to its exit), so it is here too: when the process asks for its next trial, or
exits, it appends one line for the trial it told last to ``tails.jsonl`` beside the history::

    {"token": "...", "time": 2.01, "energy": 402.3, "to": "next-ask", "at": 1764330000.1}

(``to``: ``next-ask``, the process's next ask, where its next trial's part begins; ``exit``, the process's exit).
The history itself is never rewritten: `attach` adds each tail to its trial's record as the history is read
(`zeus_run.rundir.history.read_history`): ``after_time`` and ``after_energy`` grow by it, and the record's
``window`` says where it ended (``to``) and what the tail was (``tail_s``, ``tail_j``). Only the first tail of a
token counts; a tail whose trial is not in the history is ignored. Nothing the optimizer decides on reads
``after_time`` or ``after_energy``: the next ask's decision is the same whenever the tail lands.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from zeus_run import _fs
from zeus_run.records import TrialRecord

logger = logging.getLogger(__name__)

TAILS_NAME = "tails.jsonl"
#: Where a tail ends (``to``).
TAIL_ENDS = ("next-ask", "exit")


def append_tail(run_dir: str | Path, token: str, time_s: float, energy_j: float, to: str) -> dict[str, Any]:
    """Append a told trial's tail (durably: one write, fsynced) to the run directory's ``tails.jsonl``.

    Raises:
        ValueError: A figure is negative or not finite, or ``to`` is not one of `TAIL_ENDS`.
        OSError: The file cannot be written.
    """
    for name, v in (("time", time_s), ("energy", energy_j)):
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v) or v < 0:
            raise ValueError(f"{name} = {v!r}: a tail's {name} is a finite number >= 0")
    if to not in TAIL_ENDS:
        raise ValueError(f"to = {to!r}: a tail ends at one of {', '.join(TAIL_ENDS)}")
    line = {"token": str(token), "time": float(time_s), "energy": float(energy_j), "to": to, "at": time.time()}
    data = (json.dumps(line, separators=(",", ":")) + "\n").encode()
    fd = _fs.open_fd(Path(run_dir) / TAILS_NAME, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        _fs.write_all(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    return line


def read_tails(path: str | Path) -> dict[str, dict[str, Any]]:
    """Token -> its first tail, from a ``tails.jsonl`` (missing: none). Lines that are not tails are skipped
    (a torn last line, a line edited by hand)."""
    try:
        with _fs.open_read(Path(path)) as f:
            raw = f.read()
    except FileNotFoundError:
        return {}
    except OSError as exc:
        logger.warning("cannot read %s: %s; the trials' tails after their tells are not shown", path, exc)
        return {}
    out: dict[str, dict[str, Any]] = {}
    for line in raw.decode("utf-8", "replace").splitlines():
        try:
            tail = json.loads(line)
        except ValueError:
            continue
        if not isinstance(tail, dict) or not isinstance(tail.get("token"), str) or tail.get("to") not in TAIL_ENDS:
            continue
        figures = [tail.get("time"), tail.get("energy")]
        if all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0 for v in figures
        ):
            out.setdefault(tail["token"], tail)
    return out


def attach(records: Iterable[TrialRecord], tails: dict[str, dict[str, Any]]) -> list[TrialRecord]:
    """The records with each one's tail (by its ask's token) added to ``after_time`` and ``after_energy``."""
    out = []
    for r in records:
        tail = tails.get(str((r.provenance or {}).get("ask_token"))) if tails and r.provenance else None
        out.append(r if tail is None else with_tail(r, tail))
    return out


def with_tail(r: TrialRecord, tail: dict[str, Any]) -> TrialRecord:
    """``r`` with ``tail`` (its time and energy after the tell) charged after the point it was judged at."""
    t, e = float(tail["time"]), float(tail["energy"])
    after_energy = (r.after_energy or 0.0) + e
    window = {**(r.window or {}), "to": tail["to"], "tail_s": t, "tail_j": e}
    share = r.estimated_share
    if r.estimated_energy is not None:
        whole = r.energy + after_energy
        share = r.estimated_energy / whole if whole > 0 else None
    return dataclasses.replace(
        r, after_time=(r.after_time or 0.0) + t, after_energy=after_energy, window=window, estimated_share=share
    )
