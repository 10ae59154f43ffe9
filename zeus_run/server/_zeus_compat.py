"""Zeus 0.16's batch-size protocol, so that Zeus's own client works against ``zeus-run serve`` unchanged.

A training script written for Zeus's server calls
``zeus.optimizer.batch_size.client.BatchSizeOptimizer(monitor, server_url, job)``.
With ``server_url = "http://HOST:PORT/zeus/<token>"`` it talks to this module
instead (Zeus's client sends no header, so the token is the path's first
segment; `zeus_run.server._gate.strip_token` takes it off before anything
logs the path). The token is the job's own (`zeus_run.server._tokens`): it
registers, asks, reports and ends trials of that job only (403 for any
other ``job_id``); the operator's token may do all that for any job, and
alone may delete one. Each route maps onto the server's own calls
(`JobService`), so there is no second decision path:

* ``POST /jobs`` (``JobSpecFromClient``): register the job ``job_id`` with the
  spec `spec_document` makes of it (201; 200 for the same spec again; 409 for
  a conflicting one); registered with the operator's token, a job without a
  token gets one, in the answer's ``job_token`` (Zeus's client ignores it);
* ``GET /jobs/batch_size?job_id=``: an ask; the trial number is its ``trial`` + 1;
* ``POST /report`` (``TrainingResult``): an epoch report with the client's time
  and energy; when the answer is to stop, the trial is told with them at once
  (Zeus's client tells nothing after a stop);
* ``PATCH /trials`` (``TrialId``, sent when the client's process exits): a
  trial not yet told is told as failed (Zeus: ``Failed``); a told one stays;
* ``DELETE /jobs?job_id=`` (the operator's token only): the run directory moves to ``ROOT/.deleted/`` and
  the job's token is revoked.
"""

from __future__ import annotations

import collections
import contextlib
import os
import secrets
import threading
from typing import Any, overload

from fastapi import FastAPI, Query, Request, Response
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from zeus_run.contract import StopReason
from zeus_run.errors import AlreadyTold, LeaseExpired
from zeus_run.rundir.history import HISTORY_NAME, read_history
from zeus_run.rundir.store import SPEC_NAME, read_running
from zeus_run.server._access import allow, caller, operator_only
from zeus_run.server._errors import ApiError
from zeus_run.server._gate import ZEUS_PREFIX
from zeus_run.server._jobs import JobService
from zeus_run.server._limits import MAX_ENERGY_J, MAX_TIME_S
from zeus_run.server._models import MAX_EPOCH, EpochReport, Fail, Finish
from zeus_run.server._specdoc import NO_COMMAND
from zeus_run.spec import MAX_CONCURRENCY

#: Lease of a Zeus client's trial (unit: s). Its client renews it only by reporting an epoch, so the
#: lease must outlast the longest epoch (and the start-up before the first); Zeus's own server has none.
ZEUS_LEASE = 24 * 3600.0
#: Trial tokens remembered per process (more: looked up in ``running.json``).
_MAX_TOKENS = 4096


# -- Zeus's models (zeus.optimizer.batch_size.common), as its server reads them ------------------------------------


class _ZeusBody(BaseModel):
    # NOTE: Zeus's own server ignores fields it does not know (pydantic 1's default); so does this.
    model_config = ConfigDict(extra="ignore", allow_inf_nan=False)


class ZeusJobSpec(_ZeusBody):
    """Zeus's ``JobSpecFromClient``: the job's parameters and the client's GPUs."""

    job_id: str | None = None
    job_id_prefix: str = Field(min_length=1, max_length=90)
    batch_sizes: list[int] = Field(min_length=1)
    default_batch_size: int = Field(gt=0)
    eta_knob: float = Field(default=0.5, ge=0, le=1)
    beta_knob: float | None = Field(default=2.0, gt=0)
    target_metric: float = 0.5
    higher_is_better_metric: bool = True
    max_epochs: int = Field(default=100, gt=0)
    num_pruning_rounds: int = Field(default=2, ge=0)
    window_size: int = Field(default=0, ge=0)
    mab_prior_mean: float = 0.0
    mab_prior_precision: float = Field(default=0.0, ge=0)
    mab_num_explorations: int = Field(default=2, ge=0)
    mab_seed: int | None = Field(default=None, ge=0)
    max_power: float = Field(gt=0, description="Unit: W, all the job's GPUs together.")
    number_of_gpus: int = Field(gt=0)
    gpu_model: str = Field(min_length=1)


class ZeusTrialId(_ZeusBody):
    """Zeus's ``TrialId``: one trial of a job."""

    job_id: str
    batch_size: int = Field(strict=True)
    trial_number: int = Field(ge=1, strict=True)


class ZeusTrainingResult(ZeusTrialId):
    """Zeus's ``TrainingResult``: the trial so far, after ``current_epoch`` epochs."""

    time: float = Field(ge=0, le=MAX_TIME_S, description="Training time so far (unit: s).")
    energy: float = Field(ge=0, le=MAX_ENERGY_J, description="Energy so far (unit: J).")
    metric: float
    current_epoch: int = Field(ge=1, le=MAX_EPOCH, strict=True)


