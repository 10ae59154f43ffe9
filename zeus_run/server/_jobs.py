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
import dataclasses
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import anyio
import anyio.to_thread

from zeus_run.asktell._session import LOCK_WAIT
from zeus_run.contract import StopReason
from zeus_run.remote import job_path
from zeus_run.rundir.store import SPEC_NAME, RunDir
from zeus_run.server._errors import ApiError
from zeus_run.server._models import EpochReport, Fail, Finish, ReportAnswer
from zeus_run.server._root import ServerRoot

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
    """

    def __init__(self, root: ServerRoot, workers: int = WORKERS) -> None:
        self.root = root
        self.workers = workers
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
        """Validate ``spec_doc`` and make (or check) the job's run directory; returns the resolved spec."""
        import yaml

        from zeus_run.rundir.resume import compatibility
        from zeus_run.spec import parse_spec

        path = self.root.job_dir(name)
        text = spec_doc if isinstance(spec_doc, str) else yaml.safe_dump(spec_doc, sort_keys=False)
        spec = parse_spec(text)  # SpecError: the same problems, in the same words, as `zeus-run check`
        if spec.name != name:
            raise ApiError(
                422,
                f"spec.name = {spec.name!r} differs from the job name {name!r} in the URL. "
                f"Register it as {job_path(spec.name)} or set name: {name}.",
                "invalid_field",
                "body.spec.name",
            )
        spec = dataclasses.replace(spec, run_dir=path)
        # A brief holder, as an ask: another worker process may register or ask at the same moment.
        with RunDir.open(path, wait=LOCK_WAIT, role="register", scan_trials=False) as rd:
            diffs, _ = compatibility(path, spec)
            if diffs:
                raise ApiError(
                    409,
                    f"Job {name!r} is registered with another spec, and its history would not follow from this "
                    f"one: {'; '.join(diffs)}. Register it under a new name to start afresh.",
                    "spec_conflict",
                    "body.spec",
                )
            if rd.stored_spec() is None:
                rd.save_spec(spec)
        return spec.to_dict()

    def history(self, name: str) -> list[dict[str, Any]]:
        from zeus_run.rundir.history import read_history

        path = self._existing(name)
        return (
            [r.to_json() for r in read_history(path / "history.jsonl", warn=False)]
            if (path / "history.jsonl").is_file()
            else []
        )

    # -- trials ----------------------------------------------------------------------
    def ask(self, name: str, host: str | None) -> dict[str, Any]:
        from zeus_run import asktell

        path = self._existing(name)
        decision = asktell.ask(path, host=host)
        return decision.to_json()

    def heartbeat(self, name: str, token: str) -> float:
        from zeus_run import asktell

        path = self._existing(name)
        return float(asktell.heartbeat(path, token))

    def report(self, name: str, token: str, body: EpochReport) -> ReportAnswer:
        from zeus_run import asktell

        path = self._existing(name)
        metric = float("nan") if body.metric is None else body.metric
        reason = asktell.report_epoch(path, token, body.epoch, metric, time=body.time, energy=body.energy)
        if reason is None:
            return ReportAnswer(stop=False, converged=False, reason=None, message="go on")
        converged = reason is StopReason.TARGET_REACHED
        return ReportAnswer(stop=True, converged=converged, reason=reason.value, message=reason.description)

    def finish(self, name: str, token: str, body: Finish) -> dict[str, Any]:
        from zeus_run import asktell

        path = self._existing(name)
        record = asktell.tell(path, token, exit_code=body.exit_code, energy=body.energy, time=body.time)
        return record.to_json()

    def fail(self, name: str, token: str, body: Fail) -> dict[str, Any]:
        from zeus_run import asktell

        path = self._existing(name)
        record = asktell.tell(path, token, exit_code=body.exit_code, message=body.message)
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
