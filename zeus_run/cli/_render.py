"""Rendering of histories with rich: recurrence and batch-size tables, summary lines, machine formats; the
figures come from `zeus_run.views.summary`, this module only lays them out."""

from __future__ import annotations

import csv
import dataclasses
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from rich.markup import escape
from rich.table import Table
from rich.text import Text

from zeus_run._terminal import printable
from zeus_run.contract import StopReason
from zeus_run.records import TrialRecord
from zeus_run.views.rows import failure_reason, recurrence_rows
from zeus_run.views.saving import words
from zeus_run.views.summary import Summary

OUTCOME_STYLE: dict[str, tuple[str, str]] = {
    StopReason.TARGET_REACHED: ("reached", "green"),
    StopReason.MAX_EPOCHS: ("max-epochs", "yellow"),
    StopReason.COST_THRESHOLD: ("early-stop", "magenta"),
    StopReason.NO_PROGRESS: ("no-progress", "magenta"),
    StopReason.EXITED: ("exited", "yellow"),
    StopReason.CRASHED: ("crashed", "red"),
    StopReason.TIMEOUT: ("timeout", "red"),
    StopReason.INTERRUPTED: ("interrupted", "bright_black"),
    StopReason.SKIPPED: ("skipped", "bright_black"),
    StopReason.INFRASTRUCTURE: ("infra", "red"),
    StopReason.CONFIG_ERROR: ("config-error", "red"),
    StopReason.ENVIRONMENT_ERROR: ("env-error", "red"),
}

#: Longest failure reason shown in a table cell (the full text is in the log and in --format json).
REASON_WIDTH = 50

SPARK_CHARS = "▁▂▃▄▅▆▇█"
SPARK_ASCII = "_.-~=+*#"

Justify = Literal["left", "right"]

if TYPE_CHECKING:
    from rich.console import Console

    from zeus_run.views.money import Accounting


@dataclass
class Grid:
    """A table as data, printed as a rich table on a terminal and as plain aligned lines elsewhere.

    Attributes:
        title: Line above the table.
        columns: Header and justification of each column.
        rows: Cells (rich markup allowed).
        wrap: Columns a terminal may wrap; the others never wrap.
        caption: Line below the table.
    """

    title: str
    columns: list[tuple[str, Justify]]
    rows: list[list[str]] = field(default_factory=list)
    wrap: tuple[str, ...] = ("outcome",)
    caption: str | None = None

    def add_row(self, *cells: str) -> None:
        self.rows.append(list(cells))

    def to_rich(self) -> Table:
        table = Table(title=self.title, title_justify="left", pad_edge=False, show_edge=False, caption=self.caption)
        for name, just in self.columns:
            table.add_column(name, justify=just, no_wrap=name not in self.wrap)
        for row in self.rows:
            table.add_row(*row)
        return table

    def plain_lines(self) -> list[str]:
        """Aligned columns two spaces apart, a dashed rule under the header, no markup, nothing trailing."""
        cells = [[Text.from_markup(c).plain for c in row] for row in self.rows]
        heads = [name for name, _ in self.columns]
        widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(heads)]

        def line(values: Sequence[str]) -> str:
            parts = [
                v.rjust(w) if just == "right" else v.ljust(w)
                for v, w, (_, just) in zip(values, widths, self.columns, strict=True)
            ]
            return "  ".join(parts).rstrip()

        out = [self.title, line(heads), "  ".join("-" * w for w in widths)]
        out.extend(line(r) for r in cells)
        if self.caption:
            out.append(self.caption)
        return out


def print_grid(console: Console, grid: Grid) -> None:
    """A rich table on a terminal; plain lines in a log file or pipe."""
    if console.is_terminal:
        console.print(grid.to_rich())
        return
    for line in grid.plain_lines():
        console.print(line, markup=False, highlight=False)


def fmt_energy(j: float) -> str:
    """Joules with a readable unit."""
    for unit, scale in (("MJ", 1e6), ("kJ", 1e3)):
        if abs(j) >= scale:
            return f"{j / scale:.2f} {unit}"
    return f"{j:.1f} J"


def fmt_time(s: float) -> str:
    """Seconds with a readable unit."""
    if s >= 3600:
        return f"{s / 3600:.2f} h"
    if s >= 60:
        return f"{s / 60:.1f} min"
    return f"{s:.2f} s"


def fmt_duration(s: float) -> str:
    """A wall-clock span, compact: ``45s``, ``3m05s``, ``2h07m``."""
    s = max(0, round(s))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def outcome_text(reason: str) -> str:
    """A stop reason as its coloured outcome word (see the README's outcome table)."""
    label, style = OUTCOME_STYLE.get(reason, (reason, "white"))
    return f"[{style}]{label}[/]"


