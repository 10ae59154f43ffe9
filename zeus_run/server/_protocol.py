"""uvicorn's HTTP protocol with the limits a slow or hostile client meets (`zeus_run.server._limits`).

uvicorn closes a kept-alive connection that stays idle between requests, but has no timeout for a
request that never finishes arriving: a connection that sends half its headers, or trickles its body, or
sends nothing at all, stays open as long as the client likes, and 50 of them cost nothing to hold open.
`GuardedProtocol` (uvicorn's own protocol, httptools' or h11's, with a few lines added) gives each
request a deadline:

* from the connection's opening, or from a request's first byte, to the end of its headers:
  `HEADER_TIMEOUT_S`;
* from the end of its headers to the end of its body: `BODY_TIMEOUT_S`;

and a connection past its deadline is closed (logged on ``zeus_run.server.access``, shown with ``-v``). While
the server works on a request, or the connection waits idle between requests (uvicorn's keep-alive timeout
then), there is no deadline. A process holds at most `MAX_CONNECTIONS` connections: one more is closed as
soon as it opens.

NOTE: the deadlines cost each request two clock reads and no timer: one sweep a second per process closes the
connections past theirs (`_Sweeper`), so a request pays nothing for a timer it almost never needs.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from typing import Any

from zeus_run.server._limits import BODY_TIMEOUT_S, HEADER_TIMEOUT_S, MAX_CONNECTIONS

access_log = logging.getLogger("zeus_run.server.access")
#: How often a process looks for connections past their deadline (unit: s).
SWEEP_S = 1.0

try:
    import httptools  # noqa: F401
except ImportError:  # pragma: no cover - the server extra installs httptools
    from uvicorn.protocols.http.h11_impl import H11Protocol as _Base
else:
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol as _Base  # type: ignore[assignment]


class _Sweeper:
    """Closes, once a second, the connections of one event loop that are past their deadline."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.guarded: weakref.WeakSet[GuardedProtocol] = weakref.WeakSet()
        self.handle: asyncio.TimerHandle | None = None

    def add(self, protocol: GuardedProtocol) -> None:
        self.guarded.add(protocol)
        if self.handle is None:
            self.handle = self.loop.call_later(SWEEP_S, self.sweep)

    def sweep(self) -> None:
        self.handle = None
        now = self.loop.time()
        for protocol in list(self.guarded):
            protocol.check(now)
        if self.guarded:
            self.handle = self.loop.call_later(SWEEP_S, self.sweep)


_sweepers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Sweeper] = weakref.WeakKeyDictionary()


class GuardedProtocol(_Base):
    """uvicorn's HTTP protocol with header and body deadlines and a cap on connections (see the module)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._deadline: float | None = None
        self._seen_cycle: object = None
        self._waiting = "headers"

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if len(self.connections) > MAX_CONNECTIONS:
            access_log.warning(
                "%s: closed at once: this process holds %d connections already (the most)",
                _peer(self.client),
                MAX_CONNECTIONS,
            )
            transport.close()
            return
        self._deadline = self.loop.time() + HEADER_TIMEOUT_S
        sweeper = _sweepers.get(self.loop)
        if sweeper is None:
            sweeper = _sweepers[self.loop] = _Sweeper(self.loop)
        sweeper.add(self)

    def data_received(self, data: bytes) -> None:
        if self._deadline is None:  # a new request's first bytes
            self._deadline = self.loop.time() + HEADER_TIMEOUT_S
            self._waiting = "headers"
        super().data_received(data)
        cycle = self.cycle
        if cycle is None or cycle.response_complete:  # this request's headers are not all in yet
            return
        if cycle is not self._seen_cycle:  # its headers are in
            self._seen_cycle = cycle
            if cycle.more_body:
                self._deadline = self.loop.time() + BODY_TIMEOUT_S
                self._waiting = "body"
                return
        elif cycle.more_body:
            return
        self._deadline = None  # the whole request is in: the server's turn
        self._waiting = ""

    def on_response_complete(self) -> None:
        super().on_response_complete()
        # NOTE: a pipelined request already read has no deadline; the next bytes start one.
        cycle = self.cycle
        if cycle is not None and cycle.response_complete:
            self._deadline = None

    def check(self, now: float) -> None:
        """Close the connection if it is past its deadline (the sweeper calls this)."""
        if self._deadline is None or now < self._deadline or getattr(self, "transport", None) is None:
            return
        if self.transport.is_closing():
            return
        limit = HEADER_TIMEOUT_S if self._waiting == "headers" else BODY_TIMEOUT_S
        access_log.info(
            "%s: connection closed: its request's %s did not arrive within %g s",
            _peer(self.client),
            self._waiting or "headers",
            limit,
        )
        self._deadline = None
        self.transport.close()


def _peer(client: tuple[str, int] | None) -> str:
    return f"{client[0]}:{client[1]}" if client else "?"
