"""A generic validator of a YAML mapping: typed getters that collect every problem instead of raising (`Checker`)."""

from __future__ import annotations

import difflib
import logging
import math
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from zeus_run.errors import SpecProblem
from zeus_run.spec._yaml import YamlDocument

logger = logging.getLogger(__name__)
#: Largest whole number any setting may hold.
MAX_INT = 2**63 - 1


class Checker:
    """Reads fields out of the raw mapping, collecting problems instead of raising."""

    def __init__(self, doc: YamlDocument, base: Path, label: str, source: Path | None) -> None:
        self.data: dict = doc.data
        self.lines = doc.lines
        self.text = doc.text
        self.base = base
        self.label = label
        self.source = source
        self.problems: list[SpecProblem] = []
        for dup in doc.duplicates:
            self.problems.append(
                SpecProblem(
                    dup.path,
                    dup.text,
                    f"is set twice, on lines {dup.first} and {dup.second} (YAML would silently keep the last)",
                    "Remove one of them",
                    dup.second,
                )
            )

    # -- problem recording ---------------------------------------------------
    def problem(self, field: str, value: object, why: str, fix: str = "") -> None:
        self.problems.append(SpecProblem(field, value, why, fix, self.lines.get(field)))

    def unknown_keys(self, mapping: Mapping, allowed: tuple[str, ...], prefix: str) -> None:
        for key in mapping:
            if key not in allowed:
                close = difflib.get_close_matches(str(key), allowed, n=1) if len(str(key)) < 100 else []
                fix = f"Did you mean {close[0]!r}?" if close else f"Known keys: {', '.join(allowed)}"
                self.problem(f"{prefix}{key}", mapping[key], "unknown key", fix)

    # -- typed getters ---------------------------------------------------------
    def get(self, mapping: Mapping, key: str, prefix: str, default: Any, check: Callable[[str, Any], Any]) -> Any:
        if key not in mapping or (mapping[key] is None and default is not _REQUIRED):
            if default is _REQUIRED:
                return check(prefix + key, None)
            return default
        return check(prefix + key, mapping[key])

    def int_(self, lo: int | None = None, hi: int = MAX_INT, fix: str = "") -> Callable[[str, Any], Any]:
        def check(field: str, v: Any) -> Any:
            if v is None:
                self.problem(field, v, "is required", fix or "Set it to a whole number")
                return None
            if isinstance(v, bool) or not isinstance(v, int):
                self.problem(field, v, "must be a whole number", fix or "Write it without quotes or decimals")
                return None
            if lo is not None and v < lo:
                self.problem(field, v, f"must be at least {lo}", fix)
                return None
            if v > hi:
                self.problem(field, v, f"must be at most {hi}", fix)
                return None
            return v

        return check

    def float_(
        self, lo: float | None = None, hi: float | None = None, strict_lo: bool = False, fix: str = ""
    ) -> Callable[[str, Any], Any]:
        def check(field: str, v: Any) -> Any:
            if v is None:
                self.problem(field, v, "is required", fix or "Set it to a number")
                return None
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                self.problem(field, v, "must be a finite number", fix or "Write a number such as 0.5")
                return None
            if lo is not None and (v <= lo if strict_lo else v < lo):
                bound = f"greater than {lo}" if strict_lo else f"at least {lo}"
                self.problem(field, v, f"must be {bound}", fix)
                return None
            if hi is not None and v > hi:
                self.problem(field, v, f"must be at most {hi}", fix)
                return None
            return float(v)

        return check

    def bool_(self) -> Callable[[str, Any], Any]:
        def check(field: str, v: Any) -> Any:
            if not isinstance(v, bool):
                self.problem(field, v, "must be true or false", "Write true or false without quotes")
                return None
            return v

        return check

    def choice(self, options: tuple[str, ...], fix: str = "") -> Callable[[str, Any], Any]:
        def check(field: str, v: Any) -> Any:
            if v not in options:
                close = difflib.get_close_matches(str(v), options, n=1)
                hint = f"Did you mean {close[0]!r}? " if close else ""
                self.problem(field, v, f"must be one of {', '.join(options)}", f"{hint}{fix}".strip())
                return None
            return v

        return check

    def str_(self) -> Callable[[str, Any], Any]:
        def check(field: str, v: Any) -> Any:
            if not isinstance(v, str) or not v.strip():
                self.problem(field, v, "must be a non-empty string")
                return None
            return v

        return check

    # -- the spec --------------------------------------------------------------


_REQUIRED = object()


def _whole(v: Any, lo: int, hi: int) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and lo <= v <= hi


_KEY = re.compile(r"^(\s*)(?:-\s+)?([A-Za-z_][\w.-]*)\s*:(.*)$")


def field_at_line(text: str, line: int | None) -> tuple[str, object]:
    """The setting written at ``line`` (1-based) of a YAML spec, as a dotted path, and its value's text.

    For errors the YAML reader finds before any setting is built (a 61-digit number, nesting too
    deep): the key on that line, under the keys of the blocks that contain it. ``("(yaml)", None)``
    when the line names no key.
    """
    lines = text.splitlines()
    if line is None or not 1 <= line <= len(lines):
        return "(yaml)", None
    m = _KEY.match(lines[line - 1])
    if m is None:
        return "(yaml)", None
    indent, path, value = len(m.group(1)), [m.group(2)], m.group(3).strip()
    for above in reversed(lines[: line - 1]):
        outer = _KEY.match(above)
        if outer is not None and len(outer.group(1)) < indent and not outer.group(3).strip():
            indent = len(outer.group(1))
            path.insert(0, outer.group(2))
            if indent == 0:
                break
    shown = value if len(value) <= 40 else f"{value[:20]}...{value[-10:]} ({len(value)} characters)"
    return ".".join(path), shown or None
