"""A self-contained HTML report of one run directory, to mail or attach to a ticket.

`write_report` renders, from the library's own views (`zeus_run.views.jobs.load_job`,
`zeus_run.views.summary`, `zeus_run.views.plot.plot_history`, `zeus_run.engine.replay.audit`):
the headline summary, the per-batch-size table, the recurrences, the plot
embedded as a PNG ``data:`` URI, and the result of the decision audit. The file
loads nothing from anywhere: no scripts, fonts, stylesheets or images outside it.
"""

from __future__ import annotations

import base64
import html
import tempfile
from collections.abc import Sequence
from pathlib import Path

from zeus_run import _fs, _units
from zeus_run.contract import StopReason
from zeus_run.errors import HistoryError
from zeus_run.objective import PENALTY_WEIGHT
from zeus_run.views.jobs import JobView, load_job, outcome_text
from zeus_run.views.plot import PlotUnavailableError, plot_history
from zeus_run.views.saving import words
from zeus_run.views.summary import Summary, recurrence_rows

_CSS = """
body { font-family: sans-serif; margin: 2em; color: #222; max-width: 60em; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; }
th, td { border-bottom: 1px solid #ccc; padding: 0.2em 0.8em; text-align: right; }
th { background: #f0f0f0; } td.l, th.l { text-align: left; }
.ok { color: #006d2c; } .bad { color: #b30000; } img { max-width: 100%; }
"""


def _e(value: object) -> str:
    return html.escape(str(value))


def _j(v: float | None) -> str:
    return "-" if v is None else _units.quantity(v, "J")


def cost_formula(job: JobView) -> str:
    """What the report's costs are, for the run's objective (`zeus_run.objective`)."""
    goal = job.knobs.goal if job.knobs is not None else None
    if goal is None:
        return "costs in joules (cost = eta x energy + (1 - eta) x max power x time)"
    if goal.kind == "cost":
        return f"costs in joules (cost = {goal.eta:g} x energy + {1 - goal.eta:g} x max power x time)"
    if goal.kind == "energy":
        return "costs in joules (cost = energy)"
    if goal.kind == "time":
        return "costs in joules (cost = max power x time)"
    return (
        f"costs in joules (max-slowdown {goal.factor:g}: cost = energy + {PENALTY_WEIGHT:g} x max power x the time "
        f"beyond {goal.factor:g} x the default batch size's time at the max power limit)"
    )


def _runs(n: int) -> str:
    return f"{n} run" if n == 1 else f"{n} runs"


def reason_text(stop_reason: str) -> str:
    """A stop reason as people read it (``cost_threshold``: "stopped early: ..."); unknown words as they are."""
    if stop_reason == StopReason.TARGET_REACHED:
        return "reached the target"
    try:
        return StopReason(stop_reason).description
    except ValueError:
        return stop_reason


def _s(v: float | None) -> str:
    return "-" if v is None else _units.quantity(v, "s")


def _table(head: Sequence[str] | None, rows: Sequence[Sequence[object]], left: int = 1) -> str:
    """An HTML table; ``left``: how many leading columns are left-aligned; no header row when ``head`` is None."""

    def cell(tag: str, i: int, v: object) -> str:
        return f"<{tag}{' class=l' if i < left else ''}>{_e(v)}</{tag}>"

    out = ["<table>"]
    if head is not None:
        out.append("<tr>" + "".join(cell("th", i, h) for i, h in enumerate(head)) + "</tr>")
    out += ["<tr>" + "".join(cell("td", i, v) for i, v in enumerate(r)) + "</tr>" for r in rows]
    return "\n".join([*out, "</table>"])


