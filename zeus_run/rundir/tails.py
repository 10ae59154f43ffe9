"""What a trial's process spent after it told its trial: appended later, attached to the trial's record as it is read.

A process that tells its own trial (the `zeus_run.Job` block, the server's client) goes on after the tell: it
saves, evaluates, tears its framework down, or asks for its next trial. Under ``zeus-run run`` all of that is the
trial's (its script is measured to its exit), so it is here too: when the process asks for its next trial, or
exits, it appends one line for the trial it told last to ``tails.jsonl`` beside the history::

    {"token": "...", "time": 2.01, "energy": 402.3, "to": "next-ask", "at": 1764330000.1}

(``to``: ``next-ask``, the process's next ask, where its next trial's part begins; ``exit``, the process's exit).
The history itself is never rewritten: `attach` adds each tail to its trial's record as the history is read
(`zeus_run.rundir.history.read_history`): ``after_time`` and ``after_energy`` grow by it, and the record's
``window`` says where it ended (``to``) and what the tail was (``tail_s``, ``tail_j``). Nothing the optimizer
decides on reads ``after_time`` or ``after_energy``: the next ask's decision is the same whenever the tail lands.

`record_tail` is the one way in (the `zeus_run.Job` block, the exit watcher, the server's ``POST .../tail``): a
tail only for a trial the history holds (`zeus_run.errors.UnknownToken` otherwise), one per trial (the same tail
again is accepted and not written twice, so a retried request is safe; a different one is `TailConflict`), a
torn last line cut first (kept in ``tails.jsonl.torn``, as the history's `repair_tail` does), and the file held
to `MAX_TAILS_BYTES`. As read, only the first tail of a token counts and one whose trial is not in the history is
ignored (a line written by hand).
"""

from __future__ import annotations

import dataclasses
import errno
import fcntl
import json
import logging
import math
import os
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from zeus_run import _fs
from zeus_run.errors import TailConflict, UnknownToken, UsageError
from zeus_run.records import TrialRecord

logger = logging.getLogger(__name__)

TAILS_NAME = "tails.jsonl"
#: Where a tail ends (``to``).
TAIL_ENDS = ("next-ask", "exit")
#: Largest ``tails.jsonl`` (unit: bytes): about 150,000 tails, one per trial; read whole with every history.
MAX_TAILS_BYTES = 16 << 20
#: The ``to`` of a marker that a trial's tail could not be measured (`record_lost`): no figures, shown, not added.
LOST = "lost"


def record_tail(
    run_dir: str | Path, token: str, time_s: float, energy_j: float, to: str, told: bool | None = None
) -> dict[str, Any]:
    """Record a told trial's tail: `append_tail`, once per trial, for a trial the history holds.

    Args:
        told: Whether ``token`` names a trial of this run directory's history (None: look it up).

    Returns:
        The tail line as recorded (the earlier one where the same tail was recorded already).

    Raises:
        ValueError: A figure is negative or not finite, or ``to`` is not one of `TAIL_ENDS`.
        UnknownToken: No told trial of this run directory has that token.
        TailConflict: The trial already has a different tail.
        OSError: The file cannot be written, or it has reached `MAX_TAILS_BYTES` (``EFBIG``).
    """
    line = _tail_line(token, time_s, energy_j, to)
    if told is None:
        told = _told(Path(run_dir), str(token))
    if not told:
        raise UnknownToken(
            f"token = {str(token)[:80]!r}: no told trial of this job has that token; nothing was recorded. A tail "
            "is sent after its trial's tell, with the token its ask returned."
        )
    return _append_once(Path(run_dir), line)


def append_tail(run_dir: str | Path, token: str, time_s: float, energy_j: float, to: str) -> dict[str, Any]:
    """Append a told trial's tail (durably: one write, fsynced) to the run directory's ``tails.jsonl``.

    Raises:
        ValueError: A figure is negative or not finite, or ``to`` is not one of `TAIL_ENDS`.
        OSError: The file cannot be written.
    """
    return _append_once(Path(run_dir), _tail_line(token, time_s, energy_j, to), once=False)


def record_lost(run_dir: str | Path, token: str, why: str) -> None:
    """Mark that a told trial's tail could not be measured (the counter could not be read at the exit): the
    record then says its tail is lost (``window.tail: lost``), rather than nothing. A tail recorded already
    stands; errors are logged (this runs where nobody can be told)."""
    line = {"token": str(token), "to": LOST, "why": str(why)[:500], "at": time.time()}
    try:
        _append_once(Path(run_dir), line)
    except (OSError, UsageError) as exc:
        logger.warning("could not mark the lost tail of trial %s: %s", token, exc)


def _tail_line(token: str, time_s: float, energy_j: float, to: str) -> dict[str, Any]:
    for name, v in (("time", time_s), ("energy", energy_j)):
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v) or v < 0:
            raise ValueError(f"{name} = {v!r}: a tail's {name} is a finite number >= 0")
    if to not in TAIL_ENDS:
        raise ValueError(f"to = {to!r}: a tail ends at one of {', '.join(TAIL_ENDS)}")
    return {"token": str(token), "time": float(time_s), "energy": float(energy_j), "to": to, "at": time.time()}


