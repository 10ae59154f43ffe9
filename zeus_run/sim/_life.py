"""Bad nights for the simulator (``--life``): what a real life adds to the traces' quiet one.

A `Life` draws, from the seed alone (never from the optimizer's choices), what goes wrong on each
night after the first (the first must converge at the default batch size, as in a real run):

* **out of memory** at the largest batch sizes: every batch size from a drawn one up crashes at
  its start (mostly above the default; sometimes the default too);
* a **slow night**: every try runs slower, multiplied (``x F``, time and energy alike) or added
  (a stall of a share of the default's run time at idle power, once per try);
* a **slow try**: the night's first try alone runs slower, multiplied or added (a slow step, an
  outage while it ran);
* the night's first try is **interrupted** part-way, **lost to the cluster** part-way
  (infrastructure), or cannot start (an **environment error**);
* ``oom@N`` (``oom@N+M``: on nights N and M): on night ``N`` alone, the best batch size (the Oracle's) and
  every larger one run out of memory (a co-tenant on a shared GPU): where it had reached the target before,
  the job returns to it the next night; a second such night shuts it out for ``oom_retry_after`` nights with
  a model, then the job returns to it (`zeus_run.engine.memory`).

An ``oom@N`` night's crash is marked ``oom`` as a real one is, so the engine's retry goes smaller and its rule
(`zeus_run.engine.memory`) decides when the batch size may run again, as in a real run. The drawn nights' crashes
are left unmarked, as before that rule (their figures compare with those published): marked, the engine's retry
steps down to the smaller batch sizes to deliver the night's model, which on some jobs costs many times the
Default's run (seeds 1-20, horizon 24: median regret 20.2% unmarked, 26.9% marked).

The truth a simulation is judged against (`zeus_run.sim._lived.default_truth`) is what the
default would have spent over the same life to deliver the same models: one run each night zeus-run
delivered one, at that night's slowdown (its run is the night's first try, so a slow try slows it
too, and a stall adds to it; none on a night without a model); a night the default runs out of
memory, ``max_tries`` crashes besides (its job retries, then runs again to deliver the model); what cluster
losses and environment errors spent, on both sides (an interrupted launcher is zeus-run's alone).
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

import numpy as np

#: Share of one epoch an out-of-memory crash spends before it dies.
OOM_SHARE = 0.02
#: Power while stalled, as a share of the maximum power.
IDLE_SHARE = 0.3
#: What an out-of-memory crash says.
OOM_MESSAGE = "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB"

_SPEC = re.compile(r"^\s*(?:([0-9.]+))?\s*(?:(?<=[0-9.])\s*,\s*)?(?:oom@([0-9]+(?:\+[0-9]+)*))?\s*$")


@dataclass(frozen=True)
class NightLife:
    """What goes wrong on one night (all defaults: nothing).

    Attributes:
        oom_from: Batch sizes from this one up run out of memory tonight (None: none).
        night_factor: Every try runs this many times slower (time and energy alike).
        night_stall: Every try stalls this long at idle power (unit: s).
        try_factor: The night's first try alone runs this many times slower.
        try_stall: The night's first try alone stalls this long (unit: s).
        interrupted: The first try is interrupted after this share of its run (None: not).
        lost: The first try is lost to the cluster after this share of its run (None: not).
        environment: The first try cannot start (an environment error).
        oom_marked: Its out-of-memory crashes are marked as a real run's are (an ``oom@N`` night).
    """

    oom_from: int | None = None
    night_factor: float = 1.0
    night_stall: float = 0.0
    try_factor: float = 1.0
    try_stall: float = 0.0
    interrupted: float | None = None
    lost: float | None = None
    environment: bool = False
    oom_marked: bool = False

    def factor(self, first: bool) -> float:
        """How many times slower a try runs (``first``: the night's first try)."""
        return self.night_factor * (self.try_factor if first else 1.0)

    def stall(self, first: bool) -> float:
        """Seconds a try stalls (unit: s)."""
        return self.night_stall + (self.try_stall if first else 0.0)

    def ooms(self, batch_size: int) -> bool:
        return self.oom_from is not None and batch_size >= self.oom_from


@dataclass(frozen=True)
class Life:
    """How often each bad night comes (probabilities per night after the first).

    Attributes:
        scale: Multiplies every probability (1.0: the default life; 0: a quiet one).
        oom_nights: Nights (2 or later) on which the best batch size and every larger one run out of memory
            (`nights`' ``best``), beyond the drawn ones.
    """

    scale: float = 1.0
    oom: float = 0.08
    slow_night: float = 0.06
    slow_try: float = 0.06
    interrupted: float = 0.04
    lost: float = 0.04
    environment: float = 0.02
    lo: float = 1.5
    hi: float = 3.0
    oom_nights: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if any(n < 2 for n in self.oom_nights):
            raise ValueError(f"life {self.describe()}: night 1 must converge at the default; use oom@2 or later")
        if not 0.0 <= self.scale <= self.limit():
            raise ValueError(f"life {self.scale:g}: use a scale in [0, {self.limit():g}], e.g. 1 (the default life)")

    def limit(self) -> float:
        """The largest scale: no probability above 1."""
        first = self.slow_try + self.interrupted + self.lost + self.environment
        return 1.0 / max(self.oom, self.slow_night, first)

    @classmethod
    def parse(cls, text: str) -> Life:
        """``1`` (the default life), ``0.5`` (half as often), ``2`` (twice as often); ``oom@9`` (a quiet life but
        for night 9, when the best batch size runs out of memory), ``1,oom@9`` (both).

        Raises:
            ValueError: Not a number, or out of range.
        """
        m = _SPEC.match(text)
        if m is None or (m.group(1) is None and m.group(2) is None):
            raise ValueError(
                f"life {text!r}: use a scale such as 1 (the default life) or 2 (twice as many bad nights), "
                "oom@9 (the best batch size runs out of memory on night 9 alone), or both: 1,oom@9"
            )
        nights = () if m.group(2) is None else tuple(int(n) for n in m.group(2).split("+"))
        return cls(0.0 if m.group(1) is None else float(m.group(1)), oom_nights=nights)

    def describe(self) -> str:
        oom = f"oom@{'+'.join(map(str, self.oom_nights))}" if self.oom_nights else ""
        if oom and self.scale == 0:
            return oom
        return f"{self.scale:g}" + (f",{oom}" if oom else "")

    def nights(
        self,
        seed: int,
        recurrences: int,
        batch_sizes: tuple[int, ...],
        b0: int,
        run_time: float,
        best: int | None = None,
    ) -> tuple[NightLife, ...]:
        """Each night's bad luck, drawn from ``seed`` alone; night 1 is quiet.

        Args:
            seed: The run's seed.
            recurrences: Nights to draw.
            batch_sizes: The job's batch sizes (an out-of-memory night names one of them).
            b0: The default batch size.
            run_time: The default's mean run time (unit: s): a stall is a share of it.
            best: The best batch size (the Oracle's): ``oom_nights``' out-of-memory starts there.
        """
        rng = np.random.default_rng([seed, 0x11FE])
        above = sorted(b for b in batch_sizes if b > b0)
        upto = sorted(b for b in batch_sizes if b <= b0)
        out = [NightLife()]
        s = self.scale
        for _ in range(1, recurrences):
            u = rng.random(12)
            oom = None
            if u[0] < self.oom * s:
                pool = above if above and u[1] < 0.75 else upto
                oom = pool[int(u[2] * len(pool))] if pool else None
            night = dict(oom_from=oom)
            if u[3] < self.slow_night * s:
                if u[4] < 0.5:
                    night["night_factor"] = self.lo + (self.hi - self.lo) * u[5]
                else:
                    night["night_stall"] = run_time * (0.2 + 0.8 * u[5])
            first = u[6]
            cut = 0.2 + 0.6 * u[8]
            edges = np.cumsum([self.slow_try, self.interrupted, self.lost, self.environment]) * s
            if first < edges[0]:
                if u[7] < 0.5:
                    night["try_factor"] = self.lo + (self.hi - self.lo) * u[9]
                else:
                    night["try_stall"] = run_time * (0.2 + 0.8 * u[9])
            elif first < edges[1]:
                night["interrupted"] = cut
            elif first < edges[2]:
                night["lost"] = cut
            elif first < edges[3]:
                night["environment"] = True
            out.append(NightLife(**night))  # type: ignore[arg-type]
        for n in self.oom_nights:
            if best is not None and n <= recurrences:
                out[n - 1] = dataclasses.replace(out[n - 1], oom_from=best, oom_marked=True)
        return tuple(out)
