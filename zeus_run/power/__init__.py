"""GPU power limits in real runs: the NVML controller, the just-in-time profiler, stored profiles, and the session that ties them to a run.

The policy that picks a limit from a profile lives in `zeus_run.optimizer.power_limit`
(shared with the trace simulator); this package measures, sets and remembers.
"""

from zeus_run.power._controller import HOW_TO_ENABLE, PowerLimitController, PowerLimitRangeError
from zeus_run.power._node import node_power_plan, open_node_power
from zeus_run.power._profiler import JitProfiler
from zeus_run.power._session import PowerSession, make_controller, open_power_session
from zeus_run.power._store import PROFILES_NAME, ProfileStore

__all__ = [
    "HOW_TO_ENABLE",
    "PROFILES_NAME",
    "JitProfiler",
    "PowerLimitController",
    "PowerLimitRangeError",
    "PowerSession",
    "ProfileStore",
    "make_controller",
    "node_power_plan",
    "open_node_power",
    "open_power_session",
]
