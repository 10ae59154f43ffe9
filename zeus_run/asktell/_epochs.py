"""Epoch reports that repeat or go back: applied once, refused when lower than the last.

A report is one line of the trial's ``events.jsonl`` (with a ``stop`` line
right after it when the answer was to stop). Before a report is appended,
the lines already there say whether it repeats one (the same idempotency key,
or the last epoch's number again: a retry whose first try was applied), and
then its answer is the one given then; an epoch lower than the last one is
refused (a report is answered before the next one is sent, so that is no retry).
"""

from __future__ import annotations

import json
from pathlib import Path

from zeus_run import _fs
from zeus_run.asktell._keys import same_key
from zeus_run.contract import StopReason
from zeus_run.errors import EpochOutOfOrder

#: Largest events file read to find an earlier report (unit: bytes); a trial reports a line per epoch.
MAX_EVENTS_BYTES = 16 << 20


def earlier_answer(events: Path, epoch: int, stamped: str | None) -> tuple[StopReason | None] | None:
    """The answer an earlier report with the key ``stamped`` (or of the last epoch, ``epoch``) got, as a 1-tuple;
    None if it is new.

    Raises:
        EpochOutOfOrder: ``epoch`` is lower than the last epoch reported and was never reported.
        KeyReused: ``stamped``'s key was used for another report.
    """
    try:
        with open(events, "rb") as f:
            data = _fs.read_at_most(f, MAX_EVENTS_BYTES)
    except FileNotFoundError:
        return None
    lines = [_event(line) for line in data.splitlines()]
    last, at = 0, -1
    for i, ev in enumerate(lines):
        n = ev.get("epoch")
        if ev.get("event") != "epoch" or not isinstance(n, int):
            continue
        if same_key(ev.get("key"), stamped, f"epoch {n}"):
            return (_answer_after(lines, i),)
        if n >= last:
            last, at = n, i
    if at >= 0 and epoch == last:  # the last epoch again: a retry whose answer was lost
        return (_answer_after(lines, at),)
    if epoch < last:
        raise EpochOutOfOrder(
            f"epoch = {epoch} is lower than epoch {last}, the last one reported for this trial; nothing was "
            "recorded. Report epochs in order, each once (1, 2, 3, ...)."
        )
    return None


def _answer_after(lines: list[dict[str, object]], i: int) -> StopReason | None:
    """The answer the report on line ``i`` got: the stop written right after it, if any."""
    after = lines[i + 1] if i + 1 < len(lines) else {}
    return _reason(after.get("reason")) if after.get("event") == "stop" else None


def _event(line: bytes) -> dict[str, object]:
    try:
        ev = json.loads(line)
    except ValueError:
        return {}
    return ev if isinstance(ev, dict) else {}


def _reason(value: object) -> StopReason | None:
    try:
        return StopReason.parse(str(value))
    except ValueError:
        return None
