"""The validated, frozen job spec.

A spec is loaded once (see `_load.py`) and never mutated; everything else in
zeus-run reads these dataclasses.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from zeus_run.accounting import AccountingSettings
from zeus_run.objective import Objective
from zeus_run.start import StartSettings

#: Names that may appear as ``{name}`` in ``command`` and ``env`` values.
PLACEHOLDERS = (
    "batch_size",
    "learning_rate",
    "seed",
    "epochs",
    "target_metric",
    "recurrence",
    "try",
    "python",
    "log_dir",
)

LR_SCALING_RULES = ("sqrt", "linear", "none")
METRIC_SOURCES = ("events", "regex", "jsonl", "file")
ENERGY_SOURCES = ("auto", "nvml", "rapl", "estimate")
#: What ``energy.include`` may count: GPUs (NVML), CPU packages and DRAM (RAPL).
ENERGY_DOMAINS = ("gpu", "cpu", "dram")
POLICIES = ("zeus", "zeus-plus", "zeus-voi")
#: The policy a spec without ``optimizer.policy`` gets (``zeus`` is the published algorithm).
DEFAULT_POLICY = "zeus-voi"
#: The first ``zeus-voi`` revision with a warm start (``optimizer.warm_from``).
WARM_REVISION = 10

#: Knobs whose default depends on the policy: ``zeus`` keeps the published
#: two pruning rounds and two observations per arm; ``zeus-plus`` prunes once and
#: lets its bandit (which knows how noisy one observation is) do the rest;
#: ``zeus-voi`` walks instead of pruning and uses neither.
POLICY_DEFAULTS: dict[str, dict[str, int]] = {
    "zeus": {"pruning_rounds": 2, "num_explorations": 2},
    "zeus-plus": {"pruning_rounds": 1, "num_explorations": 1},
    "zeus-voi": {"pruning_rounds": 0, "num_explorations": 1},  # neither applies to its walk
}
NO_PERMISSION_ACTIONS = ("continue", "stop")
#: How power limits are set (``power_limit.via``).
POWER_LIMIT_VIAS = ("auto", "nvml", "zeusd")
ON_TARGET_ACTIONS = ("stop", "wait")
ENERGY_BASES = ("cpu-time", "wall-time")
#: Where trials run (``executor.kind``): `zeus_run.executors.EXECUTORS`.
EXECUTOR_KINDS = ("local", "slurm")
#: Recurrences an open-ended job (``recurrences: null``) is expected to live when its spec does not say
#: (``lifetime``); records decided before lifetimes existed planned over it too.
DEFAULT_LIFETIME = 100
#: Recurrences that must reach the target after an out-of-memory crash before its batch size is tried again
#: (``oom_retry_after``; doubled with each further crash of it: `zeus_run.engine.memory`).
DEFAULT_OOM_RETRY_AFTER = 5

#: Most recurrences a spec may keep in flight at once.
MAX_CONCURRENCY = 1024
#: Ask/tell: default seconds an ask lives without a heartbeat or a tell, and the least allowed.
DEFAULT_LEASE = 600.0
MIN_LEASE = 1.0


@dataclass(frozen=True)
class OptimizerSettings:
    """Batch-size optimizer knobs (the seeds' ``JobParams`` MAB fields).

    Attributes:
        policy: ``zeus-voi`` (default: value-of-information walk + tempered Thompson Sampling),
            ``zeus`` (pruning + Gaussian Thompson Sampling, as published) or ``zeus-plus``
            (cost-aware pruning); see `zeus_run.optimizer`.
        pruning_rounds: Rounds of pruning exploration before Thompson Sampling
            (default per policy: `POLICY_DEFAULTS`; `for_policy` applies them).
        window_size: Recent observations per arm used by the bandit (0: all).
        prior_mean: Mean of the Gaussian prior over an arm's mean reward (reward = -cost).
        prior_precision: Precision of that prior (0: uninformative).
        num_explorations: Observations an arm needs before it is sampled rather than explored
            (default per policy).
        revision: Revision of ``zeus-voi``'s rules: 12 (the default) is 10 whose exploration ends on the job's own
            evidence on each side of b0: a probe's chance to converge and its share of the budget are counted per
            side, so a probe below b0 that fails leaves the walk upwards open (`zeus_run.optimizer.voi`, docs/optimizer.md);
            11 (no longer offered, built for the run directories recorded under it) is 10 with a warm start that
            predicts an untried batch size's cost as its epochs carried over times its pace measured here
            (`zeus_run.optimizer.legacy.rev10.transfer`); 10 is 9 with a walk at half a doubling a
            step whose probes save no more than the laws of epochs and pace allow and which jumps where the
            runs identify them (`zeus_run.optimizer.voi.laws`), a bandit that runs another batch size only where
            that pays over the recurrences left (`zeus_run.optimizer.voi.bandit`), and the warm start; 9 is 8
            learning each batch size's cost without its first run's power-limit sweep
            (`zeus_run.optimizer.legacy.overhead`); 8 is 7 and a walk whose trend counts a change in epochs to the
            target only as far as it stands out of their noise (`zeus_run.optimizer.legacy.trend`); 7 is 6 and a
            walk down a steep descent that strides two batch sizes (`zeus_run.optimizer.legacy.stride`); 6 is 4 and
            a second look at a batch size whose only run may have been slow; 5 (opt-in) also predicts an
            untried batch size's cost as epochs to the target x cost per epoch (`zeus_run.optimizer.legacy.pace`);
            4 also counts the chance that a probe never converges and stops a probe by its learning curve; 3
            also checks a batch size's first run for pace (a slow recurrence); 2 plans exploration over the
            recurrences left and uses the robust early stop (`zeus_run.optimizer.early_stop`); 1 to 11 are how
            runs recorded before them replay (frozen in `zeus_run.optimizer.legacy`; 12 is
            `zeus_run.optimizer.voi`). ``zeus`` and ``zeus-plus`` keep the paper's rules in both.
        warm_from: A run directory of the same job elsewhere (another GPU, another cluster, or the run
            directory it ran in before a spec change forced a new one) whose history seeds ``zeus-voi``
            (revision 10 or later): epochs to the target carry over, pace and power are measured here.
            Its records are copied into the run directory at its first run (`zeus_run.engine.warm`);
            relative paths start at the spec file's folder. None: a cold start.
    """

    policy: str = DEFAULT_POLICY
    pruning_rounds: int = POLICY_DEFAULTS[DEFAULT_POLICY]["pruning_rounds"]
    window_size: int = 0
    prior_mean: float = 0.0
    prior_precision: float = 0.0
    num_explorations: int = POLICY_DEFAULTS[DEFAULT_POLICY]["num_explorations"]
    revision: int = 12
    warm_from: str | None = None

    @classmethod
    def for_policy(cls, policy: str = DEFAULT_POLICY, **knobs: Any) -> OptimizerSettings:
        """Settings of ``policy`` with its own defaults (`POLICY_DEFAULTS`) for knobs not given.

        Raises:
            ValueError: Unknown policy.
        """
        if policy not in POLICY_DEFAULTS:
            raise ValueError(f"unknown optimizer policy {policy!r}; known: {', '.join(POLICIES)}")
        return cls(policy=policy, **{**POLICY_DEFAULTS[policy], **knobs})


@dataclass(frozen=True)
class MetricSettings:
    """How the validation metric of each epoch is read from a trial.

    Attributes:
        source: ``events`` (the training script uses `zeus_run.train` and writes
            JSON lines to ``$ZEUS_EVENT_LOG``), ``regex`` (each match of
            ``regex`` in the script's output is one epoch's metric), ``jsonl`` (each
            JSON object line of the output, or of ``path``, holding ``key`` is an epoch)
            or ``file`` (each line the script appends to ``path`` is an epoch: its last
            number, or ``regex``'s match).
        regex: Pattern with one capture group holding the metric (``regex``; ``file`` optionally).
        key: The metric's key in each JSON line (``jsonl``).
        path: The file the script appends to (``file``; ``jsonl`` optionally), relative to ``workdir``; it may hold
            placeholders (``{log_dir}/metrics.jsonl``: a file per trial).
        name: The metric's name in a training framework's logs (e.g. ``eval_accuracy``), for
            the Hugging Face and Lightning callbacks (`zeus_run.integrations`); None: theirs.
    """

    source: str = "events"
    regex: str | None = None
    name: str | None = None
    key: str | None = None
    path: str | None = None


@dataclass(frozen=True)
class EnergySettings:
    """Where energy readings come from.

    Attributes:
        source: ``auto`` (NVML if it initializes, else RAPL if readable, else estimate), ``nvml``,
            ``rapl`` (CPU package and DRAM counters, for CPU-only jobs) or ``estimate``.
        watts: Constant power assumed by the estimate (unit: W). Also its max power for the cost.
        gpus: GPU indices or UUIDs of the job (default: ``CUDA_VISIBLE_DEVICES`` or all GPUs).
        basis: What the estimate charges ``watts`` for: ``cpu-time`` (the CPU time of the
            trial's processes, at most wall time: a loaded machine does not make the job's
            own energy look larger) or ``wall-time`` (for a GPU job that NVML cannot measure).
        include: Domains to count (`ENERGY_DOMAINS`): ``gpu`` alone by default; ``cpu`` and
            ``dram`` add RAPL's package and DRAM counters to the GPUs' energy (with
            ``source: rapl``, which of the two to count).
    """

    source: str = "auto"
    watts: float = 100.0
    gpus: tuple[str, ...] | None = None
    basis: str = "cpu-time"
    include: tuple[str, ...] = ("gpu",)


@dataclass(frozen=True)
class PowerLimitSettings:
    """Just-in-time GPU power-limit optimization (NVML only).

    Attributes:
        enabled: Profile and set power limits on GPUs.
        step_watts: Distance between profiled power limits (unit: W).
        warmup_iters: Training iterations run at a limit before measuring.
        measure_iters: Training iterations measured at each limit.
        observer_mode: Profile and account as if the best limit were used, but keep the maximum.
        on_no_permission: ``continue`` without power-limit optimization, or ``stop``.
        min_window_s: Shortest measurement window per limit (unit: s; see README "Profiling windows").
        settle_s: Wait after setting a limit before measuring (unit: s).
        min_counter_updates: Energy-counter changes a measurement window must see.
        via: How limits are set: ``nvml`` (root or CAP_SYS_ADMIN), ``zeusd`` (the Zeus daemon
            over its Unix socket, no root) or ``auto`` (zeusd when ``socket`` or ``ZEUSD_SOCK_PATH``
            is set, else NVML).
        socket: zeusd's Unix socket (None: ``ZEUSD_SOCK_PATH``, else ``/run/zeusd/zeusd.sock``).
    """

    enabled: bool = True
    step_watts: int = 25
    warmup_iters: int = 10
    measure_iters: int = 40
    observer_mode: bool = False
    on_no_permission: str = "continue"
    min_window_s: float = 5.0
    settle_s: float = 1.0
    min_counter_updates: int = 20
    via: str = "auto"
    socket: str | None = None


@dataclass(frozen=True)
class StopSettings:
    """How a trial is stopped (see README, "Stopping a trial").

    Every stop creates the stop file (``ZEUS_STOP_FILE``) first. Then:

    * after the target or ``max_epochs`` the script may finish by itself (save its
      model) for ``grace`` seconds;
    * after an early stop (cost threshold), a timeout or a launcher shutdown, it gets
      ``term_grace`` seconds;

    then SIGTERM, and SIGKILL ``kill_grace`` seconds later.

    Attributes:
        grace: Seconds a script may take to exit by itself after the target or
            ``max_epochs`` (None: wait for ever).
        term_grace: Seconds between the stop file and SIGTERM on a prompt stop.
        kill_grace: Seconds between SIGTERM and SIGKILL.
        on_target: Regex mode only (the script cannot see the target): ``stop`` treats
            the target and ``max_epochs`` as a prompt stop (a SIGTERM handler can save);
            ``wait`` lets the script run to its own end (within ``grace``).
    """

    grace: float | None = 300.0
    term_grace: float = 2.0
    kill_grace: float = 10.0
    on_target: str = "stop"


@dataclass(frozen=True)
class ControlSettings:
    """``saving.control``: re-running the default as a control (`zeus_run.engine.control`).

    Attributes:
        max_share: The most the controls may cost beyond the cheapest batch size, as a share of what
            the job has spent (0.05 by default: a saving of 25% stays above 20% while the default's cost,
            which one run knows only to a tenth or so, becomes measurable; docs/savings.md).
    """

    max_share: float = 0.05


@dataclass(frozen=True)
class SavingSettings:
    """How a saving is made measurable (docs/savings.md, "The default's cost").

    Attributes:
        control: Control runs of the default (None: never).
    """

    control: ControlSettings | None = field(default_factory=ControlSettings)


@dataclass(frozen=True)
class ExecutorSettings:
    """Where each trial runs (README, "Running on a Slurm cluster").

    ``kind: local`` runs trials as subprocesses of the launcher; ``kind: slurm`` submits
    each as a Slurm batch job (the other fields, `zeus_run.slurm.SlurmSettings`, apply
    to it only). Changing the executor does not change what the optimizer learned, so
    a run may be resumed under another executor.

    Attributes:
        kind: ``local`` or ``slurm``.
        partition: ``--partition``; None: the cluster's default partition.
        gpus: GPUs per trial, ``--gres=gpu:N`` (0: none).
        time: ``--time`` per trial as Slurm writes it (``"02:00:00"``, ``"90"`` minutes); None:
            the partition's default. A trial over it ends TIMEOUT, an infrastructure failure.
        account: ``--account``, or None.
        qos: ``--qos``, or None.
        extra_args: More sbatch options, as written (options zeus-run sets are refused).
        heartbeat_timeout: Seconds a running trial's agent may go without writing its
            heartbeat into the run directory (after its job started, or since its last one)
            before zeus-run gives up on it (unit: s).
        infra_retries: Trials ended by Slurm in a row (TIMEOUT, NODE_FAIL, PREEMPTED, a
            person's scancel) that are retried before the run stops with an error.
    """

    kind: str = "local"
    partition: str | None = None
    gpus: int = 1
    time: str | None = None
    account: str | None = None
    qos: str | None = None
    extra_args: tuple[str, ...] = ()
    heartbeat_timeout: float = 120.0
    infra_retries: int = 3


@dataclass(frozen=True)
class MlflowExport:
    """``export.mlflow``: log each trial to MLflow as it ends.

    Attributes:
        tracking_uri: MLflow tracking URI (``http://host:5000``, ``sqlite:///mlflow.db``).
        experiment: Experiment name (created if missing).
    """

    tracking_uri: str
    experiment: str = "zeus-run"


@dataclass(frozen=True)
class PrometheusExport:
    """``export.prometheus``: push the job's metrics after each trial.

    Attributes:
        push: Pushgateway URL (``http://host:9091``).
    """

    push: str


@dataclass(frozen=True)
class ExportSettings:
    """Live export after each trial (spec section ``export``; see `zeus_run.export`); None: off."""

    mlflow: MlflowExport | None = None
    prometheus: PrometheusExport | None = None


@dataclass(frozen=True)
class JobSpec:
    """One recurring training job, validated.

    Attributes:
        name: Job name; names the default run directory.
        command: argv of the training script, with ``{placeholders}``.
        shell: Run ``command`` (a single string) through ``/bin/sh -c``.
        stdout: Where the script's stdout and stderr go: ``pipe``, or ``pty`` (a pseudo-terminal,
            for a program that buffers its output when it is not on a terminal).
        workdir: Working directory of the training script.
        env: Extra environment variables (values may hold placeholders).
        batch_sizes: Feasible batch sizes, sorted ascending.
        default_batch_size: b0: the batch size the job ran with before zeus-run.
        learning_rate: Learning rate at the default batch size, if the script takes one.
        lr_scaling: How the learning rate scales with batch size: sqrt, linear or none.
        target_metric: Validation metric that counts as converged.
        higher_is_better: Whether larger metric values are better.
        max_epochs: Most epochs a trial may run.
        eta: Weight of energy vs time in the cost, in [0, 1] (set from ``objective`` when that is given).
        objective: The ``objective`` section (None: the ``cost`` objective with ``eta``); see `goal`.
        beta: Early-stop a trial whose cost will exceed beta x best cost so far; None disables.
        recurrences: How many times the job recurs; None: open-ended (one recurrence per `run --next`).
            The optimizer plans over it (a failed recurrence counts), whatever a door runs at a time.
        lifetime: Open-ended jobs (``recurrences: null``): the recurrences the job is expected to live,
            which the optimizer plans over instead (exploration must pay for itself within it); the
            future is taken as memoryless, so it is the same at every recurrence. Unused with a
            finite ``recurrences``.
        max_tries: Trials per recurrence before giving up on the target: the recurrence is recorded as failed and
            the job goes on with the next one.
        oom_retry_after: A batch size that ran out of memory (where a smaller one then reached the target) is
            shut out, with every larger one, until this many recurrences have reached the target after it; then it
            may be tried again, and each further out-of-memory crash of it doubles the wait (5, 10, 20...). Its
            first crash after it (or a larger batch size) reached the target on this job shuts it out for that
            night only: it fits, so the machine (a co-tenant on a shared GPU) is the likelier cause. A batch size
            that truly does not fit costs one short crashed try each time it is tried again. null: never again.
            Each crash keeps the value it was recorded under, so a change applies to later crashes.
        seed: Seed of the optimizer and the training scripts (trial seed = seed + trial index).
        timeout: Wall-clock limit of one trial (unit: s), or None.
        max_early_stops: Early stops (cost threshold) a recurrence may take; its next try
            runs the best known batch size without a threshold (None: never, as in the paper).
        concurrency: Recurrences in flight at once (1: one after another); under ask/tell, asks in flight.
        lease: Ask/tell: seconds an ask lives without a heartbeat or a tell; then it is
            recorded as an infrastructure failure and its recurrence is asked again.
        executor: Where trials run (local subprocesses or Slurm jobs).
        accounting: Carbon intensity and price of energy (`zeus_run.accounting`).
        saving: Control runs of the default that make a saving measurable (`SavingSettings`).
        export: Live export after each trial (MLflow, Prometheus Pushgateway).
        start: When each recurrence starts: in the cleanest window before its deadline (`zeus_run.start`).
        run_dir: Directory of history, logs and resolved spec.
        source: The YAML file this came from, if any.
    """

    name: str
    command: tuple[str, ...]
    batch_sizes: tuple[int, ...]
    default_batch_size: int
    target_metric: float
    shell: bool = False
    stdout: str = "pipe"
    workdir: Path = Path(".")
    env: Mapping[str, str] = field(default_factory=dict)
    learning_rate: float | None = None
    lr_scaling: str = "none"
    higher_is_better: bool = True
    max_epochs: int = 100
    eta: float = 0.5
    objective: Objective | None = None
    beta: float | None = 2.0
    recurrences: int | None = 20
    lifetime: int = DEFAULT_LIFETIME
    max_tries: int = 20
    oom_retry_after: int | None = DEFAULT_OOM_RETRY_AFTER
    seed: int = 123456
    timeout: float | None = None
    max_early_stops: int | None = 3
    run_dir: Path = Path("runs")
    optimizer: OptimizerSettings = field(default_factory=OptimizerSettings)
    metric: MetricSettings = field(default_factory=MetricSettings)
    energy: EnergySettings = field(default_factory=EnergySettings)
    power_limit: PowerLimitSettings = field(default_factory=PowerLimitSettings)
    stop: StopSettings = field(default_factory=StopSettings)
    concurrency: int = 1
    lease: float = DEFAULT_LEASE
    executor: ExecutorSettings = field(default_factory=ExecutorSettings)
    accounting: AccountingSettings = field(default_factory=AccountingSettings)
    saving: SavingSettings = field(default_factory=SavingSettings)
    export: ExportSettings = field(default_factory=ExportSettings)
    start: StartSettings = field(default_factory=StartSettings)
    source: Path | None = None

    def to_dict(self) -> dict[str, Any]:
        """A JSON/YAML-serializable dict of every resolved setting."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if dataclasses.is_dataclass(value) and not isinstance(value, type):
                value = {k: _plain(v) for k, v in dataclasses.asdict(value).items()}
            out[f.name] = _plain(value)
        return out

    @property
    def goal(self) -> Objective:
        """What the run optimises: ``objective``, or the ``cost`` objective with ``eta``."""
        return self.objective or Objective("cost", eta=self.eta)

    def with_overrides(self, **changes: Any) -> JobSpec:
        """A copy with some top-level fields replaced (used by CLI overrides)."""
        return dataclasses.replace(self, **changes)

    def with_warm_start(self, source: str | Path) -> JobSpec:
        """A copy that starts warm from the run directory ``source`` (``run --warm-from``: ``optimizer.warm_from``).

        Raises:
            UsageError: The policy has no warm start (``zeus-voi`` revision `WARM_REVISION` or later has), or
                ``source`` is not a usable path (a symbolic link loop).
        """
        from zeus_run.errors import UsageError

        opt = self.optimizer
        if opt.policy != "zeus-voi" or opt.revision < WARM_REVISION:
            raise UsageError(
                f"--warm-from: a warm start needs policy zeus-voi, revision {WARM_REVISION} or later; this spec has "
                f"optimizer.policy {opt.policy}, revision {opt.revision}. Set optimizer: {{policy: zeus-voi, "
                f"revision: {WARM_REVISION}}} in the spec, or leave --warm-from out."
            )
        try:
            path = str(Path(source).expanduser().resolve())
        except (ValueError, OSError, RuntimeError) as exc:  # a symlink loop, a NUL byte, an unknown ~user
            raise UsageError(
                f"--warm-from {str(source)!r} is not a usable path ({exc}). Name the run directory of this job "
                "elsewhere (it holds spec.yaml and history.jsonl)."
            ) from None
        return dataclasses.replace(self, optimizer=dataclasses.replace(opt, warm_from=path))


#: Settings that change what the optimizer has learned. A history recorded
#: under different values cannot be resumed (see `zeus_run.rundir.resume`).
DECISION_FIELDS = (
    "batch_sizes",
    "default_batch_size",
    "eta",
    "objective",
    "beta",
    "target_metric",
    "higher_is_better",
    "max_epochs",
    "seed",
    "optimizer",
    "max_early_stops",
)


def _plain(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    return value
