"""One figure over many jobs: what zeus-run saved each of them (``zeus-run plot runs/*``).

Top: each job's saving so far against always running its default batch size,
after every recurrence (what its tries spent so far against the default's, by the rule of
`zeus_run.views.saving`). Bottom: each job's saving of cost, energy and time over its whole
history, with its 90% interval. Figures come from `zeus_run.views.summary` through
`zeus_run.views.jobs.JobView`; matplotlib (the ``plot`` extra) is loaded as in
`zeus_run.views.plot`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from zeus_run.errors import UsageError
from zeus_run.views.jobs import JobView
from zeus_run.views.plot import DPI, load_matplotlib, plot_target

#: Image size (unit: inches).
FIGSIZE = (9.0, 8.0)


def cumulative_savings(job: JobView) -> list[float]:
    """The whole history's cost saving after each recurrence, as fractions (empty without a default baseline).

    The sides of `zeus_run.views.nights` (the one accounting of a life), night by night.
    """
    s = job.summary
    if s.baseline is None:
        return []
    spent: dict[int, float] = {}
    default: dict[int, float] = {}
    for night in s.nights:
        spent[night.recurrence] = sum(r.spent_cost for r in night.records)
        default[night.recurrence] = night.held(lambda r: r.spent_cost) + s.baseline.cost * night.default_runs
    out, total, base = [], 0.0, 0.0
    for n in sorted(spent):
        total, base = total + spent[n], base + default[n]
        out.append(1.0 - total / base if base > 0 else 0.0)
    return out


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
        cis = [getattr(j.summary, f"savings_{key}_ci") for j in jobs]
        below = [v - ci[0] * 100 if ci else 0.0 for v, ci in zip(values, cis, strict=True)]
        above = [ci[1] * 100 - v if ci else 0.0 for v, ci in zip(values, cis, strict=True)]
        x = [x + (i - 1) * width for x in range(len(jobs))]
        ax_total.bar(x, values, width, label=key, color=color, yerr=[below, above], capsize=2, ecolor="#333333")
    ax_total.axhline(0.0, color="#555555", linewidth=1)
    ax_total.set_xticks(range(len(jobs)), names, rotation=20, ha="right", fontsize=8)
    ax_total.set_ylabel("saved (%)")
    ax_total.set_title("Whole history against always running the default (bars: 90% intervals)")
    ax_total.legend(fontsize=8)
    fig.suptitle(title or f"zeus-run: {len(jobs)} jobs", fontsize=12)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=DPI)
    return out
