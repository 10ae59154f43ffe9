"""The rates a run directory's recurrences were charged at: ``rates.jsonl``, one line per ``accounting`` period.

A job's ``accounting`` section (carbon intensity, price of energy) may change between launches:
the grid got cleaner, the contract changed. The history was charged at the old rates, so a
changed section applies from the recurrence where it appears, never to the recurrences before:

* `note_change` (every door that opens a job with a spec calls it before its first trial) compares
  the spec's section with the one in force (the last line of ``rates.jsonl``, else the stored
  ``spec.yaml``'s); a changed rate appends a line ``{"from_recurrence": N, ...}`` (the first change
  writes the original period first) and returns the notice to show, naming each changed field;
  a changed ``currency`` is refused (one history is summed in one currency);
* `periods` reads the lines back for the views (`zeus_run.views.money.account`).

Appends are whole lines written at once (``O_APPEND``); a torn last line is ignored.
"""

from __future__ import annotations

import datetime
import json
import logging
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from zeus_run.accounting import AccountingSettings, Period, settings_from
from zeus_run.errors import RunDirError

logger = logging.getLogger(__name__)

#: The file in a run directory.
RATES_NAME = "rates.jsonl"
#: The fields whose change starts a new period.
RATE_FIELDS = ("carbon_g_per_kwh", "price_per_kwh")


def periods(run_dir: Path) -> tuple[Period, ...]:
    """The periods recorded in ``run_dir`` (empty: the section never changed; the stored spec's holds throughout)."""
    path = Path(run_dir) / RATES_NAME
    try:
        text = path.read_text(encoding="utf-8")
    except (FileNotFoundError, NotADirectoryError):
        return ()
    except (OSError, UnicodeDecodeError) as exc:
        logger.warning("cannot read %s (%s); every recurrence is charged at the spec's rates", path, exc)
        return ()
    out: list[Period] = []
    for line in text.splitlines():
        try:
            row = json.loads(line)
            first = int(row["from_recurrence"])
        except (ValueError, KeyError, TypeError):
            continue  # a torn or foreign line
        if isinstance(row, dict) and first >= 1:
            out.append(Period(first, settings_from(row)))
    return tuple(out)


def note_change(
    run_dir: Path,
    stored: Mapping[str, Any] | None,
    settings: AccountingSettings,
    next_recurrence: int | Callable[[], int],
) -> list[str]:
    """Record a changed ``accounting`` section as a new period from ``next_recurrence``; the notices to show.

    Args:
        run_dir: The run directory (locked by the caller).
        stored: The stored ``spec.yaml`` (None: none yet, a new job).
        settings: The spec's section now.
        next_recurrence: The first recurrence the new rates are charged to (or what reads it, called only
            when the section changed: `zeus_run.engine.position.position` of the history).

    Returns:
        One notice per changed field (empty: nothing changed, nothing written).

    Raises:
        RunDirError: The currency changed (exit 2), or ``rates.jsonl`` cannot be written.
    """
    recorded = periods(run_dir)
    section = stored.get("accounting") if stored is not None else None
    before = recorded[-1].settings if recorded else settings_from(section if isinstance(section, Mapping) else None)
    if stored is None and not recorded:
        return []  # a new job: the spec.yaml it saves is its first period
    if before.currency != settings.currency and before.price_per_kwh is not None:
        raise RunDirError(
            f"accounting.currency changed from {before.currency!r} to {settings.currency!r}: the history's money is "
            f"summed in {before.currency}. Keep currency: {before.currency}, or pass --force to start a new run "
            "directory next to it."
        )
    changed = [f for f in RATE_FIELDS if getattr(before, f) != getattr(settings, f)]
    if not changed:
        return []
    if callable(next_recurrence):
        next_recurrence = next_recurrence()
    rows = [] if recorded else [_row(1, before, [])]
    rows.append(_row(next_recurrence, settings, changed))
    _append(Path(run_dir) / RATES_NAME, rows)
    return [
        f"accounting.{f} changed from {_shown(getattr(before, f))} to {_shown(getattr(settings, f))}: it applies "
        f"from recurrence {next_recurrence} on; the recurrences before keep {_shown(getattr(before, f))} "
        f"(recorded in {RATES_NAME})"
        for f in changed
    ]


def _shown(value: object) -> str:
    return "none" if value is None else repr(value) if isinstance(value, str) else f"{value:g}"


def _row(first: int, s: AccountingSettings, changed: list[str]) -> dict[str, Any]:
    return {
        "from_recurrence": first,
        "carbon_g_per_kwh": s.carbon_g_per_kwh,
        "price_per_kwh": s.price_per_kwh,
        "currency": s.currency,
        "changed": changed,
        "at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }


def _append(path: Path, rows: list[dict[str, Any]]) -> None:
    data = "".join(json.dumps(r) + "\n" for r in rows).encode()
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as exc:
        raise RunDirError(
            f"cannot write {str(path)!r}: {exc.strerror or exc}; check the run directory's permissions"
        ) from None
