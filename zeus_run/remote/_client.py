"""The HTTP side of the client: `ServerClient` (retries, idempotency keys, errors as `ServerError`)."""

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
from dataclasses import dataclass
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
    path = token_file_from_env(token_file)
    if not path:
        return None
    return _read_token_file(path)


def token_file_from_env(token_file: str | None = None) -> str | None:
    """The token file the client reads (given, or ``ZEUS_SERVER_TOKEN_FILE``), unless ``ZEUS_SERVER_TOKEN`` is
    set; None: none."""
    if os.environ.get(Env.SERVER_TOKEN, "").strip():
        return None
    return token_file or os.environ.get(Env.SERVER_TOKEN_FILE, "").strip() or None


def _read_token_file(path: str) -> str | None:
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
        token_file: The file the token came from: on a 401 it is read again, once, and the request sent again
            with the token it now holds (a server restarted with a new token, a token rotated), before giving up.
    """

    def __init__(
        self, url: str, token: str | None = None, retry_s: float | None = None, token_file: str | None = None
    ) -> None:
        parsed = urllib.parse.urlsplit(url if "://" in url else f"http://{url}")
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            raise ServerError(0, f"ZEUS_SERVER = {url!r} is not an http(s) URL. Set it like http://zeus-server:7787.")
        self.url = url
        self._https = parsed.scheme == "https"
        self._host = parsed.hostname
        self._port = parsed.port or (443 if self._https else 80)
        self._base = parsed.path.rstrip("/")
        self._token = token
        self._token_file = token_file
        self.retry_s = retry_s_from_env() if retry_s is None else retry_s
        self._local = threading.local()
        self._unreachable = False  # an outage is being retried (warned of once)

    @classmethod
    def from_env(cls) -> ServerClient | None:
        """The client ``ZEUS_SERVER`` (and ``ZEUS_SERVER_TOKEN`` or ``ZEUS_SERVER_TOKEN_FILE``) describe, if set."""
        url = os.environ.get(Env.SERVER, "").strip()
        if not url:
            return None
        return cls(url, read_token(), token_file=token_file_from_env())

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
                return here(self.request("POST", job_path(job, "trials"), {"host": host} if host else {}, key=key))
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

    def tail(self, job: str, token: str, time_s: float, energy_j: float, to: str) -> dict[str, Any]:
        """What the trial's process spent after its finish, up to its next ask or its exit (``to``: ``next-ask``,
        ``exit``), charged to the trial (`zeus_run.rundir.tails`)."""
        body = {"time": time_s, "energy": energy_j, "to": to}
        return self.request("POST", job_path(job, "trials", token, "tail"), body)

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
        reread = self._token_file is not None
        while True:
            try:
                status, payload = self._send(method, self._base + path, data, headers)
            except (OSError, http.client.HTTPException) as exc:
                self._drop()
                status, payload, why = 0, b"", f"{type(exc).__name__}: {exc}"
            else:
                why = f"HTTP {status}"
                if status == 401 and reread:
                    reread = False  # once: a token that still fails is the wrong one
                    if self._reread_token():
                        headers["Authorization"] = f"Bearer {self._token}"
                        continue
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

    def _reread_token(self) -> bool:
        """Read the token file again (after a 401); whether it now holds another token."""
        assert self._token_file is not None
        try:
            token = _read_token_file(self._token_file)
        except ServerError as exc:
            logger.warning("after a 401: %s", exc)
            return False
        if not token or token == self._token:
            return False
        logger.warning(
            "the zeus-run server at %s refused the token; using the one %s holds now", self.url, self._token_file
        )
        self._token = token
        return True

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


def here(decision: dict[str, Any]) -> dict[str, Any]:
    """An ask's answer made this process's: the server leaves its interpreter and directories out of it
    (``{python}`` and ``{log_dir}`` in ``command``, no ``workdir``), and this fills in its own (the interpreter
    running this, the current directory)."""
    where = os.getcwd()
    subs = (("{python}", sys.executable), ("{log_dir}", where))

    def fill(text: str) -> str:
        for old, new in subs:
            text = text.replace(old, new)
        return text

    if isinstance(decision.get("command"), list):
        decision["command"] = [fill(a) if isinstance(a, str) else a for a in decision["command"]]
    if isinstance(decision.get("env"), dict):
        decision["env"] = {k: fill(v) if isinstance(v, str) else v for k, v in decision["env"].items()}
    if decision.get("workdir") is None and "command" in decision:
        decision["workdir"] = where
    return decision


@dataclass(frozen=True)
class PlannedStart:
    """When to start a trial, as the ask's answer says for a job with a ``start`` section (``decision["start"]``).

    Attributes:
        start_at: When to start training (Unix seconds; the ask's time when not moved).
        deadline: When the run is due (Unix seconds; None: no plan could be made).
        moved: Whether the start was moved to a cleaner time.
        reason: Why, in one line.
        status: ``wait``, ``start``, ``late`` or ``missed`` (`zeus-run when`'s).
    """

    start_at: float
    deadline: float | None
    moved: bool
    reason: str
    status: str

    @classmethod
    def of(cls, decision: dict[str, Any]) -> PlannedStart | None:
        """The planned start in an ask's answer; None where it has none (a job without a ``start`` section)."""
        from zeus_run.contract import iso_seconds

        doc = decision.get("start")
        at = iso_seconds(doc.get("start_at")) if isinstance(doc, dict) else None
        if not isinstance(doc, dict) or at is None:
            return None
        return cls(
            at,
            iso_seconds(doc.get("deadline")),
            bool(doc.get("moved")),
            str(doc.get("reason") or ""),
            str(doc.get("status") or ""),
        )

    def seconds_left(self, now: float | None = None) -> float:
        """Seconds from ``now`` (default: the clock) to `start_at`; 0 once it has come."""
        return max(0.0, self.start_at - (time.time() if now is None else now))


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
