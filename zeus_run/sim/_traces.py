"""Loading and validating the Zeus paper's traces into per-job numpy tables.

Two CSV files describe a GPU: ``summary_train.csv`` (epochs each traced run
needed to reach a target metric) and ``summary_power_<gpu>.csv`` (time and
average power of one epoch at each power limit). They are read once with the
``csv`` module into a `JobTable` per job, so that simulating a trial is a few
array lookups.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np

from zeus_run.errors import TraceError

TRAIN_COLUMNS = ("dataset", "network", "optimizer", "batch_size", "run", "target_metric", "target_epoch")
POWER_COLUMNS = ("dataset", "network", "optimizer", "batch_size", "power_limit", "time_per_epoch", "average_power")


@dataclass(frozen=True)
class TraceJob:
    """A recurring job as the traces know it.

    Attributes:
        name: Short name (the paper's jobs are named by dataset).
        dataset: ``dataset`` column value.
        network: ``network`` column value.
        optimizer: ``optimizer`` column value.
        target_metric: Target metric (matched as a float against the train trace).
        max_epochs: Most epochs a trial may run.
        default_batch_size: b0 before capping to the GPU's largest traced batch size.
    """

    name: str
    dataset: str
    network: str
    optimizer: str
    target_metric: float
    max_epochs: int
    default_batch_size: int


#: The six recurring jobs of the Zeus paper (traces README).
JOBS: dict[str, TraceJob] = {
    j.name: j
    for j in (
        TraceJob("cifar100", "cifar100", "shufflenetv2", "adadelta", 0.6, 100, 1024),
        TraceJob("imagenet", "imagenet", "resnet50", "adadelta", 0.65, 100, 256),
        TraceJob("squad", "squad", "bert_base_uncased", "adamw", 84.0, 6, 32),
        TraceJob("librispeech", "librispeech", "deepspeech2", "adamw", 40.0, 16, 256),
        TraceJob("movielens-1m", "movielens-1m", "ncf", "adam", 0.41, 100, 1024),
        TraceJob("sentiment140", "sentiment140", "bert_base_uncased", "adamw", 0.84, 10, 128),
    )
}


@dataclass(frozen=True)
class JobTable:
    """Everything the simulator needs about one job on one GPU, precomputed.

    Row ``i`` of each array belongs to ``batch_sizes[i]``; column ``j`` of the
    power arrays to ``power_limits[j]``.

    Attributes:
        job: The job.
        gpu: GPU name (from the power trace's file name).
        batch_sizes: Batch sizes with rows in both traces, ascending.
        default_batch_size: b0, capped at the job's largest batch size in the GPU's power trace.
        power_limits: Power limits of the GPU, ascending (unit: W).
        max_power: The GPU's largest power limit in the whole power trace (unit: W).
        time_per_epoch: ``[bs, pl]`` seconds per epoch (NaN where not traced).
        avg_power: ``[bs, pl]`` average power (unit: W; NaN where not traced).
        target_epochs: Per batch size, the traced runs' target epochs (NaN: never reached).
    """

    job: TraceJob
    gpu: str
    batch_sizes: tuple[int, ...]
    default_batch_size: int
    power_limits: tuple[float, ...]
    max_power: float
    time_per_epoch: np.ndarray
    avg_power: np.ndarray
    target_epochs: tuple[np.ndarray, ...]

    @cached_property
    def mean_epochs(self) -> np.ndarray:
        """Per batch size, the mean target epoch of the runs that reached it (NaN: none did)."""
        return np.array(
            [float(np.mean(r[~np.isnan(r)])) if np.any(~np.isnan(r)) else math.nan for r in self.target_epochs]
        )

    @property
    def horizon(self) -> int:
        """The paper's horizon: ``2 x |batch sizes| x |power limits|`` recurrences."""
        return 2 * len(self.batch_sizes) * len(self.power_limits)

    def index(self, batch_size: int) -> int:
        """Row of ``batch_size``.

        Raises:
            TraceError: Not one of this job's batch sizes.
        """
        try:
            return self.batch_sizes.index(batch_size)
        except ValueError:
            raise TraceError(
                f"batch size {batch_size} is not traced for {self.job.name}; traced: {list(self.batch_sizes)}"
            ) from None


@dataclass(frozen=True)
class Traces:
    """The raw rows of one GPU's traces (train rows are shared by all GPUs).

    Attributes:
        gpu: GPU name.
        train: ``(dataset, network, optimizer, batch_size) -> [(target_metric, run, target_epoch)]``.
        power: ``(dataset, network, optimizer, batch_size) -> {power_limit: (time_per_epoch, avg_power)}``.
        max_power: Largest power limit in the power trace (unit: W).
        max_batch_size: Largest batch size in the power trace.
    """

    gpu: str
    train: dict[tuple[str, str, str, int], list[tuple[float, int, float]]]
    power: dict[tuple[str, str, str, int], dict[float, tuple[float, float]]]
    max_power: float
    max_batch_size: int


def gpu_of(power_csv: str | Path) -> str:
    """GPU name from ``summary_power_<gpu>.csv`` (else the file's stem)."""
    stem = Path(power_csv).stem
    return stem[len("summary_power_") :] if stem.startswith("summary_power_") else stem


def trace_gpus(directory: str | Path) -> list[str]:
    """GPUs that have a ``summary_power_<gpu>.csv`` in ``directory``, sorted."""
    return sorted(gpu_of(p) for p in Path(directory).glob("summary_power_*.csv"))


def load_traces(train_csv: str | Path, power_csv: str | Path) -> Traces:
    """Read and validate a train trace and a power trace.

    Raises:
        TraceError: A file is missing, lacks a column, or has a value that is not a number.
    """
    train: dict = {}
    for line, row in _rows(train_csv, TRAIN_COLUMNS):
        key = (row["dataset"], row["network"], row["optimizer"], _int(row, "batch_size", train_csv, line))
        epoch = row["target_epoch"].strip()
        value = math.nan if epoch in ("", "nan", "NaN") else _float(row, "target_epoch", train_csv, line)
        train.setdefault(key, []).append(
            (_float(row, "target_metric", train_csv, line), _int(row, "run", train_csv, line), value)
        )
    power: dict = {}
    for line, row in _rows(power_csv, POWER_COLUMNS):
        key = (row["dataset"], row["network"], row["optimizer"], _int(row, "batch_size", power_csv, line))
        pl = _float(row, "power_limit", power_csv, line)
        power.setdefault(key, {})[pl] = (
            _float(row, "time_per_epoch", power_csv, line),
            _float(row, "average_power", power_csv, line),
        )
    if not power:
        raise TraceError(
            f"power trace {str(power_csv)!r} has no rows; it needs one row per (job, batch_size, power_limit)."
        )
    max_power = max(pl for limits in power.values() for pl in limits)
    max_bs = max(k[3] for k in power)
    return Traces(gpu_of(power_csv), train, power, max_power, max_bs)


def job_table(traces: Traces, job: TraceJob) -> JobTable:
    """Precompute the arrays of ``job`` on ``traces``' GPU.

    Batch sizes are those with rows in both traces (train rows filtered by the
    job's target metric).

    Raises:
        TraceError: No batch size of the job is in both traces.
    """
    prefix = (job.dataset, job.network, job.optimizer)
    epochs: dict[int, np.ndarray] = {}
    for key, rows in traces.train.items():
        if key[:3] != prefix or key not in traces.power:
            continue
        runs = sorted(
            (run, ep)
            for metric, run, ep in rows
            if math.isclose(metric, job.target_metric, rel_tol=1e-9, abs_tol=1e-12)
        )
        if runs:
            epochs[key[3]] = np.array([ep for _, ep in runs], dtype=float)
    if not epochs:
        raise TraceError(
            f"job {job.name!r} ({job.dataset}/{job.network}/{job.optimizer}, target_metric {job.target_metric:g}) has no "
            f"batch size with rows in both the train trace and the {traces.gpu} power trace. Check the job's dataset, "
            "network, optimizer and target_metric against the traces."
        )
    batch_sizes = tuple(sorted(epochs))

    def key_of(bs: int) -> tuple[str, str, str, int]:
        return (job.dataset, job.network, job.optimizer, bs)

    limits = tuple(sorted({pl for bs in batch_sizes for pl in traces.power[key_of(bs)]}))
    tpe = np.full((len(batch_sizes), len(limits)), np.nan)
    pwr = np.full_like(tpe, np.nan)
    for i, bs in enumerate(batch_sizes):
        for pl, (t, p) in traces.power[key_of(bs)].items():
            j = limits.index(pl)
            tpe[i, j], pwr[i, j] = t, p
    job_max = max(k[3] for k in traces.power if k[:3] == prefix)
    capped = min(job.default_batch_size, job_max)
    if capped not in batch_sizes:
        raise TraceError(
            f"default batch size {capped} of job {job.name!r} (b0 {job.default_batch_size}, capped at the job's largest batch size "
            f"in the {traces.gpu} power trace, {job_max}) is not among its traced batch sizes {list(batch_sizes)}."
        )
    return JobTable(
        job=job,
        gpu=traces.gpu,
        batch_sizes=batch_sizes,
        default_batch_size=capped,
        power_limits=limits,
        max_power=traces.max_power,
        time_per_epoch=tpe,
        avg_power=pwr,
        target_epochs=tuple(epochs[bs] for bs in batch_sizes),
    )


JOBS_FILE = "jobs.csv"
JOBS_COLUMNS = ("name", "dataset", "network", "optimizer", "target_metric", "max_epochs", "default_batch_size")


def trace_jobs(directory: str | Path) -> dict[str, TraceJob]:
    """The jobs of a traces directory: its ``jobs.csv`` (as `scripts/gen_traces.py` writes), else the paper's six.

    ``jobs.csv`` has one row per job with the columns of `JOBS_COLUMNS` (others are ignored).

    Raises:
        TraceError: ``jobs.csv`` lacks a column, has a value that is not a number, or names a job twice.
    """
    path = Path(directory) / JOBS_FILE
    if not path.exists():
        return dict(JOBS)
    jobs: dict[str, TraceJob] = {}
    for line, row in _rows(path, JOBS_COLUMNS):
        name = row["name"].strip()
        if name in jobs:
            raise TraceError(f"{path}: line {line}: job {name!r} is named twice; give each row its own name.")
        jobs[name] = TraceJob(
            name=name,
            dataset=row["dataset"],
            network=row["network"],
            optimizer=row["optimizer"],
            target_metric=_float(row, "target_metric", path, line),
            max_epochs=_int(row, "max_epochs", path, line),
            default_batch_size=_int(row, "default_batch_size", path, line),
        )
    if not jobs:
        raise TraceError(f"{path} has no rows; it needs one row per job ({', '.join(JOBS_COLUMNS)}).")
    return jobs


def find_job(name: str) -> TraceJob:
    """One of the paper's six jobs by name.

    Raises:
        TraceError: Unknown name.
    """
    try:
        return JOBS[name]
    except KeyError:
        raise TraceError(
            f"unknown job {name!r}; the traces' jobs are {', '.join(JOBS)} (or pass a job spec YAML)."
        ) from None


def _rows(path: str | Path, required: tuple[str, ...]):
    p = Path(path)
    try:
        f = open(p, newline="", encoding="utf-8")  # noqa: SIM115
    except OSError as exc:
        raise TraceError(
            f"cannot read trace {str(p)!r}: {exc.strerror or exc}. Pass the path of an existing CSV file."
        ) from None
    with f:
        reader = csv.DictReader(f)
        missing = [c for c in required if c not in (reader.fieldnames or ())]
        if missing:
            raise TraceError(f"trace {str(p)!r} lacks column(s) {', '.join(missing)}; it needs {', '.join(required)}.")
        yield from enumerate(reader, start=2)


def _float(row: dict, col: str, path: str | Path, line: int) -> float:
    try:
        return float(row[col])
    except (TypeError, ValueError):
        raise TraceError(f"{path}: line {line}: {col} = {row[col]!r} is not a number.") from None


def _int(row: dict, col: str, path: str | Path, line: int) -> int:
    value = _float(row, col, path, line)
    if not value.is_integer():
        raise TraceError(f"{path}: line {line}: {col} = {row[col]!r} is not an integer.")
    return int(value)


def load_trace_job(path: str | Path) -> TraceJob:
    """A job spec YAML naming the traced job to simulate.

    Required keys: ``dataset``, ``network``, ``optimizer``, ``target_metric``,
    ``max_epochs``, ``default_batch_size``; optional ``name`` (default: the file's stem).

    Raises:
        TraceError: The file cannot be read or is not a YAML mapping.
        SpecError: A key is missing or has the wrong type (every problem is listed).
    """
    import yaml

    from zeus_run.errors import SpecError, SpecProblem

    p = Path(path)
    try:
        data = yaml.safe_load(p.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise TraceError(f"cannot read job spec {str(p)!r}: {exc}") from None
    if not isinstance(data, dict):
        raise TraceError(f"job spec {str(p)!r} is not a YAML mapping of dataset, network, optimizer, ...")
    problems: list[SpecProblem] = []
    kinds = {
        "dataset": str,
        "network": str,
        "optimizer": str,
        "target_metric": float,
        "max_epochs": int,
        "default_batch_size": int,
    }
    values: dict = {}
    for key, kind in kinds.items():
        value = data.get(key)
        ok = (
            isinstance(value, str)
            if kind is str
            else (
                isinstance(value, (int, float))
                and not isinstance(value, bool)
                and (kind is float or float(value).is_integer())
            )
        )
        if value is None:
            problems.append(SpecProblem(key, None, "is required to find the job in the traces", f"Add `{key}:`"))
        elif not ok:
            problems.append(SpecProblem(key, value, f"must be a {kind.__name__}"))
        else:
            values[key] = kind(value)
    if problems:
        raise SpecError(str(p), problems)
    return TraceJob(name=str(data.get("name") or p.stem), **values)
