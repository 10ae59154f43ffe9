"""Prometheus text exposition of run directories, for a textfile collector or a Pushgateway.

Every metric carries the label ``job_name`` (and ``gpu`` where the trials
recorded one) and follows Prometheus' naming conventions: base units
(joules, seconds, watts, ratios in [0, 1]), ``_total`` for counters. `METRICS`
lists them; the Grafana dashboard in ``docs/`` reads only these names.
"""

from __future__ import annotations

import base64
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from zeus_run import _fs
from zeus_run.errors import UsageError
from zeus_run.export._base import Exporter, ExportError
from zeus_run.views.jobs import JobView
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
        Metric("zeus_run_recurrences_total", "counter", "Recurrences, by outcome (reached, or not reached yet)."),
        Metric("zeus_run_energy_joules_total", "counter", "Energy of every trial."),
        Metric("zeus_run_time_seconds_total", "counter", "Training time of every trial."),
        Metric(
            "zeus_run_cost_joules_total",
            "counter",
            "Cost of every trial (eta x energy + (1 - eta) x max power x time).",
        ),
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
        Metric("zeus_run_energy_saved_joules", "gauge", "Energy saved against always running the default batch size."),
        Metric(
            "zeus_run_steady_state_savings_ratio",
            "gauge",
            "Saving of the steady state (last recurrences after exploration) against the default.",
        ),
        Metric("zeus_run_batch_size", "gauge", "Batch size of the last trial (the current one)."),
        Metric("zeus_run_power_limit_watts", "gauge", "GPU power limit of the last trial, where one was set."),
        Metric("zeus_run_exploring", "gauge", "1 while zeus-run still explores batch sizes, 0 once it is over."),
        Metric("zeus_run_last_recurrence_timestamp_seconds", "gauge", "When the last trial ended (Unix time)."),
    )
}


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(labels: dict[str, str]) -> str:
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items()) + "}"


def _samples(job: JobView) -> list[tuple[str, dict[str, str], float]]:
    s = job.summary
    base = {"job_name": job.name}
    if job.gpu:
        base["gpu"] = job.gpu
    out: list[tuple[str, dict[str, str], float]] = []

    def add(name: str, value: float | None, **extra: str) -> None:
        if value is not None:
            out.append((name, {**base, **extra}, float(value)))

    outcomes: dict[str, int] = {}
    for r in job.records:
        outcomes[r.stop_reason] = outcomes.get(r.stop_reason, 0) + 1
    for outcome, n in sorted(outcomes.items()):
        add("zeus_run_trials_total", n, outcome=outcome)
    rows = recurrence_rows(job.records)
    reached = sum(1 for row in rows if row.reached)
    add("zeus_run_recurrences_total", reached, outcome="reached")
    add("zeus_run_recurrences_total", len(rows) - reached, outcome="not_reached")
    add("zeus_run_energy_joules_total", s.total_energy)
    add("zeus_run_time_seconds_total", s.total_time)
    add("zeus_run_cost_joules_total", s.total_cost)
    if rows:
        add("zeus_run_last_recurrence_energy_joules", rows[-1].energy)
        add("zeus_run_last_recurrence_time_seconds", rows[-1].time)
        add("zeus_run_last_recurrence_cost_joules", rows[-1].cost)
    add("zeus_run_default_recurrence_cost_joules", s.default_mean_cost)
    add("zeus_run_default_recurrence_energy_joules", s.default_mean_energy)
    for quantity in ("cost", "energy", "time"):
        add("zeus_run_savings_ratio", getattr(s, f"savings_{quantity}"), quantity=quantity)
    if s.baseline_energy is not None:
        add("zeus_run_energy_saved_joules", s.baseline_energy - s.total_energy)
    add("zeus_run_steady_state_savings_ratio", s.steady.savings if s.steady else None)
    add("zeus_run_batch_size", job.batch_size)
    add("zeus_run_power_limit_watts", job.power_limit)
    add("zeus_run_exploring", 1.0 if job.exploring else 0.0)
    add("zeus_run_last_recurrence_timestamp_seconds", job.last_ended.timestamp())
    return out


def _number(v: float) -> str:
    return repr(v) if v != int(v) or abs(v) >= 1e15 else str(int(v))


def exposition(jobs: Sequence[JobView]) -> str:
    """The text exposition format (0.0.4) of ``jobs``: each family once, its samples grouped under it.

    Raises:
        UsageError: Two jobs have the same name (their series would collide).
    """
    names: dict[str, Path] = {}
    for j in jobs:
        if j.name in names:
            raise UsageError(
                f"two run directories hold job {j.name!r} ({names[j.name]} and {j.run_dir}); their metrics would "
                "collide: export one of them."
            )
        names[j.name] = j.run_dir
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
    path.parent.mkdir(parents=True, exist_ok=True)
    _fs.atomic_write(path, text)


def push(text: str, url: str, job_name: str) -> None:
    """PUT ``text`` to a Pushgateway under the grouping key ``job="zeus-run", job_name=<job_name>``.

    A PUT replaces the group's earlier push, so each push holds the job's current figures.

    Raises:
        ExportError: The Pushgateway is unreachable or refused the metrics.
    """
    if not url.startswith(("http://", "https://")):
        raise UsageError(f"Pushgateway URL {url!r} must start with http:// or https://, e.g. http://localhost:9091.")
    key = base64.urlsafe_b64encode(job_name.encode()).decode()
    target = f"{url.rstrip('/')}/metrics/job/zeus-run/job_name@base64/{key}"
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
                push(exposition([j]), self.push_url, j.name)
            done.append(f"pushed to {self.push_url}")
        samples = sum(1 for line in text.splitlines() if not line.startswith("#"))
        return f"{len(jobs)} job(s), {samples} sample(s) " + " and ".join(done)
