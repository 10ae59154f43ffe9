"""What a trial was, judged on its evidence: one function (`classify`) for every door.

A trial that ended is one of

* **reached**: its metric met the target;
* **early-stopped**: the cost threshold cut it, or it could not start under it;
* **not reached**: it ran ``max_epochs``, exited or hit the timeout without the target
  (the batch size did not converge: an observation);
* **crashed**: the batch size's fault: out of memory (CUDA or CPU), a NaN, any other
  non-zero exit (an observation);
* **a spec error**: no metric was ever readable (the regex matched no line, the events
  file was never written, a callback found no metric of the spec's ``metric.name``), or a
  script that exited 0 wrote lines of which none held the metric where earlier trials' did
  (``metric.regex`` edited to a typo on the second night: the spec's, never the batch size's), or
  the script rejected its arguments (``argparse``: ``usage: ...`` / ``error: ...``);
* **an environment error**: the script could not start (``ModuleNotFoundError``,
  ``ImportError``, ``SyntaxError``, a missing script or interpreter);
* **not judged**: interrupted, or ended by the cluster.

The evidence is the record: its stop reason, exit code, the metrics read (also those
read after the stop decision, ``after_metrics``: a metric the script wrote while it
finished proves the metric works), the records before it, and the tail of the
script's output (kept in the record's ``message`` by the launcher and the agent, and by
``zeus-run tell --log FILE``). Timing is never evidence: a trial the launcher cut (the
cost threshold, a stop, a timeout it imposed) is never a spec error because it ran long
without a metric; on a busy machine that is only a slow epoch. It is one on the evidence of
its reader: where it read none of the lines its script wrote while earlier trials read theirs,
and the spec's ``metric`` section changed since (or no trial read a metric since the last spec
error of that section), a typo cut by the cost threshold teaches no failure either.

Spec and environment errors are not observations: `judge` records them as
``config_error`` or ``environment_error`` (the optimizer never learns from them) and
returns the error that stops the run with exit code 2, naming the cause and the fix.
Once the spec or the environment is fixed the same command resumes (neither
``command``, ``metric`` nor the environment is a decision setting, so no ``--force``)
and re-runs that try.
"""

from __future__ import annotations

import dataclasses
import enum
import itertools
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from zeus_run.contract import StopReason
from zeus_run.errors import UsageError
from zeus_run.records import TrialRecord

#: Stop reason of a trial that failed because of the spec.
CONFIG_ERROR = StopReason.CONFIG_ERROR
#: Stop reason of a trial whose script could not start.
ENVIRONMENT_ERROR = StopReason.ENVIRONMENT_ERROR
#: Exit code of ``argparse`` (and of most command-line parsers) on arguments it rejects.
USAGE_EXIT_CODE = 2
#: Exit codes of a POSIX shell for a command it could not find (127) or not execute (126).
SHELL_NOT_FOUND, SHELL_CANNOT_EXECUTE = 127, 126
#: Lines of the output's tail that are searched for the cause (the last ones).
TAIL_LINES = 40


class Verdict(str, enum.Enum):
    """What a trial was (see the module docstring)."""

    REACHED = "reached"
    EARLY_STOPPED = "early_stopped"
    NOT_REACHED = "not_reached"
    CRASHED = "crashed"
    SPEC_ERROR = "spec_error"
    ENVIRONMENT_ERROR = "environment_error"
    NOT_JUDGED = "not_judged"


@dataclass(frozen=True)
class Finding:
    """A trial's verdict with what happened and what to do next.

    Attributes:
        verdict: What the trial was.
        stop_reason: The stop reason the history keeps (``config_error`` or
            ``environment_error`` for those verdicts; else the record's own).
        cause: One line naming what happened, None when nothing went wrong.
        fix: What to do next, None when nothing is needed.
    """

    verdict: Verdict
    stop_reason: StopReason
    cause: str | None = None
    fix: str | None = None

    @property
    def stops_the_run(self) -> bool:
        """Whether the run stops (exit code 2): the spec or the environment, not the batch size, failed."""
        return self.verdict in (Verdict.SPEC_ERROR, Verdict.ENVIRONMENT_ERROR)


