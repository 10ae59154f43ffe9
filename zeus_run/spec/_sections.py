"""The job schema's sections (``optimizer``, ``metric``, ``energy``, ``power_limit``, ``stop``, ``executor``)."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from zeus_run.accounting import AccountingSettings
from zeus_run.objective import KINDS as OBJECTIVE_KINDS
from zeus_run.objective import Objective
from zeus_run.slurm import parse_time_limit, reserved_option
from zeus_run.spec._check import _REQUIRED, Checker
from zeus_run.spec._model import (
    ENERGY_BASES,
    ENERGY_DOMAINS,
    ENERGY_SOURCES,
    EXECUTOR_KINDS,
    METRIC_SOURCES,
    NO_PERMISSION_ACTIONS,
    ON_TARGET_ACTIONS,
    POLICIES,
    POWER_LIMIT_VIAS,
    WARM_REVISION,
    ControlSettings,
    EnergySettings,
    ExecutorSettings,
    ExportSettings,
    MetricSettings,
    MlflowExport,
    OptimizerSettings,
    PowerLimitSettings,
    PrometheusExport,
    SavingSettings,
    StopSettings,
)
from zeus_run.spec._start import KEYS as _START_KEYS
from zeus_run.spec._start import start_section
from zeus_run.start import StartSettings

logger = logging.getLogger(__name__)

_SECTIONS: dict[str, type] = {
    "optimizer": OptimizerSettings,
    "metric": MetricSettings,
    "energy": EnergySettings,
    "power_limit": PowerLimitSettings,
    "stop": StopSettings,
    "executor": ExecutorSettings,
    "accounting": AccountingSettings,
    "saving": SavingSettings,
    "export": ExportSettings,
    "start": StartSettings,
}
_SECTION_KEYS = {
    "optimizer": (
        "policy",
        "pruning_rounds",
        "window_size",
        "prior_mean",
        "prior_precision",
        "num_explorations",
        "revision",
        "warm_from",
    ),
    "metric": ("source", "regex", "name", "key", "path"),
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
    "saving": ("control",),
    "export": ("mlflow", "prometheus"),
    "start": _START_KEYS,
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


class Sections(Checker):
    """Builds each section of the job spec (a `Checker` over the spec's mapping)."""

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

    def start(self, m: Mapping, p: str) -> StartSettings:
        return start_section(self, m, p)

    def optimizer(self, m: Mapping, p: str) -> OptimizerSettings:
        policy = self.get(m, "policy", p, OptimizerSettings().policy, self.choice(POLICIES))
        d = OptimizerSettings.for_policy(policy if policy in POLICIES else "zeus")
        revision = self.get(
            m,
            "revision",
            p,
            d.revision,
            self.int_(
                1,
                12,
                fix=(
                    "12: the current rules; 5: the pace model (opt-in); 11, 10, 9, 8, 7, 6, 4, 3, 2 and 1: how runs "
                    "from before them ran"
                ),
            ),
        )
        warm_from = self.get(m, "warm_from", p, None, self.str_())
        if warm_from is not None:
            warm_from = self.warm_path(p + "warm_from", warm_from)
            old = not isinstance(revision, int) or revision < WARM_REVISION
            if warm_from is not None and (policy != "zeus-voi" or old):
                self.problem(
                    p + "warm_from",
                    m.get("warm_from"),
                    f"a warm start needs policy zeus-voi, revision {WARM_REVISION} or later "
                    f"(here: {policy}, revision {revision})",
                    f"Use optimizer: {{policy: zeus-voi, revision: {WARM_REVISION}}}, or leave warm_from out",
                )
        return OptimizerSettings(
            policy=policy,
            pruning_rounds=self.get(m, "pruning_rounds", p, d.pruning_rounds, self.int_(0)),
            window_size=self.get(m, "window_size", p, d.window_size, self.window_size()),
            prior_mean=self.get(m, "prior_mean", p, d.prior_mean, self.float_()),
            prior_precision=self.get(m, "prior_precision", p, d.prior_precision, self.float_(0.0)),
            num_explorations=self.get(m, "num_explorations", p, d.num_explorations, self.int_(0)),
            revision=revision,
            warm_from=warm_from,
        )

    def warm_path(self, field: str, raw: str) -> str | None:
        """``optimizer.warm_from`` as an absolute path (relative ones start at the spec file's folder)."""
        try:
            path = Path(raw).expanduser()
            return str((path if path.is_absolute() else self.base / path).resolve())
        except (ValueError, OSError, RuntimeError) as exc:  # a NUL byte, a symlink loop, an unknown ~user
            self.problem(field, raw, f"is not a usable path ({exc})", "Name the run directory of this job elsewhere")
            return None

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
                p + "regex", None, "is required when metric.source is regex", r"e.g. regex: 'val_acc=([0-9.eE+-]+)'"
            )
        name = self.get(m, "name", p, None, self.str_())
        if name is not None and (not name.strip() or name != name.strip()):
            self.problem(
                p + "name", name, "must be a metric's name as the framework logs it", "e.g. name: eval_accuracy"
            )
        key = self.get(m, "key", p, None, self.str_())
        path = self.get(m, "path", p, None, self.str_())
        if source == "jsonl" and not key:
            self.problem(p + "key", key, "is required when metric.source is jsonl", "e.g. key: val_acc")
        if source == "file" and not path:
            self.problem(
                p + "path",
                path,
                "is required when metric.source is file",
                "e.g. path: metrics.txt (the file it appends to)",
            )
        if key is not None and source != "jsonl":
            self.problem(p + "key", key, f"is read only by metric.source jsonl, not {source}", "Set source: jsonl")
        if path is not None and source not in ("jsonl", "file"):
            self.problem(
                p + "path", path, f"is read only by metric.source file or jsonl, not {source}", "Set source: file"
            )
        if regex is not None and source not in ("regex", "file"):
            self.problem(
                p + "regex", regex, f"is read only by metric.source regex or file, not {source}", "Set source: regex"
            )
        return MetricSettings(source=source, regex=regex, name=name, key=key, path=path)

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

    def saving(self, m: Mapping, p: str) -> SavingSettings:
        if "control" in m and m["control"] is None:
            return SavingSettings(control=None)
        raw = m.get("control") or {}
        if not isinstance(raw, dict):
            self.problem(p + "control", raw, "must be a mapping or null", "e.g. control: {max_share: 0.05}, or null")
            return SavingSettings()
        self.unknown_keys(raw, ("max_share",), p + "control.")
        d = ControlSettings()
        share = self.get(
            raw,
            "max_share",
            p + "control.",
            d.max_share,
            self.float_(0.0, 1.0, fix="A share of the job's spend, e.g. 0.05; or control: null for no control runs"),
        )
        return SavingSettings(control=ControlSettings(share if share is not None else d.max_share))

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
