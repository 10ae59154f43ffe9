"""Prometheus text exposition of run directories, for a textfile collector or a Pushgateway.

Every metric carries the labels ``job_name`` and ``run_dir`` (the run directory's
absolute path: two run directories of one job name are two sets of series), and ``gpu``
where the trials recorded one, and follows Prometheus' naming conventions: base units
(joules, seconds, watts, grams, ratios in [0, 1]). A ``_total`` counter counts what
happened (trials, reached recurrences, energy spent) and never goes down from one export
to the next (each outcome's counter is there from 0); a state (recurrences still open, the
current batch size) is a gauge. Every saving comes with the two ends of its 90% interval
(``NAME_low_ratio``, ``NAME_high_ratio``: absent while none can be stated; `zeus_run.views.saving`). A job with a
``start`` section (``starts.jsonl``: `zeus_run.views.starts`) adds ``zeus_run_start_*``: its plans, the last
trigger's plan (delay, planned start, deadline, forecast intensities) and the carbon its shifts saved. `METRICS`
lists them; the Grafana dashboard in ``docs/`` reads only these names.
"""

from __future__ import annotations

import base64
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from zeus_run import _fs
from zeus_run.contract import StopReason
from zeus_run.errors import UsageError
from zeus_run.export._base import Exporter, ExportError
from zeus_run.views.jobs import JobView
from zeus_run.views.saving import Saved
from zeus_run.views.summary import recurrence_rows

#: Content type of the text format (version 0.0.4), as Pushgateway and scrapers expect.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
#: Seconds to wait for a Pushgateway.
PUSH_TIMEOUT = 10.0


@dataclass(frozen=True)
class Metric:
    """One metric family: name, type and help text."""

    name: str
    type: str
    help: str


