"""Live views of a run: what ``zeus-run run`` shows while trials execute.

Three views implement the runner's `RunListener`:

* `LiveRunView` on a terminal: one status line that redraws in place. It
  starts with the recurrence N/M, the elapsed time and the ETA, so a narrow
  terminal cuts the trial's details, never those.
* `PlainRunView` elsewhere (cron, CI, Slurm, a pipe): plain timestamped lines,
  one when a trial starts and one when it ends, each with N/M, elapsed and ETA.
* `QuietRunView` for ``-q``: nothing but failed trials, as warnings.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from zeus_run._terminal import printable
from zeus_run.contract import StopReason
from zeus_run.records import TrialRecord
from zeus_run.views.rows import failure_reason

if TYPE_CHECKING:
    from rich.console import Console

    from zeus_run.engine.core import TrialRequest
    from zeus_run.spec import JobSpec

logger = logging.getLogger("zeus_run.cli")


def escape(text: str) -> str:
    """rich's markup escape, rich loaded on first use: a ``-q`` run (cron) shows nothing and loads none of it."""
    from rich.markup import escape as rich_escape

    return rich_escape(text)


class RunClock:
    """Recurrences done, elapsed time and an ETA for one launcher session.

    The ETA is the mean time per recurrence finished in this session times the
    recurrences left, minus the time already spent on the current one. It is
    unknown (None) until one recurrence has finished.

    Args:
        total: Recurrences the run should reach.
        done: Recurrences already converged when the session started (resume).
        clock: Monotonic time source (unit: s).
    """

    def __init__(self, total: int, done: int = 0, clock: Callable[[], float] = time.monotonic) -> None:
        self.total = total
        self.done = done
        self._done_at_start = done
        self._clock = clock
        self._start = clock()
        self._last = self._start

    def complete(self) -> None:
        """One more recurrence converged."""
        self.done += 1
        self._last = self._clock()

    @property
    def current(self) -> int:
        """The recurrence being worked on (1-based; ``total`` once all are done)."""
        return min(self.done + 1, self.total)

    def elapsed(self) -> float:
        """Seconds since the session started."""
        return self._clock() - self._start

    def eta(self) -> float | None:
        """Seconds until the last recurrence is done (None: unknown yet)."""
        finished = self.done - self._done_at_start
        if self.done >= self.total:
            return 0.0
        if finished <= 0:
            return None
        per = (self._last - self._start) / finished
        return max(0.0, per * (self.total - self.done) - (self._clock() - self._last))

    def head(self, recurrence: int | None = None) -> str:
        """``recurrence 3/20 | elapsed 1m05s | ETA 7m20s`` (``recurrence``: default `current`)."""
        from zeus_run.cli._render import fmt_duration

        eta = self.eta()
        return (
            f"recurrence {recurrence or self.current}/{self.total} | elapsed {fmt_duration(self.elapsed())} | "
            f"ETA {'--' if eta is None else fmt_duration(eta)}"
        )


def trial_label(req: TrialRequest, learning_rate: float | None) -> str:
    """``try 1: bs=256 lr=0.2 (pruning)``."""
    lr = f" lr={learning_rate:.3g}" if learning_rate is not None else ""
    return f"try {req.attempt}: bs={req.decision.batch_size}{lr} ({req.decision.stage})"


def trial_result(record: TrialRecord) -> str:
    """``bs=256 reached after 5 epoch(s), 0.27 s, ~17.4 J, cost 17.4 J`` (with markup)."""
    from zeus_run.cli._render import fmt_energy, fmt_time, outcome_text

    est = "~" if record.estimated else ""
    pl = f" at {record.power_limit:g} W" if record.power_limit is not None else ""
    return (
        f"bs={record.batch_size}{pl} {outcome_text(record.stop_reason)} after {record.epochs} epoch(s), "
        f"{fmt_time(record.time)}, {est}{fmt_energy(record.energy)}, cost {fmt_energy(record.cost)}"
    )