def summary_rows(job: JobView) -> list[tuple[str, str]]:
    """The headline figures, as (what, value) pairs."""
    s: Summary = job.summary
    ex = s.exploration
    rec = s.recommendation
    rows = [
        ("job", f"{job.name} ({job.kind})"),
        ("recurrences, trials", s.counted),
        ("recurrences converged / failed", f"{s.recurrences} / {s.failed_recurrences}"),
        ("last trial", f"{job.last_ended.isoformat(timespec='seconds')}: {reason_text(outcome_text(job))}"),
        ("current batch size", str(job.batch_size) + (f" at {job.power_limit:g} W" if job.power_limit else "")),
        (
            "exploration",
            "still exploring" if job.exploring else f"over after recurrence {ex.ended_after}" if ex else "-",
        ),
        (
            "default (before zeus-run)",
            f"batch size {s.default_batch_size}"
            + (f" at {s.baseline.power_limit:g} W" if s.baseline and s.baseline.power_limit else "")
            + f": mean cost {_j(s.default_mean_cost)} over {_runs(s.default_runs)}"
            + (f" ({s.baseline.scaled} scaled from a lower power limit)" if s.baseline and s.baseline.scaled else ""),
        ),
        *[
            (f"whole history against the default: {q}", words(s.saved.get(q), fmt))
            for q, fmt in (("cost", _j), ("energy", _j), ("time", _s))
            if s.saved.get(q) is not None
        ],
        *[
            (
                f"whole history without the slow recurrences ({', '.join(map(str, s.slow_left_out))}): {q}",
                words(s.saved_without_slow.get(q), fmt),
            )
            for q, fmt in (("cost", _j), ("energy", _j), ("time", _s))
            if s.saved_without_slow.get(q) is not None
        ],
        *(
            [
                (
                    f"steady state (recurrences {s.steady.first}-{s.steady.last}), per recurrence: {q}",
                    words(s.steady.saved.get(q), fmt),
                )
                for q, fmt in (("cost", _j), ("energy", _j), ("time", _s))
                if s.steady.saved.get(q) is not None
            ]
            if s.steady and s.steady.saved
            else [("steady state", "not yet (exploring, or no recurrence after it)")]
        ),
        (
            "recommended",
            f"batch size {rec.batch_size}"
            + (f", learning rate {rec.learning_rate:g}" if rec.learning_rate is not None else "")
            + (f", power limit {rec.power_limit:g} W" if rec.power_limit is not None else "")
            + f" (mean cost over {_runs(rec.runs)}: "
            + (words(rec.saved, _j) if rec.saved is not None else _j(rec.mean_cost))
            + ")"
            if rec
            else "-",
        ),
        (
            "total",
            f"energy {'~' if s.estimated else ''}{_j(s.total_energy)}, time {s.total_time:.2f} s, cost {_j(s.total_cost)}",
        ),
    ]
    rows += [(f"shut out of the decisions: batch size {x.batch_size} and larger", x.note) for x in s.shut_out]
    if s.slow:
        rows.append(
            (
                "slow recurrences (out of every mean; in every total; the default charged a slowdown only where "
                "two batch sizes or more ran slow that night)",
                ", ".join(
                    f"{n} ({f:.1f}x; the default charged {s.charged_slow.get(n, 1.0):.1f}x)"
                    for n, f in sorted(s.slow.items())
                ),
            )
        )
    acc = job.accounting
    if acc is not None:
        rows += [(line.split(": ", 1)[0].lower(), line.split(": ", 1)[1]) for line in acc.lines()]
    return rows


def audit_text(job: JobView) -> tuple[bool, str]:
    """Whether the decision audit passed, and what it says."""
    from zeus_run.engine.replay import Knobs, audit

    try:
        knobs = job.knobs or Knobs.from_run_dir(job.run_dir, job.settings.raw)
    except HistoryError as exc:
        return False, f"not checked: {exc}"
    result = audit(job.records, knobs)
    if result.divergence is None:
        return True, f"passed: re-folding the history reproduces all {result.checked} recorded decisions."
    return False, f"failed after {result.checked} matching decisions: {result.divergence.describe()}."


def plot_png(job: JobView) -> bytes | None:
    """The run's plot as PNG bytes, None without matplotlib."""
    with tempfile.TemporaryDirectory(prefix="zeus-run-report-") as tmp:
        try:
            path = plot_history(
                job.records,
                Path(tmp) / "plot.png",
                default_batch_size=job.settings.default_batch_size,
                accounting=job.accounting,
                summary=job.summary,
            )
        except PlotUnavailableError:
            return None
        return path.read_bytes()


def _span(seconds: float) -> str:
    if abs(seconds) >= 3600:
        return f"{seconds / 3600:.2f} h"
    return f"{seconds / 60:.0f} min" if abs(seconds) >= 60 else f"{seconds:.0f} s"


def _g(v: float | None, unit: str = "g/kWh") -> str:
    return "-" if v is None else f"{v:.0f} {unit}"


