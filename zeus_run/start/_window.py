"""The window a recurrence may start in: from its trigger to its deadline (``start.by`` or ``start.within``).

``by: "07:00"`` is due at the next 07:00 (UTC, as the intensity series' naive times are) after the trigger;
``within: "8h"`` is due that long after it (``"90m"``, ``"1h30m"``, ``"2d"``, or seconds as a number).
"""

from __future__ import annotations

import datetime as _dt
import re
from dataclasses import dataclass

#: Seconds in a day.
DAY = 86_400.0
_DURATION = re.compile(
    r"^\s*(?:(\d+(?:\.\d+)?)d)?\s*(?:(\d+(?:\.\d+)?)h)?\s*(?:(\d+(?:\.\d+)?)m)?\s*(?:(\d+(?:\.\d+)?)s)?\s*$"
)
_CLOCK = re.compile(r"^\s*([01]?\d|2[0-3]):([0-5]\d)\s*$")


def parse_clock(text: str) -> tuple[int, int]:
    """``"07:00"`` as (hours, minutes).

    Raises:
        ValueError: Not an HH:MM time of day.
    """
    m = _CLOCK.match(text) if isinstance(text, str) else None
    if not m:
        raise ValueError(f"{text!r} is not a time of day HH:MM")
    return int(m.group(1)), int(m.group(2))


def parse_duration(text: str | float) -> float:
    """``"8h"``, ``"90m"``, ``"1h30m"``, ``"2d"`` or a number of seconds, in seconds (more than zero).

    Raises:
        ValueError: Not a duration.
    """
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        seconds = float(text)
    else:
        m = _DURATION.match(str(text))
        if not m or not any(m.groups()):
            raise ValueError(f"{text!r} is not a duration such as 8h, 90m or 1h30m")
        d, h, mi, s = (float(g) if g else 0.0 for g in m.groups())
        seconds = d * 86_400 + h * 3_600 + mi * 60 + s
    if not seconds > 0:
        raise ValueError(f"{text!r} is not a duration longer than zero")
    return seconds


def next_clock(after: float, clock: tuple[int, int]) -> float:
    """The first time of day ``clock`` (UTC) strictly after ``after`` (Unix seconds)."""
    t = _dt.datetime.fromtimestamp(after, tz=_dt.timezone.utc)
    due = t.replace(hour=clock[0], minute=clock[1], second=0, microsecond=0)
    if due.timestamp() <= after:
        due += _dt.timedelta(days=1)
    return due.timestamp()


@dataclass(frozen=True)
class Window:
    """From the trigger to the deadline (Unix seconds)."""

    trigger: float
    deadline: float

    @property
    def length(self) -> float:
        return self.deadline - self.trigger

    @classmethod
    def of(cls, trigger: float, by: str | None = None, within: str | float | None = None) -> Window:
        """The window of a trigger at ``trigger`` with a deadline ``by`` (HH:MM) or ``within`` (a duration)."""
        if by is not None:
            return cls(trigger, next_clock(trigger, parse_clock(by)))
        if within is not None:
            return cls(trigger, trigger + parse_duration(within))
        raise ValueError("a window needs by or within")

    def shifted(self, seconds: float) -> Window:
        return Window(self.trigger + seconds, self.deadline + seconds)


def iso(t: float) -> str:
    """Unix seconds as ISO-8601 UTC to the second (``2026-01-01T03:30:00Z``)."""
    return _dt.datetime.fromtimestamp(round(t), tz=_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def clock(t: float) -> str:
    """Unix seconds as HH:MM (UTC)."""
    return _dt.datetime.fromtimestamp(round(t), tz=_dt.timezone.utc).strftime("%H:%M")
