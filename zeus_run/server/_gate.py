"""What every request passes before a route sees it: the token, the body limit, the access log.

A plain ASGI middleware (no per-request task or copy, unlike Starlette's
``BaseHTTPMiddleware``). It answers 401 without a valid bearer token (except
for the health check and the ``/docs`` page, which holds no data), 413 for a
body over the limit (by ``Content-Length`` or by counting a chunked body),
and logs one line per request on the ``zeus_run.server.access`` logger (shown
with ``zeus-run serve -v``) with trial tokens cut to a short id
(`zeus_run.server._public.redact`). A fault that escapes the application is
logged here, once, with its traceback, and never reaches uvicorn.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from zeus_run.remote import HEALTH_PATH
from zeus_run.server._public import redact
from zeus_run.server._security import tokens_equal

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
    """ASGI middleware: bearer token, body limit, one log line per request.

    Args:
        app: The application behind the gate.
        token: The bearer token every request but the health check must carry.
        max_body: Largest body accepted (unit: bytes).
        lane: Offered each request with its body first (`zeus_run.server._lane.FastLane`); what it does
            not answer goes to ``app``.
    """

    def __init__(self, app: ASGIApp, token: str, max_body: int = DEFAULT_MAX_BODY, lane: Lane | None = None) -> None:
        self.app = app
        self.token = token
        self.max_body = max_body
        self.lane = lane

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
            logger.error("internal error on %s %s", scope["method"], redact(scope["path"]), exc_info=exc)
            if not status[0]:
                await _reply(logged_send, 500, "Internal server error; the server's log has the details.", "internal")
        finally:
            if access_log.isEnabledFor(logging.INFO):
                client = scope.get("client") or ("?", 0)
                access_log.info(
                    "%s %s %s %d %.1f ms",
                    client[0],
                    scope["method"],
                    redact(scope["path"]),
                    status[0],
                    (time.perf_counter() - start) * 1e3,
                )

    async def _handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = dict(scope["headers"])
        in_path = strip_token(scope)  # Zeus's client: the token is in the path, which is logged without it
        if in_path is not None:
            authorized = tokens_equal(in_path, self.token)
        else:
            authorized = scope["path"] in PUBLIC_PATHS or self._authorized(headers.get(b"authorization", b""))
        if not authorized:
            await _reply(
                send,
                401,
                "A valid bearer token is required: send 'Authorization: Bearer TOKEN' (ZEUS_SERVER_TOKEN).",
                "unauthorized",
                extra_headers=[(b"www-authenticate", b"Bearer")],
            )
            return
        declared = headers.get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.max_body):
            await _reply(send, 413, self._too_big(), "body_too_large")
            return
        # NOTE: the API speaks JSON only, so every body is parsed as JSON whatever its
        # Content-Type says (`curl -d` sends a form type): a bad body gets the JSON error.
        scope["headers"] = [(k, v) for k, v in scope["headers"] if k != b"content-type"]
        scope["headers"].append((b"content-type", b"application/json"))
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

    def _authorized(self, header: bytes) -> bool:
        scheme, _, given = header.decode("latin-1").partition(" ")
        return scheme.lower() == "bearer" and tokens_equal(given.strip(), self.token)

    def _too_big(self) -> str:
        return f"The request body is larger than {self.max_body:,} bytes; a spec is a page and a report is a line."


async def _reply(
    send: Send, status: int, message: str, code: str, extra_headers: list[tuple[bytes, bytes]] | None = None
) -> None:
    body = json.dumps({"error": message, "field": None, "code": code}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers + (extra_headers or [])})
    await send({"type": "http.response.body", "body": body})