class ZeusReportResponse(BaseModel):
    """Zeus's ``ReportResponse``."""

    stop_train: bool
    converged: bool
    message: str


def spec_document(job: ZeusJobSpec, name: str) -> dict[str, Any]:
    """The zeus-run spec of a Zeus job: Zeus's knobs under zeus-run's names, and Zeus's algorithm (``zeus``).

    Open-ended (``recurrences: null``) and with any number of sessions at once (up to `MAX_CONCURRENCY`), as
    Zeus's server; the client's reported energy is the measurement, and its GPUs' ``max_power`` is the cost's.
    """
    doc: dict[str, Any] = {
        "name": name,
        "command": NO_COMMAND,
        "batch_sizes": sorted(job.batch_sizes),
        "default_batch_size": job.default_batch_size,
        "target_metric": job.target_metric,
        "higher_is_better": job.higher_is_better_metric,
        "max_epochs": job.max_epochs,
        "eta": job.eta_knob,
        "beta": job.beta_knob,
        "recurrences": None,
        "concurrency": MAX_CONCURRENCY,
        "lease": ZEUS_LEASE,
        "optimizer": {
            "policy": "zeus",
            "pruning_rounds": job.num_pruning_rounds,
            "window_size": job.window_size,
            "prior_mean": job.mab_prior_mean,
            "prior_precision": job.mab_prior_precision,
            "num_explorations": job.mab_num_explorations,
        },
        "energy": {"source": "estimate", "watts": job.max_power, "basis": "wall-time"},
    }
    if job.mab_seed is not None:
        doc["seed"] = job.mab_seed
    return doc


class ZeusProtocol:
    """The Zeus routes' state: which ask each (job, trial number) is, so a report finds its token.

    Args:
        service: The server's jobs.
    """

    def __init__(self, service: JobService) -> None:
        self.service = service
        self._tokens: collections.OrderedDict[tuple[str, int], tuple[str, int]] = collections.OrderedDict()
        self._lock = threading.Lock()

    # -- the calls (blocking: run on the service's workers, in the job's turn) -----------------------------------
    def register(self, job: ZeusJobSpec, operator: bool = True) -> tuple[dict[str, Any], bool]:
        """Register the job; returns Zeus's answer (the job with its ``job_id``, and ``job_token`` when the
        operator registered a job without one) and whether it is new."""
        name = job.job_id
        if name is None:  # as Zeus: a fresh job per registration without an id
            while True:
                name = f"{job.job_id_prefix}-{secrets.token_hex(4)}"
                if not os.path.lexists(self.service.root.job_dir(name)):
                    break
        elif not name.startswith(job.job_id_prefix):
            raise ApiError(
                422,
                f"job_id = {name!r} does not start with job_id_prefix {job.job_id_prefix!r}. "
                "Make the prefix the start of the id, or leave job_id out to have one made.",
                "invalid_field",
                "body.job_id",
            )
        new = not (self.service.root.job_dir(name) / SPEC_NAME).is_file()
        registered = self.service.register(name, spec_document(job, name), operator=operator)
        answer = {**job.model_dump(), "job_id": name}
        if registered["job_token"] is not None:
            answer["job_token"] = registered["job_token"]
        return answer, new

    def ask(self, name: str, host: str | None) -> dict[str, Any]:
        decision = self.service.ask(name, host)
        number = int(decision["trial"]) + 1
        self._remember(name, number, decision["token"], int(decision["batch_size"]))
        return {"job_id": name, "batch_size": decision["batch_size"], "trial_number": number}

    def report(self, result: ZeusTrainingResult) -> ZeusReportResponse:
        name, number = result.job_id, result.trial_number
        token = self._token(name, number, result.batch_size)
        epoch = EpochReport(epoch=result.current_epoch, metric=result.metric, time=result.time, energy=result.energy)
        try:
            answer = self.service.report(name, token, epoch)
        except (AlreadyTold, LeaseExpired):
            record = self._record(name, number)
            return ZeusReportResponse(
                stop_train=True,
                converged=bool(record and record.get("reached")),
                message=f"Trial {number} of job {name!r} is already recorded "
                f"({record.get('stop_reason') if record else 'unknown'}); nothing was recorded again.",
            )
        if not answer.stop:
            return ZeusReportResponse(stop_train=False, converged=False, message=answer.message)
        # NOTE: Zeus's client tells nothing after a stop (its PATCH comes at the process's exit), so the
        # trial is recorded now, with the time and energy it just reported.
        self.service.finish(name, token, Finish(time=result.time, energy=result.energy, exit_code=0))
        self._forget(name, number)
        reason = StopReason(answer.reason) if answer.reason else None
        message = f"{answer.message} ({reason.value})" if reason else answer.message
        return ZeusReportResponse(stop_train=True, converged=answer.converged, message=message)

    def end(self, trial: ZeusTrialId) -> None:
        """The client's process ended (its ``atexit``): a trial still in flight failed; one not in flight (told
        at its stop, or expired) is left as it is, without reading the history."""
        token = self._token(trial.job_id, trial.trial_number, trial.batch_size, in_flight_only=True)
        if token is None:
            return
        with contextlib.suppress(AlreadyTold, LeaseExpired):
            self.service.fail(
                trial.job_id,
                token,
                Fail(message="the Zeus client ended the trial (PATCH /trials) before the server said to stop"),
            )
        self._forget(trial.job_id, trial.trial_number)

    def delete(self, name: str) -> None:
        """Move the job's run directory to ``ROOT/.deleted/NAME.UNIXTIME`` (`JobService.delete`): Zeus forgets a
        deleted job, zeus-run keeps its history (the name is free again)."""
        self._job(name)
        self.service.delete(name)
        with self._lock:
            for key in [k for k in self._tokens if k[0] == name]:
                del self._tokens[key]

    # -- finding a trial's ask ---------------------------------------------------------------------------------
    def _remember(self, name: str, number: int, token: str, batch_size: int) -> None:
        with self._lock:
            self._tokens[(name, number)] = (token, batch_size)
            while len(self._tokens) > _MAX_TOKENS:
                self._tokens.popitem(last=False)

    def _forget(self, name: str, number: int) -> None:
        with self._lock:
            self._tokens.pop((name, number), None)

    @overload
    def _token(self, name: str, number: int, batch_size: int) -> str: ...
    @overload
    def _token(self, name: str, number: int, batch_size: int, in_flight_only: bool) -> str | None: ...
    def _token(self, name: str, number: int, batch_size: int, in_flight_only: bool = False) -> str | None:
        """The token of trial ``number`` (1-based) of job ``name``: remembered, or its marker, or its record
        (``in_flight_only``: None rather than look in the history)."""
        with self._lock:
            hit = self._tokens.get((name, number))
        if hit is None:
            path = self._job(name)
            marker = next((m for m in read_running(path) or [] if m.asked and m.trial == number - 1), None)
            if marker is not None and marker.token:
                hit = (marker.token, marker.batch_size)
            elif in_flight_only:
                return None
            else:
                record = self._record(name, number)
                token = ((record or {}).get("provenance") or {}).get("ask_token")
                if record is None or not token:
                    raise ApiError(
                        404,
                        f"Job {name!r} has no trial {number}. Ask for a batch size first (GET /jobs/batch_size).",
                        "unknown_trial",
                        "body.trial_number",
                    )
                hit = (str(token), int(record["batch_size"]))
        if hit[1] != batch_size:
            raise ApiError(
                422,
                f"batch_size = {batch_size}: trial {number} of job {name!r} was given batch size {hit[1]}.",
                "invalid_field",
                "body.batch_size",
            )
        return hit[0]

    def _record(self, name: str, number: int) -> dict[str, Any] | None:
        path = self._job(name)
        if not (path / HISTORY_NAME).is_file():
            return None
        for record in read_history(path / HISTORY_NAME, warn=False):
            if record.trial == number - 1:
                return record.to_json()
        return None

    def _job(self, name: str) -> Any:
        path = self.service.root.job_dir(name)
        if not (path / SPEC_NAME).is_file():
            raise ApiError(404, f"Unknown job {name!r}: register it first (POST /jobs).", "unknown_job", "job_id")
        return path


