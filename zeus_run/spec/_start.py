"""The ``start`` section's checks (`zeus_run.start.StartSettings`): a deadline, a forecast source, ``min_saving``."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from zeus_run.spec._check import Checker
from zeus_run.start import PROVIDERS, StartSettings, parse_clock, parse_duration

KEYS = ("by", "within", "forecast", "min_saving")


def start_section(c: Checker, m: Mapping, p: str) -> StartSettings:
    """``start`` from its mapping, every problem recorded on ``c``."""
    by = _by(c, m.get("by"), p + "by") if m.get("by") is not None else None
    within = _within(c, m.get("within"), p + "within") if m.get("within") is not None else None
    if by is not None and within is not None:
        c.problem(p + "within", m["within"], "is set together with start.by", "Give one deadline: by (HH:MM) or within")
    if m.get("by") is None and m.get("within") is None:
        if m.get("forecast") is None and not m.get("min_saving"):
            return StartSettings()  # a resolved spec's section without a deadline: off
        c.problem(
            p + "by", None, "is required: a start section needs a deadline", 'e.g. start: {by: "07:00"} or {within: 8h}'
        )
    forecast = _forecast(c, m.get("forecast"), p + "forecast") if "forecast" in m else None
    min_saving = c.get(m, "min_saving", p, 0.0, c.float_(0.0, 0.99, fix="A share of the on-time carbon, e.g. 0.05"))
    return StartSettings(
        by=by, within=within, forecast=forecast, min_saving=min_saving if min_saving is not None else 0.0
    )


def _by(c: Checker, v: Any, field: str) -> str | None:
    written = c.text.get(field, str(v))
    if not isinstance(v, str):
        why = (
            f"was read as the number {v!r} (YAML reads {written} as base 60)"
            if ":" in written
            else "must be a time of day HH:MM"
        )
        c.problem(field, v, why, f'Quote it: by: "{written}" (HH:MM, UTC)' if ":" in written else 'e.g. by: "07:00"')
        return None
    try:
        h, mi = parse_clock(v)
    except ValueError as exc:
        c.problem(field, v, str(exc), 'e.g. by: "07:00" (UTC)')
        return None
    return f"{h:02d}:{mi:02d}"


def _within(c: Checker, v: Any, field: str) -> str | None:
    try:
        seconds = parse_duration(v)
    except ValueError as exc:
        c.problem(field, v, str(exc), "e.g. within: 8h")
        return None
    if seconds > 7 * 86_400:
        c.problem(field, v, "is longer than a week", "A window of at most 7 days, e.g. within: 8h")
        return None
    return str(v) if not isinstance(v, (int, float)) else f"{float(v):g}s"


def _forecast(c: Checker, v: Any, field: str) -> str | None:
    fix = "Use {csv: PATH}, persistence, {provider: electricitymaps, zone: GB} or none"
    if v is None or v == "none":
        return "none"
    if v == "persistence":
        return v
    if isinstance(v, str) and v.startswith("csv:"):  # the resolved form a run directory's spec.yaml keeps
        v = {"csv": v[4:]}
    elif isinstance(v, str) and v.startswith("provider:"):
        named, _, zoned = v[9:].partition("/")
        v = {"provider": named, **({"zone": zoned} if zoned else {})}
    if not isinstance(v, Mapping) or len(v) == 0:
        c.problem(field, v, "is not a forecast source", fix)
        return None
    if "csv" in v:
        extra = [k for k in v if k != "csv"]
        if extra:
            c.problem(f"{field}.{extra[0]}", v[extra[0]], "unknown key", "A CSV forecast has only csv: PATH")
        raw = v["csv"]
        if not isinstance(raw, str) or not raw.strip():
            c.problem(
                field + ".csv", raw, "must be the path of a CSV of timestamp,value rows", "e.g. csv: forecast.csv"
            )
            return None
        path = Path(raw) if c.source is None else c.source.parent / raw
        if not path.is_file():
            c.problem(
                field + ".csv",
                raw,
                f"names no file ({str(path)!r})",
                "Give a CSV of timestamp,value rows (relative to the spec file)",
            )
            return None
        return "csv:" + str(path.resolve())
    if "provider" in v:
        name = v["provider"]
        if name not in PROVIDERS:
            c.problem(
                field + ".provider",
                name,
                f"must be one of {', '.join(PROVIDERS)}",
                "Or write its forecast to a CSV: {csv: PATH}",
            )
            return None
        for k in v:
            if k not in ("provider", "zone"):
                c.problem(f"{field}.{k}", v[k], "unknown key", "Keys: provider, zone")
        zone = v.get("zone")
        if zone is not None and (not isinstance(zone, str) or not zone.strip()):
            c.problem(field + ".zone", zone, "must be a zone name", "e.g. zone: GB")
            return None
        return f"provider:{name}/{zone or ''}"
    key = next(iter(v))
    c.problem(f"{field}.{key}", v[key], "unknown key", fix)
    return None