def failure_line(record: TrialRecord) -> str | None:
    """``RuntimeError: CUDA out of memory (exit code 1; log: trials/r0003-t01/output.log)``, for failed trials."""
    from zeus_run.cli._render import shorten

    reason = failure_reason(record)
    if reason is None:
        return None
    extra = []
    if (
        record.stop_reason is StopReason.CRASHED
        and record.exit_code is not None
        and not reason.startswith(("exit", "killed"))
    ):
        extra.append(f"exit code {record.exit_code}")
    if record.log:
        extra.append(f"log: {record.log}")
    return shorten(reason, 160) + (f" ({'; '.join(extra)})" if extra else "")


def _head_column(clock: Callable[[], RunClock | None]) -> Any:
    """A rich progress column: N/M, elapsed and ETA, recomputed at every refresh."""
    from rich.progress import ProgressColumn, Task
    from rich.table import Column
    from rich.text import Text

    class HeadColumn(ProgressColumn):
        def __init__(self) -> None:
            super().__init__(table_column=Column(no_wrap=True))

        def render(self, task: Task) -> Text:
            c = clock()
            return Text(c.head() if c else "starting", style="bold")

    return HeadColumn()


class LiveRunView:
    """On a terminal: a status line redrawn in place, and one line per finished trial."""

    def __init__(self, console: Console, show_output: bool = True) -> None:
        self.console = console
        self.show_output = show_output
        from rich.progress import Progress, SpinnerColumn, TextColumn
        from rich.table import Column

        self.clock: RunClock | None = None
        self.progress = Progress(
            SpinnerColumn(),
            _head_column(lambda: self.clock),
            TextColumn(
                "{task.fields[status]}", table_column=Column(no_wrap=True, overflow="ellipsis", ratio=1, min_width=0)
            ),
            console=console,
            transient=True,
            expand=True,
        )
        self.task_id = self.progress.add_task("run", total=None, status="", start=False)
        self.trial_text = ""
        self.detail_text = ""
        self.epoch_text = ""
        self.estimated = False

    def __enter__(self) -> LiveRunView:
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()

    # RunListener
    def on_run_start(self, spec: JobSpec, run_dir: Path, energy: str, done: int) -> None:
        self.clock = RunClock(spec.recurrences or done + 1, done)
        self.estimated = energy.startswith("estimate")
        what = "Resuming" if done else "Running"
        self.console.print(
            f"[bold]{what} {escape(spec.name)}[/] in {escape(str(run_dir))}: "
            f"{spec.recurrences} recurrences ({done} done), batch sizes {list(spec.batch_sizes)}"
        )
        self.console.print(f"Energy: {escape(energy)}")

    def on_more_recurrences(self, total: int) -> None:
        if self.clock is not None:
            self.clock.total = max(self.clock.total, total)

    def on_trial_start(self, req: TrialRequest, learning_rate: float | None, trial_dir: Path) -> None:
        # Most telling first: a narrow terminal cuts from the right.
        self.trial_text = f"bs={req.decision.batch_size}"
        lr = f" lr={learning_rate:.3g}" if learning_rate is not None else ""
        self.detail_text = f"try {req.attempt}{lr} ({req.decision.stage})"
        self.epoch_text = ""
        self._update(0.0, 0.0)

    def on_output(self, line: str) -> None:
        if self.show_output:
            self.console.print(f"[dim]  | {escape(printable(line.rstrip()))}[/]")

    def on_epoch(self, epoch: int, metric: float, time: float, energy: float, cost: float) -> None:
        self.epoch_text = f"epoch {epoch} metric {metric:.4g}"
        self._update(energy, cost)

    def on_tick(self, time: float, energy: float, cost: float) -> None:
        self._update(energy, cost)

    def on_trial_end(self, record: TrialRecord) -> None:
        if (record.reached or record.recurrence_failed) and self.clock is not None:
            self.clock.complete()  # the recurrence ended (a failed one too: the next one runs)
        head = f"rec {record.recurrence}/{self.clock.total if self.clock else '?'} try {record.attempt}:"
        self.console.print(f"  {head} {trial_result(record)}")
        why = failure_line(record)
        if why:
            self.console.print(f"[dim]    {escape(printable(why))}[/]")

    def _update(self, energy: float, cost: float) -> None:
        from zeus_run.cli._render import fmt_energy

        est = "~" if self.estimated else ""
        parts = [
            self.trial_text,
            self.epoch_text,
            f"cost {fmt_energy(cost)}",
            f"energy {est}{fmt_energy(energy)}",
            self.detail_text,
        ]
        self.progress.update(self.task_id, status=" | ".join(p for p in parts if p))