class ConfigurationError(UsageError):
    """A trial failed because of the job spec (exit code 2); the history records it as not observed."""


class TrialEnvironmentError(ConfigurationError):
    """A trial's script could not start (exit code 2); the history records it as not observed."""


# -- the evidence in the output's tail --------------------------------------------------------

#: A Python exception that means the script (or what it imports) could not be loaded.
_PY_START = re.compile(
    r"^\s*(?:[\w.]+\.)?(?P<kind>ModuleNotFoundError|ImportError|SyntaxError|IndentationError|TabError)\b:?\s*(?P<what>.*)$"
)
#: ``python -m x`` for a module that is not there: ``/usr/bin/python3: No module named x``.
_NO_MODULE = re.compile(r"No module named '?(?P<name>[\w.]+)'?")
#: ``python train.py`` for a script that is not there.
_NO_SCRIPT = re.compile(r"can't open file '?(?P<path>[^']+)'?: \[Errno \d+\]")
#: A shell that could not find or run a program: ``sh: 1: python3.99: not found``,
#: ``bash: foo: command not found``, ``/usr/bin/env: 'python9': No such file or directory``.
_SHELL_MISSING = re.compile(
    r"(?P<prog>[^\s:']+)'?: (?:command not found|not found|No such file or directory|Permission denied|cannot execute)"
)
#: ``argparse`` rejecting the command line: ``train.py: error: unrecognized arguments: --epochs 3``.
_ARGPARSE_ERROR = re.compile(r"^\S*: error: (?P<what>.+)$")
#: A callback that found no metric of the spec's ``metric.name`` (`zeus_run.integrations`).
_METRIC_NOT_FOUND = re.compile(r"MetricNotFound\b:?\s*['\"]?(?P<what>.*?)['\"]?\s*$")
#: Any line that names an error (as `zeus_run.contract.crash_cause` finds them).
_ERROR_LINE = re.compile(
    r"^\s*(?:[A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Fault)\b|(?:ERROR|Error|FATAL|Fatal)\b|"
    r"(?:[\w.]*\.)?MetricNotFound\b|Killed\b|Segmentation fault|CUDA error)"
)
#: The launcher's note that the metric's source read nothing although the script wrote lines
#: (`zeus_run.trial.metric_regex.BoundedRegex.no_match_note`, `zeus_run.trial.events.FileMetricTail.no_metric_note`).
_NO_MATCH = re.compile(
    r"(?P<what>(?P<field>metric\.(?:regex|key|path))\b.*?(?:matched none of the script's (?P<lines>\d+) output line\(s\)"
    r"|: none of the (?P<appended>\d+) line\(s\) appended to it held a metric))"
)
#: Last lines of the output where a start failure without an exception (a shell's ``not found``,
#: ``python: can't open file``) is looked for: such a message is the last thing the program says.
LAST_WORDS = 3


def _tail_lines(tail: str | None) -> list[str]:
    return [ln.strip() for ln in (tail or "").splitlines() if ln.strip()][-TAIL_LINES:]


def _last_error(lines: Sequence[str]) -> str | None:
    return next((ln for ln in reversed(lines) if _ERROR_LINE.match(ln) and not ln.startswith("Traceback")), None)