def start_section(job: JobView) -> list[str]:
    """The start plans (``starts.jsonl``, spec section ``start``): one row per trigger, the plan then what
    happened; nothing for a job without one."""
    from zeus_run.start import iso
    from zeus_run.views.starts import saved_total

    if not job.starts:
        return []
    rows = []
    for r in job.starts:
        if r.interrupted is not None:
            ran = f"stopped by {r.interrupted} while waiting"
        elif not r.ran:
            ran = "not run yet"
        else:
            ran = f"rec {', '.join(map(str, r.recurrences))}" + ("" if r.deadline_met else ", AFTER the deadline")
        saved = (
            "-"
            if r.saved_g is None
            else f"{r.saved_g:+.3g} g" + (f" ({r.saved_share:+.1%})" if r.saved_share is not None else "")
        )
        rows.append(
            (
                iso(r.trigger),
                iso(r.start_at),
                _span(r.delay),
                _g(r.forecast_now),
                _g(r.forecast_at_start),
                iso(r.deadline),
                f"{r.reason} ({r.provenance})",
                ran,
                _g(r.intensity) if r.intensity is not None else (r.note or "-") if r.ran else "-",
                _g(r.on_time_intensity),
                saved,
            )
        )
    total = saved_total(job.starts)
    measured = sum(1 for r in job.starts if r.saved_g is not None)
    head = (
        f"<p>Carbon saved by shifting starts: {total:+.4g} g CO2e over {measured} measured run(s), against starting "
        "each at its trigger (measured on the intensity series, not forecast).</p>"
        if total is not None
        else "<p>No saving measured yet (no run has ended inside the intensity series).</p>"
    )
    return [
        "<h2>Start plans</h2>",
        head,
        _table(
            [
                "trigger",
                "planned start",
                "delay",
                "forecast at trigger",
                "forecast at start",
                "deadline",
                "why",
                "ran",
                "intensity",
                "on time",
                "saved",
            ],
            rows,
            left=0,
        ),
    ]


def render_report(job: JobView) -> str:
    """The report's HTML text."""
    s = job.summary
    est = "~" if s.estimated else ""
    ok, audit = audit_text(job)
    png = plot_png(job)
    stats = [
        (
            b.batch_size,
            b.trials,
            b.converged,
            _j(b.mean_cost),
            _j(b.std_cost),
            "-" if b.mean_epochs is None else f"{b.mean_epochs:.1f}",
            "-" if b.mean_time is None else f"{b.mean_time:.2f} s",
            est + _j(b.mean_energy) if b.mean_energy is not None else "-",
            " ".join(
                n
                for n, on in (
                    ("best", s.recommendation is not None and b.batch_size == s.recommendation.batch_size),
                    ("default", b.batch_size == s.default_batch_size),
                )
                if on
            )
            + "".join(f" ({x.label(b.batch_size)})" for x in (s.shut_out_of(b.batch_size),) if x is not None),
        )
        for b in s.by_batch_size
    ]
    recs = [
        (
            r.recurrence,
            ",".join(map(str, r.batch_sizes)),
            ",".join(r.stages),
            r.epochs,
            f"{r.time:.2f} s",
            ("~" if r.estimated else "") + _j(r.energy),
            _j(r.cost),
            ", ".join(reason_text(o) for o in r.outcomes),
        )
        for r in recurrence_rows(job.records)
    ]
    title = f"zeus-run report: {job.name}"
    plot = (
        f'<img alt="plot of {_e(job.name)}" src="data:image/png;base64,{base64.b64encode(png).decode()}">'
        if png
        else "<p>No plot: matplotlib is not installed (pip install 'zeus-run[plot]').</p>"
    )
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{_e(title)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{_e(title)}</h1>",
        f"<p>Run directory {_e(job.run_dir)}; {_e(cost_formula(job))}.</p>",
        "<h2>Summary</h2>",
        _table(None, summary_rows(job), left=2),
        "<h2>Decision audit</h2>",
        f'<p class="{"ok" if ok else "bad"}">{_e(audit)}</p>',
        "<h2>Plots</h2>",
        plot,
        "<h2>Per batch size</h2>",
        _table(["batch", "trials", "conv.", "mean cost", "std", "epochs", "time", "energy", "note"], stats, left=0),
        "<h2>Recurrences</h2>",
        _table(["rec", "batch sizes", "stage", "epochs", "time", "energy", "cost", "outcome"], recs, left=0),
        *start_section(job),
        "</body></html>",
    ]
    return "\n".join(parts) + "\n"


def write_report(run_dir: Path, output: Path) -> Path:
    """Write the report of ``run_dir`` to ``output`` (atomically) and return it.

    Raises:
        HistoryError: No readable history.
        UsageError: The history has no trial yet.
    """
    text = render_report(load_job(run_dir))
    output.parent.mkdir(parents=True, exist_ok=True)
    _fs.atomic_write(output, text)
    return output
