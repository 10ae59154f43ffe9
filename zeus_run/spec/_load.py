"""Load a YAML job spec into a validated `JobSpec`, reporting every problem at once.

The YAML is read by `zeus_run.spec._yaml` (size, depth and alias limits,
duplicate keys, YAML 1.2 numbers) before anything is built from it.
"""

from __future__ import annotations

import difflib
import logging
import math
import re
import shlex
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from zeus_run.accounting import AccountingSettings
from zeus_run.errors import SpecError, SpecProblem, UsageError
from zeus_run.objective import KINDS as OBJECTIVE_KINDS
from zeus_run.objective import Objective
from zeus_run.slurm._settings import parse_time_limit, reserved_option
from zeus_run.spec._model import (
    ENERGY_BASES,
    ENERGY_DOMAINS,
    ENERGY_SOURCES,
    EXECUTOR_KINDS,
    LR_SCALING_RULES,
    MAX_CONCURRENCY,
    METRIC_SOURCES,
    NO_PERMISSION_ACTIONS,
    ON_TARGET_ACTIONS,
    PLACEHOLDERS,
    POLICIES,
    POWER_LIMIT_VIAS,
    EnergySettings,
    ExecutorSettings,
    ExportSettings,
    JobSpec,
    MetricSettings,
    MlflowExport,
    OptimizerSettings,
    PowerLimitSettings,
    PrometheusExport,
    StopSettings,
)
from zeus_run.spec._yaml import MAX_BYTES, YamlDocument, YamlLimitError, load_yaml

logger = logging.getLogger(__name__)

#: Largest whole number any setting may hold.
MAX_INT = 2**63 - 1
#: Largest batch size.
MAX_BATCH_SIZE = 2**31 - 1
#: Most batch sizes in a spec (a list, or a range once expanded).
MAX_BATCH_SIZES = 1024

_PLACEHOLDER_RE = re.compile(r"\{\{|\}\}|\{([^{}]*)\}")

_SECTIONS: dict[str, type] = {
    "optimizer": OptimizerSettings,
    "metric": MetricSettings,
    "energy": EnergySettings,
    "power_limit": PowerLimitSettings,
    "stop": StopSettings,
    "executor": ExecutorSettings,
    "accounting": AccountingSettings,
    "export": ExportSettings,
}
_TOP_KEYS = (
    "name",
    "command",
    "shell",
    "workdir",
    "env",
    "batch_sizes",
    "default_batch_size",
    "learning_rate",
    "lr_scaling",
    "target_metric",
    "higher_is_better",
    "max_epochs",
    "eta",
    "objective",
    "beta",
    "recurrences",
    "max_tries",
    "seed",
    "timeout",
    "max_early_stops",
    "concurrency",
    "run_dir",
    *_SECTIONS,
)
_SECTION_KEYS = {
    "optimizer": (
        "policy",
        "pruning_rounds",
        "window_size",
        "prior_mean",
        "prior_precision",
        "num_explorations",
        "revision",
    ),
    "metric": ("source", "regex"),
    "energy": ("source", "watts", "gpus", "basis", "include"),
    "power_limit": (
        "enabled",
        "step_watts",
        "warmup_iters",
        "measure_iters",
        "observer_mode",
        "on_no_permission",
        "min_window_s",
        "settle_s",
        "min_counter_updates",
        "via",
        "socket",
    ),
    "stop": ("grace", "term_grace", "kill_grace", "on_target"),
    "executor": (
        "kind",
        "partition",
        "gpus",
        "time",
        "account",
        "qos",
        "extra_args",
        "heartbeat_timeout",
        "infra_retries",
    ),
    "accounting": ("carbon_g_per_kwh", "price_per_kwh", "currency"),
    "export": ("mlflow", "prometheus"),
}
#: ``executor`` keys that only a Slurm executor reads.
_SLURM_KEYS = _SECTION_KEYS["executor"][1:]
#: How to set what a reserved sbatch option in ``executor.extra_args`` would set.
_RESERVED_FIX = {
    "--partition": "executor.partition",
    "-p": "executor.partition",
    "--time": "executor.time",
    "-t": "executor.time",
    "--account": "executor.account",
    "-A": "executor.account",
    "--qos": "executor.qos",
    "-q": "executor.qos",
    "--gres": "executor.gpus",
    "--gpus": "executor.gpus",
    "-G": "executor.gpus",
}


