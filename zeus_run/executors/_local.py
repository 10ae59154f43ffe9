"""The local executor: each trial is a subprocess of the launcher, watched by the agent's code in-process."""

from __future__ import annotations

import logging
from typing import Any

from zeus_run.agent import run_agent
from zeus_run.engine import TrialRequest
from zeus_run.executors._base import RealExecutor, prepare, to_record
from zeus_run.proctree import ProcessTree
from zeus_run.records import TrialRecord
from zeus_run.rundir import check_writable
from zeus_run.trial import preflight, trial_environment

logger = logging.getLogger(__name__)


class LocalExecutor(RealExecutor):
    """Runs each trial on this machine, measured with the run's energy source.

    The agent's code (`zeus_run.agent.run_agent`) runs in the launcher's own
    process: no extra interpreter start per trial, and the power-limit
    session (which holds NVML) stays with the launcher.
    """

    kind = "local"

    def __call__(self, req: TrialRequest) -> TrialRecord:
        bs = req.decision.batch_size
        profiler = self.power.profiler_for(bs) if self.power is not None else None
        prepared = prepare(self.spec, self.rd, req, self.energy, profiler is not None and not profiler.done)
        plan = prepared.plan.trial
        preflight(plan.argv, plan.workdir, trial_environment(plan.env), plan.shell)
        check_writable(self.rd.path)
        self.rd.mark_running(prepared.running)
        self.listener.on_trial_start(req, prepared.learning_rate, prepared.plan.dir)
        invalid_before = self.energy.invalid_windows
        try:
            out = run_agent(prepared.plan, self.energy, self.listener, self.cancel, profiler, heartbeat=False)
        finally:
            if self.power is not None:
                self.power.controller.restore()  # each GPU's original limit and persistence mode
        message = out.message
        invalid = self.energy.invalid_windows - invalid_before
        if invalid:
            message = _prepend(
                f"a GPU energy counter went backwards {invalid} time(s) (driver reload?); that energy is not counted",
                message,
            )
        if self.power is not None and profiler is not None:
            self.power.trial_done(bs, profiler)
            if self.power.settings.observer_mode and out.power_limit is not None:
                message = _prepend(
                    f"observer mode: ran at the maximum power limit; time and energy counted as if at {out.power_limit:g} W",
                    message,
                )
        return to_record(self.spec, self.rd, req, prepared, out, self.energy, message, self.provenance)

    @staticmethod
    def recover(info: dict[str, Any]) -> None:
        """Kill the processes of the trial a dead launcher left behind (found by their trial token).

        The script runs in its own session, so it outlives a launcher killed with
        SIGKILL; `zeus_run.proctree` finds every process carrying the token.
        """
        if info.get("token"):
            tree = ProcessTree(str(info["token"]))
        elif info.get("event_log"):  # written by a launcher from before trial tokens
            tree = ProcessTree(str(info["event_log"]), variable="ZEUS_EVENT_LOG")
        else:
            return
        killed = tree.sweep()
        if killed:
            logger.warning("killed %d training process(es) left running by the previous launcher", len(set(killed)))


def _prepend(note: str, message: str | None) -> str:
    return note if message is None else f"{note}; {message}"
