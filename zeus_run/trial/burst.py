"""Epochs read in one burst at the script's exit: output held in a buffer, so the epochs were never timed.

A program that writes its output in blocks (Python without
``PYTHONUNBUFFERED`` into a pipe, C's stdio) holds each epoch's line until its
buffer fills or it exits. zeus-run then reads every epoch at once, at the
end: the trial runs to ``max_epochs`` (or its own end) whatever the target,
each epoch seems to take no time, and the early-stop rule cannot act.

`epoch_timing` tells such a trial from the arrival times of its metric lines
(`zeus_run.trial.run` notes when it read each): at least `MIN_READINGS` of
them, all read within `WINDOW` seconds, at the end of the trial (within
`WINDOW`, or `TAIL_SHARE` of its time, of the main process's exit), after at
least `MIN_QUIET` seconds with none. The record then says ``epoch_timing:
burst`` (`zeus_run.records.TrialRecord.epoch_timing`) and its per-epoch
figures are not used as if measured per epoch (`zeus_run.optimizer.early_stop.Pace`,
the outcome classifier's epoch time). `BurstWarning` tells the user once per
run how to fix it.

A script whose epochs really take no time, printed just before it exits after
a second or more of start-up, reads the same; nothing is lost by not timing
its epochs. Output that fills the buffer mid-run arrives in several bursts and
is not caught here.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

from zeus_run.contract import BURST_TIMING

if TYPE_CHECKING:
    from zeus_run.records import TrialRecord

logger = logging.getLogger(__name__)

#: ``epoch_timing`` of a trial whose epochs all arrived at once, at its exit.
BURST = BURST_TIMING
#: Fewest metric lines that make a burst ("several epochs").
MIN_READINGS = 3
#: Most seconds between the first and the last metric line of a burst (one buffer's flush, read
#: in a few reads on a loaded machine).
WINDOW = 0.25
#: Fewest seconds the script ran before the burst (start-up alone takes less, even on a loaded machine).
MIN_QUIET = 2.0
#: A burst ends at most this share of the trial's time (or `WINDOW`) before the main process exited:
#: a large program tears down for a while after flushing its output.
TAIL_SHARE = 0.2

#: How to fix it (the console's warning).
FIX = (
    "print(..., flush=True), or set PYTHONUNBUFFERED=1 (zeus-run sets it unless the spec's env does) "
    "or `stdout: pty` (for a program that is not Python) in the spec"
)


def epoch_timing(arrivals: Sequence[float], end: float) -> str | None:
    """`BURST` when every metric line arrived in one burst at the script's exit, else None (timed as read).

    Args:
        arrivals: When each metric line was read, in order (unit: s since the trial started).
        end: When the script's main process was seen to exit (unit: s since the trial started).
    """
    if len(arrivals) < MIN_READINGS:
        return None
    first, last = arrivals[0], arrivals[-1]
    at_exit = end - last <= max(WINDOW, TAIL_SHARE * end)
    return BURST if last - first <= WINDOW and first >= MIN_QUIET and at_exit else None


def note(readings: int, spread: float) -> str:
    """The record's note on a burst trial."""
    return (
        f"epoch timing unreliable: all {readings} metric lines arrived within {spread:.2g} s at the script's exit "
        "(not used as per-epoch figures)"
    )


class BurstWarning:
    """Warns once (per run, or per ``exec``) that a trial's epochs arrived in one burst, with the fix."""

    def __init__(self) -> None:
        self.warned = False

    def check(self, record: TrialRecord) -> None:
        """Warn if ``record``'s epochs arrived in one burst and this run has not warned yet."""
        if record.epoch_timing != BURST or self.warned:
            return
        self.warned = True
        logger.warning(
            "recurrence %d try %d (batch size %d): the script's output reached zeus-run only at exit (every "
            "epoch's metric at once): it buffers stdout, so its epochs could not be timed nor the trial stopped "
            "at the target. Fix: %s. Its time per epoch is not used for early stopping (history: epoch_timing "
            "burst); warned once per run.",
            record.recurrence,
            record.attempt,
            record.batch_size,
            FIX,
        )