def shorten(text: str, width: int = REASON_WIDTH) -> str:
    """One line, at most ``width`` characters."""
    line = " ".join(text.split())
    return line if len(line) <= width else line[: width - 1] + "…"


def sparkline(values: Sequence[float], width: int = 60, ascii_only: bool = False) -> str:
    """A one-line bar chart of ``values`` (low ``▁`` to high ``█``).

    More values than ``width`` are averaged in consecutive buckets, so the
    line never grows past ``width`` characters.
    """
    vals = [float(v) for v in values]
    if not vals:
        return ""
    if len(vals) > width:
        n = len(vals)
        vals = [
            sum(vals[i * n // width : (i + 1) * n // width]) / len(vals[i * n // width : (i + 1) * n // width])
            for i in range(width)
        ]
    chars = SPARK_ASCII if ascii_only else SPARK_CHARS
    lo, hi = min(vals), max(vals)
    if hi <= lo:
        return chars[len(chars) // 2] * len(vals)
    top = len(chars) - 1
    return "".join(chars[round((v - lo) / (hi - lo) * top)] for v in vals)


def can_encode(text: str, stream: Any = None) -> bool:
    """Whether ``stream`` (default stdout) can write ``text`` (not on an ASCII-only locale)."""
    encoding = getattr(stream or sys.stdout, "encoding", None) or "utf-8"
    try:
        text.encode(encoding)
    except (UnicodeEncodeError, LookupError):
        return False
    return True


def history_table(records: Sequence[TrialRecord], title: str) -> Grid:
    """One row per recurrence; a recurrence that needed retries lists every batch size tried and why they failed."""
    rows = recurrence_rows(records)
    failed = {r.recurrence for r in records if r.recurrence_failed is not None}  # used up max_tries: over
    with_limits = any(r.power_limit is not None for r in records)
    columns: list[tuple[str, Justify]] = [
        ("rec", "right"),
        ("batch sizes", "right"),
        ("stage", "left"),
        ("epochs", "right"),
        ("time", "right"),
        ("energy", "right"),
        ("cost", "right"),
    ]
    with_dates = any(r.date for r in rows)
    if with_limits:
        columns.insert(2, ("power limit", "right"))
    if with_dates:
        columns.insert(1, ("date", "left"))
    columns.append(("outcome", "left"))
    table = Grid(title, columns)
    for row in rows:
        est = "~" if row.estimated else ""
        cells = [
            str(row.recurrence),
            ",".join(str(b) for b in row.batch_sizes),
            row.stage,
            str(row.epochs),
            fmt_time(row.time),
            f"{est}{fmt_energy(row.energy)}",
            fmt_energy(row.cost),
        ]
        if with_limits:
            cells.insert(2, f"{row.power_limit:g} W" if row.power_limit is not None else "-")
        if with_dates:
            cells.insert(1, row.date or "-")
        cells.append(("failed: " if row.recurrence in failed else "") + _outcome_cell(row.outcomes, row.reasons))
        table.add_row(*cells)
    return table


def _outcome_cell(outcomes: Sequence[str], reasons: Sequence[str | None]) -> str:
    """``reached after crashed (RuntimeError: CUDA out of memory)``."""
    reasons = list(reasons) or [None] * len(outcomes)

    def one(outcome: str, reason: str | None) -> str:
        text = outcome_text(outcome)
        if reason and outcome in (StopReason.CRASHED, StopReason.TIMEOUT):
            text += f" ({escape(printable(shorten(reason)))})"
        return text

    cell = one(outcomes[-1], reasons[-1])
    if len(outcomes) > 1:
        cell += " after " + ", ".join(one(o, r) for o, r in zip(outcomes[:-1], reasons[:-1], strict=True))
    return cell


def batch_size_table(s: Summary) -> Grid:
    """Per batch size: trials, converged, mean and std of cost, mean epochs, time and energy."""
    with_limits = any(b.power_limit is not None for b in s.by_batch_size)
    cols: list[tuple[str, Justify]] = [
        ("batch", "right"),
        ("trials", "right"),
        ("conv.", "right"),
        ("mean cost", "right"),
        ("std", "right"),
        ("epochs", "right"),
        ("time", "right"),
        ("energy", "right"),
    ]
    if with_limits:
        cols.append(("power", "right"))
    cols.append(("note", "left"))
    table = Grid(
        "Per batch size (conv.: converged runs; mean and std over them; best: the recommended one; shut out: after OOM)",
        cols,
        wrap=("note",),
    )
    est = "~" if s.estimated else ""
    rec = s.recommendation.batch_size if s.recommendation else None
    for b in s.by_batch_size:
        notes = [
            n for n, on in (("default", b.batch_size == s.default_batch_size), ("best", b.batch_size == rec)) if on
        ] + [x.label(b.batch_size) for x in (s.shut_out_of(b.batch_size),) if x is not None]
        cells = [
            str(b.batch_size),
            str(b.trials),
            str(b.converged),
            _opt(b.mean_cost, fmt_energy),
            _opt(b.std_cost, fmt_energy),
            _opt(b.mean_epochs, lambda v: f"{v:.1f}"),
            _opt(b.mean_time, fmt_time),
            est + _opt(b.mean_energy, fmt_energy) if b.mean_energy is not None else "-",
        ]
        if with_limits:
            cells.append(_opt(b.power_limit, lambda v: f"{v:g} W"))
        cells.append(", ".join(notes))
        table.add_row(*cells)
    return table


def _opt(value: float | None, fmt: Any) -> str:
    return "-" if value is None else fmt(value)


def summary_lines(s: Summary, ascii_only: bool = False) -> list[str]:
    """The summary under the tables: what zeus-run chose, saves now and recommends.

    Every saving is stated with the figures it is computed from and its 90% interval
    (`zeus_run.views.saving.words`), so each percentage can be checked against the numbers beside it.
    """
    est = estimate_note(s)
    lines = [
        f"Recurrences converged: {s.recurrences}   trials: {s.trials}"
        + (f"   interrupted: {s.interrupted}" if s.interrupted else "")
        + f"   ({_counted(s)})",
    ]
    if s.recurrence_costs:
        spark = sparkline(s.recurrence_costs, ascii_only=ascii_only)
        lo, hi = min(s.recurrence_costs), max(s.recurrence_costs)
        default = f"; default's mean {fmt_energy(s.default_mean_cost)}" if s.default_mean_cost is not None else ""
        lines.append(
            f"Cost per recurrence: {spark}  ({fmt_energy(lo)} to {fmt_energy(hi)}, recurrences 1-{len(s.recurrence_costs)}{default})"
        )
    lines.append(f"Batch size chosen over time: {_chosen(s)}")
    lines.append(_exploration_line(s))
    lines.append(_default_line(s))
    if s.steady is not None:
        st = s.steady
        span = (
            f"recurrence {st.first}"
            if st.recurrences == 1
            else f"last {st.recurrences} recurrences, {st.first}-{st.last}"
        )
        skipped = f"; {st.skipped} slow recurrence(s) left out" if st.skipped else ""
        sizes = ", ".join(str(b) for b in dict.fromkeys(st.batch_sizes))
        if st.saved:
            lines.append(
                f"Steady state ({span}{skipped}; batch size {sizes}, each at its mean over its converged runs) "
                "against always running the default:"
            )
            lines.extend(_saving_lines(st.saved, " per recurrence"))
        else:
            lines.append(f"Steady state ({span}{skipped}): {fmt_energy(st.mean_cost)} per recurrence")
    if s.sweeps:
        share = f", {s.sweep_cost / s.total_cost:.1%} of the total cost" if s.total_cost > 0 else ""
        lines.append(
            f"Power-limit sweeps: {s.sweeps}, costing {fmt_energy(s.sweep_cost)} beyond the same work at the limits "
            f"they chose{share}"
        )
    if s.after_time > 0:
        lines.append(
            f"After the target or a stop (saving, winding down; not in the cost): time {fmt_time(s.after_time)}, "
            f"energy {fmt_energy(s.after_energy)}"
        )
    if s.saved and s.savings_cost is not None:
        charged = s.charged_slow
        slow = f"; {len(charged)} slow, against the default run as slow" if charged else ""
        lines.append(
            f"Whole history ({_compared(s)}{slow}{_no_model(s.failed_recurrences)}; exploration and every try included) against "
            "always running the default:"
        )
        lines.extend(_saving_lines(s.saved))
        if s.saved_without_slow:
            left = ", ".join(str(n) for n in s.slow_left_out)
            lines.append(f"Whole history without the slow recurrence(s) {left} (left out of both sides):")
            lines.extend(_saving_lines(s.saved_without_slow))
    else:
        lines.append("Savings against the default: unknown (the default batch size never converged in this history)")
    if s.recommendation is not None:
        r = s.recommendation
        parts = [f"batch size {r.batch_size}"]
        if r.learning_rate is not None:
            parts.append(f"learning rate {r.learning_rate:.4g}")
        parts.append(f"power limit {r.power_limit:g} W" if r.power_limit is not None else "power limit unchanged")
        runs = "1 run" if r.runs == 1 else f"{r.runs} runs"
        if r.saved is not None:
            vs = f"mean cost over {runs}: " + words(r.saved, fmt_energy)
        else:
            vs = f"mean cost {fmt_energy(r.mean_cost)} over {runs}"
        provisional = " [yellow](provisional: still exploring)[/]" if s.exploration and s.exploration.exploring else ""
        lines.append(f"Recommended: {', '.join(parts)} ({vs}){provisional}")
        if r.note:
            lines.append(f"  ({escape(r.note)})")
    lines += [f"Shut out of the decisions: {escape(x.sentence)}" for x in s.shut_out]
    if s.slow or s.charged_slow:
        charged = s.charged_slow
        shown = ", ".join(
            f"{n} ({f:.1f}x; the default charged {charged.get(n, 1.0):.1f}x)"
            for n, f in sorted({**s.slow, **charged}.items())
        )
        lines.append(
            "Slow recurrences (a try ran slower than its batch size's usual pace; out of every mean and the "
            "recommendation, in every total; the default is charged a slowdown only where two batch sizes or more "
            "ran slow that night): " + shown
        )
    whole = (
        f"; the whole process (after the target and after each tell included): energy "
        f"{fmt_energy(s.total_energy + s.after_energy)}, time {fmt_time(s.total_time + s.after_time)}"
        if s.after_time > 0 or s.after_energy > 0
        else ""
    )
    lines.append(
        f"Total: energy {fmt_energy(s.total_energy)}{est}, time {fmt_time(s.total_time)}, cost "
        f"{fmt_energy(s.total_cost)}{whole}"
    )
    for name, values in s.provenance.items():
        lines.append(f"{name.replace('_', ' ').capitalize()}: {escape('; '.join(values))}")
    return lines


def estimate_note(s: Summary) -> str:
    """What of the total energy was estimated: trials that measured no GPU (an estimate whole), and the estimated
    part of measured trials (start-ups their process could not read), never one for the other."""
    notes = []
    if s.estimated_trials and s.estimated_trials >= s.trials:
        notes.append("estimated: no GPU was measured")
    elif s.estimated_trials:
        notes.append(f"estimated: {s.estimated_trials} of {s.trials} trials measured no GPU")
    if s.estimated_part > 0:
        whole = s.total_energy + s.after_energy
        share = f", {s.estimated_part / whole:.1%} of the whole" if whole > 0 else ""
        notes.append(
            f"measured; {fmt_energy(s.estimated_part)} of it estimated{share}: start-ups a process could not read"
        )
    return f" ({'; '.join(notes)})" if notes else ""


def _compared(s: Summary) -> str:
    return "1 recurrence" if s.compared_recurrences == 1 else f"{s.compared_recurrences} recurrences"


def _counted(s: Summary) -> str:
    """``21 recurrences, 28 trials; 2 failed, 1 lost``: what every view counts."""
    extra = [f"{s.failed_recurrences} failed"] if s.failed_recurrences else []
    extra += [f"{s.lost_recurrences} lost to errors no batch size caused"] if s.lost_recurrences else []
    return s.counted + (f"; {', '.join(extra)}" if extra else "")


def _no_model(n: int) -> str:
    return f"; {n} without a model, charged to zeus-run with no default run against them" if n else ""


def _chosen(s: Summary) -> str:
    """Each recurrence's final batch size a batch size ran in, a failed one as ``32(failed)``."""
    reached = s.chosen_reached or (True,) * len(s.chosen)
    return " ".join(str(b) if ok else f"{b}(failed)" for b, ok in zip(s.chosen, reached, strict=True)) or "-"


def _saving_lines(saved: dict, per: str = "") -> list[str]:
    """``  cost ...``, ``  energy ...``, ``  time ...``: each saving with its figures (`words`)."""
    fmt = {"cost": fmt_energy, "energy": fmt_energy, "time": fmt_time}
    return [f"  {q} {escape(words(saved.get(q), fmt[q], per))}" for q in ("cost", "energy", "time") if saved.get(q)]


def _exploration_line(s: Summary) -> str:
    x = s.exploration
    if x is None or x.stage is None:
        return "Exploration: not started"
    if x.exploring:
        return (
            f"[yellow]Exploration: still going[/] ({x.stage}, after {x.recurrences} recurrence(s)); the savings "
            "below include its cost and understate what the chosen batch size saves once it settles"
        )
    if not x.ended_after:
        return "Exploration: none in this history"
    return f"Exploration: over after recurrence {x.ended_after}; since then Thompson sampling picks among the survivors"


def _default_line(s: Summary) -> str:
    if s.default_batch_size is None:
        return "Default batch size: unknown"
    if s.default_mean_cost is None:
        return f"Default batch size {s.default_batch_size}: never converged, so savings against it are unknown"
    runs = "1 run" if s.default_runs == 1 else f"{s.default_runs} runs"
    b = s.baseline
    at = f" at {b.power_limit:g} W (the default limit)" if b is not None and b.power_limit is not None else ""
    scaled = f", {b.scaled} of them scaled from a lower limit" if b is not None and b.scaled else ""
    spread = "; the 90% intervals below rest on how much runs vary (--format json: spread)"
    if s.spread.df <= 0:
        spread = "; no batch size has converged twice yet, so how much runs vary, and any interval, is unknown"
    rests = f" ({b.rests_on})" if b is not None and (b.controls or b.pace_from) else ""
    mean = f"mean cost {fmt_energy(s.default_mean_cost)} over {runs}{scaled}{rests}{spread}"
    return f"Default batch size {s.default_batch_size}{at}: {mean}"


def summary_json(summary: Summary) -> dict[str, Any]:
    """The summary as a JSON-ready dict (nested dataclasses as objects).

    ``recurrences`` counts every recurrence in the history (what every view calls "N recurrences"),
    ``converged`` those that reached the target. Every saving has its 90% interval beside it under the
    same name with ``_ci`` (``[low, high]``,
    fractions; null where none can be stated yet); ``saved`` holds each with the figures it is
    computed from (`zeus_run.views.saving.Saved.to_json`).
    """
    out = dataclasses.asdict(dataclasses.replace(summary, nights=()))
    # One word, one count: ``recurrences`` is every recurrence in the history, as the text, the plot, the report,
    # the jobs table and Prometheus count them ("8 recurrences"); those that reached the target are ``converged``.
    out["converged"] = out.pop("recurrences")
    out["recurrences"] = out.pop("all_recurrences")
    out["saved"] = {q: v.to_json() if v else None for q, v in summary.saved.items()}
    out["default_rests_on"] = summary.baseline.rests_on if summary.baseline is not None else None
    out["nights"] = [
        {"recurrence": n.recurrence, "kind": n.kind.value, "default_runs": n.default_runs, "slowdown": n.slowdown}
        for n in summary.nights
    ]
    calm = summary.saved_without_slow
    out["saved_without_slow"] = {q: v.to_json() if v else None for q, v in calm.items()}
    for q in ("cost", "energy", "time"):
        v = calm.get(q)
        out[f"savings_{q}_without_slow"] = v.value if v else None
        out[f"savings_{q}_without_slow_ci"] = list(v.ci) if v and v.ci else None
    if summary.steady is not None:
        steady = out["steady"]
        steady["saved"] = {q: v.to_json() if v else None for q, v in summary.steady.saved.items()}
        for q in ("energy", "time"):
            saved = summary.steady.saved.get(q)
            steady[f"savings_{q}"] = saved.value if saved else None
            steady[f"savings_{q}_ci"] = list(saved.ci) if saved and saved.ci else None
    if summary.recommendation is not None:
        rec = summary.recommendation.saved
        out["recommendation"]["saved"] = rec.to_json() if rec else None
    return out


def write_records(
    records: Sequence[TrialRecord], fmt: str, summary: Summary | None = None, accounting: Accounting | None = None
) -> None:
    """Machine-readable output on stdout: ``json`` (trials, summary and accounting) or ``csv`` (one row per trial)."""
    rows = [r.to_json() | {"reason": failure_reason(r)} for r in records]
    if fmt == "json":
        out: dict[str, Any] = {"trials": rows}
        if summary is not None:
            out["summary"] = summary_json(summary)
        if accounting is not None:
            out["accounting"] = accounting.to_json()
        json.dump(out, sys.stdout, indent=1)
        sys.stdout.write("\n")
        return
    fields = list(dict.fromkeys(k for r in rows for k in r)) if rows else [*TrialRecord.__dataclass_fields__, "reason"]
    w = csv.DictWriter(sys.stdout, fieldnames=fields, lineterminator="\n")
    w.writeheader()
    for r in rows:
        r["metrics"] = " ".join(f"{m:g}" for m in r["metrics"])
        # Structured values (provenance, trials in flight) as JSON, not Python's repr.
        w.writerow({k: json.dumps(v) if isinstance(v, (dict, list, tuple)) else v for k, v in r.items()})