def _told(run_dir: Path, token: str) -> bool:
    """Whether the history beside (``history.jsonl``) holds a record of the ask ``token``."""
    try:
        with _fs.open_read(run_dir / "history.jsonl") as f:
            raw = f.read()
    except OSError:
        return False
    needle = json.dumps(token).encode()
    for line in raw.splitlines():
        if needle not in line:  # most lines: no parse
            continue
        try:
            record = json.loads(line)
        except ValueError:
            continue
        provenance = record.get("provenance") if isinstance(record, dict) else None
        if isinstance(provenance, dict) and provenance.get("ask_token") == token:
            return True
    return False


def _append_once(run_dir: Path, line: dict[str, Any], once: bool = True) -> dict[str, Any]:
    """Append ``line`` under the file's lock, after cutting a torn last line; with ``once``, unless its token has
    a tail already (the same one: returned; another: `TailConflict`; a ``lost`` marker gives way to a tail)."""
    data = (json.dumps(line, separators=(",", ":")) + "\n").encode()
    path = run_dir / TAILS_NAME
    fd = _fs.open_fd(path, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        size = os.fstat(fd).st_size
        raw = os.pread(fd, MAX_TAILS_BYTES + 1, 0) if size else b""
        if raw and not raw.endswith(b"\n"):  # a torn last line (a writer died mid-write): cut, kept aside
            cut = raw.rfind(b"\n") + 1
            with _fs.open_append(str(path) + ".torn") as keep:
                keep.write(raw[cut:] + b"\n")
            os.ftruncate(fd, cut)
            logger.warning("cut a torn last line (%d bytes) from %s; kept in %s.torn", size - cut, path, TAILS_NAME)
            raw, size = raw[:cut], cut
        if once:
            earlier = _parse(raw, with_lost=True).get(line["token"])
            if earlier is not None and earlier.get("to") != LOST:
                if line.get("to") == LOST:
                    return earlier
                if (earlier["time"], earlier["energy"], earlier["to"]) == (line["time"], line["energy"], line["to"]):
                    return earlier  # a retry of the same tail
                raise TailConflict(
                    f"token = {line['token'][:80]!r}: this trial already has its tail ({earlier['time']:.6g} s, "
                    f"{earlier['energy']:.6g} J to {earlier['to']}); nothing was recorded. A trial has one tail."
                )
        if size + len(data) > MAX_TAILS_BYTES:
            raise OSError(
                errno.EFBIG, f"{path} has reached its {MAX_TAILS_BYTES >> 20} MiB cap; the tail was not recorded"
            )
        os.lseek(fd, 0, os.SEEK_END)
        _fs.write_all(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    return line


def read_tails(path: str | Path) -> dict[str, dict[str, Any]]:
    """Token -> its first tail, from a ``tails.jsonl`` (missing: none). Lines that are not tails are skipped
    (a torn last line, a line edited by hand)."""
    try:
        with _fs.open_read(Path(path)) as f:
            raw = _fs.read_at_most(f, MAX_TAILS_BYTES)
    except FileNotFoundError:
        return {}
    except OSError as exc:
        logger.warning("cannot read %s: %s; the trials' tails after their tells are not shown", path, exc)
        return {}
    return _parse(raw, with_lost=True)


def _parse(raw: bytes, with_lost: bool = False) -> dict[str, dict[str, Any]]:
    """Token -> its first tail (a ``lost`` marker where that came first, and no tail after it, ``with_lost``)."""
    out: dict[str, dict[str, Any]] = {}
    for line in raw.decode("utf-8", "replace").splitlines():
        try:
            tail = json.loads(line)
        except ValueError:
            continue
        if not isinstance(tail, dict) or not isinstance(tail.get("token"), str):
            continue
        if tail.get("to") == LOST:
            if with_lost:
                out.setdefault(tail["token"], tail)
            continue
        if tail.get("to") not in TAIL_ENDS:
            continue
        figures = [tail.get("time"), tail.get("energy")]
        if all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0 for v in figures
        ):
            earlier = out.get(tail["token"])
            if earlier is None or earlier.get("to") == LOST:
                out[tail["token"]] = tail
    return out


def attach(records: Iterable[TrialRecord], tails: dict[str, dict[str, Any]]) -> list[TrialRecord]:
    """The records with each one's tail (by its ask's token) added to ``after_time`` and ``after_energy``."""
    out = []
    for r in records:
        tail = tails.get(str((r.provenance or {}).get("ask_token"))) if tails and r.provenance else None
        out.append(r if tail is None else with_tail(r, tail))
    return out


def with_tail(r: TrialRecord, tail: dict[str, Any]) -> TrialRecord:
    """``r`` with ``tail`` (its time and energy after the tell) charged after the point it was judged at; a
    ``lost`` marker says so in its ``window`` (``tail: lost``, ``tail_why``) and adds nothing."""
    if tail.get("to") == LOST:
        return dataclasses.replace(r, window={**(r.window or {}), "tail": LOST, "tail_why": tail.get("why")})
    t, e = float(tail["time"]), float(tail["energy"])
    after_energy = (r.after_energy or 0.0) + e
    window = {**(r.window or {}), "to": tail["to"], "tail_s": t, "tail_j": e}
    share = r.estimated_share
    if r.estimated_energy is not None:
        whole = r.energy + after_energy
        share = r.estimated_energy / whole if whole > 0 else None
    return dataclasses.replace(
        r, after_time=(r.after_time or 0.0) + t, after_energy=after_energy, window=window, estimated_share=share
    )