METRICS = {
    m.name: m
    for m in (
        Metric("zeus_run_trials_total", "counter", "Trials run, by outcome (stop reason)."),
        Metric("zeus_run_recurrences_total", "counter", "Recurrences that ended, by outcome (reached)."),
        Metric("zeus_run_recurrences_open", "gauge", "Recurrences started that have not reached the target (yet)."),
        Metric(
            "zeus_run_recurrences",
            "gauge",
            "Recurrences in the history, reached, failed or lost (what `history`, the plot and the report count).",
        ),
        Metric(
            "zeus_run_batch_size_trials_total",
            "counter",
            "Trials run with each batch size (every try: failed, interrupted and slow ones included).",
        ),
        Metric("zeus_run_energy_joules_total", "counter", "Energy of every trial."),
        Metric(
            "zeus_run_whole_energy_joules_total",
            "counter",
            "Energy of every trial's whole process: zeus_run_energy_joules_total plus what each process spent after "
            "the point its trial was judged at (saving, tearing down, its tail after the tell).",
        ),
        Metric(
            "zeus_run_estimated_energy_joules_total",
            "counter",
            "The part of zeus_run_energy_joules_total that is an estimate, not a measurement (the CPU estimate, an "
            "imputed energy, a self-measuring script's estimated start-up).",
        ),
        Metric("zeus_run_time_seconds_total", "counter", "Training time of every trial."),
        Metric(
            "zeus_run_cost_joules_total",
            "counter",
            "Cost of every trial, by the job's objective (cost: eta x energy + (1 - eta) x max power x time).",
        ),
        Metric("zeus_run_carbon_grams_total", "counter", "Carbon of every trial (gCO2e; the spec's accounting)."),
        Metric("zeus_run_cost_total", "counter", "Money spent on the energy of every trial, by currency."),
        Metric("zeus_run_last_recurrence_energy_joules", "gauge", "Energy of the last recurrence, all its tries."),
        Metric("zeus_run_last_recurrence_time_seconds", "gauge", "Time of the last recurrence, all its tries."),
        Metric("zeus_run_last_recurrence_cost_joules", "gauge", "Cost of the last recurrence, all its tries."),
        Metric(
            "zeus_run_default_recurrence_cost_joules", "gauge", "Mean cost of a recurrence at the default batch size."
        ),
        Metric(
            "zeus_run_default_recurrence_energy_joules",
            "gauge",
            "Mean energy of a recurrence at the default batch size.",
        ),
        Metric(
            "zeus_run_savings_ratio",
            "gauge",
            "Saving of the whole history against always running the default, by quantity (cost, energy, time).",
        ),
        Metric("zeus_run_savings_low_ratio", "gauge", "Low end of the 90% interval of zeus_run_savings_ratio."),
        Metric("zeus_run_savings_high_ratio", "gauge", "High end of the 90% interval of zeus_run_savings_ratio."),
        Metric(
            "zeus_run_energy_saved_joules",
            "gauge",
            "Energy saved against always running the default batch size (every try counted).",
        ),
        Metric("zeus_run_energy_saved_low_joules", "gauge", "Low end of the 90% interval of the energy saved."),
        Metric("zeus_run_energy_saved_high_joules", "gauge", "High end of the 90% interval of the energy saved."),
        Metric(
            "zeus_run_steady_state_savings_ratio",
            "gauge",
            "Saving of a recurrence now (the steady state: the batch sizes the last recurrences after exploration "
            "ran, at their means) against the default's, by quantity (cost, energy, time).",
        ),
        Metric(
            "zeus_run_steady_state_savings_low_ratio",
            "gauge",
            "Low end of the 90% interval of zeus_run_steady_state_savings_ratio.",
        ),
        Metric(
            "zeus_run_steady_state_savings_high_ratio",
            "gauge",
            "High end of the 90% interval of zeus_run_steady_state_savings_ratio.",
        ),
        Metric(
            "zeus_run_accounting_savings_ratio",
            "gauge",
            "Saving of carbon and money over the whole history against always running the default, by quantity "
            "(carbon, money; the spec's accounting section).",
        ),
        Metric(
            "zeus_run_accounting_savings_low_ratio",
            "gauge",
            "Low end of the 90% interval of zeus_run_accounting_savings_ratio.",
        ),
        Metric(
            "zeus_run_accounting_savings_high_ratio",
            "gauge",
            "High end of the 90% interval of zeus_run_accounting_savings_ratio.",
        ),
        Metric("zeus_run_batch_size", "gauge", "Batch size of the last trial (the current one)."),
        Metric("zeus_run_power_limit_watts", "gauge", "GPU power limit of the last trial, where one was set."),
        Metric("zeus_run_exploring", "gauge", "1 while zeus-run still explores batch sizes, 0 once it is over."),
        Metric("zeus_run_last_recurrence_timestamp_seconds", "gauge", "When the last trial ended (Unix time)."),
        Metric(
            "zeus_run_start_plans_total",
            "counter",
            "Triggers planned by the spec's start section, by whether the start was moved from the trigger.",
        ),
        Metric("zeus_run_start_delay_seconds", "gauge", "The last trigger's planned start, after its trigger."),
        Metric("zeus_run_start_planned_timestamp_seconds", "gauge", "The last trigger's planned start (Unix time)."),
        Metric("zeus_run_start_deadline_timestamp_seconds", "gauge", "The last trigger's deadline (Unix time)."),
        Metric(
            "zeus_run_start_trigger_intensity_g_per_kwh",
            "gauge",
            "The forecast carbon intensity at the last trigger (gCO2e/kWh; absent without a forecast).",
        ),
        Metric(
            "zeus_run_start_planned_intensity_g_per_kwh",
            "gauge",
            "The forecast carbon intensity over the last trigger's planned run (gCO2e/kWh; absent without a forecast).",
        ),
        Metric(
            "zeus_run_start_realized_intensity_g_per_kwh",
            "gauge",
            "The carbon intensity over the last run whose outcome was measured, on the series of what happened.",
        ),
        Metric(
            "zeus_run_start_carbon_saved_grams",
            "gauge",
            "Carbon saved by shifting starts against starting each run at its trigger, over every measured run "
            "(gCO2e; negative where a shift cost carbon, hence a gauge).",
        ),
    )
}


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(labels: dict[str, str]) -> str:
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items()) + "}"


