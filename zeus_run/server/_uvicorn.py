"""uvicorn's server as ``zeus-run serve`` runs it: SIGINT and SIGTERM stop it and the process exits 0.

uvicorn raises a signal that stopped it again once it has shut down, so that
the process ends as the signal would have (exit status 130 or 143). A server
asked to stop has done nothing wrong: `QuietServer` records which signal
stopped it (`serve` logs it) and lets the process end normally.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType

import uvicorn


def catch_early_signals() -> list[int]:
    """Hold SIGINT and SIGTERM from now until a `QuietServer` runs (it then stops at once): a signal that
    comes between ``listening on ...`` and uvicorn's start must not kill the process."""
    pending: list[int] = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda signum, frame: pending.append(signum))
    return pending


class QuietServer(uvicorn.Server):
    """A `uvicorn.Server` that does not raise its stop signal again; `stopped_by` names it (None: none).

    Args:
        config: uvicorn's configuration.
        pending: Signals caught before it ran (`catch_early_signals`).
    """

    stopped_by: str | None = None

    def __init__(self, config: uvicorn.Config, pending: list[int] | None = None) -> None:
        super().__init__(config)
        self._pending = pending if pending is not None else []

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        self.stopped_by = self.stopped_by or signal.Signals(sig).name
        super().handle_exit(sig, frame)

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        original = {sig: signal.signal(sig, self.handle_exit) for sig in (signal.SIGINT, signal.SIGTERM)}
        for sig in self._pending:
            self.handle_exit(sig, None)
        try:
            yield
        finally:
            for sig, handler in original.items():
                signal.signal(sig, handler)
