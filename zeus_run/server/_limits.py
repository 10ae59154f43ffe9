"""What the server accepts: measurements within physical bounds, connections that finish their requests.

Values. A report's or a tell's time is at most `MAX_TIME_S` (a trial of a year), and its energy at most
`POWER_FACTOR` times the job's maximum power times its time, plus `SLACK_S` of it (the job's maximum power:
the spec's ``energy.watts``, or the max power the client says it measures against, whichever is larger). The
factor is generous (a wrong ``energy.watts`` in a spec is common and not the client's fault); the bound is there
so that ``energy: 1e308`` is a 422 naming the field, not a 300-digit total in ``zeus-run history``. Types are
strict (`zeus_run.server._models`: an epoch is an integer, ``"1"`` and ``true`` are not).

Connections (`zeus_run.server._protocol`): the headers of a request must arrive within `HEADER_TIMEOUT_S` of its
first byte (or of the connection's opening), its body within `BODY_TIMEOUT_S` after them, and a process holds at
most `MAX_CONNECTIONS` connections; an idle kept-alive connection closes after ``KEEP_ALIVE_S``
(`zeus_run.server._serve`).
"""

from __future__ import annotations

import math
from pathlib import Path

from zeus_run.server._errors import ApiError

#: Longest time a report or tell may carry (unit: s): a year.
MAX_TIME_S = 366 * 24 * 3600.0
#: Largest energy any report may carry (unit: J): a 10 MW machine running for the whole of `MAX_TIME_S`.
MAX_ENERGY_J = 1e7 * MAX_TIME_S
#: How far a trial's energy may exceed its maximum power times its time (a generous multiple).
POWER_FACTOR = 100.0
#: Time added to the reported time in that bound (unit: s): a first epoch's figures can be rounded to 0 s.
SLACK_S = 10.0
#: Longest from a request's first byte (or the connection's opening) to the end of its headers (unit: s).
HEADER_TIMEOUT_S = 10.0
#: Longest from the end of a request's headers to the end of its body (unit: s); a body is a page at most.
BODY_TIMEOUT_S = 30.0
#: Most connections one serving process holds; more are closed at once (uvicorn answers 503 past its own limit).
MAX_CONNECTIONS = 500


def check_energy(
    run_dir: Path, time: float | None, energy: float | None, max_power: float | None, field: str = "body.energy"
) -> None:
    """Refuse an energy beyond `POWER_FACTOR` x the job's maximum power x (``time`` + `SLACK_S`).

    Args:
        run_dir: The job's run directory (its spec's ``energy.watts``).
        time: The time the energy was used in (unit: s; None: `MAX_TIME_S`).
        energy: The energy (unit: J; None: nothing to check).
        max_power: The max power the client measures against (unit: W), if it says.

    Raises:
        ApiError: 422 ``invalid_field`` naming ``field``.
    """
    if energy is None:
        return
    from zeus_run.rundir.opener import stored_spec

    watts = max(stored_spec(run_dir).energy.watts, max_power or 0.0)
    span = (MAX_TIME_S if time is None else time) + SLACK_S
    bound = POWER_FACTOR * watts * span
    if not (math.isfinite(energy) and energy <= bound):
        raise ApiError(
            422,
            f"{field} = {energy:.6g} J is more than {POWER_FACTOR:g} x the job's maximum power ({watts:g} W) over "
            f"{'its time' if time is not None else 'a year'} ({span:g} s with {SLACK_S:g} s of slack): not a "
            "measurement. Send the energy in joules since the trial began (and its time in seconds).",
            "invalid_field",
            field,
        )