def _environment(lines: Sequence[str], exit_code: int | None) -> tuple[str, str] | None:
    """``(cause, fix)`` when the tail shows the script could not start, else None.

    Only the last error decides: a crash (out of memory) after an import warning stays a crash.
    """
    last = _last_error(lines)
    if last is not None:
        m = _PY_START.match(last)
        if m is None:
            return None
        kind = m["kind"]
        if kind == "ModuleNotFoundError":
            missing = _NO_MODULE.search(last)
            name = missing["name"].split(".")[0] if missing else "it"
            return last, f"Install {name} (e.g. `pip install {name}` in the environment the command runs in)"
        if kind == "ImportError":
            return last, "Install or repair the package it names (a missing library or a version mismatch)"
        return last, "Fix the script's syntax"
    for line in reversed(lines[-LAST_WORDS:]):
        if (missing := _NO_MODULE.search(line)) is not None and line.split(":")[-1].strip().startswith("No module"):
            name = missing["name"]
            return line, f"Install {name}, or fix the module name in `command`"
        if _NO_SCRIPT.search(line) is not None:
            return line, "Fix the script's path in `command` (or `workdir`: relative paths start there)"
        if (shell := _SHELL_MISSING.search(line)) is not None and exit_code in (SHELL_NOT_FOUND, SHELL_CANNOT_EXECUTE):
            return line, f"Install {shell['prog'].strip()} or fix `command` (give its full path, or make it executable)"
    if not lines and exit_code == SHELL_NOT_FOUND:
        return "exit code 127: the shell could not find the command", "Install it or fix `command`"
    return None


def _spec_in_tail(lines: Sequence[str], exit_code: int | None) -> tuple[str, str] | None:
    """``(cause, fix)`` when the tail shows the spec is wrong (argparse, a callback's missing metric), else None."""
    last = _last_error(lines)
    if last is not None and (m := _METRIC_NOT_FOUND.search(last)) is not None:
        return m["what"] or last, "Set `metric.name` in the job spec to a metric the evaluation logs"
    if exit_code == USAGE_EXIT_CODE and any(ln.startswith("usage:") for ln in lines):
        error = next((m for ln in reversed(lines) if (m := _ARGPARSE_ERROR.match(ln)) is not None), None)
        what = error["what"] if error is not None else "it printed its usage"
        return (
            f"the script rejected its arguments ({what})",
            "Check `command` in the job spec: every {placeholder} must be an option the script accepts",
        )
    return None


#: A crash out of memory: CUDA's (``torch.OutOfMemoryError``, ``CUDA out of memory``, cuBLAS's failed
#: allocation), the CPU's (``MemoryError``), XLA's (``RESOURCE_EXHAUSTED``), Slurm's ``OUT_OF_MEMORY``.
_OOM = re.compile(
    r"out of memory|OutOfMemory|\bMemoryError\b|CUBLAS_STATUS_ALLOC_FAILED|RESOURCE_EXHAUSTED|OUT_OF_MEMORY",
    re.IGNORECASE,
)


def out_of_memory(record: TrialRecord, tail: str | None = None) -> bool:
    """Whether ``record`` is a crash out of memory: its cause, or the last error of its output's tail, says so.

    Args:
        record: A trial that ended.
        tail: The last lines of its output; default: the record's ``message``.
    """
    if record.stop_reason is not StopReason.CRASHED:
        return False
    if record.cause is not None and _OOM.search(record.cause):
        return True
    last = _last_error(_tail_lines(record.message if tail is None else tail))
    return last is not None and _OOM.search(last) is not None


# -- the one classifier --------------------------------------------------------------------


def read_a_metric(record: TrialRecord) -> bool:
    """Whether a metric was read from ``record``'s trial, counted or read after the stop (``after_metrics``)."""
    return bool(record.metrics) or bool(record.after_metrics)


