"""The server's log lines: one line per record, no control character, no token.

Anyone who can reach the port can put text into the log (a path, a header, a job name the server refuses), so
every line the server writes passes `SafeFormatter`:

* control characters (C0 but the tab, DEL, C1, the Unicode line and paragraph separators and the
  bidirectional overrides) are written as escapes (``\\x0a``, ``\\x1b``, ``\\u2028``): a ``%0A`` in a path
  forges no line and a ``%1B[`` sends nothing to a terminal;
* a traceback's lines (the server's own text, one record) are indented under the record's first line, so no
  line of it can pass for a record of its own;
* tokens are cut to a short id: a job token (``zrj_...``) to its id, a trial token (24 hex digits) to its first
  six, and the operator's token to ``***`` (`scrub`).
"""

from __future__ import annotations

import logging
import re

from zeus_run.server._tokens import JOB_TOKEN_PREFIX, short_id

_CONTROL = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_JOB_TOKEN = re.compile(re.escape(JOB_TOKEN_PREFIX) + r"[A-Za-z0-9_-]{8,}")
_TRIAL_TOKEN = re.compile(r"(?<![0-9a-f])([0-9a-f]{6})[0-9a-f]{18}(?![0-9a-f])")


def escape_controls(text: str) -> str:
    """``text`` with each control character written as an escape (``\\x0a``, ``\\u2028``); tabs are kept."""
    if _CONTROL.search(text) is None:
        return text
    return _CONTROL.sub(_escape, text)


def _escape(m: re.Match[str]) -> str:
    code = ord(m.group(0))
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def scrub(text: str, secrets: tuple[str, ...] = ()) -> str:
    """``text`` with tokens cut to short ids (``secrets``: strings never to show, e.g. the operator's token)."""
    for secret in secrets:
        if secret and secret in text:
            text = text.replace(secret, "***")
    if JOB_TOKEN_PREFIX in text:
        text = _JOB_TOKEN.sub(lambda m: f"job-token:{short_id(m.group(0))}", text)
    return _TRIAL_TOKEN.sub(r"\1~", text)


class SafeFormatter(logging.Formatter):
    """Formats as ``inner`` does, then escapes control characters and scrubs tokens (see the module's doc).

    Args:
        inner: The formatter whose layout is kept.
        secrets: Strings never to show (the operator's token).
    """

    def __init__(self, inner: logging.Formatter | None, secrets: tuple[str, ...] = ()) -> None:
        super().__init__()
        self.inner = inner or logging.Formatter()
        self.secrets = secrets

    def format(self, record: logging.LogRecord) -> str:
        exc_info, exc_text, stack_info = record.exc_info, record.exc_text, record.stack_info
        record.exc_info, record.exc_text, record.stack_info = None, None, None
        try:
            head = self.inner.format(record)
        finally:
            record.exc_info, record.exc_text, record.stack_info = exc_info, exc_text, stack_info
        out = escape_controls(scrub(head, self.secrets))
        tail = ""
        if exc_info:
            tail += self.inner.formatException(exc_info)
        elif exc_text:
            tail += exc_text
        if stack_info:
            tail += ("\n" if tail else "") + self.inner.formatStack(stack_info)
        if tail:
            lines = scrub(tail, self.secrets).split("\n")
            out += "".join("\n    " + escape_controls(line) for line in lines if line)
        return out


def install(logger_names: tuple[str, ...], secrets: tuple[str, ...] = ()) -> None:
    """Wrap the formatter of every handler of these loggers in a `SafeFormatter` (once)."""
    for name in logger_names:
        for handler in logging.getLogger(name).handlers:
            current = handler.formatter
            if isinstance(current, SafeFormatter):
                current.secrets = secrets
                continue
            handler.setFormatter(SafeFormatter(current, secrets))
