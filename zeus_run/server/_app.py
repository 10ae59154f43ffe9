"""The HTTP API: FastAPI routes over `zeus_run.server._jobs.JobService` (paths in `zeus_run.remote`).

Routes are ``async``: each awaits its job's turn and runs the blocking call on
one of the service's workers (`zeus_run.server._jobs.JobService.run`), so a
job that waits on its disk holds one worker and no other job.
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import FastAPI, Path, Response

from zeus_run import __version__
from zeus_run.remote import API_PREFIX, HEALTH_PATH, OPENAPI_PATH
from zeus_run.server import _errors, _zeus_compat
from zeus_run.server._gate import DEFAULT_MAX_BODY, Gate
from zeus_run.server._jobs import JobService
from zeus_run.server._models import (
    AskRequest,
    EpochReport,
    ErrorBody,
    Fail,
    Finish,
    Health,
    Heartbeat,
    HeartbeatAnswer,
    History,
    Jobs,
    RegisterJob,
    ReportAnswer,
)

JOB = Path(description="Job name: the run directory ROOT/JOB ([A-Za-z0-9._-], not starting with '.').")
TOKEN = Path(description="The trial token from the ask.")
_ERRORS: dict[int | str, dict[str, Any]] = {code: {"model": ErrorBody} for code in (400, 401, 404, 409, 410, 413, 422)}


def create_app(service: JobService, token: str, max_body: int = DEFAULT_MAX_BODY) -> Gate:
    """The ASGI application: the API behind the token and body-limit gate."""
    app = FastAPI(
        title="zeus-run batch-size server",
        version=__version__,
        description="The network front of zeus-run's ask/tell engine: one run directory per job under the "
        "server's root. Every path but /v1/health needs 'Authorization: Bearer TOKEN'.",
        openapi_url=OPENAPI_PATH,
        docs_url=None,
        redoc_url=None,
        responses=_ERRORS,
    )
    _errors.install(app)
    v1 = API_PREFIX

    @app.get(HEALTH_PATH, response_model=Health)
    def health() -> Health:
        """Liveness; needs no token."""
        return Health(status="ok", version=__version__)

    @app.get(f"{v1}/jobs", response_model=Jobs)
    async def list_jobs() -> Jobs:
        """The jobs (run directories) under the root."""
        return Jobs(jobs=await service.run(None, service.jobs))

    @app.put(f"{v1}/jobs/{{job}}")
    async def register(body: RegisterJob, job: str = JOB) -> dict[str, Any]:
        """Register a job from its spec, validated as `zeus-run check` does; the same spec again is a no-op.

        A changed spec that would invalidate the history is refused (409), as `zeus-run run` refuses it.
        Returns the resolved spec.
        """
        return await service.run(job, lambda: service.register(job, body.spec))

    @app.post(f"{v1}/jobs/{{job}}/trials")
    async def ask(body: AskRequest | None = None, job: str = JOB) -> Response:
        """Ask for the next trial: its batch size (learning rate, power limit, seed), token and lease.

        Several asks at once follow the concurrent rule of `concurrency: N`.
        """
        return _json(await service.run(job, lambda: service.ask(job, body.host if body else None)))

    @app.post(f"{v1}/jobs/{{job}}/trials/{{token}}/heartbeat", response_model=HeartbeatAnswer)
    async def heartbeat(body: Heartbeat | None = None, job: str = JOB, token: str = TOKEN) -> HeartbeatAnswer:
        """Renew the trial's lease. 410 if it already expired, 404 for an unknown token."""
        return HeartbeatAnswer(expires_at=await service.run(job, lambda: service.heartbeat(job, token), quick=True))

    @app.post(f"{v1}/jobs/{{job}}/trials/{{token}}/epochs", response_model=ReportAnswer)
    async def report(body: EpochReport, job: str = JOB, token: str = TOKEN) -> ReportAnswer:
        """Report one epoch. On disk (fsynced) before the answer, which says whether to stop."""
        return await service.run(job, lambda: service.report(job, token, body), quick=True)

    @app.post(f"{v1}/jobs/{{job}}/trials/{{token}}/finish")
    async def finish(body: Finish, job: str = JOB, token: str = TOKEN) -> Response:
        """Close the trial; returns its history record. 410 for a late tell (its epochs stay on disk)."""
        return _json(await service.run(job, lambda: service.finish(job, token, body)))

    @app.post(f"{v1}/jobs/{{job}}/trials/{{token}}/fail")
    async def fail(body: Fail, job: str = JOB, token: str = TOKEN) -> Response:
        """Close the trial as failed, with its message; returns its history record."""
        return _json(await service.run(job, lambda: service.fail(job, token, body)))

    @app.get(f"{v1}/jobs/{{job}}/history", response_model=History)
    async def history(job: str = JOB) -> History:
        """The job's trial records, oldest first (as `zeus-run history JOB_DIR --format json`)."""
        return History(job=job, records=await service.run(None, lambda: service.history(job)))

    _zeus_compat.install(app, service)  # Zeus 0.16's batch-size protocol under /zeus/<token>/
    return Gate(app, token, max_body)


def _json(payload: dict[str, Any]) -> Response:
    """A JSON answer encoded once (the engine's records and decisions are plain JSON already: FastAPI's own
    encoding would walk them again)."""
    return Response(json.dumps(payload, allow_nan=False).encode(), media_type="application/json")