def classify(
    record: TrialRecord, history: Iterable[TrialRecord] = (), tail: str | None = None, changed: str | None = None
) -> Finding:
    """What ``record``'s trial was, on its evidence (see the module docstring).

    Args:
        record: A trial that just ended, as its executor, the agent or a tell made it.
        history: The records before it, in order.
        tail: The last lines of the script's output; default: the record's ``message`` (the
            launcher keeps the log's tail there for a crash).
        changed: The fields of the spec's ``metric`` section that changed since the history's trials ran
            (``metric.regex``), as the launcher found them against the stored spec; None: none did.
    """
    reason = record.stop_reason
    if reason in (CONFIG_ERROR, ENVIRONMENT_ERROR):  # judged already (a record read back)
        verdict = Verdict.SPEC_ERROR if reason is CONFIG_ERROR else Verdict.ENVIRONMENT_ERROR
        cause = record.cause or record.message
        message = record.message or ""
        # Its message is "cause. fix" where a door judged it (the tell of a script that never began, `judge`).
        fix = message[len(cause) :].split("\n")[0].strip(" .") if cause and message.startswith(cause) else ""
        return Finding(verdict, reason, cause, fix or None)
    if reason is StopReason.TARGET_REACHED or record.reached:
        return Finding(Verdict.REACHED, reason)
    if reason.early_stop or reason is StopReason.TIMEOUT:
        cut = _cut_unread(record, history, record.message if tail is None else tail, changed)
        if cut is not None:
            return cut
    if reason.early_stop:
        return Finding(Verdict.EARLY_STOPPED, reason)
    if not reason.observed:
        return Finding(Verdict.NOT_JUDGED, reason)
    if record.kind != "real" or record.exit_code is None:  # simulated, replayed, or never ran
        return _failure(record, reason)
    lines = _tail_lines(record.message if tail is None else tail)
    if reason is StopReason.CRASHED:
        env = _environment(lines, record.exit_code)
        if env is not None:
            return Finding(Verdict.ENVIRONMENT_ERROR, ENVIRONMENT_ERROR, *env)
        spec = _spec_in_tail(lines, record.exit_code)
        if spec is not None:
            return Finding(Verdict.SPEC_ERROR, CONFIG_ERROR, *spec)
        if (
            not lines
            and record.exit_code == USAGE_EXIT_CODE
            and not read_a_metric(record)
            and not any(r.observed for r in history)
        ):  # no output to read (a bare tell): exit code 2 on the first trial is argparse's
            return Finding(
                Verdict.SPEC_ERROR,
                CONFIG_ERROR,
                f"the script exited with code {USAGE_EXIT_CODE} on the first trial (as argparse does on arguments "
                "it rejects)",
                "Check `command` in the job spec: every {placeholder} must be an option the script accepts",
            )
        return _failure(record, reason)
    if reason is StopReason.EXITED and not read_a_metric(record):
        return _unread_metric(record, history, record.message if tail is None else tail, changed)
    return _failure(record, reason)


def _unread_metric(
    record: TrialRecord, history: Iterable[TrialRecord], tail: str | None, changed: str | None
) -> Finding:
    """What a trial that exited 0 without a metric was: a spec error when no trial ever read one, or when its
    script wrote lines and none held the metric although earlier trials' did (the metric section, or the
    script's output, changed since: a typo on night 2 is the spec's, never the batch size's)."""
    read_before = any(read_a_metric(r) for r in history if r.kind == "real")
    note = _NO_MATCH.search(tail or "")
    if read_before and note is not None and int(note["lines"] or note["appended"] or 0) > 0:
        field = note["field"]
        return Finding(
            Verdict.SPEC_ERROR,
            CONFIG_ERROR,
            f"{note['what']}, although earlier trials of this job read their metric",
            f"Fix `{field}` in the job spec (or the script's output) so that it reads the metric the script writes "
            "each epoch",
        )
    if read_before and changed is not None:
        return Finding(
            Verdict.SPEC_ERROR,
            CONFIG_ERROR,
            f"{changed} changed since earlier trials of this job read their metric, and this trial read none"
            + (f" ({note['what']})" if note is not None else ""),
            f"Fix `{changed.split(', ')[0]}` in the job spec (the spec before the change is kept beside spec.yaml as "
            "spec.<n>.yaml)",
        )
    if not read_before:
        return Finding(
            Verdict.SPEC_ERROR,
            CONFIG_ERROR,
            "no metric was read from this trial although the script exited 0, and none from any trial before it",
            "Fix `metric` in the job spec: the field its source reads must match what the script writes each epoch "
            "(source: regex: metric.regex, a line of its output; jsonl: metric.key, a key of its JSON lines; "
            "file: metric.path, the file it appends to; events: the script reports through zeus_run.train or a "
            "zeus_run callback)",
        )
    return _failure(record, record.stop_reason)