def _samples(job: JobView) -> list[tuple[str, dict[str, str], float]]:
    s = job.summary
    base = {"job_name": job.name, "run_dir": job.path}
    if job.gpu:
        base["gpu"] = job.gpu
    out: list[tuple[str, dict[str, str], float]] = []

    def add(name: str, value: float | None, **extra: str) -> None:
        if value is not None:
            out.append((name, {**base, **extra}, float(value)))

    def add_saved(name: str, saved: Saved | None, **extra: str) -> None:
        """``NAME_ratio``, and the ends of its interval as ``NAME_low_ratio`` and ``NAME_high_ratio``."""
        if saved is None:
            return
        add(f"{name}_ratio", saved.value, **extra)
        if saved.ci is not None:
            add(f"{name}_low_ratio", saved.ci[0], **extra)
            add(f"{name}_high_ratio", saved.ci[1], **extra)

    outcomes = dict.fromkeys(sorted(str(r) for r in StopReason), 0)  # every outcome from 0: rate() sees the first
    for r in job.records:
        outcomes[r.stop_reason] = outcomes.get(r.stop_reason, 0) + 1
    for outcome, n in sorted(outcomes.items()):
        add("zeus_run_trials_total", n, outcome=outcome)
    rows = recurrence_rows(job.records)
    reached = sum(1 for row in rows if row.reached)
    add("zeus_run_recurrences_total", reached, outcome="reached")
    add("zeus_run_recurrences_open", len(rows) - reached)
    add("zeus_run_recurrences", s.all_recurrences)
    for b in s.by_batch_size:
        add("zeus_run_batch_size_trials_total", b.trials, batch_size=str(b.batch_size))
    add("zeus_run_energy_joules_total", s.total_energy)
    add("zeus_run_whole_energy_joules_total", s.total_energy + s.after_energy)
    add("zeus_run_estimated_energy_joules_total", sum(r.estimated_joules for r in job.records))
    add("zeus_run_time_seconds_total", s.total_time)
    add("zeus_run_cost_joules_total", s.total_cost)
    acc = job.accounting
    if acc is not None:
        add("zeus_run_carbon_grams_total", acc.carbon_g)
        if acc.money is not None:
            add("zeus_run_cost_total", acc.money, currency=acc.currency)
        add_saved("zeus_run_accounting_savings", acc.carbon, quantity="carbon")
        add_saved("zeus_run_accounting_savings", acc.money_saved, quantity="money")
    if rows:
        add("zeus_run_last_recurrence_energy_joules", rows[-1].energy)
        add("zeus_run_last_recurrence_time_seconds", rows[-1].time)
        add("zeus_run_last_recurrence_cost_joules", rows[-1].cost)
    add("zeus_run_default_recurrence_cost_joules", s.default_mean_cost)
    add("zeus_run_default_recurrence_energy_joules", s.default_mean_energy)
    for quantity in ("cost", "energy", "time"):
        add_saved("zeus_run_savings", s.saved.get(quantity), quantity=quantity)
        add_saved(
            "zeus_run_steady_state_savings", s.steady.saved.get(quantity) if s.steady else None, quantity=quantity
        )
    energy = s.saved.get("energy")
    if energy is not None:
        add("zeus_run_energy_saved_joules", energy.default - energy.spent)
        if energy.default_low is not None and energy.default_high is not None:
            add("zeus_run_energy_saved_low_joules", energy.default_low - energy.spent)
            add("zeus_run_energy_saved_high_joules", energy.default_high - energy.spent)
    add("zeus_run_batch_size", job.batch_size)
    add("zeus_run_power_limit_watts", job.power_limit)
    add("zeus_run_exploring", 1.0 if job.exploring else 0.0)
    add("zeus_run_last_recurrence_timestamp_seconds", job.last_ended.timestamp())
    if job.starts:  # the spec's start section (starts.jsonl): nothing without one
        _start_samples(job, add)
    return out


