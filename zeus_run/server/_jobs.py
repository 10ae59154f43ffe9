"""The server's jobs: each a run directory under the root, driven through the ask/tell engine.

`JobService` is the only place the server touches the library: it maps a job
name to its run directory (`ServerRoot.job_dir`), serializes the requests of
one job, and turns the engine's answers into the API's bodies.

The library's calls block (the run directory's ``flock``, fsyncs), so they run
on a small pool of worker threads (`WORKERS`). A request waits for its job's
turn on the event loop (`JobService.run`: one `asyncio.Lock` per job), not on a
worker, so the requests of one slow job (a slow disk, many clients) hold at
most one worker and never keep another job waiting. Epoch reports and
heartbeats, the most frequent and cheapest calls, have workers of their own.
Few workers also keep the threads from fighting over the interpreter lock.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import anyio
import anyio.to_thread

from zeus_run.contract import StopReason
from zeus_run.remote import job_path
from zeus_run.rundir.store import SPEC_NAME
from zeus_run.server import _faults, _register
from zeus_run.server._errors import ApiError
from zeus_run.server._models import EpochReport, Fail, Finish, Meter, ReportAnswer
from zeus_run.server._root import ServerRoot

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
        self._turns: dict[str, asyncio.Lock] = {}  # used on the event loop's thread only
        self._limiters: tuple[anyio.CapacityLimiter, anyio.CapacityLimiter] | None = None

    async def run(self, name: str | None, call: Callable[[], T], quick: bool = False) -> T:
        """Run ``call`` (a blocking method of this service) on a worker, after the job's earlier requests.

        Args:
            name: The job (None: a call that reads, in no job's turn).
            call: The call.
            quick: A report or heartbeat: a few file operations and no lock, run on workers of
                their own, so that they never wait behind other jobs' asks and tells.
        """
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

    def register(self, name: str, spec_doc: str | dict[str, Any]) -> dict[str, Any]:
        """Validate ``spec_doc`` and make, keep or update the job's run directory (`zeus_run.server._register`)."""
        answer = _register.register(self.root.job_dir(name), name, spec_doc, self.allowed)
        _faults.after_effect("register")
        return answer

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
        return decision.to_json()

    def heartbeat(self, name: str, token: str) -> float:
        from zeus_run import asktell

        path = self._existing(name)
        return float(asktell.heartbeat(path, token))

    def report(self, name: str, token: str, body: EpochReport, key: str | None = None) -> ReportAnswer:
        from zeus_run import asktell

        path = self._existing(name)
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
        measured = _measured(body.time, body.energy, body.measured)
        if measured is not None:  # measured by the client, through zeus-run's energy sources
            record = asktell.tell(path, token, exit_code=body.exit_code, measured=measured, key=key, compact=True)
        else:  # told by hand, or not at all (recorded as unmeasured)
            record = asktell.tell(
                path, token, exit_code=body.exit_code, energy=body.energy, time=body.time, key=key, compact=True
            )
        _faults.after_effect("finish")
        return record.to_json()

    def fail(self, name: str, token: str, body: Fail, key: str | None = None) -> dict[str, Any]:
        from zeus_run import asktell

        path = self._existing(name)
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


def _measured(time: float | None, energy: float | None, meter: Meter | None) -> asktell.Measured | None:
    """What the client measured in its own process, when it says how."""
    from zeus_run import asktell

    if meter is None or time is None or energy is None:
        return None
    return asktell.Measured(time, energy, meter.source, meter.estimated, meter.method, meter.max_power)
