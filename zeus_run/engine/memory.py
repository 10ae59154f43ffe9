"""Which batch sizes a job's out-of-memory crashes shut out, and until when: `MemoryBans`, a pure fold of the records.

An out-of-memory crash is evidence, not a verdict. A crash marked ``oom`` in a recurrence that then reached the
target below it shuts that batch size (and every larger one: they need more memory) out of the job's decisions.
A night whose every try ran out of memory shuts nothing out: the machine is the likelier cause.

How long (the record's ``oom_retry_after``, stamped from the spec's ``oom_retry_after`` when it was recorded,
`zeus_run.engine.core.Engine.tell`): for ``N`` recurrences that reach the target after it, doubled with each
earlier shut-out of the same batch size (``N``, ``2N``, ``4N``...); then the optimizer may decide it again. The
first crash of a batch size that had already reached the target on this job, or a larger one had (it fits: the
machine is the likelier cause, a co-tenant on a shared GPU), shuts it out for its own night only, and its next
crash for ``N``. A
co-tenant's one bad night then costs the job nothing beyond that night's crashed try; a batch size that truly does
not fit costs one crashed try (an out-of-memory crash dies at its first steps) each time it is tried again, about
``log2(L / N)`` over a life of ``L`` recurrences. A crash recorded without the stamp (before the rule, or under
``oom_retry_after: null``) shuts its batch size out for ever, as it did when it was recorded: a recorded history
replays as it was decided.

The engine's decisions (`zeus_run.engine.ledger.Ledger`) and every view (`shut_out`) fold the same records
through this one rule, so what the views recommend is what the decisions may run.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from zeus_run.records import TrialRecord


@dataclass(frozen=True)
class Ban:
    """A batch size shut out of the decisions by an out-of-memory crash (with every larger one).

    Attributes:
        batch_size: The batch size that ran out of memory.
        since: The recurrence it ran out of memory in (that recurrence then reached the target below it).
        trial: The crashed trial.
        strikes: How many times it has been shut out (this one included).
        wait: Recurrences that must reach the target after ``since`` before it may be decided again (None: never).
        until: The count of recurrences reached (the job's, since its start) at which it lapses (None: never).
        cause: What the crash said (``MemoryError``, ``CUDA out of memory...``).
    """

    batch_size: int
    since: int
    trial: int
    strikes: int
    wait: int | None
    until: int | None
    cause: str

    def active(self, reached: int) -> bool:
        """Whether it still shuts its batch size out once ``reached`` recurrences have reached the target."""
        return self.until is None or reached < self.until

    def left(self, reached: int) -> int | None:
        """Recurrences still to reach the target before it lapses (None: never)."""
        return None if self.until is None else max(0, self.until - reached)

    def describe(self, reached: int) -> str:
        """``shut out since recurrence 9 (MemoryError); tried again after 3 more recurrences with a model``."""
        why = f"ran out of memory in recurrence {self.since} ({self.cause})"
        if self.strikes > 1:
            why += f", its {_ordinal(self.strikes)} time"
        left = self.left(reached)
        if left is None:
            return f"{why}: shut out, with every larger batch size, for good (recorded before out-of-memory retries)"
        return (
            f"{why}: shut out, with every larger batch size, until {left} more recurrence(s) reach the target "
            f"({self.wait} after it), then it may be tried again"
        )


@dataclass(frozen=True)
class ShutOut:
    """A shut-out in force as the views show it (`MemoryBans.now`).

    Attributes:
        batch_size: The batch size that ran out of memory; every larger one is shut out with it.
        since: The recurrence it ran out of memory in.
        trial: The crashed trial.
        strikes: How many times it has been shut out (this one included).
        wait: Recurrences to reach the target after ``since`` before it may be decided again (None: never).
        left: How many of them are still to come (None: never).
        cause: What the crash said.
        note: All of it in words (`Ban.describe`).
    """

    batch_size: int
    since: int
    trial: int
    strikes: int
    wait: int | None
    left: int | None
    cause: str
    note: str

    @property
    def sentence(self) -> str:
        """``batch size 128 and larger; it ran out of memory in recurrence 9 (...): shut out ...``."""
        return f"batch size {self.batch_size} and larger; it {self.note}"

    @property
    def until(self) -> str:
        """``3 more recurrence(s) with a model to go``, or ``for good``."""
        return "for good" if self.left is None else f"{self.left} more recurrence(s) with a model to go"

    def label(self, batch_size: int) -> str:
        """``batch_size``'s note in a table: ``shut out since recurrence 9 (out of memory), 3 more recurrence(s)
        with a model to go``, or for a larger one ``shut out with 128``."""
        if batch_size != self.batch_size:
            return f"shut out with {self.batch_size}"
        return f"shut out since recurrence {self.since} (out of memory), {self.until}"


class MemoryBans:
    """The out-of-memory rule folded over a history, one record at a time (`fold`), in the order it was folded."""

    def __init__(self) -> None:
        #: Recurrences that reached the target so far.
        self.reached = 0
        #: Every shut-out so far, lapsed or not, by batch size (its latest).
        self.bans: dict[int, Ban] = {}
        #: Batch sizes that reached the target on this job (they fit).
        self.fitted: set[int] = set()
        self._ooms: dict[int, dict[int, tuple[TrialRecord, bool]]] = {}  # recurrence -> size -> crash, fitted then
        self._forgiven: set[int] = set()  # batch sizes whose first shut-out lasted its night only

    def fold(self, record: TrialRecord) -> None:
        """Learn from one ended trial."""
        if record.oom:
            crashes = self._ooms.setdefault(record.recurrence, {})
            fits = any(b >= record.batch_size for b in self.fitted)  # it, or a larger one, reached the target
            crashes.setdefault(record.batch_size, (record, fits))
        if not record.reached:
            return
        self.reached += 1
        self.fitted.add(record.batch_size)
        ooms = self._ooms.pop(record.recurrence, None)
        if not ooms or record.batch_size >= min(ooms):
            return  # the smallest ran out of memory and ran again: nothing fits below it to compare with
        for b, (crash, fitted) in ooms.items():
            previous = self.bans.get(b)
            strikes = 1 if previous is None else previous.strikes + 1
            n = crash.oom_retry_after
            if n is not None and strikes == 1 and fitted:
                self._forgiven.add(b)  # it fitted before: its night only
            doublings = strikes - 1 - (b in self._forgiven)
            wait = None if n is None else 0 if doublings < 0 else n * 2**doublings
            cause = crash.cause or crash.message or "out of memory"
            until = None if wait is None else self.reached + wait
            self.bans[b] = Ban(b, record.recurrence, crash.trial, strikes, wait, until, cause)

    def active(self) -> dict[int, Ban]:
        """The shut-outs in force, by batch size."""
        return {b: ban for b, ban in sorted(self.bans.items()) if ban.active(self.reached)}

    def now(self) -> tuple[ShutOut, ...]:
        """The shut-outs in force, smallest batch size first, as the views show them."""
        n = self.reached
        return tuple(
            ShutOut(b.batch_size, b.since, b.trial, b.strikes, b.wait, b.left(n), b.cause, b.describe(n))
            for b in self.active().values()
        )

    @property
    def ceiling(self) -> int | None:
        """The smallest batch size shut out (it and every larger one are not decided); None: none is."""
        active = [b for b, ban in self.bans.items() if ban.active(self.reached)]
        return min(active) if active else None


def shut_out(records: Iterable[TrialRecord]) -> MemoryBans:
    """The rule folded over ``records`` (a history, in the order it was folded): what the views show."""
    bans = MemoryBans()
    for record in records:
        bans.fold(record)
    return bans


def _ordinal(n: int) -> str:
    return {2: "second", 3: "third"}.get(n, f"{n}th")
