"""What the trial routes do (ask, report, finish, fail), whichever way a request comes in.

The FastAPI routes (`zeus_run.server._app`) and the fast lane
(`zeus_run.server._lane`) both call these, so a request gets the same
service call and the same answer, byte for byte, either way: the
idempotency key checked, the call made in its job's turn
(`zeus_run.server._jobs.JobService.run`), the answer encoded once with paths
relative to the root.
"""

from __future__ import annotations

from zeus_run.errors import UsageError
from zeus_run.server._errors import ApiError
from zeus_run.server._jobs import JobService
from zeus_run.server._models import AskRequest, EpochReport, Fail, Finish
from zeus_run.server._public import Publisher


class TrialCalls:
    """The trial routes' work; each returns the answer's JSON body.

    Args:
        service: The jobs.
        publisher: Makes answers job-relative (`zeus_run.server._public.Publisher`).
    """

    def __init__(self, service: JobService, publisher: Publisher) -> None:
        self.service = service
        self.publisher = publisher

    async def ask(self, job: str, body: AskRequest | None, key: str | None) -> bytes:
        k = check_key(key)
        host = body.host if body else None
        answer = await self.service.run(job, lambda: self.service.ask(job, host, k))
        start = await self.service.start(job)  # the spec's start section: when to start, as `zeus-run when` plans
        if start is not None:
            start["reason"] = self.publisher.text(str(start["reason"]))  # a forecast's error may name a file
            answer["start"] = start
        return self.publisher.payload(answer)

    async def report(self, job: str, token: str, body: EpochReport, key: str | None) -> bytes:
        k = check_key(key)
        answer = await self.service.run(job, lambda: self.service.report(job, token, body, k), quick=True)
        return answer.model_dump_json().encode()

    async def finish(self, job: str, token: str, body: Finish, key: str | None) -> bytes:
        k = check_key(key)
        return self.publisher.payload(await self.service.run(job, lambda: self.service.finish(job, token, body, k)))

    async def fail(self, job: str, token: str, body: Fail, key: str | None) -> bytes:
        k = check_key(key)
        return self.publisher.payload(await self.service.run(job, lambda: self.service.fail(job, token, body, k)))


def check_key(key: str | None) -> str | None:
    """The request's idempotency key, checked.

    Raises:
        ApiError: 400 for a key that is not 1-200 printable characters.
    """
    if key is None:
        return None
    from zeus_run.asktell import check_key as check

    try:
        return check(key)
    except UsageError as exc:
        raise ApiError(400, str(exc), "bad_idempotency_key", "header.Idempotency-Key") from None
