"""Running several trials at once: the executor contract the engine drives, and three adapters.

With ``concurrency: N`` the engine (`zeus_run.engine.core.Engine`) keeps up to N
recurrences in flight through a `zeus_run.engine.core.TrialExecutor`, an object with
two methods::

    executor.start(request)        # begin the trial; return at once
    record = executor.wait_any()   # block until one started trial ends; its record

The contract, which every executor (local processes, Slurm jobs, traces) keeps:

* ``start`` does not wait for the trial. The engine never has more than N
  trials started and not yet returned, so an executor with N slots always has
  a free one when ``start`` is called.
* ``wait_any`` returns the record of a started trial, each exactly once, in the
  order they end; the record's ``trial`` is the request's (that is how the
  engine knows which one ended). The engine calls it only while a trial is in
  flight, and persists the record before it starts anything else.
* Both are called from the engine's thread only.
* A trial that fails *as a trial* (crash, timeout, interruption) is a record,
  not an exception. An exception from either method ends `Engine.run` at once;
  the trials still running are then the executor's to stop or collect (see
  `SlotPool.close`), and their records, stamped with `TrialRequest.stamp`,
  still belong in the history.

A Slurm executor, say, submits a job in ``start`` and polls for the first
finished one in ``wait_any``.

The adapters turn a *serial* executor (a function from request to record) into
a concurrent one:

* `InOrder`: runs the started trials one at a time, in start order, inside
  ``wait_any``. `Engine.run` wraps a plain function in it.
* `Clocked`: runs each trial at once on a virtual clock and ends them in the
  order of simulated wall time (start + ``record.time``): the trace simulator
  and what-if replay.
* `SlotPool`: real concurrency: each trial runs ``execute(request, slot)`` in its
  own thread on a free slot (`slot_devices` maps a slot to its GPUs): the local runner.
"""

from __future__ import annotations

import heapq
import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, overload

from zeus_run.records import TrialRecord

if TYPE_CHECKING:
    from zeus_run.engine.core import Executor, TrialRequest

logger = logging.getLogger(__name__)

#: A serial executor that also learns which slot the trial runs on (slot in [0, slots)).
SlotExecutor = Callable[["TrialRequest", int], TrialRecord]


class InOrder:
    """A serial executor as a `zeus_run.engine.core.TrialExecutor`: trials run one at a time, in start order.

    ``start`` only queues the request; ``wait_any`` runs the oldest queued one.
    With one recurrence in flight this is exactly the serial loop.

    Args:
        execute: Runs one trial to its end.
    """

    def __init__(self, execute: Executor) -> None:
        self.execute = execute
        self._queued: deque[TrialRequest] = deque()

    def start(self, request: TrialRequest) -> None:
        self._queued.append(request)

    def wait_any(self) -> TrialRecord:
        if not self._queued:
            raise RuntimeError("wait_any called with no trial in flight")
        return self.execute(self._queued.popleft())


class Clocked:
    """A serial executor on a virtual clock: trials end in the order of their simulated wall time.

    The model: a trial starts at the moment the engine starts it (the end of the
    trial whose result freed its slot, or 0), runs ``record.time`` seconds, and
    ends then. The trial itself is computed at once when it starts, so an
    executor with state (the simulator's power-limit profiles, the random path
    draws) sees trials in start order. Ties end in start order.

    Args:
        execute: Runs one trial; its record's ``time`` (unit: s) is its duration.
    """

    def __init__(self, execute: Executor) -> None:
        self.execute = execute
        #: The virtual time (unit: s): when the last trial returned by `wait_any` ended.
        self.now = 0.0
        self._ends: list[tuple[float, int, TrialRecord]] = []

    def start(self, request: TrialRequest) -> None:
        record = self.execute(request)
        duration = record.time if record.time >= 0 else 0.0  # NaN: ends at once; inf: never before another
        heapq.heappush(self._ends, (self.now + duration, request.trial, record))

    def wait_any(self) -> TrialRecord:
        if not self._ends:
            raise RuntimeError("wait_any called with no trial in flight")
        self.now, _, record = heapq.heappop(self._ends)
        return record


#: Longest the launcher's thread waits for a trial without looking at signals (unit: s).
SIGNAL_CHECK_INTERVAL = 0.2


