"""What the trial runner calls back: a listener of its progress and a power-limit profiler (protocols)."""

from __future__ import annotations

from typing import Protocol


class TrialListener(Protocol):
    """Receives live progress of a trial (the CLI renders it)."""

    def on_output(self, line: str) -> None: ...

    def on_epoch(self, epoch: int, metric: float, time: float, energy: float, cost: float) -> None: ...

    def on_tick(self, time: float, energy: float, cost: float) -> None: ...


class NullListener:
    """Ignores everything."""

    def on_output(self, line: str) -> None:
        pass

    def on_epoch(self, epoch: int, metric: float, time: float, energy: float, cost: float) -> None:
        pass

    def on_tick(self, time: float, energy: float, cost: float) -> None:
        pass


class TrialProfiler(Protocol):
    """What the launcher needs from a power-limit profiler (see `zeus_run.power.JitProfiler`)."""

    done: bool
    chosen: float | None

    def start(self) -> None: ...

    def on_iters_per_epoch(self, iters: int) -> None: ...

    def observe(self, steps: int, script_time: float | None, time: float, energy: float) -> None: ...

    def abandon(self, why: str) -> None: ...

    def account(self, time: float, energy: float) -> tuple[float, float]: ...

    def overhead(self, eta: float, max_power: float) -> float | None: ...
