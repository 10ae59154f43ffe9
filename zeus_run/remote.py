"""The batch-size server's client: standard library only, so a training image needs nothing new.

`zeus_run.train.Trial`, the framework callbacks and ``zeus-run ask/tell/exec``
use it when ``ZEUS_SERVER`` is set (`ServerClient.from_env`). It speaks the
server's ``/v1`` API (`API_PREFIX`; the schema is served at `OPENAPI_PATH`):

=========================================  =====================================================
``GET  /v1/health``                        liveness; the only path without a token
``PUT  /v1/jobs/{job}``                    register a job from its spec (YAML text or a mapping)
``POST /v1/jobs/{job}/trials``             ask: reserve the next trial (its batch size, token, ...)
``POST /v1/jobs/{job}/trials/{t}/heartbeat``  renew the trial's lease
``POST /v1/jobs/{job}/trials/{t}/epochs``  report one epoch; the answer says whether to stop
``POST /v1/jobs/{job}/trials/{t}/finish``  tell: the trial ended (energy and time if measured)
``POST /v1/jobs/{job}/trials/{t}/fail``    tell: the trial failed, with its message
``GET  /v1/jobs/{job}/history``            the job's trial records
``DELETE /v1/jobs/{job}/trials/{t}``       release an ask that will never be told
=========================================  =====================================================

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

from __future__ import annotations

import http.client
import json
import logging
import math
import os
import random
import sys
import threading
import time
import urllib.parse
import uuid
from collections.abc import Callable
from typing import Any

from zeus_run.contract import Env

logger = logging.getLogger(__name__)

API_PREFIX = "/v1"
HEALTH_PATH = f"{API_PREFIX}/health"
OPENAPI_PATH = f"{API_PREFIX}/openapi.json"
#: Default port of ``zeus-run serve``.
DEFAULT_PORT = 7787
#: Default for how long a request keeps retrying an unreachable server (unit: s).
DEFAULT_RETRY_S = 120.0
#: First and largest pause between two tries (unit: s); each pause doubles, with jitter.
BACKOFF_FIRST_S = 0.05
BACKOFF_MAX_S = 5.0
#: Socket timeout of one request (unit: s).
REQUEST_TIMEOUT_S = 60.0
#: Longest wait for a connection to open (unit: s): an unreachable server is reported within it.
CONNECT_TIMEOUT_S = 5.0
#: Statuses that mean "the server is not there right now": retried like a refused connection.
RETRY_STATUSES = frozenset({502, 503, 504})
#: Lease assumed for a trial asked elsewhere (``ZEUS_SERVER_TRIAL``) until the server says (unit: s).
DEFAULT_LEASE_S = 60.0


class ServerError(Exception):
    """The server refused a request (a 4xx or 5xx), or could not be reached in time.

    Attributes:
        status: HTTP status (0 when the server could not be reached).
        code: Machine-readable error code from the server (e.g. ``lease_expired``), or "".
        field: The request field the error is about, or "".
    """

    def __init__(self, status: int, message: str, code: str = "", field: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.field = field


def read_token(token: str | None = None, token_file: str | None = None) -> str | None:
    """The bearer token: given, or ``ZEUS_SERVER_TOKEN``, or the file given / ``ZEUS_SERVER_TOKEN_FILE``."""
    if token:
        return token.strip()
    env = os.environ.get(Env.SERVER_TOKEN, "").strip()
    if env:
        return env
    path = token_file or os.environ.get(Env.SERVER_TOKEN_FILE, "").strip()
    if not path:
        return None
    try:
        with open(path, encoding="utf-8") as f:
            return f.read().strip() or None
    except OSError as exc:
        raise ServerError(0, f"Cannot read the server token file {path!r}: {exc.strerror or exc}.") from None


def job_path(job: str, *rest: str) -> str:
    """``/v1/jobs/JOB/...`` with each part quoted."""
    parts = [urllib.parse.quote(p, safe="") for p in (job, *rest)]
    return f"{API_PREFIX}/jobs/" + "/".join(parts)


def retry_s_from_env() -> float:
    """``ZEUS_SERVER_TIMEOUT`` (unit: s), or `DEFAULT_RETRY_S`.

    Raises:
        ServerError: It is set to something other than a non-negative number.
    """
    text = os.environ.get(Env.SERVER_TIMEOUT, "").strip()
    if not text:
        return DEFAULT_RETRY_S
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not (math.isfinite(value) and value >= 0):
        raise ServerError(0, f"{Env.SERVER_TIMEOUT} = {text!r}: give the seconds to keep retrying, e.g. 120.")
    return value


class ServerClient:
    """A connection to ``zeus-run serve`` (one keep-alive connection per thread).

    Args:
        url: ``http://host:port`` or ``https://host`` (behind a TLS proxy).
        token: Bearer token (None: only the health check works).
        retry_s: How long a request retries an unreachable server (unit: s; None: ``ZEUS_SERVER_TIMEOUT``,
            default 120).
    """

    def __init__(self, url: str, token: str | None = None, retry_s: float | None = None) -> None:
        parsed = urllib.parse.urlsplit(url if "://" in url else f"http://{url}")
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            raise ServerError(0, f"ZEUS_SERVER = {url!r} is not an http(s) URL. Set it like http://zeus-server:7787.")
        self.url = url
        self._https = parsed.scheme == "https"
        self._host = parsed.hostname
        self._port = parsed.port or (443 if self._https else 80)
        self._base = parsed.path.rstrip("/")
        self._token = token
        self.retry_s = retry_s_from_env() if retry_s is None else retry_s
        self._local = threading.local()
        self._unreachable = False  # an outage is being retried (warned of once)

    @classmethod
    def from_env(cls) -> ServerClient | None:
        """The client ``ZEUS_SERVER`` (and ``ZEUS_SERVER_TOKEN`` or ``ZEUS_SERVER_TOKEN_FILE``) describe, if set."""
        url = os.environ.get(Env.SERVER, "").strip()
        if not url:
            return None
        return cls(url, read_token())

    # -- the API ---------------------------------------------------------------------
    def health(self) -> dict[str, Any]:
        return self.request("GET", HEALTH_PATH)

    def register(self, job: str, spec: str | dict[str, Any]) -> dict[str, Any]:
        """Register (or re-register, unchanged) a job from its spec; returns the resolved spec."""
        return self.request("PUT", job_path(job), {"spec": spec})

    def ask(self, job: str, host: str | None = None, wait_s: float | None = None) -> dict[str, Any]:
        """Reserve the next trial of ``job``: batch size, token, lease, ... (`zeus_run.asktell.Ask` as JSON).

        While the job is busy (``concurrency`` trials in flight, or every recurrence left is),
        the ask waits for a slot with backoff, at most ``wait_s`` (default: ``retry_s``).

        Raises:
            ServerError: Refused; ``code`` says why (``busy`` after the wait, ``job_complete``, ...).
        """
        deadline = time.monotonic() + (self.retry_s if wait_s is None else wait_s)
        pause = BACKOFF_FIRST_S
        key = new_key()  # one ask, however many tries: a lost answer is answered again, not asked twice
        while True:
            try:
                return self.request("POST", job_path(job, "trials"), {"host": host} if host else {}, key=key)
            except ServerError as exc:
                if exc.code != "busy" or time.monotonic() + pause > deadline:
                    raise
                logger.info("job %s is busy (%s); asking again in %.2f s", job, exc, pause)
            time.sleep(pause * random.uniform(0.5, 1.0))
            pause = min(pause * 2, BACKOFF_MAX_S)

    def heartbeat(self, job: str, token: str) -> dict[str, Any]:
        return self.request("POST", job_path(job, "trials", token, "heartbeat"), {})

    def report(
        self,
        job: str,
        token: str,
        epoch: int,
        metric: float | None,
        time_s: float | None,
        energy_j: float | None,
        measured: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Report one epoch (cumulative time and energy since training began, and how the energy was measured:
        ``source``, ``method``, ``estimated``, ``max_power``); the answer has ``stop``."""
        body: dict[str, Any] = {"epoch": epoch, "metric": metric, "time": time_s, "energy": energy_j}
        if measured:
            body["measured"] = measured
        return self.request("POST", job_path(job, "trials", token, "epochs"), body, key=new_key())

    def finish(
        self,
        job: str,
        token: str,
        time_s: float | None = None,
        energy_j: float | None = None,
        exit_code: int = 0,
        measured: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        body: dict[str, Any] = {"time": time_s, "energy": energy_j, "exit_code": exit_code}
        if measured:
            body["measured"] = measured
        return self.request("POST", job_path(job, "trials", token, "finish"), body, key=new_key())

    def fail(
        self,
        job: str,
        token: str,
        message: str,
        exit_code: int = 1,
        time_s: float | None = None,
        energy_j: float | None = None,
        measured: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        body: dict[str, Any] = {"message": message[:2000], "exit_code": exit_code}
        if measured:
            body.update({"time": time_s, "energy": energy_j, "measured": measured})
        return self.request("POST", job_path(job, "trials", token, "fail"), body, key=new_key())

    def cancel(self, job: str, token: str) -> dict[str, Any]:
        """Release an ask that will never be told (recorded as infrastructure); returns its record."""
        return self.request("DELETE", job_path(job, "trials", token))

    def history(self, job: str) -> list[dict[str, Any]]:
        return self.request("GET", job_path(job, "history"))["records"]

    # -- transport -------------------------------------------------------------------
    def request(self, method: str, path: str, body: Any = None, key: str | None = None) -> Any:
        """Send one request, retrying with backoff while the server is unreachable.

        Args:
            key: Idempotency key, sent with every try (``Idempotency-Key``).

        Raises:
            ServerError: The server answered 4xx/5xx, or stayed unreachable for ``retry_s``.
        """
        data = None if body is None else json.dumps(body).encode()
        headers = {"Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = "application/json"
        if self._token:
            headers["Authorization"] = f"Bearer {self._token}"
        if key is not None:
            headers["Idempotency-Key"] = key
        deadline = time.monotonic() + self.retry_s
        pause = BACKOFF_FIRST_S
        while True:
            try:
                status, payload = self._send(method, self._base + path, data, headers)
            except (OSError, http.client.HTTPException) as exc:
                self._drop()
                status, payload, why = 0, b"", f"{type(exc).__name__}: {exc}"
            else:
                why = f"HTTP {status}"
                if status not in RETRY_STATUSES:
                    if self._unreachable:
                        self._unreachable = False
                        logger.warning("zeus-run server at %s answers again", self.url)
                    return _answer(status, payload)
            if time.monotonic() + pause > deadline:
                raise ServerError(
                    status,
                    f"The zeus-run server at {self.url} is unreachable ({why}); gave up after {self.retry_s:g} s "
                    f"({Env.SERVER_TIMEOUT}).",
                )
            if not self._unreachable:
                self._unreachable = True
                logger.warning(
                    "cannot reach the zeus-run server at %s (%s); retrying for up to %g s (%s)",
                    self.url,
                    why,
                    self.retry_s,
                    Env.SERVER_TIMEOUT,
                )
            logger.info("zeus-run server at %s unreachable (%s); retrying in %.2f s", self.url, why, pause)
            time.sleep(pause * random.uniform(0.5, 1.0))
            pause = min(pause * 2, BACKOFF_MAX_S)

    def _send(self, method: str, path: str, data: bytes | None, headers: dict[str, str]) -> tuple[int, bytes]:
        for reuse in (True, False):
            conn = self._connection(fresh=not reuse)
            try:
                conn.request(method, path, body=data, headers=headers)
                resp = conn.getresponse()
                payload = resp.read()
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                # NOTE: a kept-alive connection the server closed meanwhile fails on first use;
                # one fresh connection decides whether the server is really gone.
                self._drop()
                if not reuse:
                    raise
                continue
            if resp.will_close:
                self._drop()
            return resp.status, payload
        raise AssertionError("unreachable")

    def _connection(self, fresh: bool) -> http.client.HTTPConnection:
        conn = getattr(self._local, "conn", None)
        if conn is None or fresh:
            self._drop()
            cls = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
            conn = cls(self._host, self._port, timeout=CONNECT_TIMEOUT_S)
            conn.connect()  # within CONNECT_TIMEOUT_S; then each answer may take REQUEST_TIMEOUT_S
            if conn.sock is not None:
                conn.sock.settimeout(REQUEST_TIMEOUT_S)
            self._local.conn = conn
        return conn

    def _drop(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None

    def close(self) -> None:
        """Close this thread's connection."""
        self._drop()


def new_key() -> str:
    """A fresh idempotency key for one request (its retries repeat it)."""
    return uuid.uuid4().hex


def _answer(status: int, payload: bytes) -> Any:
    try:
        doc = json.loads(payload) if payload else {}
    except ValueError:
        doc = {"error": payload[:300].decode("utf-8", "replace")}
    if 200 <= status < 300:
        return doc
    if not isinstance(doc, dict):
        doc = {"error": str(doc)}
    raise ServerError(
        status, str(doc.get("error") or f"HTTP {status}"), str(doc.get("code") or ""), str(doc.get("field") or "")
    )


class RemoteTrial:
    """One trial driven through the server: the seeds' client flow behind `zeus_run.train.Trial`.

    ``get_batch_size`` is the ask (`ask`, or a token from ``ZEUS_SERVER_TRIAL``
    when ``zeus-run ask`` made it); ``on_train_begin`` starts the clock;
    ``on_evaluate`` is `report`, whose answer carries the server's stop
    decision. A daemon thread renews the lease between reports, and `finish`
    or `fail` tells the server how it ended (once; at interpreter exit if the
    script never did).

    Args:
        client: The server.
        job: The job's name on the server.
        token: The trial token.
        decision: The ask's answer (batch size, lease, ...), if this process asked.
        lease_s: Lease length (unit: s); the heartbeat runs at a third of it.
    """

    def __init__(
        self, client: ServerClient, job: str, token: str, decision: dict[str, Any] | None, lease_s: float
    ) -> None:
        self.client = client
        self.job = job
        self.token = token
        self.decision = decision or {}
        self.lease_s = lease_s
        self.stop_reason: str | None = None
        #: How this process measures its energy, as its last report said (sent with the tell).
        self.measured: dict[str, Any] | None = None
        #: Time (s), energy (J) and how they were measured, for a tell at interpreter exit (`zeus_run.train.Trial`
        #: sets it to its own meter's reading; None: not measured here).
        self.meter: Callable[[], tuple[float, float, dict[str, Any]] | None] | None = None
        self.converged = False
        self.closed = False
        self._t0 = time.monotonic()
        self._stop_beat = threading.Event()
        self._beat = threading.Thread(target=self._heartbeat, name="zeus-run-heartbeat", daemon=True)
        self._beat.start()
        import atexit

        atexit.register(self._at_exit)

    @classmethod
    def from_env(cls, host: str | None = None) -> RemoteTrial | None:
        """The trial ``ZEUS_SERVER`` and ``ZEUS_SERVER_JOB`` name: asked now, or ``ZEUS_SERVER_TRIAL``'s."""
        client = ServerClient.from_env()
        if client is None:
            return None
        job = os.environ.get(Env.SERVER_JOB, "").strip()
        if not job:
            raise ServerError(
                0, f"{Env.SERVER} is set but {Env.SERVER_JOB} is not: set it to the job's name on the server."
            )
        token = os.environ.get(Env.SERVER_TRIAL, "").strip()
        if token:
            return cls(client, job, token, None, _env_lease())
        spec = os.environ.get(Env.SERVER_SPEC, "").strip()
        if spec:
            try:
                with open(spec, encoding="utf-8") as f:
                    client.register(job, f.read())
            except OSError as exc:
                raise ServerError(0, f"Cannot read {Env.SERVER_SPEC} = {spec!r}: {exc.strerror or exc}.") from None
        decision = client.ask(job, host=host)
        logger.info("zeus-run server chose batch size %s (trial %s)", decision.get("batch_size"), decision.get("token"))
        return cls(client, job, str(decision["token"]), decision, float(decision.get("lease_s") or 0) or _env_lease())

    def begin(self) -> None:
        """Training begins now: `report`'s time counts from here (the seeds' ``on_train_begin``)."""
        self._t0 = time.monotonic()

    def report(
        self,
        epoch: int,
        metric: float | None,
        energy_j: float | None = None,
        time_s: float | None = None,
        measured: dict[str, Any] | None = None,
    ) -> bool:
        """Report one epoch (time and energy as this process measured them, ``measured`` saying how); True to
        go on. The server's stop decision (its stop rule, `zeus_run.trial.stop`) sets `stop_reason`."""
        if self.stop_reason is not None:
            return False
        value = metric if metric is not None and math.isfinite(metric) else None
        elapsed = time.monotonic() - self._t0 if time_s is None else time_s
        self.measured = measured or self.measured
        try:
            answer = self.client.report(self.job, self.token, epoch, value, elapsed, energy_j, measured)
        except ServerError as exc:
            if exc.status in (404, 410):
                self._lost(exc)
                return False
            raise
        if answer.get("stop"):
            self.stop_reason = str(answer.get("reason") or "stopped")
            self.converged = bool(answer.get("converged"))
        return self.stop_reason is None

    def finish(
        self,
        exit_code: int = 0,
        energy_j: float | None = None,
        measured: dict[str, Any] | None = None,
        time_s: float | None = None,
    ) -> dict[str, Any] | None:
        """Tell the server the trial ended (once), with the energy this process measured; returns its record."""
        if self.closed:
            return None
        self._close()
        elapsed = time.monotonic() - self._t0 if time_s is None else time_s
        try:
            return self.client.finish(self.job, self.token, elapsed, energy_j, exit_code, measured)
        except ServerError as exc:
            if exc.code == "already_told":  # a retry after the server recorded it and died before answering
                logger.info("zeus-run server already has this trial's tell: %s", exc)
                return None
            if exc.status in (404, 410):
                self._lost(exc)
                return None
            raise

    def fail(
        self, message: str, exit_code: int = 1, energy_j: float | None = None, measured: dict[str, Any] | None = None
    ) -> dict[str, Any] | None:
        """Tell the server the trial failed (once), with the energy this process measured; returns its record."""
        if self.closed:
            return None
        self._close()
        elapsed = time.monotonic() - self._t0
        try:
            return self.client.fail(self.job, self.token, message, exit_code, elapsed, energy_j, measured)
        except ServerError as exc:
            if exc.code == "already_told":  # a retry after the server recorded it and died before answering
                logger.info("zeus-run server already has this trial's tell: %s", exc)
                return None
            if exc.status in (404, 410):
                self._lost(exc)
                return None
            raise

    def _close(self) -> None:
        self.closed = True
        self._stop_beat.set()

    def _lost(self, exc: ServerError) -> None:
        self.stop_reason = self.stop_reason or "lease_expired"
        self._close()
        logger.warning("zeus-run server no longer knows this trial: %s", exc)

    def _heartbeat(self) -> None:
        interval = max(self.lease_s / 3, 0.2)
        while not self._stop_beat.wait(interval):
            try:
                self.client.heartbeat(self.job, self.token)
            except ServerError as exc:
                if exc.status in (404, 410):
                    self._lost(exc)
                    return
                logger.warning("zeus-run heartbeat failed: %s", exc)

    def _at_exit(self) -> None:
        if not self.closed:
            # NOTE: an uncaught exception has been printed (and left in sys.last_value) before atexit runs.
            exc = getattr(sys, "last_value", None)
            m = self.meter() if self.meter is not None else None
            energy, how = (None, None) if m is None else (m[1], m[2])
            try:
                if exc is not None and not isinstance(exc, SystemExit):
                    self.fail(f"{type(exc).__name__}: {exc}", energy_j=energy, measured=how)
                else:
                    self.finish(exit_code=0, energy_j=energy, measured=how, time_s=None if m is None else m[0])
            except ServerError as exc:
                logger.warning("could not tell the zeus-run server the trial ended: %s", exc)


def _env_lease() -> float:
    return DEFAULT_LEASE_S