class SlotPool:
    """Runs a serial executor N-wide: each started trial runs in a thread of its own, on a free slot.

    A slot is a place a trial can run: a set of GPUs (`slot_devices`) or, on a
    machine without GPUs, a CPU slot. The lowest free slot is taken at ``start``
    and freed when ``wait_any`` returns its record.

    Use it as a context manager so that an error leaves no thread behind::

        with SlotPool(run_on_slot, spec.concurrency) as pool:
            engine.run(history, pool, persist)
        # on an error: set the trials' cancel event first; `close` then waits for them

    Args:
        execute: Runs one trial on a slot, ``execute(request, slot) -> record``, in a
            worker thread; an exception it raises is re-raised by ``wait_any``.
        slots: Number of slots (the engine's concurrency, >= 1).
    """

    def __init__(self, execute: SlotExecutor, slots: int) -> None:
        if slots < 1:
            raise ValueError(f"a slot pool needs at least one slot, not {slots}")
        self.execute = execute
        self.slots = slots
        self._free = list(range(slots))
        self._running: dict[int, tuple[TrialRequest, int, threading.Thread]] = {}
        self._ended: queue.Queue[tuple[TrialRequest, int, TrialRecord | BaseException]] = queue.Queue()

    @property
    def running(self) -> dict[int, int]:
        """``trial -> slot`` of the trials started and not yet returned."""
        return {trial: slot for trial, (_, slot, _) in self._running.items()}

    def start(self, request: TrialRequest) -> None:
        if not self._free:
            raise RuntimeError(f"all {self.slots} slots are busy; the engine starts at most as many trials")
        slot = min(self._free)
        self._free.remove(slot)
        thread = threading.Thread(
            target=self._work, args=(request, slot), name=f"zeus-run trial {request.trial} slot {slot}"
        )
        self._running[request.trial] = (request, slot, thread)
        thread.start()

    def wait_any(self) -> TrialRecord:
        record = self.wait_for(None)
        assert record is not None
        return record

    def wait_for(self, timeout: float | None) -> TrialRecord | None:
        """`wait_any`, giving up after ``timeout`` seconds (None: never) with None."""
        if not self._running:
            raise RuntimeError("wait_any called with no trial in flight")
        ended = self._collect(timeout)
        if ended is None:
            return None
        result = ended[1]
        if isinstance(result, BaseException):
            raise result
        return result

    def close(self) -> list[tuple[TrialRequest, TrialRecord]]:
        """Wait for every trial still running; return those that ended with a record, in the order they ended.

        `wait_any` never returned these, so the engine has not persisted them: the
        caller should (``request.stamp(record)`` for a concurrent run). A trial
        that raised is logged and left out. Stop the trials first (their cancel
        event) unless waiting for them is what you want.
        """
        out = []
        while self._running:
            request, result = self._collect()
            if isinstance(result, BaseException):
                logger.error("trial %d ended with an error: %r", request.trial, result)
            else:
                out.append((request, result))
        return out

    def __enter__(self) -> SlotPool:
        return self

    def __exit__(self, *exc: object) -> None:
        left = self.close()
        if left:
            logger.warning("%d trial(s) ended after the run stopped; their records were returned by close()", len(left))

    def _work(self, request: TrialRequest, slot: int) -> None:
        try:
            result: TrialRecord | BaseException = self.execute(request, slot)
        except BaseException as exc:  # handed to the engine's thread by wait_any
            result = exc
        self._ended.put((request, slot, result))

    @overload
    def _collect(self) -> tuple[TrialRequest, TrialRecord | BaseException]: ...
    @overload
    def _collect(self, timeout: float | None) -> tuple[TrialRequest, TrialRecord | BaseException] | None: ...
    def _collect(self, timeout: float | None = None) -> tuple[TrialRequest, TrialRecord | BaseException] | None:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            # Never one blocking get: a signal the kernel hands to a trial's thread runs its
            # Python handler (which sets the trials' cancel event) only once this thread gets
            # back to the interpreter, and the trials it should stop would never end.
            wait = (
                SIGNAL_CHECK_INTERVAL if deadline is None else min(SIGNAL_CHECK_INTERVAL, deadline - time.monotonic())
            )
            try:
                request, slot, result = self._ended.get(timeout=max(wait, 0.0))
                break
            except queue.Empty:
                if deadline is not None and time.monotonic() >= deadline:
                    return None
        _, _, thread = self._running.pop(request.trial)
        thread.join()
        self._free.append(slot)
        return request, result


def slot_devices(slot: int, devices: Sequence[str], per_trial: int) -> tuple[str, ...]:
    """The devices of ``slot`` when each trial takes ``per_trial`` of ``devices``: slot k gets the k-th group.

    For example ``slot_devices(1, ["0", "1", "2", "3"], 2) == ("2", "3")``.

    Raises:
        ValueError: ``per_trial`` is below 1, or there are not enough devices for the slot.
    """
    if per_trial < 1:
        raise ValueError(f"each trial needs at least one device, not {per_trial}")
    group = tuple(devices[slot * per_trial : (slot + 1) * per_trial])
    if slot < 0 or len(group) < per_trial:
        raise ValueError(
            f"slot {slot} needs devices {slot * per_trial}-{(slot + 1) * per_trial - 1}, but only "
            f"{len(devices)} are visible ({', '.join(devices) or 'none'}); lower concurrency or the devices per trial"
        )
    return group
