"""The server's request and response bodies (pydantic; unknown fields refused, types strict, ranges checked).

The OpenAPI schema at ``/v1/openapi.json`` is generated from these. A request
that breaks them gets a 4xx naming the field (`zeus_run.server._errors`).
Types are strict: an epoch is a JSON integer (``"1"``, ``1.0`` and ``true``
are 422), a number is a JSON number (an integer is one). Times and energies
are finite and bounded (`zeus_run.server._limits`; an energy is checked
against the job's power once its job is known).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from zeus_run.server._limits import MAX_ENERGY_J, MAX_TIME_S

#: Largest epoch number a report may carry.
MAX_EPOCH = 1_000_000
MAX_MESSAGE = 2000


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, strict=True)


class RegisterJob(_Request):
    """Register a job (``PUT /v1/jobs/{job}``); the same spec again is a no-op."""

    spec: str | dict[str, Any] = Field(
        description="The job spec: its YAML text, or the same settings as a JSON object. Validated as by "
        "`zeus-run check`. `command`, `workdir` and `run_dir` do not apply on the server (the run directory "
        "is ROOT/JOB): `command` may be omitted, `workdir` and `run_dir` are ignored (a spec that runs registers "
        "as it is). `zeus-run serve register JOB.yaml` sends a spec file."
    )


class AskRequest(_Request):
    """Ask for the next trial (``POST /v1/jobs/{job}/trials``)."""

    host: str | None = Field(default=None, max_length=255, description="Where the trial runs (for the record).")


class Meter(_Request):
    """How the client measured its energy (its own process, through zeus-run's energy sources)."""

    source: str = Field(min_length=1, max_length=40, description="nvml, rapl or estimate.")
    method: str | None = Field(default=None, max_length=40, description="e.g. counter, watts-x-cpu-time.")
    estimated: bool = Field(default=True, description="Whether the energy is an estimate.")
    max_power: float = Field(gt=0, le=1e7, description="Max power the cost charges time at (unit: W).")
    window: dict[str, str | float] | None = Field(
        default=None,
        description="The span measured (the record's `window`): `by`, `from`, and the start-up charged before "
        "the meter could read (`extended_s`, `extended_j`, `extended_at`).",
    )


class EpochReport(_Request):
    """One validated epoch (``POST .../trials/{token}/epochs``)."""

    epoch: int = Field(ge=1, le=MAX_EPOCH, description="1-based epoch number.")
    metric: float | None = Field(description="Validation metric after this epoch; null if it is not a number.")
    time: float | None = Field(default=None, ge=0, le=MAX_TIME_S, description="Training time since it began (unit: s).")
    energy: float | None = Field(
        default=None, ge=0, le=MAX_ENERGY_J, description="Energy since training began (unit: J)."
    )
    measured: Meter | None = Field(default=None, description="How the energy was measured (said once is enough).")


class Heartbeat(_Request):
    """Renew a trial's lease (``POST .../trials/{token}/heartbeat``); the body may be empty."""


class Finish(_Request):
    """The trial ended (``POST .../trials/{token}/finish``)."""

    time: float | None = Field(default=None, ge=0, le=MAX_TIME_S, description="Training time, if measured (unit: s).")
    energy: float | None = Field(default=None, ge=0, le=MAX_ENERGY_J, description="Energy, if measured (unit: J).")
    exit_code: int = Field(default=0, ge=-255, le=255, description="The training process's exit code.")
    measured: Meter | None = Field(default=None, description="How the energy was measured (null: told by hand).")


class Tail(_Request):
    """What a told trial's process spent after its finish (``POST .../trials/{token}/tail``): up to its next ask
    or its exit, charged to the trial after the point it was judged at (``after_time``, ``after_energy``)."""

    time: float = Field(ge=0, le=MAX_TIME_S, description="Time from the finish to the next ask or the exit (unit: s).")
    energy: float = Field(ge=0, le=MAX_ENERGY_J, description="Energy in that time (unit: J).")
    to: Literal["next-ask", "exit"] = Field(description="Where it ended: the process's next ask, or its exit.")


class Fail(_Request):
    """The trial failed (``POST .../trials/{token}/fail``)."""

    message: str = Field(min_length=1, max_length=MAX_MESSAGE, description="Why, in one line (e.g. the error).")
    exit_code: int = Field(default=1, ge=-255, le=255, description="The training process's exit code.")
    time: float | None = Field(default=None, ge=0, le=MAX_TIME_S, description="Training time, if measured (unit: s).")
    energy: float | None = Field(default=None, ge=0, le=MAX_ENERGY_J, description="Energy, if measured (unit: J).")
    measured: Meter | None = Field(default=None, description="How the energy was measured.")


class ErrorBody(BaseModel):
    """Every error answer."""

    error: str = Field(description="What is wrong and how to fix it.")
    field: str | None = Field(default=None, description="The request field at fault, dotted (e.g. body.epoch).")
    code: str = Field(description="Machine-readable kind, e.g. invalid_field, lease_expired, busy.")


class Health(BaseModel):
    status: str
    version: str


class ReportAnswer(BaseModel):
    """The server's decision after an epoch (the seeds' ``ReportResponse``)."""

    stop: bool = Field(description="Stop training now.")
    converged: bool = Field(description="The target metric was reached.")
    reason: str | None = Field(description="Why to stop (a zeus-run stop reason), or null to go on.")
    message: str


class HeartbeatAnswer(BaseModel):
    expires_at: float = Field(description="When the lease ends without another heartbeat or report (Unix s).")


class History(BaseModel):
    job: str
    records: list[dict[str, Any]]


class Jobs(BaseModel):
    jobs: list[str]
