"""A run's power-limit optimization: which limit each trial runs at, and the profiles it keeps."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from zeus_run.energy import EnergySource, NvmlEnergy, gpu_source
from zeus_run.errors import PowerLimitPermissionError
from zeus_run.objective import Objective
from zeus_run.optimizer.power_limit import (
    JITPowerLimitOptimizer,
    PowerLimitMeasurement,
    PowerLimitState,
    sweep_more,
    unit_cost,
)
from zeus_run.power._controller import HOW_TO_ENABLE, PowerLimitController, PowerLimitRangeError
from zeus_run.power._profiler import JitProfiler
from zeus_run.power._store import ProfileStore, model_key
from zeus_run.power._zeusd import HOW_TO_ZEUSD, ZEUSD_VERSION, ZeusdClient, ZeusdGpu, zeusd_socket
from zeus_run.spec import PowerLimitSettings

logger = logging.getLogger(__name__)


@dataclass
class PowerSession:
    """Power-limit optimization of one run on NVML GPUs: the controller, stored profiles and the JIT policy's state."""

    settings: PowerLimitSettings
    controller: PowerLimitController
    store: ProfileStore
    jit: JITPowerLimitOptimizer
    state: PowerLimitState
    disabled: bool = False

    def for_gpus(self, energy: NvmlEnergy) -> PowerSession:
        """A session over a subset of the run's GPUs (one ``concurrency`` slot's, or one node's):
        its own controller, the profiles of its own GPU model, the same settings and policy."""
        controller, _ = make_controller(self.settings, energy)
        store = ProfileStore(self.store.path.parent, model_key([g.name for g in energy.gpus]))
        jit = JITPowerLimitOptimizer(self.jit.eta, energy.max_power, self.jit.objective)
        return PowerSession(self.settings, controller, store, jit, jit.initial_state(), self.disabled)

    def profiler_for(self, batch_size: int, left: float | None = None) -> JitProfiler | None:
        """A profiler for a trial of ``batch_size``: applying the stored choice if profiled, continuing a
        partial profile's sweep if one is stored, else fresh.

        The store is read again first: another slot or node may have profiled this model since.

        Args:
            batch_size: The trial's batch size.
            left: Recurrences left (`zeus_run.optimizer.power_limit.recurrences_left`); on a short
                horizon the sweep may stop before the lowest limits (`sweep_more`). None: a full sweep.
        """
        if self.disabled or not self.controller.usable:
            return None
        self.store.reload()

        def pick(profile):
            return self.jit.observe_profile(self.state, batch_size, profile).predict(batch_size)

        stored = self.store.get(batch_size)
        if stored:
            return JitProfiler.from_profile(stored, pick, self._set, self.settings.observer_mode)
        limits = self.controller.candidate_limits(self.settings.step_watts)
        partial = [m for m in self.store.partial(batch_size) if m.power_limit in limits]
        if partial:
            logger.info(
                "batch size %d: continuing its power-limit profile (%d of %d limits measured in earlier trials)",
                batch_size,
                len(partial),
                len(limits),
            )

        def more(profile: Sequence[PowerLimitMeasurement]) -> bool:
            eta, top = self.jit.objective.cost_eta, self.jit.max_power
            return left is None or sweep_more([unit_cost(m, eta, top) for m in profile], len(limits), left)

        return JitProfiler(
            limits,
            pick,
            self._set,
            self.settings.warmup_iters,
            self.settings.measure_iters,
            self.settings.observer_mode,
            min_window_s=self.settings.min_window_s,
            settle_s=self.settings.settle_s,
            min_updates=self.settings.min_counter_updates,
            measured=partial,
            more=more,
        )

    def _set(self, limit_w: float) -> bool:
        try:
            return self.controller.set(limit_w)
        except PowerLimitRangeError as exc:  # e.g. a stored profile from other GPUs: never fail mid-run
            logger.warning("%s; keeping the GPUs' own limit", exc)
            return False

    def trial_done(self, batch_size: int, profiler: JitProfiler) -> None:
        """Persist a newly completed profile (later trials of the batch size reuse it) or a partial one
        (the next trial of the batch size continues its sweep). Warns when the trial measured no
        limit at all (`JitProfiler.stall`): a job whose training is that short never gets a profile."""
        why = profiler.stall()
        if why is not None:
            logger.warning(
                "batch size %d: no power limit measured in this trial: %s. The next trial of this batch size "
                "starts the window again; if the training is always this short, lower power_limit.min_window_s "
                "and settle_s, or set power_limit.enabled: false",
                batch_size,
                why,
            )
        if profiler.partial and self.store.get(batch_size) is None:
            self.store.put(batch_size, profiler.profile, partial=True)
            logger.info(
                "batch size %d: power-limit profile partial (%d of %d limits); the next trial continues it",
                batch_size,
                len(profiler.profile),
                len(profiler.limits),
            )
            return
        if profiler.complete and self.store.get(batch_size) is None:
            self.store.put(batch_size, profiler.profile)
            self.state = self.jit.observe_profile(self.state, batch_size, profiler.profile)
            logger.info(
                "batch size %d: power limit %g W (profile saved in %s)", batch_size, profiler.chosen, self.store.path
            )


