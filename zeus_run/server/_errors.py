"""Errors as answers: every refusal is JSON ``{"error", "field", "code"}`` with a 4xx, never a traceback.

* malformed JSON: 400 ``malformed_json``, naming the line and column;
* an unknown field: 422 ``unknown_field``; a missing, mistyped or out-of-range
  one: 422 ``invalid_field``; both name the field (``body.epoch``);
* the library's errors map by type (`STATUS_OF`), with their own message;
* anything unexpected: 500 ``internal`` with one line; the traceback goes to
  the server's log only.
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
    JobComplete,
    LeaseExpired,
    RunDirBusy,
    SpecError,
    UnknownToken,
    UsageError,
    ZeusRunError,
)
from zeus_run.server._root import JOB_NAME_RULE as _JOB_RULE
from zeus_run.server._root import JobNameError

logger = logging.getLogger(__name__)


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
    (UsageError, 409, "refused"),
    (ZeusRunError, 409, "refused"),
]


def answer(status: int, message: str, code: str, field: str | None = None) -> JSONResponse:
    return JSONResponse({"error": message, "field": field, "code": code}, status_code=status)


def install(app: FastAPI) -> None:
    """Install the error handlers on ``app``."""

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        return validation_answer(exc.errors())

    @app.exception_handler(ApiError)
    async def _api(request: Request, exc: ApiError) -> JSONResponse:
        return answer(exc.status, str(exc), exc.code, exc.field)

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
        return library_answer(exc)


def library_answer(exc: BaseException) -> JSONResponse:
    """The answer to a library error (or, unexpected, a 500 whose traceback only the log sees)."""
    for exc_type, status, code in STATUS_OF:
        if isinstance(exc, exc_type):
            return answer(status, str(exc), code)
    logger.error("internal error", exc_info=exc)
    return answer(500, f"Internal server error ({type(exc).__name__}); the server's log has the details.", "internal")


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