def load_spec(path: str | Path) -> JobSpec:
    """Read and validate a job spec file.

    Args:
        path: YAML file. Relative paths inside it (``workdir``, ``run_dir``)
            resolve against the file's directory.

    Raises:
        UsageError: The file does not exist or cannot be read.
        SpecError: The YAML is malformed or a field is invalid (all problems listed).
    """
    p = Path(path)
    if not p.is_file():
        raise UsageError(
            f"Job spec {str(p)!r} does not exist or is not a file. "
            "Pass the path of a YAML job spec, e.g. `zeus-run configs/demo.yaml`."
        )
    try:
        with open(p, "rb") as f:
            raw = f.read(MAX_BYTES + 1)
        text = raw.decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"Cannot read job spec {str(p)!r}: {exc}. Check its permissions and encoding.") from exc
    if len(raw) > MAX_BYTES:
        raise SpecError(
            str(p),
            [
                SpecProblem(
                    "(file)",
                    None,
                    f"is larger than {MAX_BYTES:,} bytes; a job spec is a page of settings",
                    "Pass the job spec, not a data file",
                )
            ],
        )
    return parse_spec(text, source=p)


def parse_spec(text: str, source: Path | None = None) -> JobSpec:
    """Validate spec YAML text. See `load_spec`."""
    label = str(source) if source else "<spec>"
    try:
        doc = load_yaml(text)
    except YamlLimitError as exc:
        raise SpecError(label, [SpecProblem("(yaml)", None, exc.why, "Fix the file at that line", exc.line)]) from None
    if not isinstance(doc.data, dict):
        raise SpecError(
            label,
            [
                SpecProblem(
                    "(top level)",
                    None,
                    "the spec must be a YAML mapping of settings",
                    "Start from configs/demo.yaml",
                    1,
                )
            ],
        )
    base = source.parent.resolve() if source else Path.cwd()
    return _Validator(doc, base, label, source).build()