def _cut_unread(
    record: TrialRecord, history: Iterable[TrialRecord], tail: str | None, changed: str | None
) -> Finding | None:
    """A spec error where the launcher cut a trial (cost threshold, timeout) that read no metric although its
    script wrote lines, earlier trials read theirs, and the spec's metric is in doubt: its ``metric`` section
    changed since (``changed``), or the last spec error of the metric was followed by no trial that read one.
    The cut's timing alone is never the evidence (a slow first epoch is not a typo); the broken reader is."""
    if record.kind != "real" or record.exit_code is None or read_a_metric(record):
        return None
    note = _NO_MATCH.search(tail or "")
    if note is None or int(note["lines"] or note["appended"] or 0) == 0:
        return None
    before = [r for r in history if r.kind == "real"]
    if not any(read_a_metric(r) for r in before):
        return None
    if changed is not None:
        doubt = f"{changed} changed since earlier trials of this job read their metric"
        field = changed.split(", ")[0]
    else:
        last = next(
            (
                k
                for k in range(len(before) - 1, -1, -1)
                if before[k].stop_reason is CONFIG_ERROR and _about_metric(before[k])
            ),
            None,
        )
        if last is None or any(read_a_metric(r) for r in before[last + 1 :]):
            return None
        doubt = "no trial has read the metric since the spec error of its metric section"
        field = note["field"]
    return Finding(
        Verdict.SPEC_ERROR,
        CONFIG_ERROR,
        f"{doubt}, and this trial read none before {record.stop_reason} cut it ({note['what']})",
        f"Fix `{field}` in the job spec so that it reads the metric the script writes each epoch",
    )


def _about_metric(record: TrialRecord) -> bool:
    """Whether a spec error's cause names the ``metric`` section."""
    return "metric." in (record.cause or record.message or "")


def _failure(record: TrialRecord, reason: StopReason) -> Finding:
    if reason is StopReason.CRASHED:
        return Finding(Verdict.CRASHED, reason, record.cause)
    return Finding(Verdict.NOT_REACHED, reason, record.cause)


def judge(
    record: TrialRecord, *history: Sequence[TrialRecord], tail: str | None = None, changed: str | None = None
) -> tuple[TrialRecord, ConfigurationError | None]:
    """``record`` as the history keeps it, and the error that stops the run if the spec or the environment failed.

    A spec error becomes a ``config_error`` record, an environment error an
    ``environment_error`` record; neither is observed. Their message is the cause and the fix.

    Args:
        record: A trial that just ended.
        history: The records before it (one or more sequences, in order).
        tail: The script's output tail, if the record's ``message`` does not hold it.
        changed: The ``metric`` fields changed since the history's trials ran (`classify`).
    """
    finding = classify(record, itertools.chain(*history), tail, changed)  # read only where the evidence needs it
    if not finding.stops_the_run:
        return record, None
    cause, fix = finding.cause or str(finding.stop_reason), finding.fix or ""
    what = f"Recurrence {record.recurrence} try {record.attempt} (batch size {record.batch_size})"
    if finding.verdict is Verdict.ENVIRONMENT_ERROR:
        error: ConfigurationError = TrialEnvironmentError(
            f"{what}: {cause} — the script could not start; this is the environment, not the batch size. "
            f"{fix}, then run the same command again: the run resumes (recorded as environment_error, not observed)."
        )
    else:
        error = ConfigurationError(
            f"{what} failed because of the job spec, not the batch size: {cause}. {fix}, then run the same command "
            "again: the run resumes (recorded as config_error, not observed)."
        )
    if record.stop_reason is finding.stop_reason:  # judged before (a record read back)
        return record, error
    message = f"{cause}. {fix}" + (f"\n{record.message}" if record.message and cause not in record.message else "")
    return (
        dataclasses.replace(record, stop_reason=finding.stop_reason, observed=False, message=message, cause=cause),
        error,
    )
