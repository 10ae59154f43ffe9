"""`zeus_run.server._listener.Balance`: a process that holds more connections than another leaves a new one to it."""

from __future__ import annotations

import multiprocessing as mp
import time

from zeus_run.server._listener import YIELD_S, Balance


def _other(balance: Balance, connections: int, ready, stop) -> None:  # type: ignore[no-untyped-def]
    balance.attach(1)
    for _ in range(connections):
        balance.opened()
    ready.set()
    stop.wait(60)


def _with_other_holding(balance: Balance, connections: int):  # type: ignore[no-untyped-def]
    ctx = mp.get_context("fork")
    ready, stop = ctx.Event(), ctx.Event()
    proc = ctx.Process(target=_other, args=(balance, connections, ready, stop))
    proc.start()
    assert ready.wait(60)
    return proc, stop


def test_the_busier_process_declines_until_the_other_catches_up_and_only_for_a_while():
    balance = Balance(2)
    balance.attach(0)
    proc, stop = _with_other_holding(balance, 1)
    try:
        assert balance.counts() == [0, 1]  # the other process's count is seen here
        assert balance.take()  # fewer than the other: take it
        balance.opened()
        assert balance.take()  # as many: take it
        balance.opened()
        assert balance.counts() == [2, 1]
        assert not balance.take()  # more than the other: leave it to the other (which takes it)
        time.sleep(2 * YIELD_S)  # the next connection comes later: a new wait, not the old one's
        assert not balance.take()
        while not balance.take():  # taken here after all if the other has not within YIELD_S (it is stuck)
            pass
        balance.closed()
        assert balance.take()  # back to as many as the other
    finally:
        stop.set()
        proc.join(60)
