"""Errors as answers: every refusal is JSON ``{"error", "field", "code"}`` with a 4xx, never a traceback.

* malformed JSON: 400 ``malformed_json``, naming the line and column;
* an unknown field: 422 ``unknown_field``; a missing, mistyped or out-of-range
  one: 422 ``invalid_field``; both name the field (``body.epoch``);
* the library's errors map by type (`STATUS_OF`), with their own message in
  HTTP's words (`zeus_run.server._public`: no server paths, no exit codes),
  logged as one line (shown with ``-v``), and the connection stays open;
* anything unexpected: 500 ``internal`` with one line; the traceback goes to
  the server's log only, once (`zeus_run.server._gate`).
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from zeus_run.errors import (
    AlreadyTold,
    EpochOutOfOrder,
    JobComplete,
    KeyReused,
    LeaseExpired,
    RunDirBusy,
    SpecError,
    TailConflict,
    UnknownToken,
    UsageError,
    ZeusRunError,
)
from zeus_run.server._logs import scrub
from zeus_run.server._public import Publisher, redact
from zeus_run.server._root import JOB_NAME_RULE as _JOB_RULE
from zeus_run.server._root import JobNameError

logger = logging.getLogger(__name__)
#: Refusals are logged with the requests (shown with ``zeus-run serve -v``).
refusals = logging.getLogger("zeus_run.server.access")


class ApiError(Exception):
    """A refusal raised by a route: status, message, code and the field at fault."""

    def __init__(self, status: int, message: str, code: str, field: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.field = field


#: Library errors and the answer each gets (first match wins; subclasses before bases).
STATUS_OF: list[tuple[type[Exception], int, str]] = [
    (JobNameError, 400, "bad_job_name"),
    (SpecError, 422, "invalid_spec"),
    (RunDirBusy, 409, "busy"),
    (JobComplete, 409, "job_complete"),
    (LeaseExpired, 410, "lease_expired"),
    (AlreadyTold, 409, "already_told"),
    (UnknownToken, 404, "unknown_trial"),
    (KeyReused, 409, "key_reused"),
    (TailConflict, 409, "tail_conflict"),
    (EpochOutOfOrder, 409, "epoch_out_of_order"),
    (UsageError, 409, "refused"),
    (ZeusRunError, 409, "refused"),
]


def answer(status: int, message: str, code: str, field: str | None = None) -> JSONResponse:
    return JSONResponse({"error": message, "field": field, "code": code}, status_code=status)


def install(app: FastAPI, publisher: Publisher) -> None:
    """Install the error handlers on ``app``.

    NOTE: Starlette re-raises whatever reaches a handler of ``Exception`` after answering it
    (its server-error layer), which logs a traceback and drops a kept-alive connection; so the
    library's errors have a handler of their own type (answered, not re-raised), and only a
    real fault reaches ``Exception``.
    """

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        return validation_answer(exc.errors())

    @app.exception_handler(ApiError)
    async def _api(request: Request, exc: ApiError) -> JSONResponse:
        return refused(request.method, request.url.path, exc, publisher)

    @app.exception_handler(ZeusRunError)
    async def _library(request: Request, exc: ZeusRunError) -> JSONResponse:
        return refused(request.method, request.url.path, exc, publisher)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        raw_path = bytes(request.scope.get("raw_path") or b"").lower()
        if ".." in request.url.path.split("/") or (raw_path.startswith(b"/v1/jobs/") and b"%2f" in raw_path):
            # The router saw a decoded '../' in the path: a job name that tries to leave the root.
            return answer(400, "A job name cannot contain '/' or be '..': " + _JOB_RULE, "bad_job_name", "job")
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        message = f"{request.method} {request.url.path}: {exc.detail}. The API is under /v1 (see /v1/openapi.json)."
        return answer(exc.status_code, message, code)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        return library_answer(exc, publisher)  # its traceback is logged once, by the gate


def library_answer(exc: BaseException, publisher: Publisher) -> JSONResponse:
    """The answer to a library error (or, unexpected, a 500 whose traceback only the log sees)."""
    for exc_type, status, code in STATUS_OF:
        if isinstance(exc, exc_type):
            return answer(status, publisher.text(str(exc)), code, getattr(exc, "field", None))
    return answer(500, f"Internal server error ({type(exc).__name__}); the server's log has the details.", "internal")


def refused(method: str, path: str, exc: ApiError | ZeusRunError, publisher: Publisher) -> JSONResponse:
    """The answer to a route's refusal (an `ApiError` or a library error), logged as one line (with
    ``zeus-run serve -v``); the routes and `zeus_run.server._lane` answer refusals with it."""
    if isinstance(exc, ApiError):
        response = answer(exc.status, publisher.text(str(exc)), exc.code, exc.field)
    else:
        response = library_answer(exc, publisher)
    if refusals.isEnabledFor(logging.INFO):
        body = bytes(response.body).decode("utf-8", "replace")
        # NOTE: a refusal's text may name the trial's token (unknown, already told): cut to a short id
        refusals.info("%s %s refused: %d %s", method, redact(path), response.status_code, scrub(body[:300]))
    return response


def validation_answer(errors: Any) -> JSONResponse:
    """400/422 naming the first field at fault (all of them in the message)."""
    errors = list(errors)
    if any(e.get("type") == "json_invalid" for e in errors):
        e = next(e for e in errors if e.get("type") == "json_invalid")
        where = e.get("ctx", {}).get("error", "")
        return answer(400, f"The request body is not valid JSON ({where}). Send a JSON object.", "malformed_json")
    parts = []
    for e in errors:
        field = ".".join(str(p) for p in e.get("loc", ()))
        kind = e.get("type", "")
        if kind == "extra_forbidden":
            parts.append(f"{field}: unknown field; remove it (see /v1/openapi.json for the fields)")
        elif kind == "missing":
            parts.append(f"{field}: missing; it is required")
        else:
            shown = repr(e.get("input"))[:80]
            parts.append(f"{field} = {shown}: {e.get('msg', 'invalid')}")
    first = errors[0] if errors else {}
    at = ".".join(str(p) for p in first.get("loc", ())) or None
    code = "unknown_field" if first.get("type") == "extra_forbidden" else "invalid_field"
    return answer(422, "; ".join(parts) + ".", code, at)