def install(app: FastAPI, service: JobService) -> None:
    """Add the Zeus routes (``/zeus/...``; the gate has taken the token off the path)."""
    zeus = ZeusProtocol(service)
    hidden: dict[str, Any] = {"include_in_schema": False}

    @app.post(f"{ZEUS_PREFIX}/jobs", **hidden)
    async def zeus_register(request: Request, body: ZeusJobSpec) -> Response:
        allow(request.scope, body.job_id)  # a job token registers its own job, by its name
        name = body.job_id or body.job_id_prefix
        operator = caller(request.scope) is None
        answer, new = await service.run(name, lambda: zeus.register(body, operator))
        return JSONResponse(answer, status_code=201 if new else 200)

    @app.get(f"{ZEUS_PREFIX}/jobs/batch_size", **hidden)
    async def zeus_batch_size(request: Request, job_id: str = Query()) -> dict[str, Any]:
        allow(request.scope, job_id)
        host = request.client.host if request.client else None
        return await service.run(job_id, lambda: zeus.ask(job_id, host))

    @app.post(f"{ZEUS_PREFIX}/report", response_model=ZeusReportResponse, **hidden)
    async def zeus_report(request: Request, body: ZeusTrainingResult) -> ZeusReportResponse:
        allow(request.scope, body.job_id)
        return await service.run(body.job_id, lambda: zeus.report(body))

    @app.patch(f"{ZEUS_PREFIX}/trials", **hidden)
    async def zeus_end(request: Request, body: ZeusTrialId) -> None:
        allow(request.scope, body.job_id)
        await service.run(body.job_id, lambda: zeus.end(body))

    @app.delete(f"{ZEUS_PREFIX}/jobs", **hidden)
    async def zeus_delete(request: Request, job_id: str = Query()) -> None:
        operator_only(request.scope, f"delete job {job_id[:100]!r}")
        await service.run(job_id, lambda: zeus.delete(job_id))
