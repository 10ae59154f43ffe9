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
            value is quoted for the place it stands (`shell_substitute`), so the
            shell reads it as the value's own text and never runs what it holds
            (a ``run_dir`` holding a space, a quote or ``$(...)``).
    """
    if shell:
        return shell_substitute(text, values)

    def repl(m: re.Match[str]) -> str:
        token = m.group(0)
        if token == "{{":
            return "{"
        if token == "}}":
            return "}"
        return str(values[m.group(1)])

    return _PLACEHOLDER_RE.sub(repl, text)


#: Quoting contexts of a shell command line, as `shell_substitute` follows them.
_BARE, _SINGLE, _DOUBLE, _BACKTICK = "bare", "single", "double", "backtick"
#: Characters a backslash keeps literal inside double quotes (POSIX sh).
_DOUBLE_SPECIAL = re.compile(r'([\\$`"])')
#: Characters a backslash keeps literal inside backquotes.
_BACKTICK_SPECIAL = re.compile(r"([\\$`])")


def shell_substitute(text: str, values: Mapping[str, object]) -> str:
    """``text``, a ``/bin/sh -c`` command line, with each ``{name}`` replaced by a quoting of its value that makes
    the shell read exactly the value, wherever it stands.

    The one rule of ``shell: true``: write placeholders bare (``--out {log_dir}``); one already
    quoted in the spec (``'{log_dir}'``, ``"{log_dir}/m.jsonl"``, as older specs and docs wrote
    them) reads the same. Bare, and inside ``$(...)``, the value is put in with `shlex.quote`;
    inside backquotes, so quoted and then with a backslash before each backslash, dollar and
    backquote (the shell takes those away first); inside single quotes the quote is closed, the
    quoted value put in, and the quote reopened; inside double quotes with a backslash before each
    backslash, dollar, backquote and double quote. So a value with spaces, quotes, ``$`` or
    ``$(...)`` is always the value's own text, in one word, and never run.
    """
    out: list[str] = []
    stack: list[list] = [[_BARE, 0]]  # quoting contexts, innermost last: [kind, open parentheses]
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        kind = stack[-1][0]
        if c == "{" or c == "}":
            m = _PLACEHOLDER_RE.match(text, i)
            if m is not None:
                token = m.group(0)
                if token in ("{{", "}}"):
                    out.append(token[0])
                else:
                    out.append(_quoted(str(values[m.group(1)]), kind))
                i = m.end()
                continue
        out.append(c)
        i += 1
        if kind == _SINGLE:
            if c == "'":
                stack.pop()
        elif c == "\\" and i < n and text[i] not in "{}":
            out.append(text[i])  # an escaped character is literal (a brace stays a placeholder's)
            i += 1
        elif kind == _DOUBLE:
            if c == '"':
                stack.pop()
            elif c == "`":
                stack.append([_BACKTICK, 0])
            elif c == "$" and text.startswith("(", i):
                out.append("(")
                i += 1
                stack.append([_BARE, 0])
        else:  # bare, or inside $(...) or backquotes
            if c == "'":
                stack.append([_SINGLE, 0])
            elif c == '"':
                stack.append([_DOUBLE, 0])
            elif c == "`":
                if kind == _BACKTICK:
                    stack.pop()
                else:
                    stack.append([_BACKTICK, 0])
            elif c == "$" and text.startswith("(", i):
                out.append("(")
                i += 1
                stack.append([_BARE, 0])
            elif c == "(":
                stack[-1][1] += 1
            elif c == ")":
                if stack[-1][1] > 0:
                    stack[-1][1] -= 1
                elif len(stack) > 1:
                    stack.pop()  # the end of a $(...)
    return "".join(out)


def _quoted(value: str, kind: str) -> str:
    """``value`` quoted to be read as itself where a shell command line stands in ``kind`` quoting."""
    if kind == _SINGLE:
        return "'" + shlex.quote(value) + "'"
    if kind == _DOUBLE:
        return _DOUBLE_SPECIAL.sub(r"\\\1", value)
    if kind == _BACKTICK:  # the shell takes a backslash away before $, ` and \ ere it runs what is inside
        return _BACKTICK_SPECIAL.sub(r"\\\1", shlex.quote(value))
    return shlex.quote(value)
