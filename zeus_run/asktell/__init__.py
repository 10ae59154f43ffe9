"""Ask/tell: trials of a job that someone else launches (an orchestrator, a pipeline, a pod).

::

    from zeus_run.asktell import ask, tell

    a = ask("job.yaml")                    # the next trial: batch size, seed, threshold, env, token
    ...                                     # train with a.batch_size (a.env for zeus_run.train.Trial)
    tell(a.run_dir, a.token, exit_code=0)  # record it from the trial's events; fold it

The run directory stays the single store: every ask and tell takes its lock
for a moment (`zeus_run.asktell._session`), an ask that is never told back
expires after its lease (`zeus_run.door.lease`), and decisions follow the
rule ``concurrency: N`` uses, so ``zeus-run replay`` audits an ask/tell history
like any other. ``zeus-run exec`` runs a command under the trial agent
(`run_ask`), `cancel` releases an ask that will never be told, and
`Job` is the Python API.
"""

from zeus_run.asktell._ask import Ask, ask
from zeus_run.asktell._cancel import cancel
from zeus_run.asktell._exec import Target, exit_code_of, run_ask, target_of
from zeus_run.asktell._job import AskedTrial, Job
from zeus_run.asktell._keys import check_key
from zeus_run.asktell._tell import expire, heartbeat, report_epoch, tell, tell_tail
from zeus_run.engine.measure import Measured
from zeus_run.errors import AlreadyTold, LeaseExpired, UnknownToken

__all__ = [
    "AlreadyTold",
    "Ask",
    "AskedTrial",
    "Job",
    "LeaseExpired",
    "Measured",
    "Target",
    "UnknownToken",
    "ask",
    "cancel",
    "check_key",
    "exit_code_of",
    "expire",
    "heartbeat",
    "report_epoch",
    "run_ask",
    "target_of",
    "tell",
    "tell_tail",
]
