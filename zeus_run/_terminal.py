"""Make untrusted text (a training script's output) safe to echo on a terminal.

A script's output can hold escape sequences that clear the screen, move the
cursor, set the window title, or (on some terminals) worse. zeus-run logs the
output as is, but what it echoes to the user's terminal goes through
`printable`.
"""

from __future__ import annotations

import re

# CSI (ESC [ ... final), OSC/DCS/SOS/PM/APC strings (to BEL or ST, or the end),
# other escape sequences (ESC, intermediates, final), and a lone ESC.
_ESCAPES = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]?"
    r"|\x1b[\]PX^_][^\x07\x1b]*(?:\x07|\x1b\\)?"
    r"|\x1b[ -/]*[0-~]?"
)
# C1 controls (CSI is U+009B), and bidirectional overrides that reorder what is shown.
_INVISIBLE = re.compile("[\x80-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_C0 = re.compile("[\x00-\x08\x0b-\x1f\x7f]")


def printable(text: str, keep_newlines: bool = False) -> str:
    """``text`` without terminal control sequences.

    Escape sequences, C1 controls and bidirectional overrides are removed. A
    carriage return keeps only what follows it (what a terminal would have
    shown for a progress bar). Other control characters are shown in caret
    notation (``^G``). Tabs are kept, and newlines with ``keep_newlines``.
    """
    if keep_newlines:
        return "\n".join(printable(line) for line in text.split("\n"))
    text = _ESCAPES.sub("", text.replace("\n", " "))
    text = text.rstrip("\r")
    if "\r" in text:
        text = text.rsplit("\r", 1)[1] or text.replace("\r", " ")
    text = _INVISIBLE.sub("", text)
    return _C0.sub(lambda m: "^" + chr((ord(m.group(0)) + 64) % 128), text)