class _Validator:
    """Reads fields out of the raw mapping, collecting problems instead of raising."""

    def __init__(self, doc: YamlDocument, base: Path, label: str, source: Path | None) -> None:
        self.data: dict = doc.data
        self.lines = doc.lines
        self.text = doc.text
        self.base = base
        self.label = label
        self.source = source
        self.problems: list[SpecProblem] = []
        for dup in doc.duplicates:
            self.problems.append(
                SpecProblem(
                    dup.path,
                    dup.text,
                    f"is set twice, on lines {dup.first} and {dup.second} (YAML would silently keep the last)",
                    "Remove one of them",
                    dup.second,
                )
            )

    # -- problem recording ---------------------------------------------------
    def problem(self, field: str, value: object, why: str, fix: str = "") -> None:
        self.problems.append(SpecProblem(field, value, why, fix, self.lines.get(field)))

    def unknown_keys(self, mapping: Mapping, allowed: tuple[str, ...], prefix: str) -> None:
        for key in mapping:
            if key not in allowed:
                close = difflib.get_close_matches(str(key), allowed, n=1) if len(str(key)) < 100 else []
                fix = f"Did you mean {close[0]!r}?" if close else f"Known keys: {', '.join(allowed)}"
                self.problem(f"{prefix}{key}", mapping[key], "unknown key", fix)

    # -- typed getters ---------------------------------------------------------
    def get(self, mapping: Mapping, key: str, prefix: str, default: Any, check: Callable[[str, Any], Any]) -> Any:
        if key not in mapping or (mapping[key] is None and default is not _REQUIRED):
            if default is _REQUIRED:
                return check(prefix + key, None)
            return default
        return check(prefix + key, mapping[key])

    def int_(self, lo: int | None = None, hi: int = MAX_INT, fix: str = "") -> Callable[[str, Any], Any]:
        def check(field: str, v: Any) -> Any:
            if v is None:
                self.problem(field, v, "is required", fix or "Set it to a whole number")
                return None
            if isinstance(v, bool) or not isinstance(v, int):
                self.problem(field, v, "must be a whole number", fix or "Write it without quotes or decimals")
                return None
            if lo is not None and v < lo:
                self.problem(field, v, f"must be at least {lo}", fix)
                return None
            if v > hi:
                self.problem(field, v, f"must be at most {hi}", fix)
                return None
            return v

        return check

    def float_(
        self, lo: float | None = None, hi: float | None = None, strict_lo: bool = False, fix: str = ""
    ) -> Callable[[str, Any], Any]:
        def check(field: str, v: Any) -> Any:
            if v is None:
                self.problem(field, v, "is required", fix or "Set it to a number")
                return None
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                self.problem(field, v, "must be a finite number", fix or "Write a number such as 0.5")
                return None
            if lo is not None and (v <= lo if strict_lo else v < lo):
                bound = f"greater than {lo}" if strict_lo else f"at least {lo}"
                self.problem(field, v, f"must be {bound}", fix)
                return None
            if hi is not None and v > hi:
                self.problem(field, v, f"must be at most {hi}", fix)
                return None
            return float(v)

        return check

    def bool_(self) -> Callable[[str, Any], Any]:
        def check(field: str, v: Any) -> Any:
            if not isinstance(v, bool):
                self.problem(field, v, "must be true or false", "Write true or false without quotes")
                return None
            return v

        return check

    def choice(self, options: tuple[str, ...]) -> Callable[[str, Any], Any]:
        def check(field: str, v: Any) -> Any:
            if v not in options:
                close = difflib.get_close_matches(str(v), options, n=1)
                hint = f"Did you mean {close[0]!r}? " if close else ""
                self.problem(field, v, f"must be one of {', '.join(options)}", f"{hint}".strip())
                return None
            return v

        return check

    def str_(self) -> Callable[[str, Any], Any]:
        def check(field: str, v: Any) -> Any:
            if not isinstance(v, str) or not v.strip():
                self.problem(field, v, "must be a non-empty string")
                return None
            return v

        return check

    # -- the spec --------------------------------------------------------------
    def build(self) -> JobSpec:
        d = self.data
        self.unknown_keys(d, _TOP_KEYS, "")
        g = self.get
        default_name = self.source.stem if self.source else "job"
        name = g(d, "name", "", default_name, self.str_())
        if name is not None and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", str(name)):
            self.problem(
                "name",
                name,
                "must be letters, digits, '.', '_' or '-' (it names a directory)",
                "Rename the job, e.g. 'cifar-nightly'",
            )
            name = None
        shell = g(d, "shell", "", False, self.bool_())
        command = self.command(d.get("command"), bool(shell))
        batch_sizes = self.batch_sizes(d.get("batch_sizes"))
        default_bs = g(
            d,
            "default_batch_size",
            "",
            _REQUIRED,
            self.int_(1, MAX_BATCH_SIZE, fix="Set it to the batch size the job normally uses"),
        )
        if batch_sizes and default_bs is not None and default_bs not in batch_sizes:
            self.problem(
                "default_batch_size",
                default_bs,
                f"is not in batch_sizes {list(batch_sizes)}",
                "Add it to batch_sizes or pick one of them",
            )
        learning_rate = g(d, "learning_rate", "", None, self.float_(0.0, strict_lo=True))
        lr_scaling = g(d, "lr_scaling", "", "none", self.choice(LR_SCALING_RULES))
        if lr_scaling not in (None, "none") and learning_rate is None and "lr_scaling" in d:
            self.problem(
                "lr_scaling", lr_scaling, "needs learning_rate (the rate at default_batch_size)", "Set learning_rate"
            )
        target = g(
            d, "target_metric", "", _REQUIRED, self.float_(fix="Set the validation metric that counts as converged")
        )
        higher = g(d, "higher_is_better", "", True, self.bool_())
        max_epochs = g(d, "max_epochs", "", 100, self.int_(1))
        eta = g(d, "eta", "", 0.5, self.float_(0.0, 1.0, fix="eta weighs energy against time; pick a value in [0, 1]"))
        objective = self.objective(d, eta)
        if objective is not None:
            eta = objective.cost_eta
        beta = self.beta(d)
        recurrences = g(d, "recurrences", "", 20, self.int_(1))
        max_tries = g(d, "max_tries", "", 20, self.int_(1))
        seed = g(d, "seed", "", 123456, self.int_(0))
        timeout = g(
            d, "timeout", "", None, self.float_(0.0, strict_lo=True, fix="Seconds per trial, or null for no limit")
        )
        workdir = self.path(d, "workdir", Path("."))
        run_dir = self.path(d, "run_dir", Path("runs") / str(name or default_name))
        env = self.env(d.get("env"))

        opt = self.section("optimizer", self.optimizer)
        metric = self.section("metric", self.metric)
        energy = self.section("energy", self.energy)
        power = self.section("power_limit", self.power_limit)
        stop = self.section("stop", self.stop)
        executor = self.section("executor", self.executor)
        accounting = self.section("accounting", self.accounting)
        export = self.section("export", self.export)
        concurrency = g(
            d,
            "concurrency",
            "",
            1,
            self.int_(1, MAX_CONCURRENCY, fix="Recurrences in flight at once; 1 runs them one after another"),
        )
        max_early_stops = (
            None
            if "max_early_stops" in d and d["max_early_stops"] is None
            else g(
                d, "max_early_stops", "", 3, self.int_(1, fix="Early stops before the fallback try, or null for never")
            )
        )

        self.placeholders(command, env, learning_rate)
        if workdir is not None and "workdir" in d and not workdir.is_dir():
            self.problem(
                "workdir",
                d["workdir"],
                f"directory {str(workdir)!r} does not exist",
                "Create it or fix the path (relative paths start at the spec file's folder)",
            )

        if self.problems or workdir is None or run_dir is None:
            raise SpecError(self.label, self.problems)
        return JobSpec(
            name=name,
            command=command,
            shell=shell,
            workdir=workdir,
            env=env,
            batch_sizes=batch_sizes,
            default_batch_size=default_bs,
            learning_rate=learning_rate,
            lr_scaling=lr_scaling,
            target_metric=target,
            higher_is_better=higher,
            max_epochs=max_epochs,
            eta=eta,
            objective=objective,
            beta=beta,
            recurrences=recurrences,
            max_tries=max_tries,
            seed=seed,
            timeout=timeout,
            run_dir=run_dir,
            optimizer=opt,
            metric=metric,
            energy=energy,
            power_limit=power,
            stop=stop,
            concurrency=concurrency,
            executor=executor,
            accounting=accounting,
            export=export,
            max_early_stops=max_early_stops,
            source=self.source.resolve() if self.source else None,
        )

    def command(self, raw: Any, shell: bool) -> tuple[str, ...]:
        fix = 'Write it as a list, e.g. ["python", "train.py", "--batch-size", "{batch_size}"]'
        if raw is None:
            self.problem("command", None, "is required: the training command to launch", fix)
            return ()
        if isinstance(raw, str):
            if shell:
                return (raw,) if raw.strip() else self._empty_command(raw, fix)
            try:
                argv = tuple(shlex.split(raw))
            except ValueError as exc:
                self.problem("command", raw, f"cannot be split into arguments ({exc})", fix)
                return ()
            return argv or self._empty_command(raw, fix)
        if (
            isinstance(raw, list)
            and raw
            and all(isinstance(a, (str, int, float)) and not isinstance(a, bool) for a in raw)
        ):
            if shell and len(raw) != 1:
                self.problem("command", raw, "with shell: true must be a single string", "Join it into one string")
                return ()
            return tuple(str(a) for a in raw)
        self.problem("command", raw, "must be a non-empty list of strings or one string", fix)
        return ()

    def _empty_command(self, raw: Any, fix: str) -> tuple[str, ...]:
        self.problem("command", raw, "is empty", fix)
        return ()

    def batch_sizes(self, raw: Any) -> tuple[int, ...]:
        fix = "Write a list such as [16, 32, 64] or a range {min: 16, max: 1024} (powers of two) or {min, max, step}"
        if raw is None:
            self.problem("batch_sizes", None, "is required", fix)
            return ()
        if isinstance(raw, dict):
            return self.batch_size_range(raw, fix)
        if isinstance(raw, list):
            if not raw:
                self.problem("batch_sizes", raw, "is empty: the optimizer needs at least one batch size", fix)
                return ()
            if len(raw) > MAX_BATCH_SIZES:
                self.problem("batch_sizes", raw, f"lists {len(raw)} batch sizes; at most {MAX_BATCH_SIZES}", fix)
                return ()
            bad = [v for v in raw if not _whole(v, 1, MAX_BATCH_SIZE)]
            if bad:
                self.problem(
                    "batch_sizes", raw, f"has entries that are not whole numbers in [1, {MAX_BATCH_SIZE}]: {bad}", fix
                )
                return ()
            if len(set(raw)) != len(raw):
                dups = sorted({v for v in raw if raw.count(v) > 1})
                self.problem("batch_sizes", raw, f"lists {dups} more than once", "Remove the duplicates")
                return ()
            return tuple(sorted(raw))
        self.problem("batch_sizes", raw, "must be a list or a {min, max} range", fix)
        return ()

    def batch_size_range(self, raw: dict, fix: str) -> tuple[int, ...]:
        """``{min, max}`` (powers of two) or ``{min, max, step}``, checked before anything is built."""
        self.unknown_keys(raw, ("min", "max", "step"), "batch_sizes.")
        lo, hi, step = raw.get("min"), raw.get("max"), raw.get("step")
        ok = True
        for key, v in (("min", lo), ("max", hi)):
            if not _whole(v, 1, MAX_BATCH_SIZE):
                self.problem(f"batch_sizes.{key}", v, f"must be a whole number in [1, {MAX_BATCH_SIZE}]", fix)
                ok = False
        if step is not None and not _whole(step, 1, MAX_BATCH_SIZE):
            self.problem("batch_sizes.step", step, "must be a positive whole number", "Omit it for powers of two")
            ok = False
        if not ok or not isinstance(lo, int) or not isinstance(hi, int):
            return ()
        if lo > hi:
            self.problem("batch_sizes", raw, "min is larger than max", "Swap them")
            return ()
        if isinstance(step, int):
            count = (hi - lo) // step + 1
            if count > MAX_BATCH_SIZES:
                self.problem(
                    "batch_sizes",
                    raw,
                    f"the range holds {count:,} batch sizes; at most {MAX_BATCH_SIZES}",
                    "Use a larger step or a narrower range",
                )
                return ()
            return tuple(range(lo, hi + 1, step))
        values = tuple(1 << k for k in range(hi.bit_length()) if lo <= (1 << k) <= hi)
        if not values:
            self.problem("batch_sizes", raw, "the range holds no batch size (no power of two between min and max)", fix)
        elif (values[0], values[-1]) != (lo, hi):
            logger.warning(
                "batch_sizes {min: %d, max: %d} is a range of powers of two, so it holds %s (%d and %d are not both "
                "powers of two); write min and max as powers of two, add a step, or list the batch sizes",
                lo,
                hi,
                ", ".join(map(str, values)),
                lo,
                hi,
            )
        return values

    def beta(self, d: Mapping) -> float | None:
        if "beta" not in d or d["beta"] is None:
            return None if "beta" in d else 2.0
        v = d["beta"]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
            self.problem(
                "beta", v, "must be a number greater than 0", "Use e.g. 2.0, or null to disable early stopping"
            )
            return None
        return float(v)

    def path(self, d: Mapping, key: str, default: Path) -> Path | None:
        raw = d.get(key)
        if raw is None:
            return (self.base / default).resolve()
        if not isinstance(raw, str) or not raw.strip():
            self.problem(key, raw, "must be a path string")
            return None
        try:
            p = Path(raw).expanduser()
            return (p if p.is_absolute() else self.base / p).resolve()
        except (ValueError, OSError, RuntimeError) as exc:  # a NUL byte, a symlink loop, an unknown ~user
            self.problem(key, raw, f"is not a usable path ({exc})")
            return None

    def env(self, raw: Any) -> dict[str, str]:
        if raw is None:
            return {}
        if not isinstance(raw, dict):
            self.problem("env", raw, "must be a mapping of NAME: value", "e.g. env: {OMP_NUM_THREADS: 1}")
            return {}
        out = {}
        for k, v in raw.items():
            if not isinstance(k, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", k):
                self.problem(f"env.{k}", v, "is not a valid environment variable name", "Use letters, digits and '_'")
            elif isinstance(v, (dict, list)) or v is None:
                self.problem(f"env.{k}", v, "must be a string or number")
            else:
                # The text the user wrote: `N: 010` is "010", not 8 or 10; `X: 1e-3` stays "1e-3".
                out[k] = self.text.get(f"env.{k}", str(v).lower() if isinstance(v, bool) else str(v))
        return out

    def section(self, key: str, builder: Callable[[Mapping, str], Any]) -> Any:
        raw = self.data.get(key)
        if raw is None:
            return _SECTIONS[key]()
        if not isinstance(raw, dict):
            self.problem(key, raw, "must be a mapping", f"Keys: {', '.join(_SECTION_KEYS[key])}")
            return _SECTIONS[key]()
        self.unknown_keys(raw, _SECTION_KEYS[key], key + ".")
        return builder(raw, key + ".")

    def objective(self, d: Mapping, eta: float | None) -> Objective | None:
        """The ``objective`` section (None when absent: the ``cost`` objective with ``eta``)."""
        raw = d.get("objective")
        if raw is None:
            return None
        keys = ("kind", "eta", "factor")
        if not isinstance(raw, dict):
            self.problem("objective", raw, "must be a mapping", "e.g. objective: {kind: max-slowdown, factor: 1.1}")
            return None
        self.unknown_keys(raw, keys, "objective.")
        kind = self.get(raw, "kind", "objective.", "cost", self.choice(OBJECTIVE_KINDS))
        fix = {"cost": "eta", "max-slowdown": "factor"}
        for key in ("eta", "factor"):
            if key in raw and fix.get(kind) != key:
                self.problem(f"objective.{key}", raw[key], f"does not apply to kind {kind}", "Remove it")
        if "eta" in d and kind != "cost":
            self.problem("eta", d["eta"], f"does not apply to objective kind {kind}", "Remove eta")
        if kind == "cost":
            if "eta" in d and "eta" in raw and d["eta"] != raw["eta"]:
                self.problem("eta", d["eta"], f"differs from objective.eta {raw['eta']!r}", "Set only objective.eta")
            o_eta = self.get(raw, "eta", "objective.", 0.5 if eta is None else eta, self.float_(0.0, 1.0))
            return Objective("cost", eta=o_eta) if o_eta is not None else None
        if kind == "max-slowdown":
            factor = self.get(
                raw,
                "factor",
                "objective.",
                _REQUIRED,
                self.float_(1.0, fix="At most this many times the time at the max limit, e.g. 1.1"),
            )
            return Objective(kind, factor=factor) if factor is not None else None
        return Objective(kind) if kind is not None else None

    def accounting(self, m: Mapping, p: str) -> AccountingSettings:
        def rate(field: str, v: Any) -> Any:
            if isinstance(v, str):
                path = Path(v) if self.source is None else self.source.parent / v
                if not path.is_file():
                    self.problem(
                        field, v, f"names no file ({str(path)!r})", "Give a number, or a CSV of timestamp,value"
                    )
                    return None
                return str(path.resolve())
            return self.float_(0.0, fix="A number per kWh, or the path of a CSV of timestamp,value")(field, v)

        currency = self.get(m, "currency", p, "USD", self.str_())
        return AccountingSettings(
            carbon_g_per_kwh=self.get(m, "carbon_g_per_kwh", p, None, rate),
            price_per_kwh=self.get(m, "price_per_kwh", p, None, rate),
            currency=currency or "USD",
        )

    def optimizer(self, m: Mapping, p: str) -> OptimizerSettings:
        policy = self.get(m, "policy", p, OptimizerSettings().policy, self.choice(POLICIES))
        d = OptimizerSettings.for_policy(policy if policy in POLICIES else "zeus")
        return OptimizerSettings(
            policy=policy,
            pruning_rounds=self.get(m, "pruning_rounds", p, d.pruning_rounds, self.int_(0)),
            window_size=self.get(m, "window_size", p, d.window_size, self.window_size()),
            prior_mean=self.get(m, "prior_mean", p, d.prior_mean, self.float_()),
            prior_precision=self.get(m, "prior_precision", p, d.prior_precision, self.float_(0.0)),
            num_explorations=self.get(m, "num_explorations", p, d.num_explorations, self.int_(0)),
            revision=self.get(
                m,
                "revision",
                p,
                d.revision,
                self.int_(1, 2, fix="2: the current rules; 1: how runs from before them ran"),
            ),
        )

    def window_size(self) -> Callable[[str, Any], Any]:
        as_int = self.int_(0, fix="0 keeps all observations; otherwise use at least 2")

        def check(field: str, v: Any) -> Any:
            v = as_int(field, v)
            if v == 1:
                self.problem(
                    field,
                    v,
                    "a window of one observation gives every batch size zero variance, so Thompson Sampling stops exploring",
                    "Use 0 (all observations) or at least 2",
                )
                return None
            return v

        return check

    def metric(self, m: Mapping, p: str) -> MetricSettings:
        source = self.get(m, "source", p, "regex" if m.get("regex") else "events", self.choice(METRIC_SOURCES))
        regex = self.get(m, "regex", p, None, self.str_())
        if regex is not None:
            try:
                compiled = re.compile(regex)
            except re.error as exc:
                self.problem(p + "regex", regex, f"is not a valid regular expression ({exc})")
            else:
                if compiled.groups < 1:
                    self.problem(
                        p + "regex", regex, "needs a capture group around the number", r"e.g. 'val_acc=([0-9.]+)'"
                    )
        if source == "regex" and regex is None:
            self.problem(
                p + "regex", None, "is required when metric.source is regex", r"e.g. regex: 'val_acc=([0-9.]+)'"
            )
        return MetricSettings(source=source, regex=regex)

    def energy(self, m: Mapping, p: str) -> EnergySettings:
        gpus_raw = m.get("gpus")
        gpus = None
        if gpus_raw is not None:
            if isinstance(gpus_raw, (int, str)) and not isinstance(gpus_raw, bool):
                gpus_raw = [gpus_raw]
            if (
                isinstance(gpus_raw, list)
                and gpus_raw
                and all(isinstance(g, (int, str)) and not isinstance(g, bool) for g in gpus_raw)
            ):
                gpus = tuple(str(g) for g in gpus_raw)
            else:
                self.problem(p + "gpus", gpus_raw, "must be a list of GPU indices or UUIDs", "e.g. gpus: [0, 1]")
        return EnergySettings(
            source=self.get(m, "source", p, "auto", self.choice(ENERGY_SOURCES)),
            watts=self.get(
                m,
                "watts",
                p,
                100.0,
                self.float_(0.0, strict_lo=True, fix="The estimated average power of the job, e.g. 65"),
            ),
            gpus=gpus,
            basis=self.get(m, "basis", p, "cpu-time", self.choice(ENERGY_BASES)),
            include=self.get(m, "include", p, ("gpu",), self.domains()),
        )

    def domains(self) -> Callable[[str, Any], Any]:
        def check(field: str, v: Any) -> Any:
            items = [v] if isinstance(v, str) else v
            if not isinstance(items, list) or not items or any(d not in ENERGY_DOMAINS for d in items):
                self.problem(
                    field, v, f"must be a list of {', '.join(ENERGY_DOMAINS)}", "e.g. include: [gpu, cpu, dram]"
                )
                return ("gpu",)
            return tuple(dict.fromkeys(items))

        return check

    def power_limit(self, m: Mapping, p: str) -> PowerLimitSettings:
        d = PowerLimitSettings()
        return PowerLimitSettings(
            enabled=self.get(m, "enabled", p, d.enabled, self.bool_()),
            step_watts=self.get(m, "step_watts", p, d.step_watts, self.int_(1)),
            warmup_iters=self.get(m, "warmup_iters", p, d.warmup_iters, self.int_(0)),
            measure_iters=self.get(m, "measure_iters", p, d.measure_iters, self.int_(1)),
            observer_mode=self.get(m, "observer_mode", p, d.observer_mode, self.bool_()),
            on_no_permission=self.get(m, "on_no_permission", p, d.on_no_permission, self.choice(NO_PERMISSION_ACTIONS)),
            min_window_s=self.get(
                m,
                "min_window_s",
                p,
                d.min_window_s,
                self.float_(0.0, fix="Seconds; below ~2 s NVML's counter steps show"),
            ),
            settle_s=self.get(m, "settle_s", p, d.settle_s, self.float_(0.0, fix="Seconds, e.g. 1")),
            min_counter_updates=self.get(m, "min_counter_updates", p, d.min_counter_updates, self.int_(1)),
            via=self.get(m, "via", p, d.via, self.choice(POWER_LIMIT_VIAS)),
            socket=self.get(m, "socket", p, None, self.str_()),
        )

    def stop(self, m: Mapping, p: str) -> StopSettings:
        d = StopSettings()
        seconds = self.float_(0.0, fix="Seconds, e.g. 10")
        grace = None if "grace" in m and m["grace"] is None else self.get(m, "grace", p, d.grace, seconds)
        return StopSettings(
            grace=grace,
            term_grace=self.get(m, "term_grace", p, d.term_grace, seconds),
            kill_grace=self.get(m, "kill_grace", p, d.kill_grace, seconds),
            on_target=self.get(m, "on_target", p, d.on_target, self.choice(ON_TARGET_ACTIONS)),
        )

    def export(self, m: Mapping, p: str) -> ExportSettings:
        sub = {"mlflow": ("tracking_uri", "experiment"), "prometheus": ("push",)}
        raw = {k: m.get(k) or {} for k in sub}
        for k, keys in sub.items():
            if not isinstance(raw[k], dict):
                self.problem(p + k, raw[k], "must be a mapping", f"Keys: {', '.join(keys)}")
                raw[k] = {}
            self.unknown_keys(raw[k], keys, f"{p}{k}.")
        mlflow, prom = raw["mlflow"], raw["prometheus"]
        uri = self.get(mlflow, "tracking_uri", p + "mlflow.", _REQUIRED, self.str_()) if mlflow else None
        experiment = self.get(mlflow, "experiment", p + "mlflow.", "zeus-run", self.str_())
        push = self.get(prom, "push", p + "prometheus.", _REQUIRED, self.str_()) if prom else None
        if push is not None and not str(push).startswith(("http://", "https://")):
            self.problem(p + "prometheus.push", push, "is not an http(s) URL", "Use e.g. http://pushgateway:9091")
            push = None
        return ExportSettings(
            mlflow=MlflowExport(uri, experiment or "zeus-run") if uri else None,
            prometheus=PrometheusExport(push) if push else None,
        )

    def executor(self, m: Mapping, p: str) -> ExecutorSettings:
        d = ExecutorSettings()
        kind = self.get(m, "kind", p, d.kind, self.choice(EXECUTOR_KINDS))
        if kind == "local":
            for key in _SLURM_KEYS:
                default = getattr(d, key)
                if m.get(key) is not None and m[key] != (list(default) if isinstance(default, tuple) else default):
                    self.problem(p + key, m[key], "applies to Slurm jobs only", "Add kind: slurm, or remove it")
        name = self.slurm_name()
        return ExecutorSettings(
            kind=kind or d.kind,
            partition=self.get(m, "partition", p, d.partition, name),
            gpus=self.get(m, "gpus", p, d.gpus, self.int_(0, 1024, fix="GPUs per trial; 0 for CPU-only jobs")),
            time=self.get(m, "time", p, d.time, self.slurm_time()),
            account=self.get(m, "account", p, d.account, name),
            qos=self.get(m, "qos", p, d.qos, name),
            extra_args=self.get(m, "extra_args", p, d.extra_args, self.extra_args()),
            heartbeat_timeout=self.get(
                m,
                "heartbeat_timeout",
                p,
                d.heartbeat_timeout,
                self.float_(0.0, strict_lo=True, fix="Seconds, e.g. 120 (the agent writes its heartbeat every second)"),
            ),
            infra_retries=self.get(
                m,
                "infra_retries",
                p,
                d.infra_retries,
                self.int_(0, 1000, fix="Trials ended by Slurm in a row to retry before stopping, e.g. 3"),
            ),
        )

    def slurm_name(self) -> Callable[[str, Any], Any]:
        def check(field: str, v: Any) -> Any:
            if not isinstance(v, str) or not v.strip() or any(c.isspace() or c == "," for c in v):
                self.problem(field, v, "must be one name without spaces or commas", "e.g. gpu, or null for the default")
                return None
            return v

        return check

    def slurm_time(self) -> Callable[[str, Any], Any]:
        def check(field: str, v: Any) -> Any:
            written = self.text.get(field, str(v))
            if not isinstance(v, str):
                base60 = ":" in written
                why = (
                    f"was read as the number {v!r} (YAML reads {written} as base 60)"
                    if base60
                    else "must be a Slurm time string (a bare number is ambiguous: Slurm reads 90 as minutes)"
                )
                self.problem(field, v, why, f'Quote it: time: "{written}" (hours:minutes:seconds, e.g. "02:00:00")')
                return None
            try:
                parse_time_limit(v)
            except ValueError as exc:
                self.problem(field, v, str(exc))
                return None
            return v.strip()

        return check

    def extra_args(self) -> Callable[[str, Any], Any]:
        def check(field: str, v: Any) -> Any:
            if isinstance(v, str) or not isinstance(v, list) or not all(isinstance(a, str) and a for a in v):
                self.problem(
                    field, v, "must be a list of sbatch options", 'e.g. extra_args: ["--mem=64G", "--constraint=a100"]'
                )
                return None
            ok = True
            for arg in v:
                opt = reserved_option(arg)
                if opt is not None:
                    where = _RESERVED_FIX.get(opt)
                    fix = f"Set {where} instead" if where else "Remove it: zeus-run sets it for every trial"
                    self.problem(field, arg, f"sets {opt}, which zeus-run sets itself", fix)
                    ok = False
            return tuple(v) if ok else None

        return check

    def placeholders(self, command: tuple[str, ...], env: Mapping[str, str], learning_rate: float | None) -> None:
        places = [("command", a) for a in command] + [(f"env.{k}", v) for k, v in env.items()]
        for field, text in places:
            if "{" in _PLACEHOLDER_RE.sub("", text) or "}" in _PLACEHOLDER_RE.sub("", text):
                self.problem(
                    field,
                    text,
                    "has an unmatched { or }",
                    "Close the placeholder, e.g. {batch_size}, or write {{ and }} for literal braces",
                )
                continue
            for name in placeholder_names(text):
                if name not in PLACEHOLDERS:
                    close = difflib.get_close_matches(name, PLACEHOLDERS, n=1)
                    hint = f"Did you mean {{{close[0]}}}? " if close else ""
                    self.problem(
                        field,
                        text,
                        f"uses unknown placeholder {{{name}}}",
                        f"{hint}Known: {', '.join('{' + p + '}' for p in PLACEHOLDERS)}; write {{{{ and }}}} for literal braces",
                    )
                elif name == "learning_rate" and learning_rate is None:
                    self.problem(
                        field,
                        text,
                        "uses {learning_rate} but learning_rate is not set",
                        "Set learning_rate to the rate of default_batch_size",
                    )


_REQUIRED = object()


def _whole(v: Any, lo: int, hi: int) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and lo <= v <= hi


def placeholder_names(text: str) -> list[str]:
    """Names of the ``{placeholders}`` in text (``{{`` and ``}}`` are literal braces)."""
    return [m.group(1) for m in _PLACEHOLDER_RE.finditer(text) if m.group(1) is not None]


def substitute(text: str, values: Mapping[str, object], shell: bool = False) -> str:
    """Replace each ``{name}`` with ``str(values[name])`` as a whole value.

    The substituted text is never re-parsed: a value containing braces, spaces
    or shell syntax arrives in the argument unchanged.

    Args:
        text: A ``command`` argument or ``env`` value.
        values: The placeholders' values.
        shell: ``text`` is a ``/bin/sh -c`` command line (``shell: true``): each
            value is quoted with `shlex.quote`, so the shell sees it as one word
            and never runs what it contains (a ``run_dir`` holding ``$(...)``).
    """

    def repl(m: re.Match[str]) -> str:
        token = m.group(0)
        if token == "{{":
            return "{"
        if token == "}}":
            return "}"
        value = str(values[m.group(1)])
        return shlex.quote(value) if shell else value

    return _PLACEHOLDER_RE.sub(repl, text)