def _start_samples(job: JobView, add: Callable[..., None]) -> None:
    """The start plans' samples: plans by moved (from 0), the last plan, the intensity and saving measured."""
    from zeus_run.views.starts import saved_total

    moved = sum(1 for r in job.starts if r.moved)
    add("zeus_run_start_plans_total", len(job.starts) - moved, moved="false")
    add("zeus_run_start_plans_total", moved, moved="true")
    last = job.starts[-1]
    add("zeus_run_start_delay_seconds", last.delay)
    add("zeus_run_start_planned_timestamp_seconds", last.start_at)
    add("zeus_run_start_deadline_timestamp_seconds", last.deadline)
    add("zeus_run_start_trigger_intensity_g_per_kwh", last.forecast_now)
    add("zeus_run_start_planned_intensity_g_per_kwh", last.forecast_at_start)
    measured = [r for r in job.starts if r.intensity is not None]
    if measured:
        add("zeus_run_start_realized_intensity_g_per_kwh", measured[-1].intensity)
    add("zeus_run_start_carbon_saved_grams", saved_total(job.starts))


def _number(v: float) -> str:
    return repr(v) if v != int(v) or abs(v) >= 1e15 else str(int(v))


def exposition(jobs: Sequence[JobView]) -> str:
    """The text exposition format (0.0.4) of ``jobs``: each family once, its samples grouped under it.

    Two run directories of one job name are kept apart by their ``run_dir`` label.
    """
    by_name: dict[str, list[str]] = {name: [] for name in METRICS}
    for j in jobs:
        for name, labels, value in _samples(j):
            by_name[name].append(f"{name}{_labels(labels)} {_number(value)}")
    lines: list[str] = []
    for name, samples in by_name.items():
        if samples:
            m = METRICS[name]
            lines += [f"# HELP {name} {m.help}", f"# TYPE {name} {m.type}", *samples]
    return "\n".join(lines) + "\n"


def write_textfile(text: str, path: Path) -> None:
    """Write ``text`` atomically (a temporary file, then rename), as the textfile collector needs."""
    _fs.make_dirs(path.parent)
    _fs.atomic_write(path, text)


def push(text: str, url: str, job_name: str, run_dir: str = "") -> None:
    """PUT ``text`` to a Pushgateway under the grouping key ``job="zeus-run", job_name=<job_name>, run_dir=<run_dir>``.

    A PUT replaces the group's earlier push, so each push holds the job's current figures.

    Raises:
        ExportError: The Pushgateway is unreachable or refused the metrics.
    """
    if not url.startswith(("http://", "https://")):
        raise UsageError(f"Pushgateway URL {url!r} must start with http:// or https://, e.g. http://localhost:9091.")
    key = base64.urlsafe_b64encode(job_name.encode()).decode()
    target = f"{url.rstrip('/')}/metrics/job/zeus-run/job_name@base64/{key}"
    if run_dir:
        target += f"/run_dir@base64/{base64.urlsafe_b64encode(run_dir.encode()).decode()}"
    request = urllib.request.Request(target, data=text.encode(), method="PUT", headers={"Content-Type": CONTENT_TYPE})
    try:
        with urllib.request.urlopen(request, timeout=PUSH_TIMEOUT) as response:
            response.read()
    except urllib.error.HTTPError as exc:
        body = exc.read().decode(errors="replace").strip()
        raise ExportError(f"Pushgateway {url} refused the metrics of {job_name!r}: HTTP {exc.code} {body}") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise ExportError(f"cannot reach the Pushgateway at {url}: {reason}.") from None


class PrometheusExporter(Exporter):
    """Write the exposition to a file, push it to a Pushgateway, or both."""

    name = "prometheus"

    def __init__(self, output: Path | None = None, push_url: str | None = None) -> None:
        self.output = output
        self.push_url = push_url

    def export(self, jobs: Sequence[JobView]) -> str:
        text = exposition(jobs)
        done = []
        if self.output is not None:
            write_textfile(text, self.output)
            done.append(f"written to {self.output}")
        if self.push_url is not None:
            for j in jobs:
                push(exposition([j]), self.push_url, j.name, j.path)
            done.append(f"pushed to {self.push_url}")
        samples = sum(1 for line in text.splitlines() if not line.startswith("#"))
        return f"{len(jobs)} run directory(ies), {samples} sample(s) " + " and ".join(done)

    def command(self, run_dir: Path) -> str:
        """The command that does what this exporter does for ``run_dir`` (a failure's hint)."""
        target = f" --push {self.push_url}" if self.push_url else ""
        target += f" -o {self.output}" if self.output else ""
        return f"zeus-run export prometheus {run_dir}{target or ' -o zeus_run.prom'}"
