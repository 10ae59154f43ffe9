"""The exceptions zeus-run raises.

Every error a user can cause is a subclass of `ZeusRunError`. The CLI turns
them into one-paragraph messages on stderr with the exit code named by
`exit_code`; nothing below this module knows about exit codes otherwise.
"""

from __future__ import annotations

import reprlib
from dataclasses import dataclass

_short = reprlib.Repr()
_short.maxstring = 120
_short.maxother = 120
_short.maxlist = _short.maxtuple = _short.maxdict = _short.maxset = 12
_short.maxlevel = 3


class ZeusRunError(Exception):
    """Base class of all errors zeus-run reports to users.

    Attributes:
        exit_code: Process exit code the CLI uses for this error.
    """

    exit_code: int = 1


class UsageError(ZeusRunError):
    """The user asked for something that cannot work (bad path, bad option)."""

    exit_code = 2


@dataclass(frozen=True)
class SpecProblem:
    """One problem found in a job spec.

    Attributes:
        field: Dotted path of the field, e.g. ``optimizer.window_size``.
        value: The offending value as written (``None`` when missing).
        why: What is wrong.
        fix: What to do about it.
        line: 1-based line in the YAML file, if known.
    """

    field: str
    value: object
    why: str
    fix: str = ""
    line: int | None = None

    def render(self) -> str:
        """One human-readable line."""
        where = f"line {self.line}: " if self.line else ""
        shown = "(missing)" if self.value is None else _short.repr(self.value)
        text = f"{where}{_printable(self.field)} = {shown}: {self.why}"
        if self.fix:
            text += f". {self.fix}"
        return text


def _printable(text: str) -> str:
    """A field name as written in the spec, with control characters escaped and its length capped."""
    shown = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text[:120])
    return shown + ("..." if len(text) > 120 else "")


class SpecError(UsageError):
    """A job spec failed validation. Carries every problem found, not just the first."""

    def __init__(self, source: str, problems: list[SpecProblem]) -> None:
        self.source = source
        self.problems = list(problems)
        lines = "\n".join(f"  - {p.render()}" for p in self.problems)
        n = len(self.problems)
        super().__init__(f"{source}: {n} problem{'s' if n != 1 else ''} in the job spec:\n{lines}")


class HistoryError(ZeusRunError):
    """The history file cannot be read or written safely."""

    exit_code = 2


class RunDirError(UsageError):
    """The run directory is unusable (unwritable, locked by another launcher, mismatched)."""


#: Exit code of a launcher that found its run directory held by another one (``EX_TEMPFAIL``):
#: a scheduler's trigger fired while the previous recurrence still runs; nothing was done.
BUSY_EXIT_CODE = 75


class RunDirBusy(RunDirError):
    """Another launcher holds the run directory; this one did nothing and exits at once."""

    exit_code = BUSY_EXIT_CODE


class LaunchError(ZeusRunError):
    """A training command could not be started at all (missing or not executable)."""

    exit_code = 2


class LaunchEnvironmentError(ZeusRunError):
    """This machine could not start a trial (too many open files, no memory or processes left): not the
    command's fault, so nothing is recorded against the batch size; fix the machine and run again."""

    exit_code = 2


class ConvergenceError(ZeusRunError):
    """The job cannot reach its target: its first recurrence failed at the default batch size."""

    exit_code = 1


#: Exit code of a trigger (``run``, ``run --next``, ``exec``) during which a recurrence failed: it used up
#: ``max_tries`` without the target and was recorded as failed; the next trigger (or ask) runs the next
#: recurrence. The job goes on: alert, but nothing needs mending unless it keeps happening.
RECURRENCE_FAILED_EXIT_CODE = 5


class TraceError(UsageError):
    """A trace file is missing, malformed, or lacks the requested job."""


class EnergyError(ZeusRunError):
    """An energy source was requested but cannot be used on this machine."""

    exit_code = 2


class Interrupted(ZeusRunError):
    """The launcher received SIGINT or SIGTERM; history is intact and the run can resume."""

    def __init__(self, signum: int, message: str) -> None:
        super().__init__(message)
        self.signum = signum
        self.exit_code = 128 + signum


class PowerLimitPermissionError(ZeusRunError):
    """Power limits cannot be set (no root / CAP_SYS_ADMIN) and the spec says ``on_no_permission: stop``."""

    exit_code = 2


#: Exit code of a tell (or ``zeus-run exec``) refused because the ask's lease had expired: the
#: trial was recorded as an infrastructure failure and its recurrence asked again.
LEASE_EXPIRED_EXIT_CODE = 3


class UnknownToken(UsageError):
    """A tell or heartbeat names a token the run directory has no ask for."""


class AlreadyTold(UnknownToken):
    """A tell names an ask that was already told (its record is in the history)."""


class LeaseExpired(ZeusRunError):
    """A tell or heartbeat came after the ask's lease expired; the trial was recorded as an infrastructure failure.

    What the trial measured stays in its directory; the recurrence goes to the next ask.
    """

    exit_code = LEASE_EXPIRED_EXIT_CODE


#: Exit code of an ask refused because every recurrence of the job's ``recurrences`` is done.
JOB_COMPLETE_EXIT_CODE = 4


class JobComplete(ZeusRunError):
    """An ask found every recurrence of the spec's ``recurrences`` done: there is nothing to ask for."""

    exit_code = JOB_COMPLETE_EXIT_CODE


class KeyReused(UsageError):
    """A request repeats an idempotency key that an earlier, different request already used."""


class TailConflict(UsageError):
    """A told trial already has a different tail (what its process spent after its tell): one tail per trial."""


class EpochOutOfOrder(UsageError):
    """An epoch report names an epoch lower than one already reported for the trial."""
