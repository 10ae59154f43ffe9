"""A fault hook for the tests: die after a request's effect is on disk and before its answer is sent.

``ZEUS_RUN_SERVE_FAULT=ask`` (or ``report``, ``finish``, ``fail``, ``register``,
``cancel``) makes the server exit at once (`FAULT_EXIT`, no clean-up, as a
SIGKILL would) right after the first such request is applied, so that a test
can show that the client's retry, against the restarted server, is answered as
the request it repeats. Never set it in production.
"""

from __future__ import annotations

import os

FAULT_ENV = "ZEUS_RUN_SERVE_FAULT"
#: Exit status of a server stopped by the fault hook.
FAULT_EXIT = 86
_FAULT = os.environ.get(FAULT_ENV, "").strip()


def after_effect(name: str) -> None:
    """Exit now if the fault hook is set for ``name`` (the effect is durable; the answer is not sent)."""
    if _FAULT and name == _FAULT:
        os.write(2, f"zeus-run serve: fault hook {FAULT_ENV}={name}: exiting before the answer\n".encode())
        os._exit(FAULT_EXIT)
