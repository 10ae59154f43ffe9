"""The batch-size server's client: standard library only, so a training image needs nothing new.

`zeus_run.train.Trial`, the framework callbacks and ``zeus-run ask/tell/exec``
use it when ``ZEUS_SERVER`` is set (`ServerClient.from_env`). It speaks the
server's ``/v1`` API (`API_PREFIX`; the schema is served at `OPENAPI_PATH`):

=========================================  =====================================================
``GET  /v1/health``                        liveness; the only path without a token
``PUT  /v1/jobs/{job}``                    register a job from its spec (YAML text or a mapping)
``POST /v1/jobs/{job}/trials``             ask: reserve the next trial (batch size, token, ``start``)
``POST /v1/jobs/{job}/trials/{t}/heartbeat``  renew the trial's lease
``POST /v1/jobs/{job}/trials/{t}/epochs``  report one epoch; the answer says whether to stop
``POST /v1/jobs/{job}/trials/{t}/finish``  tell: the trial ended (energy and time if measured)
``POST /v1/jobs/{job}/trials/{t}/fail``    tell: the trial failed, with its message
``GET  /v1/jobs/{job}/history``            the job's trial records
``DELETE /v1/jobs/{job}/trials/{t}``       release an ask that will never be told
=========================================  =====================================================

An ask of a job with a ``start`` section also says when to start training (`PlannedStart`,
`RemoteTrial.start`).

Every request but the health check carries ``Authorization: Bearer TOKEN``.
Errors are JSON ``{"error": "...", "field": "...", "code": "..."}``; the client
raises `ServerError` with them. While the server cannot be reached (or answers
502/503/504), a request is retried with exponential backoff up to
``retry_s`` seconds (``ZEUS_SERVER_TIMEOUT``, default 120), so a client rides
out a server restart; the first failure is logged at once (WARNING) with the
URL and why, and a connection attempt gives up after `CONNECT_TIMEOUT_S`.
Ask, report, finish and fail carry an ``Idempotency-Key`` that every retry of
the same call repeats, so a request the server applied before it died is
answered as it was (the same trial, the same record), never applied twice.
"""

from zeus_run.remote._client import (
    API_PREFIX,
    BACKOFF_FIRST_S,
    BACKOFF_MAX_S,
    CONNECT_TIMEOUT_S,
    DEFAULT_LEASE_S,
    DEFAULT_PORT,
    DEFAULT_RETRY_S,
    HEALTH_PATH,
    OPENAPI_PATH,
    REQUEST_TIMEOUT_S,
    RETRY_STATUSES,
    PlannedStart,
    ServerClient,
    ServerError,
    job_path,
    new_key,
    read_token,
    retry_s_from_env,
    token_file_from_env,
)
from zeus_run.remote._trial import RemoteTrial

__all__ = [
    "API_PREFIX",
    "BACKOFF_FIRST_S",
    "BACKOFF_MAX_S",
    "CONNECT_TIMEOUT_S",
    "DEFAULT_LEASE_S",
    "DEFAULT_PORT",
    "DEFAULT_RETRY_S",
    "HEALTH_PATH",
    "OPENAPI_PATH",
    "REQUEST_TIMEOUT_S",
    "RETRY_STATUSES",
    "PlannedStart",
    "RemoteTrial",
    "ServerClient",
    "ServerError",
    "job_path",
    "new_key",
    "read_token",
    "retry_s_from_env",
    "token_file_from_env",
]
