"""Who a request is: the operator, or one job's token; and what a job token may reach.

The gate (`zeus_run.server._gate`) finds the caller from the token and puts it in the request's scope
(`CALLER`: None for the operator, else the `zeus_run.server._tokens.JobToken`). Routes whose job is in the
path (``/v1/jobs/{job}/...``) are checked there, once, before any route runs (`path_allows`); the Zeus
protocol's routes name their job in the body or the query and check it themselves (`allow`). Deleting a job
is the operator's alone (`operator_only`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from zeus_run.remote import API_PREFIX
from zeus_run.server._errors import ApiError
from zeus_run.server._tokens import JobToken

#: The scope key of the caller (absent or None: the operator).
CALLER = "zeus_run.caller"
_JOBS = f"{API_PREFIX}/jobs/"


def caller(scope: Mapping[str, Any]) -> JobToken | None:
    """The job token a request came with; None: the operator's token."""
    return scope.get(CALLER)


def path_allows(token: JobToken, method: str, path: str) -> ApiError | None:
    """Why a job token may not make this ``/v1`` request (a 403), or None if it may.

    It may read the API's schema, list the jobs (it sees its own) and act on its own job
    (``/v1/jobs/{its job}/...``), except delete it.
    """
    if not path.startswith(_JOBS):
        return None  # /v1/health, /v1/jobs (filtered), /v1/openapi.json, /docs, unknown paths (404)
    job = path[len(_JOBS) :].split("/", 1)[0]
    if job != token.job:
        return forbidden(token, job)
    if method == "DELETE" and path.rstrip("/") == _JOBS + job:
        return operator_needed(token, f"delete job {job!r}")
    return None


def allow(scope: Mapping[str, Any], job: str | None) -> None:
    """Refuse (403) a job token acting on another job than its own.

    Raises:
        ApiError: 403 ``forbidden``.
    """
    token = caller(scope)
    if token is not None and job != token.job:
        raise forbidden(token, job)


def operator_only(scope: Mapping[str, Any], what: str) -> None:
    """Refuse (403) a job token doing what only the operator may (``what``: e.g. "delete job 'a'").

    Raises:
        ApiError: 403 ``operator_only``.
    """
    token = caller(scope)
    if token is not None:
        raise operator_needed(token, what)


def forbidden(token: JobToken, job: str | None) -> ApiError:
    shown = repr(job[:100]) if job else "a new job"
    return ApiError(
        403,
        f"This token is job {token.job!r}'s (id {token.id}): it acts on that job only, not on {shown}. Use that "
        "job's own token, or ask the server's operator.",
        "forbidden",
        "job",
    )


def operator_needed(token: JobToken, what: str) -> ApiError:
    return ApiError(
        403,
        f"Only the server's operator may {what}; this token is job {token.job!r}'s (id {token.id}).",
        "operator_only",
    )
