"""The HTTP API: FastAPI routes over `zeus_run.server._jobs.JobService` (paths in `zeus_run.remote`).

Routes are ``async``: each awaits its job's turn and makes the library call on
the event loop, or on one of the service's worker threads where another process
holds the job's run directory (`zeus_run.server._jobs.JobService.run`), so a job
that waits for its lock holds one worker and no other job.

Ask, report, finish and fail take an ``Idempotency-Key`` header: a retry with
the same key is answered as the request it repeats (2xx), across a restart.
Their work is `zeus_run.server._trials.TrialCalls`, which the fast lane
(`zeus_run.server._lane`) calls too: a well-formed request of theirs is
answered there, without FastAPI's per-request work; the rest reach the routes.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Header, Path, Request, Response

from zeus_run import __version__
from zeus_run.remote import API_PREFIX, HEALTH_PATH, OPENAPI_PATH
from zeus_run.server import _docs, _errors, _zeus_compat
from zeus_run.server._access import caller
from zeus_run.server._answers import AskAnswer, Registered, TrialRecord
from zeus_run.server._gate import DEFAULT_MAX_BODY, Gate
from zeus_run.server._jobs import JobService
from zeus_run.server._lane import FastLane
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
    Tail,
)
from zeus_run.server._public import Publisher
from zeus_run.server._trials import TrialCalls

JOB = Path(description="Job name: the run directory ROOT/JOB ([A-Za-z0-9._-], not starting with '.').")
TOKEN = Path(description="The trial token from the ask.")
KEY = Header(
    None,
    alias="Idempotency-Key",
    description="A key of your choice (a UUID) for this request; send the same key to retry it. A retry of a "
    "request that was applied gets its answer again; the same key with another body is 409 key_reused.",
)
_ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorBody} for code in (400, 401, 403, 404, 409, 410, 413, 422)
}


def create_app(service: JobService, token: str, max_body: int = DEFAULT_MAX_BODY, fast_lane: bool = True) -> Gate:
    """The ASGI application: the API behind the token and body-limit gate.

    Args:
        fast_lane: Answer the trial routes' well-formed requests in `zeus_run.server._lane` (the same answers,
            with less CPU); False: every request through FastAPI.
    """
    app = FastAPI(
        title="zeus-run batch-size server",
        version=__version__,
        description="The network front of zeus-run's ask/tell engine: one run directory per job under the "
        "server's root. Every path but /v1/health needs 'Authorization: Bearer TOKEN': the job's own token "
        "(it acts on that job only; 403 elsewhere) or the operator's (every job).",
        openapi_url=OPENAPI_PATH,
        docs_url=None,
        redoc_url=None,
        responses=_ERRORS,
    )
    publisher = Publisher(service.root.path)
    _errors.install(app, publisher)
    _docs.install(app)
    v1 = API_PREFIX

    calls = TrialCalls(service, publisher)

    def _json(payload: dict[str, Any]) -> Response:
        """A JSON answer encoded once (the engine's records and decisions are plain JSON already: FastAPI's own
        encoding would walk them again), its paths relative to the root."""
        return _answer(publisher.payload(payload))

    @app.get(HEALTH_PATH, response_model=Health)
    def health() -> Health:
        """Liveness; needs no token."""
        return Health(status="ok", version=__version__)

    @app.get(f"{v1}/jobs", response_model=Jobs)
    async def list_jobs(request: Request) -> Jobs:
        """The jobs (run directories) under the root; a job token sees only its own job."""
        jobs = await service.run(None, service.jobs)
        who = caller(request.scope)
        return Jobs(jobs=jobs if who is None else [j for j in jobs if j == who.job])

    @app.put(f"{v1}/jobs/{{job}}", response_model=Registered)
    async def register(request: Request, body: RegisterJob, job: str = JOB) -> Response:
        """Register a job from its spec, validated as `zeus-run check` does; the same spec again is a no-op.

        With the operator's token, a job that has no token yet gets one: `job_token` in the answer, shown only
        there. A job's own token may re-register its job (a new job needs the operator's token, or a token made
        for its name with `zeus-run serve tokens rotate`).

        A changed spec is applied where `zeus-run run` would resume the job with it (`recurrences`, `lease`,
        `command`, `accounting`, `export` ...; `changed` lists them), and refused (409 spec_conflict, naming
        the fields) where `run` would need --force. Files the spec names must lie inside the job's run
        directory or an --allow-path directory (else 422 path_not_allowed); an accounting series must be one.
        """
        operator = caller(request.scope) is None
        return _json(await service.run(job, lambda: service.register(job, body.spec, operator)))

    @app.delete(f"{v1}/jobs/{{job}}", status_code=204)
    async def delete_job(job: str = JOB) -> Response:
        """Delete a job (the operator's token only): its run directory moves to ROOT/.deleted/ (the history is
        kept, the name is free again) and its token is revoked. 409 busy while trials are in flight."""
        await service.run(job, lambda: service.delete(job))
        return Response(status_code=204)

    @app.post(f"{v1}/jobs/{{job}}/trials", response_model=AskAnswer)
    async def ask(body: AskRequest | None = None, job: str = JOB, key: str | None = KEY) -> Response:
        """Ask for the next trial: its batch size (learning rate, power limit, seed), token and lease.

        Several asks at once follow the concurrent rule of `concurrency: N`.
        """
        return _answer(await calls.ask(job, body, key))

    @app.post(f"{v1}/jobs/{{job}}/trials/{{token}}/heartbeat", response_model=HeartbeatAnswer)
    async def heartbeat(body: Heartbeat | None = None, job: str = JOB, token: str = TOKEN) -> HeartbeatAnswer:
        """Renew the trial's lease. 410 if it already expired, 404 for an unknown token."""
        return HeartbeatAnswer(expires_at=await service.run(job, lambda: service.heartbeat(job, token), quick=True))

    @app.post(f"{v1}/jobs/{{job}}/trials/{{token}}/epochs", response_model=ReportAnswer)
    async def report(body: EpochReport, job: str = JOB, token: str = TOKEN, key: str | None = KEY) -> Response:
        """Report one epoch. On disk (fsynced) before the answer, which says whether to stop.

        The last epoch again (a retry) is answered as before and not recorded twice; a lower epoch is 409.
        """
        return _answer(await calls.report(job, token, body, key))

    @app.post(f"{v1}/jobs/{{job}}/trials/{{token}}/finish", response_model=TrialRecord)
    async def finish(body: Finish, job: str = JOB, token: str = TOKEN, key: str | None = KEY) -> Response:
        """Close the trial; returns its history record. 410 for a late tell (its epochs stay on disk)."""
        return _answer(await calls.finish(job, token, body, key))

    @app.post(f"{v1}/jobs/{{job}}/trials/{{token}}/fail", response_model=TrialRecord)
    async def fail(body: Fail, job: str = JOB, token: str = TOKEN, key: str | None = KEY) -> Response:
        """Close the trial as failed, with its message; returns its history record."""
        return _answer(await calls.fail(job, token, body, key))

    @app.post(f"{v1}/jobs/{{job}}/trials/{{token}}/tail", response_model=Tail)
    async def tail(body: Tail, job: str = JOB, token: str = TOKEN) -> Tail:
        """What the trial's process spent after its finish, up to its next ask or its exit: charged to the trial
        (its record's ``after_time`` and ``after_energy``), as a launcher charges a script to its exit. One tail
        per trial (the same one again is accepted; another is 409 ``tail_conflict``); it changes no decision. 404
        for a token no told trial of this job has, 409 for a trial not told yet, 422 for an energy beyond the
        bound a finish is held to."""
        await service.run(job, lambda: service.tail(job, token, body))
        return body

    @app.delete(f"{v1}/jobs/{{job}}/trials/{{token}}", response_model=TrialRecord)
    async def cancel(job: str = JOB, token: str = TOKEN) -> Response:
        """Release an ask that will never be told (its answer was lost, its pod is gone), as `zeus-run cancel`.

        It is recorded as an infrastructure failure, as an expired lease is, and its recurrence is asked
        again. Returns its record; 409 already_told if it was closed, 404 for an unknown token.
        """
        return _json(await service.run(job, lambda: service.cancel(job, token)))

    @app.get(f"{v1}/jobs/{{job}}/history", response_model=History)
    async def history(job: str = JOB) -> History:
        """The job's trial records, oldest first (as `zeus-run history JOB_DIR --format json`)."""
        return History(job=job, records=await service.run(None, lambda: service.history(job)))

    _zeus_compat.install(app, service)  # Zeus 0.16's batch-size protocol under /zeus/<token>/
    return Gate(app, token, max_body, lane=FastLane(calls) if fast_lane else None, tokens=service.tokens)


def _answer(content: bytes) -> Response:
    return Response(content, media_type="application/json")