def make_controller(settings: PowerLimitSettings, energy: NvmlEnergy) -> tuple[PowerLimitController, str]:
    """The controller of ``energy``'s GPUs, through NVML or zeusd (``power_limit.via``/``socket``),
    and how to enable it when permission is missing."""
    sock = zeusd_socket(settings.via, settings.socket)
    if sock is None:
        return PowerLimitController([g.gpu for g in energy.gpus]), HOW_TO_ENABLE
    client = ZeusdClient(sock)
    logger.info("power limits are set through zeusd at %s (API of zeusd %s)", sock, ZEUSD_VERSION)
    return PowerLimitController([ZeusdGpu(g.gpu, client) for g in energy.gpus]), HOW_TO_ZEUSD


def open_power_session(
    settings: PowerLimitSettings,
    eta: float,
    energy: EnergySource,
    run_dir: Path,
    objective: Objective | None = None,
) -> PowerSession | None:
    """Set up power-limit optimization, or None (estimate energy, disabled, or no permission).

    Args:
        settings: The spec's ``power_limit`` section.
        eta: The cost knob (the JIT policy minimises the same cost as the batch-size optimizer).
        energy: The run's energy source (only `NvmlEnergy` GPUs get power limits).
        run_dir: Where ``power_profiles.json`` lives.
        objective: What the limit choice minimises (default: the ``cost`` objective with ``eta``).

    Raises:
        PowerLimitPermissionError: Limits cannot be set and ``on_no_permission`` is ``stop``.
    """
    gpus = gpu_source(energy)
    if not settings.enabled or gpus is None:
        return None  # CPU machines never reach GPU code
    energy = gpus
    controller, how = make_controller(settings, energy)
    if not controller.check_permission():
        if settings.on_no_permission == "stop":
            raise PowerLimitPermissionError(
                f"Cannot set GPU power limits: {controller.reason}. {how} "
                "Or set power_limit.on_no_permission: continue to run without power-limit optimization."
            )
        logger.warning("power-limit optimization is off: %s. %s", controller.reason, how)
        return None
    store = ProfileStore(run_dir, model_key([g.name for g in energy.gpus]))
    jit = JITPowerLimitOptimizer(eta, energy.max_power, objective)
    state = jit.initial_state()
    for bs, profile in store.profiles.items():
        state = jit.observe_profile(state, bs, profile)
    logger.info(
        "power-limit optimization on: %s; %d batch size(s) already profiled", controller.describe(), len(store.profiles)
    )
    return PowerSession(settings, controller, store, jit, state)
