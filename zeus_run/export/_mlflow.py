"""MLflow export: a parent run per job, a nested run per trial.

The parent run (named ``JOB (RUN_DIR)``; tags ``zeus_run.job``, ``zeus_run.run_dir``, the run
directory's name, and ``zeus_run.run_path``, its absolute path, which tells apart two run
directories of one job name) carries the job's decision settings as params and its summary
as metrics: savings against the default (cost, energy, time), the steady
state, the recommendation and the totals, each saving with the two ends of its 90% interval
(``<name>_ci_low``, ``<name>_ci_high``; `zeus_run.views.saving`), each logged at step = the number of
trials so far, so that re-exports draw them over time. Each trial's nested run
carries batch size, learning rate, power limit, recurrence and try as params;
stage, outcome, stop reason and kind as tags; energy, time, cost and epochs as
metrics, the whole process's figures as the history has them (``whole_energy_joules``, ``after_energy_joules``,
``estimated_share``: its tail after the tell included; a trial whose tail has not landed yet is tagged
``zeus_run.tail: pending`` and logged again by the first export after it lands), and the validation metric after
each epoch as the step series ``metric``. With an ``accounting`` section the parent also carries ``carbon_grams``,
``money`` (tag ``zeus_run.currency``) and their savings.

A job with a ``start`` section (``starts.jsonl``: `zeus_run.views.starts`) has a nested run per trigger too (tag
``zeus_run.role: start``, keyed by ``zeus_run.start_trigger``): the plan as params (``trigger``, ``start_at``,
``deadline``, ``moved``, ``reason``, ``provenance``, ``planned_duration_s``) and metrics (``delay_seconds``,
``forecast_now_g_per_kwh``, ``forecast_at_start_g_per_kwh``), and once the run ended what happened (param
``recurrences``; metrics ``intensity_g_per_kwh``, ``on_time_intensity_g_per_kwh``, ``carbon_grams``,
``saved_grams``, ``saved_share``, ``deadline_met``; tag ``zeus_run.start_outcome``: ``pending``, ``ran`` or
``interrupted``). The parent carries ``start_carbon_saved_grams`` (every measured run) and ``start_plans``.

The parent run is RUNNING while a launcher runs the job, and ends FINISHED when its
recurrences are all done or it stopped after one that reached the target (FAILED after one
that did not); the next export after more trials reopens it (`zeus_run.views.jobs.JobView.state`).

The trial's stable id (`zeus_run.export.trial_id`) is the tag
``zeus_run.trial_id``: an export adds only trials not yet there, so it can be
re-run after every recurrence and never duplicates. A trial run is created
RUNNING and ended last; one left RUNNING by an export that failed halfway is
deleted and logged again by the next.

mlflow is the optional extra ``zeus-run[mlflow]``, imported only here and only
when an export runs.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from zeus_run.contract import StopReason
from zeus_run.errors import UsageError
from zeus_run.export._base import Exporter, ExportError, trial_id
from zeus_run.export._mlflow_starts import log_start
from zeus_run.records import TrialRecord
from zeus_run.start import iso
from zeus_run.views.jobs import JobView
from zeus_run.views.saving import Saved, words
from zeus_run.views.starts import saved_total

INSTALL_HINT = "pip install 'zeus-run[mlflow]'   (or: pip install mlflow)"
#: Default experiment name.
EXPERIMENT = "zeus-run"
#: Seconds to wait for a tracking server's /health before giving up on this export.
HEALTH_TIMEOUT = 5.0
#: MLflow settings during an export unless the user set them: few retries and a request timeout
#: (unit: s), so that a down server is a quick warning, and no run URLs printed on stdout.
_ENV = {
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "1",
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "20",
    "MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT": "true",
}
#: Stop reasons whose trial run ends FAILED (KILLED: interrupted; FINISHED: the rest).
_FAILED = (StopReason.CRASHED, StopReason.TIMEOUT, StopReason.INFRASTRUCTURE)
#: Most metrics in one log_batch call (MLflow's limit).
_BATCH = 1000


def load_mlflow() -> Any:
    """The mlflow module.

    Raises:
        UsageError: mlflow is not installed.
    """
    try:
        import mlflow
        import mlflow.tracking
    except ImportError as exc:
        raise UsageError(
            f"zeus-run export mlflow needs mlflow, which is not installed ({exc}). Install the extra: {INSTALL_HINT}"
        ) from None
    return mlflow


def _ms(iso: str | None) -> int | None:
    if not iso:
        return None
    try:
        return int(datetime.fromisoformat(iso).timestamp() * 1000)
    except ValueError:
        return None


@contextlib.contextmanager
def _settings_env() -> Iterator[None]:
    """`_ENV` in the environment, where MLflow reads its settings, for the time of an export."""
    added = [k for k in _ENV if k not in os.environ]
    for k in added:
        os.environ[k] = _ENV[k]
    try:
        yield
    finally:
        for k in added:
            os.environ.pop(k, None)


def check_server(tracking_uri: str) -> None:
    """For an http(s) tracking URI, that the server answers /health.

    Raises:
        ExportError: It does not.
    """
    if not tracking_uri.startswith(("http://", "https://")):
        return
    try:
        with urllib.request.urlopen(f"{tracking_uri.rstrip('/')}/health", timeout=HEALTH_TIMEOUT) as r:
            r.read()
    except (urllib.error.URLError, OSError) as exc:
        raise ExportError(
            f"MLflow tracking server {tracking_uri} is not reachable ({getattr(exc, 'reason', exc)})."
        ) from None


class MlflowExporter(Exporter):
    """Sync run directories into an MLflow tracking store.

    Args:
        tracking_uri: Any MLflow tracking URI: ``http://host:5000``, ``sqlite:///mlflow.db``, a folder.
        experiment: Experiment name (created if missing).
    """

    name = "mlflow"

    def __init__(self, tracking_uri: str, experiment: str = EXPERIMENT) -> None:
        self.tracking_uri = tracking_uri
        self.experiment = experiment

    def export(self, jobs: Sequence[JobView]) -> str:
        mlflow = load_mlflow()
        check_server(self.tracking_uri)
        with _settings_env():
            try:
                client = mlflow.tracking.MlflowClient(tracking_uri=self.tracking_uri)
                exp_id = self._experiment(client)
                added = sum(self._sync(client, exp_id, job) for job in jobs)
            except mlflow.exceptions.MlflowException as exc:
                raise ExportError(f"MLflow at {self.tracking_uri} refused the export: {exc}") from None
        return (
            f"{added} new trial run(s) in experiment {self.experiment!r} at {self.tracking_uri} "
            f"({len(jobs)} run directory(ies))"
        )

    def command(self, run_dir: Path) -> str:
        return (
            f"zeus-run export mlflow {shlex.quote(str(run_dir))} --tracking-uri {shlex.quote(self.tracking_uri)} "
            f"--experiment {shlex.quote(self.experiment)}"
        )

    def _experiment(self, client: Any) -> str:
        exp = client.get_experiment_by_name(self.experiment)
        if exp is not None:
            return str(exp.experiment_id)
        return str(client.create_experiment(self.experiment))

    def _sync(self, client: Any, exp_id: str, job: JobView) -> int:
        from mlflow.entities import RunStatus

        parent = self._parent(client, exp_id, job)
        done: set[str] = set()
        pending: dict[str, str] = {}
        starts: dict[str, tuple[str, str]] = {}
        for run in _search(client, exp_id, f"tags.`mlflow.parentRunId` = '{parent}'"):
            trigger = run.data.tags.get("zeus_run.start_trigger")
            if trigger is not None:
                starts[trigger] = (str(run.info.run_id), run.data.tags.get("zeus_run.start_outcome", ""))
            tid = run.data.tags.get("zeus_run.trial_id")
            if tid is None:
                continue
            if run.info.status == RunStatus.to_string(RunStatus.RUNNING):  # an export that failed halfway
                client.delete_run(run.info.run_id)
            else:
                done.add(tid)
            if run.data.tags.get("zeus_run.tail") == "pending":
                pending[tid] = str(run.info.run_id)
        new = [r for r in job.records if trial_id(r) not in done]
        for r in job.records:  # a tail that landed since the trial was logged: its figures, the history's now
            run_id = pending.get(trial_id(r))
            if run_id is not None and tail_state(r) != "pending":
                _log_whole(client, run_id, r)
        if new:
            _set_status(client, parent, "RUNNING")  # reopen a parent an earlier export ended
        for record in new:
            self._log_trial(client, exp_id, parent, record)
        for row in job.starts:  # the spec's start section: a run per trigger, its outcome once it ran
            log_start(client, exp_id, parent, row, starts.get(iso(row.trigger)))
        self._log_summary(client, parent, job)
        state = job.state
        if state != "running":
            _set_status(client, parent, state.upper(), int(job.last_ended.timestamp() * 1000))
        return len(new)

    def _parent(self, client: Any, exp_id: str, job: JobView) -> str:
        for run in _search(client, exp_id, f"tags.`zeus_run.run_path` = '{_quote(job.path)}'"):
            return str(run.info.run_id)
        # A parent an export made before run paths were tagged: adopt it if it is untagged.
        key = f"tags.`zeus_run.job` = '{_quote(job.name)}' and tags.`zeus_run.run_dir` = '{_quote(job.run_dir.name)}'"
        for run in _search(client, exp_id, key + " and tags.`zeus_run.role` = 'job'"):
            if "zeus_run.run_path" not in run.data.tags:
                client.set_tag(run.info.run_id, "zeus_run.run_path", job.path)
                return str(run.info.run_id)
        run = client.create_run(
            exp_id,
            start_time=_ms(job.records[0].started_at),
            run_name=f"{job.name} ({job.run_dir})",
            tags={
                "zeus_run.job": job.name,
                "zeus_run.run_dir": job.run_dir.name,
                "zeus_run.run_path": job.path,
                "zeus_run.role": "job",
                "zeus_run.kind": job.kind,
                **({"zeus_run.gpu": job.gpu} if job.gpu else {}),
            },
        )
        run_id = str(run.info.run_id)
        params = _settings(job)
        if params:
            from mlflow.entities import Param

            client.log_batch(run_id, params=[Param(k, str(v)) for k, v in params.items()])
        return run_id

    def _log_trial(self, client: Any, exp_id: str, parent: str, r: TrialRecord) -> None:
        from mlflow.entities import Metric, Param, RunStatus

        tags = {
            "mlflow.parentRunId": parent,
            "zeus_run.trial_id": trial_id(r),
            "zeus_run.role": "trial",
            "stage": r.stage,
            "outcome": "reached" if r.reached else "not_reached",
            "stop_reason": r.stop_reason,
            "kind": r.kind,
            "energy_source": r.energy_source,
            "estimated": "true" if r.estimated else "false",
            "zeus_run.tail": tail_state(r),
        }
        if r.message:
            tags["message"] = r.message[:4000]
        start = _ms(r.started_at)
        end = _ms(r.ended_at) or int(time.time() * 1000)
        run = client.create_run(
            exp_id, start_time=start, run_name=f"r{r.recurrence:04d}-t{r.attempt:02d} bs={r.batch_size}", tags=tags
        )
        run_id = run.info.run_id
        params = {
            "batch_size": r.batch_size,
            "learning_rate": r.learning_rate,
            "power_limit": r.power_limit,
            "recurrence": r.recurrence,
            "attempt": r.attempt,
            "seed": r.seed,
        }
        values = {"energy_joules": r.energy, "time_seconds": r.time, "cost_joules": r.cost, "epochs": r.epochs}
        values.update(_whole_values(r))
        metrics = [Metric(k, float(v), end, 0) for k, v in values.items()]
        metrics += [Metric("metric", float(m), end, epoch) for epoch, m in enumerate(r.metrics, start=1)]
        # learning_rate and power_limit read "none" where the spec sets none (a CPU job: no power limit).
        client.log_batch(run_id, params=[Param(k, "none" if v is None else str(v)) for k, v in params.items()])
        for i in range(0, len(metrics), _BATCH):
            client.log_batch(run_id, metrics=metrics[i : i + _BATCH])
        status = (
            "FAILED"
            if r.stop_reason in _FAILED
            else "KILLED"
            if r.stop_reason is StopReason.INTERRUPTED
            else "FINISHED"
        )
        client.set_terminated(run_id, status=RunStatus.to_string(getattr(RunStatus, status)), end_time=end)

    def _log_summary(self, client: Any, parent: str, job: JobView) -> None:
        from mlflow.entities import Metric, RunTag

        s = job.summary
        step = s.trials
        now = int(job.last_ended.timestamp() * 1000)
        values: dict[str, float | None] = {
            **_with_ci("savings_cost", s.saved.get("cost")),
            **_with_ci("savings_energy", s.saved.get("energy")),
            **_with_ci("savings_time", s.saved.get("time")),
            "total_energy_joules": s.total_energy,
            "total_time_seconds": s.total_time,
            # The whole process: with what each trial's process spent after its point (saving, its tail).
            "whole_energy_joules": s.total_energy + s.after_energy,
            "whole_time_seconds": s.total_time + s.after_time,
            "estimated_part_joules": s.estimated_part,
            "total_cost_joules": s.total_cost,
            "recurrences": s.all_recurrences,  # every recurrence, as every view counts them
            "converged_recurrences": s.recurrences,
            "failed_recurrences": s.failed_recurrences,
            "trials": s.trials,
            **{f"batch_size_{b.batch_size}_trials": b.trials for b in s.by_batch_size},
            "default_mean_cost_joules": s.default_mean_cost,
            "steady_state_cost_joules": s.steady.mean_cost if s.steady else None,
            **_with_ci("steady_state_savings", s.steady.saved.get("cost") if s.steady else None),
            **_with_ci("steady_state_savings_energy", s.steady.saved.get("energy") if s.steady else None),
            **_with_ci("steady_state_savings_time", s.steady.saved.get("time") if s.steady else None),
            "recommended_batch_size": s.recommendation.batch_size if s.recommendation else None,
            "recommended_power_limit_watts": s.recommendation.power_limit if s.recommendation else None,
            **_with_ci("recommended_savings", s.recommendation.saved if s.recommendation else None),
            "batch_size": job.batch_size,
            "exploring": 1.0 if job.exploring else 0.0,
            "slow_recurrences": len(s.slow),
        }
        if job.starts:
            values |= {"start_plans": len(job.starts), "start_carbon_saved_grams": saved_total(job.starts)}
        acc = job.accounting
        if acc is not None:
            values |= {
                "carbon_grams": acc.carbon_g,
                **_with_ci("carbon_savings", acc.carbon),
                "money": acc.money,
                **_with_ci("money_savings", acc.money_saved),
            }
        metrics = [Metric(k, float(v), now, step) for k, v in values.items() if v is not None]
        ex = s.exploration
        tags = {
            "exploration": "exploring" if job.exploring else f"over after recurrence {ex.ended_after}" if ex else "",
            "recommendation": _recommendation_text(job),
            "zeus_run.currency": acc.currency if acc is not None and acc.money is not None else "",
        }
        client.log_batch(parent, metrics=metrics, tags=[RunTag(k, v) for k, v in tags.items() if v])


def tail_state(r: TrialRecord) -> str:
    """Where a trial's tail after its tell stands: ``landed``, ``lost``, ``pending`` (a process that told its trial
    itself has not sent it yet: its record ends at the close) or ``none`` (a door that measures to the exit)."""
    window = r.window or {}
    if "tail_s" in window:
        return "landed"
    if window.get("tail") == "lost":
        return "lost"
    return "pending" if window.get("to") == "close" and r.provenance and r.provenance.get("ask_token") else "none"


def _whole_values(r: TrialRecord) -> dict[str, float]:
    """A trial's figures over its whole process, as the history has them (its tail included once it landed)."""
    values = {
        "after_energy_joules": r.after_energy or 0.0,
        "after_time_seconds": r.after_time or 0.0,
        "whole_energy_joules": r.energy + (r.after_energy or 0.0),
        "whole_time_seconds": r.time + (r.after_time or 0.0),
    }
    if r.estimated_energy is not None:  # a measured trial whose start-up was estimated
        values["estimated_energy_joules"] = r.estimated_energy
        if r.estimated_share is not None:
            values["estimated_share"] = r.estimated_share
    return values


