"""The server's jobs: each a run directory under the root, driven through the ask/tell engine.

`JobService` is the only place the server touches the library: it maps a job
name to its run directory (`ServerRoot.job_dir`), serializes the requests of
one job, and turns the engine's answers into the API's bodies.

The library's calls are brief (a few file operations and fsyncs: about a
millisecond on a local disk), so they run on the event loop's thread
(`JobService.run`): handing each to a worker thread costs more than the call,
and threads that contend for the interpreter lock made a request's CPU double
under concurrency. A call never waits there for another process, though: it
takes its run directory's lock without waiting
(`zeus_run.rundir.lock.first_lock_without_waiting`), and when another holder
has it (a second worker process, a ``zeus-run tell``, a launcher) the call is
made again on a small pool of worker threads (`WORKERS`), which waits. There a
request waits for its job's turn on the event loop (one `asyncio.Lock` per
job), not on a worker, so one busy job holds at most one worker and never keeps
another job waiting. Epoch reports and heartbeats, the most frequent and
cheapest calls, take no lock and have workers of their own.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import anyio
import anyio.to_thread

from zeus_run import _fs
from zeus_run.contract import StopReason
from zeus_run.remote import job_path
from zeus_run.rundir.lock import WouldWait, first_lock_without_waiting
from zeus_run.rundir.store import SPEC_NAME, read_running
from zeus_run.server import _faults, _register
from zeus_run.server._errors import ApiError
from zeus_run.server._limits import check_energy
from zeus_run.server._models import EpochReport, Fail, Finish, Meter, ReportAnswer, Tail
from zeus_run.server._public import job_terms
from zeus_run.server._root import DELETED_NAME, ServerRoot
from zeus_run.server._tokens import TokenStore

if TYPE_CHECKING:
    from zeus_run import asktell

logger = logging.getLogger(__name__)

#: Worker threads that run the library's blocking calls (the requests of one job take one at a time).
WORKERS = 4
#: Worker threads of the quick calls (epoch reports, heartbeats).
QUICK_WORKERS = 2
T = TypeVar("T")


class JobService:
    """The jobs of one server root.

    Args:
        root: The locked server root.
        allowed: Directories outside the jobs whose files a spec may name (``--allow-path``).

    Every call that changes a job takes the request's idempotency key (None: none), which the
    library keeps with the change (`zeus_run.asktell._keys`).
    """

    def __init__(self, root: ServerRoot, workers: int = WORKERS, allowed: Sequence[Path] = ()) -> None:
        self.root = root
        self.workers = workers
        self.allowed = tuple(allowed)
        self.tokens = TokenStore(root.path)
        self._turns: dict[str, asyncio.Lock] = {}  # used on the event loop's thread only
        self._limiters: tuple[anyio.CapacityLimiter, anyio.CapacityLimiter] | None = None

    async def run(self, name: str | None, call: Callable[[], T], quick: bool = False) -> T:
        """Run ``call`` (a method of this service), after the job's earlier requests: here, unless its run
        directory is held by another process (then on a worker, which waits for it).

        Args:
            name: The job (None: a call that reads, in no job's turn, on a worker: a whole history can be long).
            call: The call.
            quick: A report or heartbeat: a few file operations and no lock (on a worker: on workers of
                their own, so that they never wait behind other jobs' asks and tells).
        """
        turn = self._turns.get(name) if name is not None else None
        if name is not None and (turn is None or not turn.locked()):  # none of its requests is on a worker
            try:
                with first_lock_without_waiting():
                    return call()
            except WouldWait:
                logger.debug("job %s: its run directory is held by another process; waiting on a worker", name)
        return await self._on_worker(name, call, quick)

    async def _on_worker(self, name: str | None, call: Callable[[], T], quick: bool) -> T:
        if self._limiters is None:
            self._limiters = (anyio.CapacityLimiter(self.workers), anyio.CapacityLimiter(QUICK_WORKERS))
        limiter = self._limiters[quick]
        if name is None:
            return await anyio.to_thread.run_sync(call, limiter=limiter)
        turn = self._turns.get(name)
        if turn is None:
            turn = self._turns[name] = asyncio.Lock()
        async with turn:
            return await anyio.to_thread.run_sync(call, limiter=limiter)

    # -- jobs ------------------------------------------------------------------------
    def jobs(self) -> list[str]:
        return [name for name in self.root.jobs() if (self.root.path / name / SPEC_NAME).is_file()]

    def register(self, name: str, spec_doc: str | dict[str, Any], operator: bool = True) -> dict[str, Any]:
        """Validate ``spec_doc`` and make, keep or update the job's run directory (`zeus_run.server._register`).

        Args:
            operator: The operator registers it: a job without a token gets one, in the answer (``job_token``,
                shown only there). A job token registering its own job gets none.
        """
        answer = _register.register(self.root.job_dir(name), name, spec_doc, self.allowed)
        made = self.tokens.ensure(name) if operator else None
        held = made[1] if made is not None else self.tokens.of_job(name)
        answer["job_token"] = made[0] if made is not None else None
        answer["token_id"] = held.id if held is not None else None
        _faults.after_effect("register")
        return answer

    def delete(self, name: str) -> None:
        """Move the job's run directory to ``ROOT/.deleted/NAME.UNIXTIME`` and revoke its token: the name is free
        again, the history is kept. Refused (409 ``busy``) while trials are in flight."""
        import time

        from zeus_run.rundir.opener import lock

        path = self._existing(name)
        dest_dir = self.root.path / DELETED_NAME
        with lock(path, "delete") as rd:
            asks = [m for m in rd.running_trials() or [] if m.asked]
            if asks:
                raise ApiError(
                    409,
                    f"Job {name!r} has {len(asks)} trial(s) in flight; nothing was deleted. Let them end (or "
                    "their lease expire) and delete it then.",
                    "busy",
                )
            _fs.make_dirs(dest_dir)
            os.rename(path, dest_dir / f"{name}.{int(time.time())}")
        self.tokens.revoke(name)

    def history(self, name: str) -> list[dict[str, Any]]:
        from zeus_run.rundir.history import read_history

        path = self._existing(name)
        return (
            [r.to_json() for r in read_history(path / "history.jsonl", warn=False)]
            if (path / "history.jsonl").is_file()
            else []
        )

    # -- trials ----------------------------------------------------------------------
    def ask(self, name: str, host: str | None, key: str | None = None) -> dict[str, Any]:
        from zeus_run import asktell

        path = self._existing(name)
        decision = asktell.ask(path, host=host, key=key, plan=False)  # no plan.json: a server's client runs the trial
        _faults.after_effect("ask")
        return job_terms(decision.to_json())

    async def start(self, name: str) -> dict[str, Any] | None:
        """When an ask of ``name`` should start training, for a job with a ``start`` section (None: none), planned
        as `zeus-run when` plans (`_start`). The plan (a few ms) is made on a worker, never on the event loop: it
        takes no lock, and other jobs' requests go on meanwhile. A job without one costs a cached lookup."""
        from zeus_run.errors import ZeusRunError
        from zeus_run.rundir.opener import stored_spec

        path = self._existing(name)
        try:
            if not stored_spec(path).start.enabled:
                return None
        except ZeusRunError:
            return None
        if self._limiters is None:
            self._limiters = (anyio.CapacityLimiter(self.workers), anyio.CapacityLimiter(QUICK_WORKERS))
        try:
            return await anyio.to_thread.run_sync(_start, path, limiter=self._limiters[0])
        except Exception:  # the trial is reserved: its answer must go out, with or without a plan
            logger.exception("job %s: no start plan for this ask", name)
            return None

    def heartbeat(self, name: str, token: str) -> float:
        from zeus_run import asktell

        path = self._existing(name)
        return float(asktell.heartbeat(path, token))

    def report(self, name: str, token: str, body: EpochReport, key: str | None = None) -> ReportAnswer:
        from zeus_run import asktell

        path = self._existing(name)
        check_energy(path, body.time, body.energy, body.measured.max_power if body.measured else None)
        metric = float("nan") if body.metric is None else body.metric
        how = body.measured.model_dump() if body.measured is not None else None
        reason = asktell.report_epoch(
            path, token, body.epoch, metric, time=body.time, energy=body.energy, measured=how, key=key
        )
        _faults.after_effect("report")
        if reason is None:
            return ReportAnswer(stop=False, converged=False, reason=None, message="go on")
        converged = reason is StopReason.TARGET_REACHED
        return ReportAnswer(stop=True, converged=converged, reason=reason.value, message=reason.description)

    def finish(self, name: str, token: str, body: Finish, key: str | None = None) -> dict[str, Any]:
        from zeus_run import asktell

        path = self._existing(name)
        check_energy(path, body.time, body.energy, body.measured.max_power if body.measured else None)
        measured = _measured(body.time, body.energy, body.measured)
        if measured is not None:  # measured by the client, through zeus-run's energy sources
            record = asktell.tell(path, token, exit_code=body.exit_code, measured=measured, key=key, compact=True)
        else:  # told by hand, or not at all (recorded as unmeasured)
            record = asktell.tell(
                path, token, exit_code=body.exit_code, energy=body.energy, time=body.time, key=key, compact=True
            )
        _faults.after_effect("finish")
        return record.to_json()

    def tail(self, name: str, token: str, body: Tail) -> None:
        from zeus_run import asktell

        path = self._existing(name)
        check_energy(path, body.time, body.energy, None)  # the bound a finish is held to
        if any(m.token == token for m in read_running(path) or []):
            raise ApiError(
                409, f"token = {token!r}: this trial is not told yet; send its tail after its finish.", "not_told"
            )
        try:  # a told trial of this job only (404), one tail per trial (409; the same one again is accepted)
            asktell.tell_tail(path, token, body.time, body.energy, body.to)
        except OSError as exc:  # a full disk, or the tails' cap: the trial's record stands without its tail
            raise ApiError(507, f"could not record the tail: {exc.strerror or exc}; free space", "storage") from None

    def fail(self, name: str, token: str, body: Fail, key: str | None = None) -> dict[str, Any]:
        from zeus_run import asktell

        path = self._existing(name)
        check_energy(path, body.time, body.energy, body.measured.max_power if body.measured else None)
        measured = _measured(body.time, body.energy, body.measured)
        record = asktell.tell(
            path, token, exit_code=body.exit_code, message=body.message, measured=measured, key=key, compact=True
        )
        _faults.after_effect("fail")
        return record.to_json()

    def cancel(self, name: str, token: str) -> dict[str, Any]:
        """Release an ask that will never be told: recorded as ``infrastructure`` (`zeus_run.asktell.cancel`)."""
        from zeus_run import asktell

        record = asktell.cancel(self._existing(name), token, reason="DELETE through the server")
        _faults.after_effect("cancel")
        return record.to_json()

    # -- helpers ---------------------------------------------------------------------
    def _existing(self, name: str) -> Path:
        path = self.root.job_dir(name)
        if not (path / SPEC_NAME).is_file():
            raise ApiError(
                404,
                f"No job {name!r} on this server. Register it first: PUT {job_path(name)} with its spec.",
                "unknown_job",
            )
        return path


#: How long an ask's start plan serves the job's next asks (unit: s), while its spec and history are unchanged.
PLAN_TTL_S = 60.0
_plans: dict[str, tuple[Any, float, Any]] = {}


def _start(path: Path) -> dict[str, Any] | None:
    """The planned start of an ask of the job at ``path`` (`zeus_run.door.start.ask_start`; None: the job has no
    ``start`` section). The ask is taken already: a spec that cannot be read now is logged, not an error.

    A plan (a few ms: the forecast's skill on 14 earlier nights; its CSV parsed once per version) serves the job's
    asks for `PLAN_TTL_S` while its spec and history are the same: those asks cost a lookup, and say how long
    from their own time."""
    import time

    from zeus_run.door.start import ask_start, file_version, job_of_dir, plan_trigger
    from zeus_run.errors import ZeusRunError
    from zeus_run.rundir.opener import stored_spec

    try:
        spec = stored_spec(path)
    except ZeusRunError as exc:
        logger.warning("job %s: no start plan for this ask (%s)", path.name, exc)
        return None
    if not spec.start.enabled:
        return None
    now = time.time()
    key = (file_version(path / SPEC_NAME), file_version(path / "history.jsonl"))
    held = _plans.get(str(path))
    if held is not None and held[0] == key and 0 <= now - held[1] < PLAN_TTL_S:
        return ask_start(spec, path, now, held[2])
    try:
        p = plan_trigger(spec, job_of_dir(path), now)
    except (ZeusRunError, ValueError, OSError):
        return ask_start(spec, path, now)  # says why, and starts now
    _plans[str(path)] = (key, now, p)
    return ask_start(spec, path, now, p)


def _measured(time: float | None, energy: float | None, meter: Meter | None) -> asktell.Measured | None:
    """What the client measured in its own process, when it says how."""
    from zeus_run import asktell

    if meter is None or time is None or energy is None:
        return None
    return asktell.Measured(time, energy, meter.source, meter.estimated, meter.method, meter.max_power, meter.window)
