"""Just-in-time power-limit profiling inside a trial (launcher side).

For the first trial of a batch size, `JitProfiler` walks the power limits
from the maximum down to the minimum. At each limit it waits for ``warmup_iters``
training iterations *and* ``settle_s`` seconds, then measures a window that ends
only once all of these hold:

* at least ``measure_iters`` iterations ran;
* at least ``min_window_s`` seconds passed (`DEFAULT_MIN_WINDOW_S`, see README
  "Profiling windows" for how it is sized from NVML's counter update period);
* the energy counter changed at least ``min_updates`` times (`MIN_COUNTER_UPDATES`):
  a counter that updates more slowly than assumed stretches the window instead
  of being read at its granularity.

A window whose counter has not advanced ``min_updates`` times after
`STUCK_FACTOR` x ``min_window_s`` abandons profiling (the trial goes on at the
maximum limit): nothing is chosen from a counter that does not move. From a
valid window:

* average power = energy delta / launcher time delta (unit: W; all the job's GPUs);
* throughput = iterations / script time delta (unit: iterations/s, from the
  timestamps the training script writes with its step counts);
* the window's duration (s) and counter updates are kept with the measurement.

The sweep measures the limits highest first. ``more`` (built from
`zeus_run.optimizer.power_limit.sweep_more` and the recurrences left) may end it
before the lowest limits when the job has too few recurrences left to repay them.
When the sweep is over, the policy (`zeus_run.optimizer.power_limit`)
picks the limit and the profiler applies it for the rest of the trial. If the
script reports its iterations per epoch and the windows of all limits would not
fit in one epoch, the iteration counts are scaled down (at least 1 warm-up and 2
measured iterations), but never the time and counter minima: profiling then
carries on into the next epochs rather than measuring noise.

Observer mode: the limits are still set during the measurement windows (that
is what profiling is), but the rest of the trial runs at the maximum limit and
time and energy are accounted as if it had run at the chosen limit
(`account`): time scales by throughput(max)/throughput(chosen) and energy is
that time x the chosen limit's average power.

A profiler built `from_profile` (a batch size profiled in an earlier trial or
run) is done from the start: `start` applies the stored choice. One built with
``measured`` (a partial profile: an earlier trial of the batch size ended before
its sweep did) continues the sweep at the first limit not yet measured.

`JitProfiler.overhead` prices the sweep: what its span cost beyond the same iterations at the
chosen limit. The trial's record carries it (``profile_overhead``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from zeus_run.cost import zeus_cost
from zeus_run.optimizer.power_limit import PowerLimitMeasurement

logger = logging.getLogger(__name__)

#: Shortest measurement window (unit: s). NVML documents no update period for its total-energy
#: counter; it is reported to advance in steps of roughly 10-100 ms. A 5 s window spans >= 50 such steps, so reading it at a step boundary on either
#: end misstates the average by at most 2 x 100 ms / 5 s = 4% (typically far less), below the
#: 8-10% a 25 W step changes a 250-300 W GPU's power. See README "Profiling windows".
DEFAULT_MIN_WINDOW_S = 5.0
#: Wait after setting a limit before its warm-up may end (unit: s): many counter update
#: periods, so the first measured step already reflects the new limit.
DEFAULT_SETTLE_S = 1.0
#: Counter changes a window must see: bounds the quantisation error to 2 / 20 = 10% even if
#: the counter updates far more slowly than NVML documents.
MIN_COUNTER_UPDATES = 20
#: A window still short of ``min_updates`` counter changes after this many x ``min_window_s``
#: abandons profiling (a stuck counter).
STUCK_FACTOR = 10.0

#: Picks a limit (unit: W) from a complete profile.
Picker = Callable[[Sequence[PowerLimitMeasurement]], float]
#: Whether a descending sweep with this profile so far should measure its next limit
#: (`zeus_run.optimizer.power_limit.sweep_more`).
MoreRule = Callable[[Sequence[PowerLimitMeasurement]], bool]
#: Sets a limit (unit: W) on the job's GPUs; returns False if it could not.
Setter = Callable[[float], bool]


@dataclass
class _Mark:
    steps: int
    script_time: float | None
    time: float
    energy: float
    updates: int = 0  # counter changes seen since the window began


class JitProfiler:
    """State machine fed with (steps, time, energy) observations by the trial launcher.

    Attributes:
        limits: Limits to profile, highest first (unit: W).
        profile: Measurements so far.
        chosen: The picked limit (unit: W) once done, else None.
        done: No more profiling (complete, abandoned, or built from a stored profile).
        complete: The sweep is over: ``profile`` covers every limit, or as many as ``more``
            wanted (a short horizon); the choice is final.
        todo: Limits still to measure, highest first.
        warmup_iters, measure_iters: Window sizes in iterations (possibly scaled down).
        min_window_s, settle_s, min_updates: The time and counter minima (never scaled).
    """

    def __init__(
        self,
        limits: Sequence[float],
        pick: Picker,
        set_limit: Setter,
        warmup_iters: int = 10,
        measure_iters: int = 40,
        observer_mode: bool = False,
        min_window_s: float = DEFAULT_MIN_WINDOW_S,
        settle_s: float = DEFAULT_SETTLE_S,
        min_updates: int = MIN_COUNTER_UPDATES,
        measured: Sequence[PowerLimitMeasurement] = (),
        more: MoreRule | None = None,
    ) -> None:
        if not limits:
            raise ValueError("no power limits to profile")
        if warmup_iters < 0 or measure_iters < 1:
            raise ValueError("warmup_iters must be >= 0 and measure_iters >= 1")
        if min_window_s < 0 or settle_s < 0 or min_updates < 1:
            raise ValueError("min_window_s and settle_s must be >= 0 and min_updates >= 1")
        self.min_window_s = float(min_window_s)
        self.settle_s = float(settle_s)
        self.min_updates = int(min_updates)
        self.limits = sorted((float(x) for x in limits), reverse=True)
        self.pick = pick
        self.set_limit = set_limit
        self.warmup_iters = int(warmup_iters)
        self.measure_iters = int(measure_iters)
        self.observer_mode = observer_mode
        self.profile: list[PowerLimitMeasurement] = list(measured)
        have = {m.power_limit for m in self.profile}
        #: Limits still to measure, highest first (a partial profile continues where it stopped).
        self.todo = [x for x in self.limits if x not in have]
        self.more = more
        self.chosen: float | None = None
        self.done = False
        self.complete = False
        self._i = 0
        self._phase = "idle"  # idle -> warmup -> measure -> (next limit) ... -> done
        self._begin: _Mark | None = None
        self._scaled = False
        self._done_at: _Mark | None = None
        self._last_energy = 0.0
        #: First reading of this trial's sweep, and its end: the span `overhead` prices.
        self._swept_from: _Mark | None = None
        self._swept_to: _Mark | None = None
        #: Limits measured before this trial, and this trial's last reading: what `stall` reports.
        self._measured_before = len(self.profile)
        self._last_time: float | None = None

    @classmethod
    def from_profile(
        cls, profile: Sequence[PowerLimitMeasurement], pick: Picker, set_limit: Setter, observer_mode: bool = False
    ) -> JitProfiler:
        """A profiler whose profiling is already done (from an earlier trial or run)."""
        p = cls([m.power_limit for m in profile], pick, set_limit, observer_mode=observer_mode)
        p.profile = list(profile)
        p.complete = True
        p.done = True
        p.chosen = pick(p.profile)
        return p

    # -- launcher hooks ----------------------------------------------------------------
    def start(self) -> None:
        """Called right before the script starts: set the first limit (or the stored choice)."""
        if not self.done and (not self.todo or not self._wants_more()):
            self._finish(_Mark(0, None, 0.0, 0.0))
            return
        if self.done:
            self._apply_final(_Mark(0, None, 0.0, 0.0))
            return
        self._set(self.todo[0])
        self._phase = "warmup"

    def on_iters_per_epoch(self, iters: int) -> None:
        """The script's iterations per epoch; scales the windows down once if they do not fit."""
        if self._scaled or self.done or iters <= 0:
            return
        self._scaled = True
        need = len(self.todo) * (self.warmup_iters + self.measure_iters)
        if need <= iters:
            return
        f = iters / need
        w, m = self.warmup_iters, self.measure_iters
        self.warmup_iters = max(1, int(w * f)) if w > 0 else 0
        self.measure_iters = max(2, int(m * f))
        logger.info(
            "power-limit profiling: %d limits x (%d + %d) iterations do not fit in an epoch of %d; using %d warm-up + "
            "%d measured, each window still at least %g s and %d counter updates (profiling may carry into later epochs)",
            len(self.todo),
            w,
            m,
            iters,
            self.warmup_iters,
            self.measure_iters,
            self.min_window_s,
            self.min_updates,
        )

    def observe(self, steps: int, script_time: float | None, time: float, energy: float) -> None:
        """A new reading: cumulative iterations, the script's timestamp of that count (unit: s),
        launcher time (unit: s) and cumulative energy (unit: J)."""
        if self.done or self._phase == "idle":
            return
        mark = _Mark(steps, script_time, time, energy)
        self._last_time = time
        if self._swept_from is None:
            self._swept_from = _Mark(steps, script_time, time, energy)
        if self._phase == "warmup":
            if self._begin is None:
                self._begin = mark  # first reading at this limit: the settle time counts from here
            if steps - self._begin.steps >= self.warmup_iters and time - self._begin.time >= self.settle_s:
                self._begin = mark
                self._last_energy = energy
                self._phase = "measure"
            return
        b = self._begin
        assert b is not None
        if energy != self._last_energy:
            b.updates += 1
            self._last_energy = energy
        dt = time - b.time
        if b.updates < self.min_updates and dt >= STUCK_FACTOR * max(self.min_window_s, 0.1):
            self.abandon(
                f"the energy counter changed {b.updates} time(s) in {dt:.1f} s at {self.todo[self._i]:g} W "
                f"(a window needs {self.min_updates}); no limit is chosen from a counter that does not advance"
            )
            return
        if steps - b.steps < self.measure_iters or dt < self.min_window_s or b.updates < self.min_updates:
            return
        if b.script_time is not None and script_time is not None and script_time > b.script_time:
            st = script_time - b.script_time
        else:
            st = dt
        if dt <= 0 or st <= 0:
            return  # wait for a later reading
        m = PowerLimitMeasurement(
            self.todo[self._i], (energy - b.energy) / dt, (steps - b.steps) / st, window_s=dt, samples=b.updates
        )
        self.profile.append(m)
        logger.info(
            "power limit %g W: %.1f W average, %.3g iterations/s (%.2f s window, %d counter updates)",
            m.power_limit,
            m.avg_power,
            m.throughput,
            dt,
            b.updates,
        )
        self._i += 1
        if self._i < len(self.todo) and self._wants_more():
            self._set(self.todo[self._i])
            self._begin = None
            self._phase = "warmup"
            return
        self._finish(mark)

    def _wants_more(self) -> bool:
        return self.more is None or self.more(self.profile)

    def _finish(self, mark: _Mark) -> None:
        """The sweep is over (every limit, or as many as ``more`` wanted): pick and apply."""
        self._swept_to = mark if self._swept_from is not None else None
        self.complete = True
        self.chosen = self.pick(self.profile)
        logger.info(
            "power-limit profile done (%d of %d limits): picked %g W", len(self.profile), len(self.limits), self.chosen
        )
        self._apply_final(mark)

    def abandon(self, why: str) -> None:
        """Stop profiling (e.g. the script reports no steps); the trial goes on at the maximum limit."""
        if self.done:
            return
        logger.warning("power-limit profiling abandoned: %s", why)
        self.done = True
        self._phase = "done"
        self._set(self.limits[0])

    # -- accounting ------------------------------------------------------------------------
    def account(self, time: float, energy: float) -> tuple[float, float]:
        """Time (s) and energy (J) to count for the trial so far.

        Identity unless in observer mode after the choice: then the part after the
        choice counts as if run at the chosen limit.
        """
        if not self.observer_mode or self._done_at is None or self.chosen is None:
            return time, energy
        by_limit = {m.power_limit: m for m in self.profile}
        at_max = by_limit.get(max(by_limit))
        best = by_limit.get(self.chosen)
        if at_max is None or best is None or best.throughput <= 0 or at_max.throughput <= 0:
            return time, energy
        d = self._done_at
        rest = max(time - d.time, 0.0) * at_max.throughput / best.throughput
        return d.time + rest, d.energy + rest * best.avg_power

    def overhead(self, eta: float, max_power: float) -> float | None:
        """What this trial's sweep cost beyond the same iterations at the chosen limit (unit: J of cost).

        The sweep runs from its first reading to the choice, at every limit measured: the time and
        energy it took, against its iterations at the chosen limit's throughput and average power,
        priced as the trial is (`zeus_run.cost.zeus_cost`). 0 at least. None where this trial did not
        complete a sweep (a stored profile, a partial or abandoned one): nothing to price. ``zeus-voi``
        learns a batch size's cost without it (revision 9).
        """
        a, b = self._swept_from, self._swept_to
        if a is None or b is None or self.chosen is None:
            return None
        best = {m.power_limit: m for m in self.profile}.get(self.chosen)
        steps, time, energy = b.steps - a.steps, b.time - a.time, b.energy - a.energy
        if best is None or best.throughput <= 0 or steps <= 0 or time <= 0:
            return None
        at_best = steps / best.throughput
        return max(0.0, zeus_cost(energy - at_best * best.avg_power, time - at_best, eta, max_power))

    def stall(self) -> str | None:
        """Why this trial measured no limit although its sweep is not over, or None.

        A script whose training is shorter than one window (``settle_s``, then ``min_window_s``
        and ``min_updates`` counter changes) never measures a limit: each trial starts the same
        window again. The launcher warns with this text rather than sweep in silence.
        """
        a = self._swept_from
        if self.done or a is None or self._last_time is None or len(self.profile) > self._measured_before:
            return None
        at = self.todo[min(self._i, len(self.todo) - 1)]
        return (
            f"the script reported training steps for {self._last_time - a.time:.1f} s, and a window at {at:g} W "
            f"needs {self.settle_s:g} s to settle, then at least {self.min_window_s:g} s, "
            f"{self.warmup_iters + self.measure_iters} iterations and {self.min_updates} energy-counter updates"
        )

    @property
    def partial(self) -> bool:
        """Some limits are measured but the sweep is not over (persist it; the next trial continues it)."""
        return bool(self.profile) and not self.complete

    @property
    def running_limit(self) -> float | None:
        """Limit the GPUs run at after profiling (unit: W): the choice, or the maximum in observer mode."""
        if self.chosen is None:
            return None
        return self.limits[0] if self.observer_mode else self.chosen

    # -- internals -------------------------------------------------------------------------
    def _apply_final(self, mark: _Mark) -> None:
        self.done = True
        self._phase = "done"
        self._done_at = mark
        target = self.running_limit
        if target is not None:
            self._set(target)

    def _set(self, limit: float) -> None:
        if not self.set_limit(limit):
            if not self.done:
                logger.warning("could not set power limit %g W; power-limit profiling stops", limit)
            self.done = True
            self._phase = "done"
