"""A picture of a run: what zeus-run chose and what it cost, from the history alone.

`plot_history` draws three panels into one image (PNG, SVG or PDF, by the
file's suffix) from the trial records of any run directory, real, simulated or
replayed:

1. cost per recurrence (failed tries stacked on top), against the default batch
   size's mean cost, with the end of exploration and the steady state marked;
2. the batch size of every trial over time and, when one was set, its GPU
   power limit;
3. each batch size's cost distribution over its converged runs.

matplotlib is an optional dependency (``pip install 'zeus-run[plot]'``): it is
imported only here and only when a plot is drawn, never at ``zeus-run`` start-up.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from zeus_run.errors import UsageError
from zeus_run.records import TrialRecord
from zeus_run.views.saving import short
from zeus_run.views.summary import EXPLORING_STAGES, Summary, recurrence_rows, summarize

if TYPE_CHECKING:
    from zeus_run.views.money import Accounting

#: Image size (unit: inches) and resolution: 900 x 1000 pixels.
FIGSIZE = (9.0, 10.0)
DPI = 100

#: Suffixes matplotlib writes without extra packages.
FORMATS = (".png", ".svg", ".pdf")

INSTALL_HINT = "pip install 'zeus-run[plot]'   (or: pip install matplotlib)"

_EXPLORE = "#e69f00"
_EXPLOIT = "#0072b2"
_FAILED = "#d55e00"
_WASTED = "#999999"
_DEFAULT = "#555555"
_STEADY = "#009e73"
_POWER = "#cc79a7"


class PlotUnavailableError(UsageError):
    """matplotlib, the ``plot`` extra, is not installed."""


def plot_target(path: str | Path) -> Path:
    """The plot file ``path`` as a Path, or a UsageError naming the suffixes we can write."""
    out = Path(path)
    if out.suffix.lower() not in FORMATS:
        raise UsageError(f"cannot write a plot to {str(out)!r}: use a file ending in {', '.join(FORMATS)}.")
    return out


def load_matplotlib() -> tuple[Any, Any]:
    """matplotlib's `Figure` and Agg canvas classes (no pyplot, no global state).

    Raises:
        PlotUnavailableError: matplotlib is not installed.
    """
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as exc:
        raise PlotUnavailableError(
            f"zeus-run plot needs matplotlib, which is not installed ({exc}). Install the plot extra: {INSTALL_HINT}"
        ) from None
    return Figure, FigureCanvasAgg


def energy_unit(max_joules: float) -> tuple[str, float]:
    """The unit to show costs in (``J``, ``kJ``, ``MJ``) and its scale."""
    for unit, scale in (("MJ", 1e6), ("kJ", 1e3)):
        if max_joules >= scale:
            return unit, scale
    return "J", 1.0


def plot_history(
    records: Sequence[TrialRecord],
    path: str | Path,
    *,
    default_batch_size: int | None = None,
    title: str | None = None,
    accounting: Accounting | None = None,
    summary: Summary | None = None,
) -> Path:
    """Draw the run's three panels into ``path``.

    Args:
        records: The history (at least one record).
        path: Output file; its suffix picks the format (`FORMATS`).
        default_batch_size: b0 (default: the first trial's batch size).
        title: Figure title (default: the job name and the headline figures).
        accounting: Carbon and money, shown under the title next to the default's.
        summary: The run's summary (`zeus_run.views.jobs.summarize_run`: the savings every view
            shows); None: summarized here from ``records`` alone.

    Returns:
        The path written.

    Raises:
        UsageError: No records, or an unknown suffix.
        PlotUnavailableError: matplotlib is missing.
    """
    out = plot_target(path)
    if not records:
        raise UsageError("the history has no trials yet; there is nothing to plot.")
    figure_cls, canvas_cls = load_matplotlib()
    summary = summary or summarize(records, default_batch_size)
    fig = figure_cls(figsize=FIGSIZE, dpi=DPI, layout="constrained")
    canvas_cls(fig)
    ax_cost, ax_bs, ax_dist = fig.subplots(3, 1, height_ratios=[1.2, 1.0, 1.0])
    unit, scale = energy_unit(max(max(r.spent_cost for r in records), summary.default_mean_cost or 0.0))
    _cost_panel(ax_cost, records, summary, unit, scale)
    _batch_size_panel(ax_bs, records, summary)
    _distribution_panel(ax_dist, records, summary, unit, scale)
    head = title or _title(records, summary)
    subtitle = accounting.subtitle() if accounting is not None else ""
    fig.suptitle(head + (f"\n{subtitle}" if subtitle else ""), fontsize=12)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=DPI)
    return out


def _title(records: Sequence[TrialRecord], s: Summary) -> str:
    kind = records[0].kind
    head = f"{records[0].job}" + (f" ({kind})" if kind != "real" else "")
    head += f": {s.counted}"
    if s.steady is not None and s.steady.saved.get("cost") is not None:
        head += f"; steady state {short(s.steady.saved.get('cost'))} vs default"
    elif s.exploration is not None and s.exploration.exploring:
        head += "; still exploring"
    return head


def _cost_panel(ax: Any, records: Sequence[TrialRecord], s: Summary, unit: str, scale: float) -> None:
    rows = recurrence_rows(records)
    x = [row.recurrence for row in rows]
    by_rec: dict[int, list[TrialRecord]] = defaultdict(list)
    for r in records:
        by_rec[r.recurrence].append(r)
    final = [by_rec[row.recurrence][-1].spent_cost / scale if row.reached else 0.0 for row in rows]
    failed = [row.cost / scale - f for row, f in zip(rows, final, strict=True)]
    explored = [row.stage in EXPLORING_STAGES for row in rows]  # a recurrence's stage is its first try's
    colors = [_EXPLORE if e else _EXPLOIT for e in explored]
    ax.bar(x, final, color=colors, width=0.8)
    ax.bar(x, failed, bottom=final, color="white", edgecolor=_WASTED, hatch="///", width=0.8, linewidth=0.8)
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    handles: list[Any] = [
        Patch(color=_EXPLORE, label="exploring"),
        Patch(color=_EXPLOIT, label="Thompson sampling"),
        Patch(facecolor="white", edgecolor=_WASTED, hatch="///", label="failed tries"),
    ]
    if s.default_mean_cost is not None:
        ax.axhline(s.default_mean_cost / scale, color=_DEFAULT, linestyle="--", linewidth=1.2)
        runs = "1 run" if s.default_runs == 1 else f"{s.default_runs} runs"
        at = f" at {s.baseline.power_limit:g} W" if s.baseline and s.baseline.power_limit else ""
        handles.append(
            Line2D(
                [],
                [],
                color=_DEFAULT,
                linestyle="--",
                label=f"default bs {s.default_batch_size}{at}: {s.default_mean_cost / scale:.3g} {unit}, mean of {runs}",
            )
        )
    if s.exploration is not None and s.exploration.ended_after:
        ax.axvline(s.exploration.ended_after + 0.5, color="#999999", linestyle=":", linewidth=1)
    if s.steady is not None:
        st = s.steady
        ax.hlines(st.mean_cost / scale, st.first - 0.4, st.last + 0.4, color=_STEADY, linewidth=2.5, zorder=4)
        label = f"steady state (rec. {st.first}-{st.last}): {st.mean_cost / scale:.3g} {unit}"
        if st.saved.get("cost") is not None:
            label += f", {short(st.saved.get('cost'))}"
        handles.append(Line2D([], [], color=_STEADY, linewidth=2.5, label=label))
    ax.legend(handles=handles, loc="upper left", fontsize=8, ncols=2, frameon=True, framealpha=0.9)
    ax.set_ylim(0, max(c / scale for c in [row.cost for row in rows] + [s.default_mean_cost or 0.0]) * 1.4)
    ax.set_ylabel(f"cost per recurrence ({unit})")
    ax.set_xlabel("recurrence")
    ax.set_xlim(0.4, max(x) + 0.6)
    _integer_ticks(ax)
    ax.set_title("Cost per recurrence vs the default batch size", fontsize=10, loc="left")
    ax.grid(axis="y", alpha=0.3)


def _batch_size_panel(ax: Any, records: Sequence[TrialRecord], s: Summary) -> None:
    sizes = sorted({r.batch_size for r in records})
    # Several tries in one recurrence spread over its width, in order.
    xs = []
    per_rec: dict[int, int] = defaultdict(int)
    tries = defaultdict(int, {row.recurrence: row.tries for row in recurrence_rows(records)})
    for r in records:
        k = per_rec[r.recurrence]
        per_rec[r.recurrence] += 1
        n = tries[r.recurrence]
        xs.append(r.recurrence + (k - (n - 1) / 2) * (0.6 / max(n, 1)))
    ok = [(x, r.batch_size) for x, r in zip(xs, records, strict=True) if r.reached]
    bad = [(x, r.batch_size) for x, r in zip(xs, records, strict=True) if not r.reached]
    ax.plot([p[0] for p in ok], [p[1] for p in ok], color=_EXPLOIT, linewidth=0.8, alpha=0.5)
    ax.scatter([p[0] for p in ok], [p[1] for p in ok], color=_EXPLOIT, s=22, zorder=3, label="converged")
    if bad:
        ax.scatter(
            [p[0] for p in bad],
            [p[1] for p in bad],
            color=_FAILED,
            marker="x",
            s=30,
            zorder=3,
            label="did not converge",
        )
    if s.default_batch_size is not None:
        ax.axhline(s.default_batch_size, color=_DEFAULT, linestyle="--", linewidth=1, label="default")
    last = max(r.recurrence for r in records) + 0.6
    for x in s.shut_out:  # what the decisions exclude now, since the recurrence that ran out of memory
        ax.fill_between(
            [x.since + 0.5, last], x.batch_size / 2**0.25, max(sizes) * 2**0.25, color=_FAILED, alpha=0.12, lw=0
        )
        ax.annotate(
            f"shut out since {x.since} (out of memory)",
            xy=(x.since + 0.5, x.batch_size),
            xytext=(2, 2),
            textcoords="offset points",
            fontsize=7,
            color=_FAILED,
        )
    ax.set_yscale("log", base=2)
    ax.set_yticks(sizes, [str(b) for b in sizes])
    ax.minorticks_off()
    ax.set_ylabel("batch size")
    ax.set_xlabel("recurrence")
    ax.set_xlim(0.4, max(r.recurrence for r in records) + 0.6)
    _integer_ticks(ax)
    ax.grid(axis="y", alpha=0.3)
    limits = [(x, r.power_limit) for x, r in zip(xs, records, strict=True) if r.power_limit is not None]
    title = "Batch size chosen over time"
    handles, labels = ax.get_legend_handles_labels()
    if limits:
        title += " and its GPU power limit"
        ax2 = ax.twinx()
        ax2.step([p[0] for p in limits], [p[1] for p in limits], where="mid", color=_POWER, linewidth=1.2)
        ax2.scatter([p[0] for p in limits], [p[1] for p in limits], color=_POWER, s=10, marker="s")
        ax2.set_ylabel("power limit (W)", color=_POWER)
        ax2.tick_params(axis="y", colors=_POWER)
        lo, hi = min(p[1] for p in limits), max(p[1] for p in limits)
        pad = max(10.0, (hi - lo) * 0.15)
        ax2.set_ylim(lo - pad, hi + pad)
        from matplotlib.lines import Line2D

        handles.append(Line2D([], [], color=_POWER, marker="s", markersize=4, label="power limit"))
        labels.append("power limit")
    ax.legend(handles, labels, loc="upper right", fontsize=8, ncols=len(labels), frameon=False)
    ax.set_title(title, fontsize=10, loc="left")


def _integer_ticks(ax: Any) -> None:
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def _distribution_panel(ax: Any, records: Sequence[TrialRecord], s: Summary, unit: str, scale: float) -> None:
    stats = list(s.by_batch_size)
    positions = list(range(len(stats)))
    # The runs each batch size's mean is over (`batch_size_stats`): observed, converged, outside slow recurrences.
    costs = [[r.cost / scale for r in records if r.batch_size == b.batch_size and _in_means(r, s.slow)] for b in stats]
    with_data = [(p, c) for p, c in zip(positions, costs, strict=True) if c]
    if with_data:
        box = ax.boxplot(
            [c for _, c in with_data],
            positions=[p for p, _ in with_data],
            widths=0.5,
            showfliers=False,
            patch_artist=True,
            medianprops={"color": "black"},
        )
        rec = s.recommendation.batch_size if s.recommendation else None
        for patch, (p, _) in zip(box["boxes"], with_data, strict=True):
            size = stats[p].batch_size
            patch.set_facecolor(_STEADY if size == rec else "#dddddd" if size != s.default_batch_size else "#bbbbbb")
            patch.set_alpha(0.6)
        for p, c in with_data:
            n = len(c)
            offsets = [((i + 0.5) / n - 0.5) * 0.3 for i in range(n)] if n > 1 else [0.0]
            ax.scatter([p + o for o in offsets], c, color=_EXPLOIT, s=12, zorder=3)
    top = max((max(c) for c in costs if c), default=1.0)
    for p, st in zip(positions, stats, strict=True):
        ax.annotate(
            f"{st.converged}/{st.trials}",
            xy=(p, 0),
            xytext=(0, 3),
            textcoords="offset points",
            ha="center",
            fontsize=7,
            color="#333333",
        )
    if s.default_mean_cost is not None:
        ax.axhline(s.default_mean_cost / scale, color=_DEFAULT, linestyle="--", linewidth=1)
    labels = []
    for st in stats:
        ban = s.shut_out_of(st.batch_size)
        notes = [
            note
            for note, on in (
                ("default", st.batch_size == s.default_batch_size),
                ("best", s.recommendation is not None and st.batch_size == s.recommendation.batch_size),
                (f"shut out since {ban.since}" if ban else "", ban is not None),
            )
            if on
        ]
        labels.append(str(st.batch_size) + (f"\n({', '.join(notes)})" if notes else ""))
    ax.set_xticks(positions, labels, fontsize=8)
    ax.set_xlim(-0.6, len(stats) - 0.4)
    ax.set_ylim(0, top * 1.15 if math.isfinite(top) and top > 0 else 1.0)
    ax.set_xlabel("batch size (converged/trials under each box)")
    ax.set_ylabel(f"cost per converged run ({unit})")
    ax.set_title("Cost distribution per batch size", fontsize=10, loc="left")
    ax.grid(axis="y", alpha=0.3)


def _in_means(r: TrialRecord, slow: Collection[int]) -> bool:
    return r.reached and r.observed and r.stop_reason.observed and r.recurrence not in slow
