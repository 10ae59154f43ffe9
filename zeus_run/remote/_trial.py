"""`RemoteTrial`: one trial driven through the server, the seeds' client flow behind `zeus_run.train.Trial`."""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from zeus_run.contract import Env, exit_watch
from zeus_run.remote._client import DEFAULT_LEASE_S, PlannedStart, ServerClient, ServerError

logger = logging.getLogger(__name__)


#: How long the tail after a finish is retried while the server is unreachable (unit: s).
TAIL_RETRY_S = 2.0


class RemoteTrial:
    """One trial driven through the server: the seeds' client flow behind `zeus_run.train.Trial`.

    ``get_batch_size`` is the ask (`ask`, or a token from ``ZEUS_SERVER_TRIAL``
    when ``zeus-run ask`` made it); ``on_train_begin`` starts the clock;
    ``on_evaluate`` is `report`, whose answer carries the server's stop
    decision. A daemon thread renews the lease between reports, and `finish`
    or `fail` tells the server how it ended (once; at interpreter exit if the
    script never did: with its exit code and, if it failed, the last lines it
    printed, as a launcher reads a crashed script's log: `zeus_run.contract.ExitWatch`).

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
        #: Called once a tell at the process's exit is on the server (the trial measured here hands what the
        #: process spends after it, its teardown, to the exit watcher as its tail: `zeus_run.train.Trial`).
        self.after_exit_tell: Callable[[], None] | None = None
        self.converged = False
        self.closed = False
        self._t0 = time.monotonic()
        self._stop_beat = threading.Event()
        self._beat = threading.Thread(target=self._heartbeat, name="zeus-run-heartbeat", daemon=True)
        self._beat.start()
        self._exit = exit_watch()
        self._exit.install()  # how the process ends, for a tell at its exit
        self._pid = os.getpid()  # a forked child runs the exit hook too: it is not this trial's end
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
            _register(client, job, spec)
        decision = client.ask(job, host=host)
        shown = f"{str(decision.get('token'))[:6]}~"  # a short id: no token in a log line
        logger.info("zeus-run server chose batch size %s (trial %s)", decision.get("batch_size"), shown)
        return cls(client, job, str(decision["token"]), decision, float(decision.get("lease_s") or 0) or _env_lease())

    @property
    def start(self) -> PlannedStart | None:
        """When to start training, for a job with a ``start`` section (None: now; a token from
        ``ZEUS_SERVER_TRIAL`` carries none). The lease is kept while the process waits for it (the heartbeat)."""
        return PlannedStart.of(self.decision)

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
        return self._tell(lambda: self.client.finish(self.job, self.token, elapsed, energy_j, exit_code, measured))

    def fail(
        self,
        message: str,
        exit_code: int = 1,
        energy_j: float | None = None,
        measured: dict[str, Any] | None = None,
        time_s: float | None = None,
    ) -> dict[str, Any] | None:
        """Tell the server the trial failed (once), with the energy this process measured; returns its record."""
        if self.closed:
            return None
        self._close()
        elapsed = time.monotonic() - self._t0 if time_s is None else time_s
        return self._tell(
            lambda: self.client.fail(self.job, self.token, message, exit_code, elapsed, energy_j, measured)
        )

    def tail(self, time_s: float, energy_j: float, to: str) -> None:
        """Tell the server what this process spent after the trial's finish, up to its next ask or its exit
        (``to``): appended to the trial's record (`zeus_run.rundir.tails`)."""
        c = self.client
        # Retried briefly: the process is asking for its next trial or exiting, and the record stands without it.
        quick = ServerClient(c.url, c._token, retry_s=min(c.retry_s, TAIL_RETRY_S), token_file=c._token_file)
        try:
            quick.tail(self.job, self.token, time_s, energy_j, to)
        finally:
            quick.close()

    def _tell(self, send: Callable[[], dict[str, Any]]) -> dict[str, Any] | None:
        """Send the tell; None where the server already has it (a retry) or no longer knows the trial."""
        try:
            return send()
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
        """The script exits without having told the server: tell it now, as a launcher would record the exit.

        A non-zero exit (``sys.exit(1)`` after printing an error, an uncaught exception) is a failure with the
        exit code and the last lines the script printed, where the server's classifier reads the cause.
        """
        if self.closed or os.getpid() != self._pid:
            return
        # NOTE: an uncaught exception has been printed (and left in sys.last_value) before atexit runs.
        code = self._exit.code()
        m = self.meter() if self.meter is not None else None
        energy, how, elapsed = (None, None, None) if m is None else (m[1], m[2], m[0])
        try:
            if code != 0:
                told = self.fail(self._exit.failure(), exit_code=code, energy_j=energy, measured=how, time_s=elapsed)
            else:
                told = self.finish(exit_code=0, energy_j=energy, measured=how, time_s=elapsed)
        except ServerError as exc:
            logger.warning("could not tell the zeus-run server the trial ended: %s", exc)
            return
        if told is not None and m is not None and self.after_exit_tell is not None:
            try:
                self.after_exit_tell()
            except Exception as exc:  # at exit: logged, never the script's failure
                logger.info("the teardown after the tell is not measured: %s", exc)


def _env_lease() -> float:
    return DEFAULT_LEASE_S


class RegistrationRefused(SystemExit):
    """The job could not be registered from ``ZEUS_SERVER_SPEC``: the process ends with one line on stderr (exit
    code 1), not a traceback; nothing was asked, so nothing runs."""


def _register(client: ServerClient, job: str, path: str) -> None:
    """Register ``job`` from the spec file ``path`` (a pod's ``ZEUS_SERVER_SPEC``).

    Raises:
        RegistrationRefused: The file cannot be read, or the server refused the spec (its answer in one line).
        ServerError: The server could not be reached in time (the platform's restart tries again).
    """
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise RegistrationRefused(f"zeus-run: cannot read {Env.SERVER_SPEC} = {path!r}: {why}.") from None
    try:
        client.register(job, text)
    except ServerError as exc:
        if exc.status == 0:
            raise
        where = f" ({exc.code}" + (f", {exc.field}" if exc.field else "") + ")" if exc.code else ""
        said = " ".join(str(exc).split())  # the server's answer (a spec's problems span lines) on one line
        raise RegistrationRefused(
            f"zeus-run: the server refused job {job!r} from {Env.SERVER_SPEC} = {path!r}: HTTP {exc.status}{where}: {said}"
        ) from None
