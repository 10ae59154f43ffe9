"""MLflow's entities the exporter builds (the double's)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Metric:
    key: str
    value: float
    timestamp: int
    step: int


@dataclass(frozen=True)
class Param:
    key: str
    value: str


@dataclass(frozen=True)
class RunTag:
    key: str
    value: str


class RunStatus:
    RUNNING = 1
    SCHEDULED = 2
    FINISHED = 3
    FAILED = 4
    KILLED = 5

    @staticmethod
    def to_string(status: int) -> str:
        return {1: "RUNNING", 2: "SCHEDULED", 3: "FINISHED", 4: "FAILED", 5: "KILLED"}[status]
