"""Configuration errors are not observations: trials that failed because of the spec, not the batch size.

A trial whose metric source never produced a single reading tells nothing
about its batch size: the ``metric.regex`` matched no line of the output, or
the events file was never written (the script does not use `zeus_run.train`).
When the script nevertheless exited 0, hit the timeout, or ran (and was then
cut or crashed) more than `EPOCH_MARGIN` times as long as one epoch of that
batch size took in earlier trials, the spec is wrong. The same holds for a
script that rejects its arguments on the very first trial (exit code 2, as
``argparse`` does for a ``{placeholder}`` it does not know).

The engine records such a trial with stop reason ``config_error``: not
observed, so the optimizer never learns from it, and the run stops with exit
code 2 and the message. Once the spec is fixed the run resumes (neither
``command`` nor ``metric`` is a decision setting, so no ``--force``) and
re-runs that try.
"""

from __future__ import annotations

import dataclasses
import itertools
import statistics
from collections.abc import Iterable, Sequence

from zeus_run.contract import StopReason
from zeus_run.errors import UsageError
from zeus_run.records import TrialRecord

#: Stop reason of a trial that failed because of the spec (`zeus_run.records.STOP_REASONS`).
CONFIG_ERROR = StopReason.CONFIG_ERROR
#: A try that ran this many times one epoch of its batch size without a metric reading outlasted an epoch.
EPOCH_MARGIN = 1.5
#: Exit code of ``argparse`` (and of most command-line parsers) on arguments it rejects.
USAGE_EXIT_CODE = 2


class ConfigurationError(UsageError):
    """A trial failed because of the job spec (exit code 2); the history records it as not observed."""


def config_error(record: TrialRecord, *history: Sequence[TrialRecord]) -> str | None:
    """Why ``record`` failed because of the spec, or None if it may be the batch size's fault.

    Only real trials that ran (an exit code) and produced no metric reading at all qualify.

    Args:
        record: A trial that just ended.
        history: The records before it (one or more sequences, in order).
    """
    if record.kind != "real" or record.reached or record.metrics or not record.observed or record.exit_code is None:
        return None
    before = list(itertools.chain(*history))
    if (
        record.stop_reason is StopReason.CRASHED
        and record.exit_code == USAGE_EXIT_CODE
        and not any(r.observed for r in before)
    ):
        return (
            f"the script rejected its arguments on the first trial (exit code {USAGE_EXIT_CODE}, as argparse does): "
            "check `command` in the job spec (every {placeholder} must be an option the script accepts)"
            + (f". {record.message}" if record.message else "")
        )
    epoch = _epoch_time(before, record.batch_size)
    outlasted = epoch is not None and record.time > EPOCH_MARGIN * epoch
    if record.stop_reason in (StopReason.EXITED, StopReason.TIMEOUT) or (
        outlasted and record.stop_reason in (StopReason.CRASHED, StopReason.COST_THRESHOLD)
    ):
        ran = "exited 0" if record.stop_reason is StopReason.EXITED else f"ran {record.time:.3g} s"
        timeout = " (or raise `timeout`, if one epoch takes longer)" if record.stop_reason is StopReason.TIMEOUT else ""
        return (
            f"no metric was read from this trial although the script {ran}: fix `metric` in the job spec "
            "(metric.regex must match the line the script prints each epoch; with source: events the script must "
            f"report through zeus_run.train){timeout}" + (f". {record.message}" if record.message else "")
        )
    return None


def _epoch_time(history: Iterable[TrialRecord], batch_size: int) -> float | None:
    """Median time of one epoch of ``batch_size``'s real trials that read metrics (unit: s), or None if none did."""
    times = [r.time / r.epochs for r in history if r.kind == "real" and r.batch_size == batch_size and r.metrics]
    return statistics.median(times) if times else None


def unobserve_config_error(
    record: TrialRecord, *history: Sequence[TrialRecord]
) -> tuple[TrialRecord, ConfigurationError | None]:
    """``record`` as the history keeps it, and the error that stops the run if the spec made it fail.

    A configuration error becomes a ``config_error`` record, not observed, with the reason as its message.
    """
    why = config_error(record, *history)
    if why is None:
        return record, None
    error = ConfigurationError(
        f"Recurrence {record.recurrence} try {record.attempt} (batch size {record.batch_size}) failed because of "
        f"the job spec, not the batch size: {why}\n"
        "It is recorded as not observed (config_error); fix the spec and run the same command again to resume."
    )
    return dataclasses.replace(record, stop_reason=CONFIG_ERROR, observed=False, message=why), error
