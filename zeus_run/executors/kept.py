"""A night whose script reached its target while the spec's metric could not read it keeps its model (`kept_model`).

A typo in ``metric.regex`` makes a trial that trained to the target, saved its model and exited read no
metric: `zeus_run.engine.classify` records it ``config_error`` (not observed) and the run stops. Once the spec
is fixed, the next trigger reads that trial's output log again with the fixed reader: where it reaches the
target, the try is taken over as reached from that log (`zeus_run.executors.LocalExecutor`), its whole
process charged as it was measured, and the recurrence is not run again; ``run --next`` counts it as the
night it ran on where that was another night (`zeus_run.door.calendar`), so the job's calendar catches up.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from zeus_run.contract import StopReason
from zeus_run.engine.classify import read_a_metric
from zeus_run.records import TrialRecord
from zeus_run.spec import JobSpec
from zeus_run.trial.metric_regex import output_reader
from zeus_run.trial.orphan import reached_in_output


@dataclass(frozen=True)
class KeptRun:
    """The metrics a spec error's trial wrote, read again under the spec in force.

    Attributes:
        record: The ``config_error`` record of the trial (the history's last).
        metrics: Each epoch's metric through the first that reached the target.
        after_metrics: Those after it.
    """

    record: TrialRecord
    metrics: tuple[float, ...]
    after_metrics: tuple[float, ...]


def kept_model(records: Sequence[TrialRecord], spec: JobSpec, run_dir: Path) -> KeptRun | None:
    """The history's last record, where it is a spec error of a trial that ran to its own end (exit 0) reading no
    metric, and its output log, read with ``spec``'s reader of the output, reaches the target; else None."""
    if not records:
        return None
    last = records[-1]
    if (
        last.stop_reason is not StopReason.CONFIG_ERROR
        or last.kind != "real"
        or last.exit_code != 0
        or read_a_metric(last)
        or last.log is None
        or spec.metric.path is not None
    ):
        return None
    m = spec.metric
    reader = output_reader(m.regex if m.source == "regex" else None, m.key if m.source == "jsonl" else None)
    if reader is None:
        return None
    read = reached_in_output(run_dir / last.log, reader, spec.target_metric, spec.higher_is_better, spec.max_epochs)
    return None if read is None else KeptRun(last, *read)
