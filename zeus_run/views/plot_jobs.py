"""One figure over many jobs: what zeus-run saved each of them (``zeus-run plot runs/*``).

Top: each job's saving so far against always running its default batch size,
after every recurrence (cumulative cost of its recurrences against the default's
mean cost times their number). Bottom: each job's saving of cost, energy and
time over its whole history. Figures come from `zeus_run.views.summary` through
`zeus_run.views.jobs.JobView`; matplotlib (the ``plot`` extra) is loaded as in
`zeus_run.views.plot`.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import accumulate
from pathlib import Path

from zeus_run.errors import UsageError
from zeus_run.views.jobs import JobView
from zeus_run.views.plot import DPI, load_matplotlib, plot_target

#: Image size (unit: inches).
FIGSIZE = (9.0, 8.0)


def cumulative_savings(job: JobView) -> list[float]:
    """The saving after each recurrence, as fractions (empty without a default baseline)."""
    base = job.summary.default_mean_cost
    if not base:
        return []
    spent = accumulate(job.summary.recurrence_costs)
    return [1.0 - c / (base * n) for n, c in enumerate(spent, start=1)]


def plot_jobs(jobs: Sequence[JobView], path: str | Path, title: str | None = None) -> Path:
    """Draw the savings of ``jobs`` into ``path`` (PNG, SVG or PDF by suffix) and return it.

    Raises:
        UsageError: No jobs, or an unknown suffix.
        PlotUnavailableError: matplotlib is missing.
    """
    out = plot_target(path)
    if not jobs:
        raise UsageError("no jobs to plot.")
    figure_cls, canvas_cls = load_matplotlib()
    fig = figure_cls(figsize=FIGSIZE, dpi=DPI, layout="constrained")
    canvas_cls(fig)
    ax_time, ax_total = fig.subplots(2, 1)
    for job in jobs:
        series = cumulative_savings(job)
        if series:
            ax_time.plot(range(1, len(series) + 1), [v * 100 for v in series], marker=".", label=job.name)
    ax_time.axhline(0.0, color="#555555", linestyle="--", linewidth=1)
    ax_time.set_xlabel("recurrence")
    ax_time.set_ylabel("saved against the default (%)")
    ax_time.set_title("Saving so far, after each recurrence")
    if ax_time.get_legend_handles_labels()[0]:
        ax_time.legend(fontsize=8)
    width = 0.27
    names = [j.name for j in jobs]
    for i, (key, color) in enumerate((("cost", "#0072b2"), ("energy", "#009e73"), ("time", "#e69f00"))):
        values = [(getattr(j.summary, f"savings_{key}") or 0.0) * 100 for j in jobs]
        ax_total.bar([x + (i - 1) * width for x in range(len(jobs))], values, width, label=key, color=color)
    ax_total.axhline(0.0, color="#555555", linewidth=1)
    ax_total.set_xticks(range(len(jobs)), names, rotation=20, ha="right", fontsize=8)
    ax_total.set_ylabel("saved (%)")
    ax_total.set_title("Whole history against always running the default")
    ax_total.legend(fontsize=8)
    fig.suptitle(title or f"zeus-run: {len(jobs)} jobs", fontsize=12)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=DPI)
    return out