def _log_whole(client: Any, run_id: str, r: TrialRecord) -> None:
    """Log a trial's whole figures again once its tail landed (or was lost), and say so in its tag."""
    from mlflow.entities import Metric

    now = int(time.time() * 1000)
    client.log_batch(run_id, metrics=[Metric(k, float(v), now, 0) for k, v in _whole_values(r).items()])
    client.set_tag(run_id, "zeus_run.tail", tail_state(r))


def _set_status(client: Any, run_id: str, status: str, end_time: int | None = None) -> None:
    """Set a parent run's status (RUNNING reopens it; FINISHED and FAILED end it at ``end_time``, unit: ms)."""
    if client.get_run(run_id).info.status == status:
        return
    if status == "RUNNING":
        client.update_run(run_id, status=status)
    else:
        client.set_terminated(run_id, status=status, end_time=end_time)


def _search(client: Any, exp_id: str, filter_string: str) -> Iterator[Any]:
    token = None
    while True:
        page = client.search_runs([exp_id], filter_string=filter_string, max_results=1000, page_token=token)
        yield from page
        token = page.token
        if not token:
            return


def _quote(value: str) -> str:
    return value.replace("'", "\\'")


def _settings(job: JobView) -> dict[str, Any]:
    """The job's decision settings from its run directory's spec.yaml (none where it cannot be read)."""
    from zeus_run.views.jobs import knobs_of  # the exports read the records and settings through the views

    k = knobs_of(job.run_dir, job.settings)
    if k is None:
        return {}
    return {
        "objective": k.goal.label,
        "default_batch_size": k.default_batch_size,
        "batch_sizes": ",".join(map(str, k.batch_sizes)),
        "eta": k.eta,
        "beta": k.beta,
        "seed": k.seed,
        "policy": k.optimizer.policy,
        "target_metric": k.target_metric,
        "max_epochs": k.max_epochs,
        "concurrency": k.concurrency,
    }


def _with_ci(name: str, saved: Saved | None) -> dict[str, float | None]:
    """``name`` and the two ends of its 90% interval (``name_ci_low``, ``name_ci_high``; absent while unbounded)."""
    if saved is None:
        return {}
    low, high = saved.ci if saved.ci is not None else (None, None)
    return {name: saved.value, f"{name}_ci_low": low, f"{name}_ci_high": high}


def _recommendation_text(job: JobView) -> str:
    rec = job.summary.recommendation
    if rec is None:
        return ""
    parts = [f"batch size {rec.batch_size}"]
    if rec.learning_rate is not None:
        parts.append(f"learning rate {rec.learning_rate:g}")
    if rec.power_limit is not None:
        parts.append(f"power limit {rec.power_limit:g} W")
    saving = f": {words(rec.saved)} against the default" if rec.saved is not None else ""
    return ", ".join(parts) + f" (mean cost {rec.mean_cost:.1f} J over {rec.runs} runs{saving})"
