"""Job specs: the YAML a user writes, loaded once into frozen, validated dataclasses."""

from zeus_run.spec._load import load_spec, parse_spec
from zeus_run.spec._model import (
    DECISION_FIELDS,
    DEFAULT_LIFETIME,
    DEFAULT_POLICY,
    EXECUTOR_KINDS,
    PLACEHOLDERS,
    POLICIES,
    POLICY_DEFAULTS,
    WARM_REVISION,
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
from zeus_run.spec._template import placeholder_names, substitute

__all__ = [
    "DECISION_FIELDS",
    "DEFAULT_LIFETIME",
    "DEFAULT_POLICY",
    "EXECUTOR_KINDS",
    "PLACEHOLDERS",
    "POLICIES",
    "POLICY_DEFAULTS",
    "WARM_REVISION",
    "EnergySettings",
    "ExecutorSettings",
    "ExportSettings",
    "JobSpec",
    "MetricSettings",
    "MlflowExport",
    "OptimizerSettings",
    "PowerLimitSettings",
    "PrometheusExport",
    "StopSettings",
    "load_spec",
    "parse_spec",
    "placeholder_names",
    "substitute",
]
