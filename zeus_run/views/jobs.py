"""Many jobs at once: a run directory read as one job, and one line per job.

`load_job` reads a run directory (real, simulated or replayed) into a `JobView`:
its records, their `zeus_run.views.summary.Summary` and what a dashboard shows of it
(current batch size and power limit, the last recurrence and its outcome).
`expand_run_dirs` turns command-line arguments (run directories, or folders
holding them) into run directories; `job_rows` and `total_row` are the lines
of ``zeus-run history runs/*``. Exporters (`zeus_run.export`) and the HTML
report (`zeus_run.views.report`) read jobs through here too, so every view shows
the same figures.

This module is imported by the command line's help, so it imports only the
standard library at module level.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from zeus_run.errors import UsageError

if TYPE_CHECKING:
    from zeus_run.engine.knobs import Knobs
    from zeus_run.records import TrialRecord
    from zeus_run.rundir.settings import RunSettings
    from zeus_run.views.money import Accounting
    from zeus_run.views.saving import Saved
    from zeus_run.views.starts import StartRow
    from zeus_run.views.summary import Summary

#: The history file's name in a run directory (`zeus_run.rundir.history.HISTORY_NAME`).
_HISTORY = "history.jsonl"


def is_run_dir(path: Path) -> bool:
    """Whether ``path`` is a run directory with a history."""
    return (path / _HISTORY).is_file()


def many_jobs(paths: Sequence[Path]) -> bool:
    """Whether command-line ``paths`` name several jobs: more than one, or one folder of run directories."""
    if len(paths) != 1:
        return True
    p = paths[0]
    return p.is_dir() and not is_run_dir(p) and any(d.is_dir() and is_run_dir(d) for d in p.iterdir())


def expand_run_dirs(paths: Iterable[Path]) -> list[Path]:
    """Run directories named by ``paths``: each is a run directory, its history.jsonl, or a folder of run directories.

    Raises:
        UsageError: A path is none of these (the message names it), or two paths are the same run.
    """
    out: list[Path] = []
    for p in paths:
        if p.is_file() and p.name == _HISTORY:
            found = [p.parent]
        elif is_run_dir(p):
            found = [p]
        elif p.is_dir():
            found = sorted(d for d in p.iterdir() if d.is_dir() and is_run_dir(d))
            if not found:
                raise UsageError(
                    f"{str(p)!r} holds no run directory (no history.jsonl in it or in its folders); "
                    "pass run directories, e.g. runs/demo, or a folder of them, e.g. runs."
                )
        else:
            raise UsageError(f"{str(p)!r} is not a run directory; pass e.g. runs/demo, or a folder of them.")
        for d in found:
            if any(d.resolve() == o.resolve() for o in out):
                raise UsageError(f"run directory {str(d)!r} is named twice; pass each once.")
            out.append(d)
    return out


@dataclass(frozen=True)
class JobView:
    """One run directory, read once.

    Attributes:
        run_dir: The run directory.
        name: Job name (the records' ``job``).
        records: Every trial record, in history order.
        summary: Their summary.
        kind: ``real``, ``simulated`` or ``replayed`` (the first record's).
        gpu: GPU model(s) the trials measured, or None where unknown.
        last_ended: End of the last trial (UTC), or the history file's last change for records without times.
        accounting: Carbon and money (`zeus_run.accounting`), None where the spec sets no rate.
        knobs: The run's settings (None where its spec.yaml cannot be read).
        settings: Its ``spec.yaml``, read once (`zeus_run.rundir.settings.RunSettings`).
        starts: Each trigger's start plan and what it saved (``starts.jsonl``: `zeus_run.views.starts`; empty
            for a job without a ``start`` section).
    """

    run_dir: Path
    name: str
    records: tuple[TrialRecord, ...]
    summary: Summary
    kind: str
    gpu: str | None
    last_ended: datetime
    settings: RunSettings
    accounting: Accounting | None = None
    knobs: Knobs | None = None
    starts: tuple[StartRow, ...] = ()

    @property
    def last(self) -> TrialRecord:
        """The last trial recorded."""
        return self.records[-1]

    @property
    def batch_size(self) -> int:
        """The batch size zeus-run ran last (the current one)."""
        return self.last.batch_size

    @property
    def power_limit(self) -> float | None:
        """The power limit of the last trial (unit: W), None where none was set."""
        return self.last.power_limit

    @property
    def path(self) -> str:
        """The run directory's absolute path: what tells apart two run directories of one job name."""
        return str(self.run_dir.resolve())

    @property
    def state(self) -> str:
        """``running`` (a launcher holds the run directory and the job's recurrences are not all done),
        ``finished`` (all done, or idle after a recurrence that reached the target) or ``failed``
        (idle after a recurrence that did not reach it)."""
        from zeus_run.errors import ZeusRunError
        from zeus_run.rundir.lock import is_held, launcher_holds
        from zeus_run.views.summary import recurrence_rows

        horizon = self.knobs.horizon if self.knobs is not None else None
        if horizon is not None and self.summary.recurrences >= horizon:
            return "finished"
        try:
            held = is_held(self.run_dir) and launcher_holds(self.run_dir)
        except (OSError, ZeusRunError):  # an unreadable directory holds no launcher we could see
            held = False
        if held:
            return "running"
        rows = recurrence_rows(self.records)
        return "finished" if rows and rows[-1].reached else "failed"

    @property
    def exploring(self) -> bool:
        """Whether exploration is still going."""
        return self.summary.exploration is not None and self.summary.exploration.exploring


def knobs_of(run_dir: Path, settings: RunSettings | None = None) -> Knobs | None:
    """The run's settings from its ``spec.yaml`` (None where there is none or it cannot be read).

    Args:
        run_dir: The run directory.
        settings: Its ``spec.yaml`` already read (`zeus_run.rundir.settings.RunSettings`); None: read it.
    """
    from zeus_run.engine.knobs import Knobs
    from zeus_run.errors import HistoryError

    try:
        return Knobs.from_run_dir(run_dir, settings.raw if settings is not None else None)
    except HistoryError:
        return None


def summarize_run(
    records: Sequence[TrialRecord],
    knobs: Knobs | None,
    default_batch_size: int | None = None,
    run_dir: Path | None = None,
) -> Summary:
    """The summary every view shows of a run: `zeus_run.views.summary.summarize` under the run's settings.

    With ``knobs`` the optimizer's belief and the slow recurrences are what the engine saved beside the history
    after folding its last record (``belief.json`` in ``run_dir``: `zeus_run.views.recommend.saved_belief`): a
    view reads them, it does not decide again. A history without a belief that covers it (written before beliefs
    were kept, a simulation's records) has them replayed from its records (`zeus_run.views.recommend.belief_of`).
    The baseline is b0 at the maximum power limit of its profile, costed by the run's objective
    (`zeus_run.views.baseline`). ``run``'s summary, ``history``, ``report``, the exports and ``simulate`` all
    call this.
    """
    from zeus_run.views.recommend import belief_of, saved_belief
    from zeus_run.views.summary import summarize

    if knobs is None:
        return summarize(records, default_batch_size)
    belief = saved_belief(run_dir, records) if run_dir is not None else None
    return summarize(
        records,
        knobs.default_batch_size if default_batch_size is None else default_batch_size,
        belief=belief if belief is not None else belief_of(records, knobs),
        objective=knobs.goal,
        profile=knobs.default_profile,
    )


def accounting_of(
    run_dir: Path, records: Sequence[TrialRecord], summary: Summary, settings: RunSettings | None = None
) -> Accounting | None:
    """Carbon and money of a run, from its spec's ``accounting`` section, against the summary's baseline.

    Args:
        run_dir: The run directory.
        records: Its records.
        summary: Their summary (`summarize_run`): its baseline and slow recurrences.
        settings: Its ``spec.yaml`` already read; None: read it (`zeus_run.rundir.settings`, the one reader).

    Raises:
        zeus_run.accounting.AccountingError: A rate series named there cannot be read.
    """
    from zeus_run.accounting import settings_from
    from zeus_run.rundir.rates import periods
    from zeus_run.rundir.settings import RunSettings
    from zeus_run.views.money import account

    if settings is None:
        settings = RunSettings.read(run_dir)
    return account(records, settings_from(settings.accounting), summary, run_dir, periods(run_dir))


def load_job(run_dir: Path) -> JobView:
    """Read a run directory into a `JobView`.

    Raises:
        HistoryError: No readable history.
        UsageError: The history has no trial yet.
        zeus_run.accounting.AccountingError: A rate series the spec names cannot be read.
    """
    from zeus_run.rundir.history import read_history
    from zeus_run.rundir.settings import RunSettings
    from zeus_run.views.starts import read_start_rows

    records = tuple(read_history(run_dir))
    if not records:
        raise UsageError(f"run directory {str(run_dir)!r} has no trials yet; run it first.")
    settings = RunSettings.read(run_dir)  # spec.yaml, read once
    knobs = knobs_of(run_dir, settings)
    summary = summarize_run(records, knobs, settings.default_batch_size, run_dir)
    gpus = sorted({str(g.get("name")) for r in records for g in (r.provenance or {}).get("gpus") or [] if g})
    return JobView(
        run_dir=run_dir,
        name=records[0].job,
        records=records,
        summary=summary,
        kind=records[0].kind,
        gpu=",".join(gpus) or None,
        last_ended=_last_ended(run_dir, records),
        accounting=accounting_of(run_dir, records, summary, settings),
        knobs=knobs,
        settings=settings,
        starts=tuple(read_start_rows(run_dir)),
    )


def _last_ended(run_dir: Path, records: Sequence[TrialRecord]) -> datetime:
    for r in reversed(records):
        if r.ended_at:
            try:
                t = datetime.fromisoformat(r.ended_at)
            except ValueError:
                continue
            return t if t.tzinfo else t.replace(tzinfo=timezone.utc)
    return datetime.fromtimestamp((run_dir / _HISTORY).stat().st_mtime, tz=timezone.utc)


def outcome_text(job: JobView) -> str:
    """How the last recurrence ended: ``reached``, or its last try's stop reason."""
    last = job.last
    return "reached" if last.reached else last.stop_reason


#: Columns of `job_rows` (and of ``history runs/* --format csv``), in order.
COLUMNS = (
    "job",
    "kind",
    "recurrences",
    "trials",
    "last_run",
    "outcome",
    "batch_size",
    "power_limit",
    "exploring",
    "energy",
    "time",
    "cost",
    "saving_cost",
    "saving_cost_ci",
    "saving_energy",
    "saving_energy_ci",
    "saving_time",
    "saving_time_ci",
    "steady_cost",
    "steady_saving",
    "steady_saving_ci",
    "carbon_g",
    "saving_carbon",
    "saving_carbon_ci",
    "money",
    "currency",
    "saving_money",
    "saving_money_ci",
    "run_dir",
)


def _ci(saved: Saved | None) -> list[float] | None:
    return list(saved.ci) if saved is not None and saved.ci is not None else None


def job_rows(jobs: Sequence[JobView]) -> list[dict[str, Any]]:
    """One row per job (`COLUMNS`): units J, s and gCO2e, savings as fractions against the default.

    Beside each saving its 90% interval (``*_ci``: ``[low, high]``, None where none can be stated yet).
    """
    rows = []
    for j in jobs:
        s, acc = j.summary, j.accounting
        steady = s.steady.saved.get("cost") if s.steady else None
        rows.append(
            {
                "job": j.name,
                "kind": j.kind,
                "recurrences": s.all_recurrences,
                "trials": s.trials,
                "last_run": j.last_ended.isoformat(timespec="seconds"),
                "outcome": outcome_text(j),
                "batch_size": j.batch_size,
                "power_limit": j.power_limit,
                "exploring": j.exploring,
                "energy": s.total_energy,
                "time": s.total_time,
                "cost": s.total_cost,
                "saving_cost": s.savings_cost,
                "saving_cost_ci": _ci(s.saved.get("cost")),
                "saving_energy": s.savings_energy,
                "saving_energy_ci": _ci(s.saved.get("energy")),
                "saving_time": s.savings_time,
                "saving_time_ci": _ci(s.saved.get("time")),
                "steady_cost": s.steady.mean_cost if s.steady else None,
                "steady_saving": s.steady.savings if s.steady else None,
                "steady_saving_ci": _ci(steady),
                "carbon_g": acc.carbon_g if acc else None,
                "saving_carbon": acc.carbon_saving if acc else None,
                "saving_carbon_ci": _ci(acc.carbon) if acc else None,
                "money": acc.money if acc else None,
                "currency": acc.currency if acc and acc.money is not None else None,
                "saving_money": acc.money_saving if acc else None,
                "saving_money_ci": _ci(acc.money_saved) if acc else None,
                "run_dir": str(j.run_dir),
            }
        )
    return rows


def total(jobs: Sequence[JobView]) -> dict[str, Saved | None]:
    """Every job's whole-history savings taken together (`zeus_run.views.saving.pooled`), by quantity.

    ``carbon`` and ``money`` over the jobs with a rate (``money`` only when they share one currency).
    """
    from zeus_run.views.saving import pooled

    out: dict[str, Saved | None] = {
        q: pooled([j.summary.saved.get(q) for j in jobs]) for q in ("cost", "energy", "time")
    }
    accs = [j.accounting for j in jobs if j.accounting is not None]
    priced = [a for a in accs if a.money is not None]
    out["carbon"] = pooled([a.carbon for a in accs if a.carbon_g is not None])
    out["money"] = pooled([a.money_saved for a in priced]) if len({a.currency for a in priced}) == 1 else None
    return out


def total_row(jobs: Sequence[JobView]) -> dict[str, Any]:
    """The total over ``jobs`` (`COLUMNS`): sums, and savings against every job's default together (`total`).

    A job without a default baseline (no converged default run yet) counts in the
    sums but not in the savings. Money is summed only when every job with a price has
    the same currency (else None).
    """
    s = [j.summary for j in jobs]
    saving = total(jobs)
    accs = [j.accounting for j in jobs if j.accounting is not None]
    carbon = [a for a in accs if a.carbon_g is not None]
    priced = [a for a in accs if a.money is not None]
    currencies = {a.currency for a in priced}
    one_currency = len(currencies) == 1
    return {
        "job": "total",
        "kind": "",
        "recurrences": sum(x.all_recurrences for x in s),
        "trials": sum(x.trials for x in s),
        "last_run": max(j.last_ended for j in jobs).isoformat(timespec="seconds") if jobs else None,
        "outcome": "",
        "batch_size": None,
        "power_limit": None,
        "exploring": sum(1 for j in jobs if j.exploring),
        "energy": sum(x.total_energy for x in s),
        "time": sum(x.total_time for x in s),
        "cost": sum(x.total_cost for x in s),
        "saving_cost": _value(saving["cost"]),
        "saving_cost_ci": _ci(saving["cost"]),
        "saving_energy": _value(saving["energy"]),
        "saving_energy_ci": _ci(saving["energy"]),
        "saving_time": _value(saving["time"]),
        "saving_time_ci": _ci(saving["time"]),
        "steady_cost": None,
        "steady_saving": None,
        "steady_saving_ci": None,
        "carbon_g": sum(a.carbon_g or 0.0 for a in carbon) if carbon else None,
        "saving_carbon": _value(saving["carbon"]),
        "saving_carbon_ci": _ci(saving["carbon"]),
        "money": sum(a.money or 0.0 for a in priced) if one_currency else None,
        "currency": next(iter(currencies)) if one_currency else None,
        "saving_money": _value(saving["money"]),
        "saving_money_ci": _ci(saving["money"]),
        "run_dir": "",
    }


def _value(saved: Saved | None) -> float | None:
    return saved.value if saved is not None else None
