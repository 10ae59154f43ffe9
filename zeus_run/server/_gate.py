"""What every request passes before a route sees it: who is asking, the body limit, the access log.

A plain ASGI middleware (no per-request task or copy, unlike Starlette's
``BaseHTTPMiddleware``). It answers 401 without a valid token (except for the
health check and the ``/docs`` page, which holds no data): the operator's
token, or a job token (`zeus_run.server._tokens`), which it puts in the scope
(`zeus_run.server._access.CALLER`) and allows on its own job's ``/v1`` paths
only (403 elsewhere). It answers 400 for a request with more than one
``Idempotency-Key``, and 413 for a body over the limit (by ``Content-Length``
or by counting a chunked body). It logs one line per request on the
``zeus_run.server.access`` logger (shown with ``zeus-run serve -v``): the
caller by its short id, and the path with trial tokens cut to a short id
(`zeus_run.server._public.redact`) and control characters escaped
(`zeus_run.server._logs`). A fault that escapes the application is logged here,
once, with its traceback, and never reaches uvicorn.
"""

from __future__ import annotations

import hmac
import json
import logging
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from zeus_run.remote import HEALTH_PATH
from zeus_run.server._access import CALLER, path_allows
from zeus_run.server._errors import ApiError
from zeus_run.server._logs import escape_controls
from zeus_run.server._public import redact
from zeus_run.server._tokens import JOB_TOKEN_PREFIX, JobToken, TokenStore

access_log = logging.getLogger("zeus_run.server.access")
logger = logging.getLogger(__name__)
#: The paths anyone may read: liveness and the API's documentation page (it fetches the schema with a token).
PUBLIC_PATHS = frozenset({HEALTH_PATH, "/docs"})

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]
#: Answers a request given its body, or says False (having sent nothing) to leave it to the app.
Lane = Callable[[Scope, bytes, Send], Awaitable[bool]]

#: Largest request body the server reads (unit: bytes). A spec is a page; a report is a line.
DEFAULT_MAX_BODY = 64 * 1024
#: The Zeus protocol's routes (`zeus_run.server._zeus_compat`): ``/zeus/<token>/...``.
ZEUS_PREFIX = "/zeus"
_UNAUTHORIZED = (
    "A valid token is required: send 'Authorization: Bearer TOKEN' (ZEUS_SERVER_TOKEN): the job's token, or the "
    "operator's."
)
_TWO_KEYS = "Send at most one Idempotency-Key header (one key names one request and its retries)."


def strip_token(scope: Scope) -> str | None:
    """For a ``/zeus/<token>/...`` request (Zeus's client sends no header): the token given, with the path
    rewritten to ``/zeus/...``, which is what routing and the access log see. None for any other path."""
    path: str = scope["path"]
    if not path.startswith(ZEUS_PREFIX + "/"):
        return None
    given, _, rest = path[len(ZEUS_PREFIX) + 1 :].partition("/")
    scope["path"] = f"{ZEUS_PREFIX}/{rest}"
    scope["raw_path"] = scope["path"].encode()
    return given


