"""The fast lane: a trial's requests (ask, epoch reports, finish, fail) answered without FastAPI's per-request work.

A two-epoch trial is four requests. FastAPI's routing, dependency solving and
body validation cost about 80 µs of CPU a request; with one client, whose
requests wait on each other, that was about 8% of a trial's time end to end.
The gate (`zeus_run.server._gate.Gate`) hands each request with its body here
first. The lane takes a request only when it is exactly what its route
expects: ``POST`` to ``/v1/jobs/{job}/trials`` or
``/v1/jobs/{job}/trials/{token}/{epochs,finish,fail}`` with no escaped
character in the path, a JSON object body its model validates (an empty one
for an ask), and at most one ``Idempotency-Key``. It then makes the route's
own call (`zeus_run.server._trials.TrialCalls`) and answers a refusal as the
route's error handlers do (`zeus_run.server._errors.refused`). Everything else
(a malformed body, an unknown field, any other route) goes on to FastAPI,
which answers it as it always has; so the two ways give one answer, and the
OpenAPI schema stays FastAPI's.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from starlette.responses import Response

from zeus_run.errors import ZeusRunError
from zeus_run.remote import API_PREFIX
from zeus_run.server._errors import ApiError, library_answer, refused
from zeus_run.server._gate import Scope, Send
from zeus_run.server._models import AskRequest, EpochReport, Fail, Finish
from zeus_run.server._trials import TrialCalls

_JOBS = f"{API_PREFIX}/jobs/"
_KEY = b"idempotency-key"


class FastLane:
    """Answers the trial routes' well-formed requests (see the module's doc).

    Args:
        calls: The trial routes' work, shared with the FastAPI routes.
    """

    def __init__(self, calls: TrialCalls) -> None:
        self.calls = calls

    async def __call__(self, scope: Scope, body: bytes, send: Send) -> bool:
        """Answer the request if it is one of the lane's; False (nothing sent) to leave it to FastAPI."""
        call = self._match(scope, body)
        if call is None:
            return False
        try:
            content = await call()
        except (ApiError, ZeusRunError) as exc:
            response: Response = refused(scope["method"], scope["path"], exc, self.calls.publisher)
        except Exception as exc:  # a real fault: answered 500, as FastAPI's handler does; the gate logs it
            await library_answer(exc, self.calls.publisher)(scope, _nothing, send)
            raise
        else:
            response = Response(content, media_type="application/json")
        await response(scope, _nothing, send)
        return True

    def _match(self, scope: Scope, body: bytes) -> Callable[[], Awaitable[bytes]] | None:
        path: str = scope["path"]
        if scope["method"] != "POST" or not path.startswith(_JOBS):
            return None
        raw = scope.get("raw_path")
        if raw is not None and raw != path.encode():
            return None  # an escaped character: FastAPI's routing (and its refusal of '%2F') decides
        parts = path[len(_JOBS) :].split("/")
        if len(parts) not in (2, 4) or parts[1] != "trials" or any(p in ("", ".", "..") for p in parts):
            return None
        keys = [v for k, v in scope["headers"] if k == _KEY]
        if len(keys) > 1:
            return None
        key = keys[0].decode("latin-1") if keys else None
        job = parts[0]
        if len(parts) == 2:
            asked = None
            if body:
                asked = _parse(AskRequest, body)
                if asked is None:
                    return None
            return lambda: self.calls.ask(job, asked, key)
        token, route = parts[2], parts[3]
        if route == "epochs" and (report := _parse(EpochReport, body)) is not None:
            return lambda: self.calls.report(job, token, report, key)
        if route == "finish" and (finish := _parse(Finish, body)) is not None:
            return lambda: self.calls.finish(job, token, finish, key)
        if route == "fail" and (fail := _parse(Fail, body)) is not None:
            return lambda: self.calls.fail(job, token, fail, key)
        return None


M = TypeVar("M", bound=BaseModel)


def _parse(model: type[M], body: bytes) -> M | None:
    """The body as ``model``, read as FastAPI reads it (JSON, then the model's validation in Python mode);
    None where FastAPI should answer it (no body, not JSON, not an object, not valid)."""
    try:
        doc = json.loads(body) if body else None
    except ValueError:
        return None
    if not isinstance(doc, dict):
        return None
    try:
        return model.model_validate(doc)
    except ValidationError:
        return None


async def _nothing() -> dict[str, Any]:  # a response never reads the request
    return {"type": "http.disconnect"}
