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


class QuietServer(uvicorn.Server):
    """A `uvicorn.Server` that does not raise its stop signal again; `stopped_by` names it (None: none)."""

    stopped_by: str | None = None

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        self.stopped_by = self.stopped_by or signal.Signals(sig).name
        super().handle_exit(sig, frame)

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        original = {sig: signal.signal(sig, self.handle_exit) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for sig, handler in original.items():
                signal.signal(sig, handler)
