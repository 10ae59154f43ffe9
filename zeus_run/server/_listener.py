"""The listening socket, shared by ``zeus-run serve --workers N``'s processes, and how they share its connections.

Clients keep their connection alive, so the process that accepts a connection answers every request on
it. asyncio accepts up to its ``backlog`` argument of connections each time the socket is ready: with
several processes waiting on one socket, the one that woke first took a whole burst (8 or 32 clients
connecting at once) and the others were left idle. Measured with 8 clients and two workers, one process
held 7 of the 8 connections and the server ran at the speed of one (`scripts/bench_server.py`).

So each process accepts one connection per wake-up (uvicorn is given a backlog of 1; `Listener` keeps the
kernel's queue `BACKLOG` long whatever asyncio asks), and a process that holds more connections than the
least busy one declines a connection for a moment (`Balance`) and leaves it to that one. Every process
waits on the socket, so every one is woken by each new connection and refreshes its own count then. A
process declines for at most `YIELD_S` per connection: one that is stuck (a long request on a slow disk)
does not leave the connection waiting longer.
"""

from __future__ import annotations

import mmap
import os
import socket
import struct
import time

#: Connections the kernel queues for ``accept`` (the listening socket's backlog).
BACKLOG = 1024
#: Longest a process leaves a new connection to a less busy process (unit: s): that one is stuck in a
#: long request (a slow disk) if it has not accepted it by then.
YIELD_S = 0.05

_SLOT = struct.Struct("q")


class Balance:
    """Each serving process's count of open connections, in memory the processes share.

    Made before the processes fork; each then calls `attach` with its index.

    Args:
        processes: How many processes serve the socket.
    """

    def __init__(self, processes: int) -> None:
        self.processes = processes
        self._shared = mmap.mmap(-1, _SLOT.size * processes)  # anonymous and shared: forked processes see it
        self._index = 0
        self._mine = 0
        self._declined_since: float | None = None
        self._last_declined = 0.0

    def attach(self, index: int) -> None:
        """Count this process's connections as process ``index`` (``0 .. processes - 1``)."""
        self._index = index
        self._publish(0)

    def counts(self) -> list[int]:
        """Each process's open connections as it last published them."""
        return [_SLOT.unpack_from(self._shared, i * _SLOT.size)[0] for i in range(self.processes)]

    def take(self) -> bool:
        """Whether this process should accept the connection waiting now.

        No while it holds more connections than the least busy process, for at most `YIELD_S`.
        """
        counts = self.counts()
        least = min(c for i, c in enumerate(counts) if i != self._index)
        if self._mine <= least:
            self._declined_since = None
            return True
        now = time.monotonic()
        if self._declined_since is None or now - self._last_declined > YIELD_S:
            self._declined_since = now  # a new connection: the last one was taken by another process
        self._last_declined = now
        if now - self._declined_since >= YIELD_S:
            self._declined_since = None
            return True
        os.sched_yield()  # on a loaded host, let the other process run and accept it
        return False

    def opened(self) -> None:
        self._publish(self._mine + 1)

    def closed(self) -> None:
        self._publish(self._mine - 1)

    def _publish(self, count: int) -> None:
        self._mine = count
        _SLOT.pack_into(self._shared, self._index * _SLOT.size, count)


class Listener(socket.socket):
    """The listening socket: its kernel queue stays `BACKLOG` long, and with a `Balance` it accepts only
    its share of the connections (see the module docstring)."""

    def __init__(self, family: int, type: int, proto: int) -> None:
        super().__init__(family, type, proto)
        #: Set before the serving processes fork, when there are several.
        self.balance: Balance | None = None

    def listen(self, backlog: int = BACKLOG) -> None:
        super().listen(BACKLOG)

    def accepts_per_wakeup(self) -> int:
        """What to give asyncio as its ``backlog`` (connections accepted each time the socket is ready): one
        where processes share the connections, so that each takes its share; a whole burst for one process,
        which would otherwise hold the later connections' first requests back."""
        return 1 if self.balance is not None else BACKLOG

    def accept(self) -> tuple[socket.socket, object]:
        balance = self.balance
        if balance is None:
            return super().accept()
        if not balance.take():
            raise BlockingIOError  # asyncio: nothing to accept now; the socket stays ready for the other processes
        fd, addr = self._accept()  # type: ignore[attr-defined]  # what socket.accept does, with a counted socket
        conn = _Counted(self.family, self.type, self.proto, fd, balance)
        balance.opened()
        return conn, addr


class _Counted(socket.socket):
    """An accepted connection that its process's `Balance` counts until it is closed."""

    def __init__(self, family: int, type: int, proto: int, fileno: int, balance: Balance) -> None:
        super().__init__(family, type, proto, fileno)
        self.balance: Balance | None = balance

    def close(self) -> None:
        balance, self.balance = self.balance, None
        super().close()
        if balance is not None:
            balance.closed()