class Gate:
    """ASGI middleware: who is asking, the body limit, one log line per request.

    Args:
        app: The application behind the gate.
        token: The operator's token (every request but the health check carries it or a job token).
        max_body: Largest body accepted (unit: bytes).
        lane: Offered each request with its body first (`zeus_run.server._lane.FastLane`); what it does
            not answer goes to ``app``.
        tokens: The job tokens (None: the operator's token only).
    """

    def __init__(
        self,
        app: ASGIApp,
        token: str,
        max_body: int = DEFAULT_MAX_BODY,
        lane: Lane | None = None,
        tokens: TokenStore | None = None,
    ) -> None:
        self.app = app
        self.token = token
        self._token_bytes = token.encode()
        self.max_body = max_body
        self.lane = lane
        self.tokens = tokens

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = [0]

        async def logged_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            await self._handle(scope, receive, logged_send)
        except Exception as exc:  # a real fault: answered 500 by the app already, or here
            logger.error("internal error on %s %s", scope["method"], _shown(scope["path"]), exc_info=exc)
            if not status[0]:
                await _reply(logged_send, 500, "Internal server error; the server's log has the details.", "internal")
        finally:
            if access_log.isEnabledFor(logging.INFO):
                client = scope.get("client") or ("?", 0)
                who = scope.get(CALLER, False)
                access_log.info(
                    "%s %s %s %s %d %.1f ms",
                    client[0],
                    "-" if who is False else "operator" if who is None else f"job-token:{who.id}",
                    scope["method"],
                    _shown(scope["path"]),
                    status[0],
                    (time.perf_counter() - start) * 1e3,
                )

    def caller(self, given: str) -> tuple[bool, JobToken | None]:
        """Whether ``given`` is a valid token, and whose: None for the operator's, else the job token."""
        if self.tokens is not None and given.startswith(JOB_TOKEN_PREFIX):
            hit = self.tokens.job_of(given)
            if hit is not None:
                return True, hit
        # NOTE: constant time (hmac.compare_digest) for tokens of the operator's length
        return hmac.compare_digest(given.encode("utf-8", "surrogateescape"), self._token_bytes), None

    async def _handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        auth = b""
        declared = None
        keys = 0
        headers = []
        for k, v in scope["headers"]:
            if k == b"authorization":
                auth = v
            elif k == b"content-length":
                declared = v
            elif k == b"idempotency-key":
                keys += 1
            if k != b"content-type":
                headers.append((k, v))
        in_path = strip_token(scope)  # Zeus's client: the token is in the path, which is logged without it
        path: str = scope["path"]
        if in_path is not None or path not in PUBLIC_PATHS:
            if in_path is None:
                scheme, _, given = auth.decode("latin-1").partition(" ")
                given = given.strip() if scheme.lower() == "bearer" else ""
            else:
                given = in_path
            valid, who = self.caller(given) if given else (False, None)
            if not valid:
                await _reply(send, 401, _UNAUTHORIZED, "unauthorized", extra_headers=[(b"www-authenticate", b"Bearer")])
                return
            scope[CALLER] = who
            if who is not None and in_path is None:
                refusal = path_allows(who, scope["method"], path)
                if refusal is not None:
                    await _refuse(send, refusal)
                    return
        if keys > 1:
            await _reply(send, 400, _TWO_KEYS, "bad_idempotency_key", field="header.Idempotency-Key")
            return
        if declared is not None and (not declared.isdigit() or int(declared) > self.max_body):
            await _reply(send, 413, self._too_big(), "body_too_large")
            return
        # NOTE: the API speaks JSON only, so every body is parsed as JSON whatever its
        # Content-Type says (`curl -d` sends a form type): a bad body gets the JSON error.
        headers.append((b"content-type", b"application/json"))
        scope["headers"] = headers
        body = bytearray()
        more = True
        while more:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client went away
            body += message.get("body", b"")
            more = message.get("more_body", False)
            if len(body) > self.max_body:
                await _reply(send, 413, self._too_big(), "body_too_large")
                return
        if self.lane is not None and await self.lane(scope, bytes(body), send):
            return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": bytes(body), "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    def _too_big(self) -> str:
        return f"The request body is larger than {self.max_body:,} bytes; a spec is a page and a report is a line."


def _shown(path: str) -> str:
    """A path as the log shows it: tokens cut short, control characters escaped."""
    return escape_controls(redact(path))


async def _refuse(send: Send, error: ApiError) -> None:
    await _reply(send, error.status, str(error), error.code, field=error.field)


async def _reply(
    send: Send,
    status: int,
    message: str,
    code: str,
    extra_headers: list[tuple[bytes, bytes]] | None = None,
    field: str | None = None,
) -> None:
    body = json.dumps({"error": message, "field": field, "code": code}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers + (extra_headers or [])})
    await send({"type": "http.response.body", "body": body})
