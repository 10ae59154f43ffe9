"""Run-time templating of a spec's ``command`` and ``env``: ``{placeholder}`` names and their substitution."""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping

_PLACEHOLDER_RE = re.compile(r"\{\{|\}\}|\{([^{}]*)\}")


def placeholder_names(text: str) -> list[str]:
    """Names of the ``{placeholders}`` in text (``{{`` and ``}}`` are literal braces)."""
    return [m.group(1) for m in _PLACEHOLDER_RE.finditer(text) if m.group(1) is not None]


def substitute(text: str, values: Mapping[str, object], shell: bool = False) -> str:
    """Replace each ``{name}`` with ``str(values[name])`` as a whole value.

    The substituted text is never re-parsed: a value containing braces, spaces
    or shell syntax arrives in the argument unchanged.

    Args:
        text: A ``command`` argument or ``env`` value.
        values: The placeholders' values.
        shell: ``text`` is a ``/bin/sh -c`` command line (``shell: true``): each
            value is quoted with `shlex.quote`, so the shell sees it as one word
            and never runs what it contains (a ``run_dir`` holding ``$(...)``).
    """

    def repl(m: re.Match[str]) -> str:
        token = m.group(0)
        if token == "{{":
            return "{"
        if token == "}}":
            return "}"
        value = str(values[m.group(1)])
        return shlex.quote(value) if shell else value

    return _PLACEHOLDER_RE.sub(repl, text)
