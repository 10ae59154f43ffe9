"""GPU power limits: the NVML controller and the just-in-time profiler used by real runs.

The policy that picks a limit from a profile lives in `zeus_run.optimizer.power_limit`
(shared with the trace simulator); this package only measures and sets.
"""

from zeus_run.power._controller import HOW_TO_ENABLE, PowerLimitController, PowerLimitRangeError
from zeus_run.power._profiler import JitProfiler
from zeus_run.power._store import ProfileStore

__all__ = ["HOW_TO_ENABLE", "JitProfiler", "PowerLimitController", "PowerLimitRangeError", "ProfileStore"]
