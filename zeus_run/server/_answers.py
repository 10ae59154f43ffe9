"""The schemas of the server's answers, for the OpenAPI document (`zeus_run.server._app`).

The ask, finish, fail and cancel routes send the engine's own JSON (encoded
once, not through these models), so the models here describe it and allow
more fields than they name: a newer engine may add some.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class StartAnswer(_Open):
    """When to start the trial, for a job whose spec has a ``start`` section (docs/starting-clean.md)."""

    start_at: str = Field(description="When to start training, ISO-8601 UTC (the ask's time when not moved).")
    start_in_s: float = Field(description="Seconds from the answer to `start_at` (0: start now).")
    deadline: str | None = Field(description="When the run is due, ISO-8601 UTC (null: no plan could be made).")
    moved: bool = Field(description="Whether the start was moved from the ask's time to a cleaner one.")
    reason: str = Field(description="Why this start, in one line.")
    status: str = Field(description="wait, start, late (a run started now ends after the deadline) or missed.")
    trigger: str = Field(
        description="The trigger planned for, ISO-8601 UTC: the ask's time (asks of the job within a minute of "
        "one another, its spec and history unchanged, share one plan)."
    )


class AskAnswer(_Open):
    """The next trial (``POST /v1/jobs/{job}/trials``): `zeus_run.asktell.Ask` as JSON."""

    token: str = Field(description="The trial's token: report, finish, fail and heartbeat name it.")
    recurrence: int = Field(description="1-based recurrence number.")
    attempt: int = Field(description="1-based try within the recurrence (also as `try`).")
    trial: int = Field(description="0-based trial number in the job.")
    batch_size: int = Field(description="Batch size to train with.")
    learning_rate: float | None = Field(description="Learning rate scaled for the batch size, if the job has one.")
    seed: int = Field(description="The trial's seed.")
    cost_threshold: float | None = Field(description="Early-stop threshold (unit: J), null if none.")
    max_epochs: int
    target_metric: float | None
    higher_is_better: bool
    stage: str = Field(description="The optimizer stage that chose the batch size.")
    detail: str = Field(description="Why it chose it.")
    lease_s: float = Field(description="The lease (unit: s): renew it with a report or a heartbeat.")
    expires_at: float = Field(description="When the lease runs out unless renewed (Unix time, unit: s).")
    run_dir: str = Field(description="The job's run directory, relative to the server's root.")
    trial_dir: str = Field(description="The trial's directory, relative to the server's root.")
    command: list[str] = Field(
        description="The spec's command for this trial, in the job's terms: `{python}` and `{log_dir}` where the "
        "client fills in its own interpreter and directory (zeus_run.remote does)."
    )
    env: dict[str, str] = Field(description="The ZEUS_* contract for the trial, without the server's file paths.")
    workdir: str | None = Field(default=None, description="Always null: the client runs where it is.")
    start: StartAnswer | None = Field(
        default=None,
        description="Only for a job with a `start` section: when to start, planned as `zeus-run when` plans "
        "(the lowest-carbon start before the deadline, or now). The trial is reserved at once; a client that "
        "waits for `start_at` keeps its lease with heartbeats (zeus_run.remote does).",
    )


class TrialRecord(_Open):
    """A trial's history record (finish, fail, cancel), as ``zeus-run history --format json`` prints it."""

    job: str
    recurrence: int
    attempt: int
    trial: int
    batch_size: int
    epochs: int
    time: float = Field(description="Unit: s.")
    energy: float = Field(description="Unit: J.")
    cost: float = Field(description="Zeus cost (unit: J).")
    reached: bool = Field(description="The target metric was reached.")
    stop_reason: str = Field(description="Why it ended (a zeus-run stop reason).")
    observed: bool = Field(description="Whether the optimizer learns from it.")
    metrics: list[float | None] = Field(description="The metric after each epoch.")


class Registered(BaseModel):
    """A job registered (``PUT /v1/jobs/{job}``)."""

    job: str
    spec: dict[str, Any] = Field(description="The resolved spec (every default filled in).")
    created: bool = Field(description="The job is new.")
    changed: list[str] = Field(description="Settings this spec changed and that now apply (empty: none).")
    job_token: str | None = Field(
        default=None,
        description="The job's own token, made by this registration (the operator's, for a job without one): "
        "shown only here; give it to the job's pods (ZEUS_SERVER_TOKEN). null: the job has a token already "
        "(`zeus-run serve tokens rotate` makes a new one).",
    )
    token_id: str | None = Field(default=None, description="The short id of the job's token (as logs name it).")