class PlainRunView:
    """Off a terminal: plain, timestamped lines that a log file keeps whole."""

    def __init__(self, console: Console, show_output: bool = True, wall: Callable[[], float] = time.time) -> None:
        self.console = console
        self.show_output = show_output
        self.clock: RunClock | None = None
        self._wall = wall

    def __enter__(self) -> PlainRunView:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def _line(self, text: str, recurrence: int | None = None) -> None:
        stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self._wall()))
        head = self.clock.head(recurrence) if self.clock else ""
        self.console.print(f"{stamp} {head} | {text}" if head else f"{stamp} {text}")

    def on_run_start(self, spec: JobSpec, run_dir: Path, energy: str, done: int) -> None:
        what = "Resuming" if done else "Running"
        self._line(
            f"{what} {escape(spec.name)} in {escape(str(run_dir))}: {spec.recurrences} recurrences ({done} done), "
            f"batch sizes {list(spec.batch_sizes)}; energy: {escape(energy)}"
        )
        self.clock = RunClock(spec.recurrences or done + 1, done)

    def on_more_recurrences(self, total: int) -> None:
        if self.clock is not None:
            self.clock.total = max(self.clock.total, total)

    def on_trial_start(self, req: TrialRequest, learning_rate: float | None, trial_dir: Path) -> None:
        self._line(f"{trial_label(req, learning_rate)} started", req.recurrence)

    def on_output(self, line: str) -> None:
        if self.show_output:
            self.console.print(f"  | {escape(printable(line.rstrip()))}")

    def on_epoch(self, epoch: int, metric: float, time: float, energy: float, cost: float) -> None:
        pass

    def on_tick(self, time: float, energy: float, cost: float) -> None:
        pass

    def on_trial_end(self, record: TrialRecord) -> None:
        if (record.reached or record.recurrence_failed) and self.clock is not None:
            self.clock.complete()  # the recurrence ended (a failed one too: the next one runs)
        why = failure_line(record)
        self._line(
            f"try {record.attempt}: {trial_result(record)}" + (f": {escape(printable(why))}" if why else ""),
            record.recurrence,
        )


class QuietRunView(PlainRunView):
    """``-q``: only failed trials, as warnings through logging (no console: nothing of rich is loaded)."""

    def __init__(self, console: Console | None = None, show_output: bool = False) -> None:
        super().__init__(console, show_output=False)  # type: ignore[arg-type]

    def _line(self, text: str, recurrence: int | None = None) -> None:
        pass

    def on_run_start(self, spec: JobSpec, run_dir: Path, energy: str, done: int) -> None:
        self.clock = RunClock(spec.recurrences or done + 1, done)

    def on_trial_start(self, req: TrialRequest, learning_rate: float | None, trial_dir: Path) -> None:
        pass

    def on_output(self, line: str) -> None:
        pass

    def on_trial_end(self, record: TrialRecord) -> None:
        if (record.reached or record.recurrence_failed) and self.clock is not None:
            self.clock.complete()
        if record.stop_reason in (StopReason.CRASHED, StopReason.TIMEOUT):
            logger.warning(
                "recurrence %d try %d: bs=%d %s: %s",
                record.recurrence,
                record.attempt,
                record.batch_size,
                record.stop_reason,
                failure_line(record),
            )


def make_run_view(console: Console | None, show_output: bool, quiet: bool) -> LiveRunView | PlainRunView:
    """The view that fits: quiet (no console needed), a live line on a terminal, or plain lines elsewhere."""
    if quiet or console is None:
        return QuietRunView()
    if console.is_terminal:
        return LiveRunView(console, show_output=show_output)
    return PlainRunView(console, show_output=show_output)
