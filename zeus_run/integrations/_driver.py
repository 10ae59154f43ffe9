"""What both framework callbacks do, without either framework: find the metric, report it, count steps."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Mapping
from typing import Any

from zeus_run.train import Trial

logger = logging.getLogger(__name__)

#: Least time between two looks at zeus-run's stop file from `Driver.stepped` (unit: s).
STOP_CHECK_INTERVAL = 0.2


class MetricNotFound(KeyError):
    """The evaluation logged no metric of the expected name."""

    def __str__(self) -> str:
        return str(self.args[0])


class Driver:
    """One trial as a framework callback sees it.

    Args:
        trial: The trial (default: `Trial.from_env`, the ``ZEUS_*`` environment).
        metric: The metric's name in the framework's logs (default: the spec's
            ``metric.name``, else ``default_metric``).
        default_metric: The framework's usual name, used when neither is given.
        prefix: A prefix the framework may add to evaluation metrics (``eval_`` for
            Hugging Face): ``accuracy`` then also finds ``eval_accuracy``.
    """

    def __init__(
        self, trial: Trial | None = None, metric: str | None = None, default_metric: str = "", prefix: str = ""
    ) -> None:
        self.trial = trial if trial is not None else Trial.from_env()
        self.metric = metric or self.trial.metric_name or default_metric
        self.prefix = prefix
        self.stopped = False
        self._last_check = -math.inf

    def value(self, metrics: Mapping[str, Any]) -> float:
        """The metric's value in ``metrics`` (a framework's evaluation results).

        Raises:
            MetricNotFound: It is not there; the message lists what is.
        """
        for key in (self.metric, self.prefix + self.metric):
            if key in metrics:
                return _number(metrics[key])
        names = ", ".join(sorted(map(str, metrics))) or "none"
        raise MetricNotFound(
            f"the evaluation logged no metric {self.metric!r} (it logged: {names}). "
            "Set metric.name in the job spec to one of these, or pass metric= to ZeusRunCallback"
        )

    def evaluated(self, metrics: Mapping[str, Any], epoch: int | None = None) -> bool:
        """Report an evaluation's metric; True when training should stop."""
        keep = self.trial.report(self.value(metrics), epoch=epoch)
        self.stopped = self.stopped or not keep
        return self.stopped

    def stepped(self, n: int = 1) -> bool:
        """Count ``n`` optimizer steps; True when zeus-run asked the script to stop."""
        self.trial.step(n)
        now = time.monotonic()
        if not self.stopped and now - self._last_check >= STOP_CHECK_INTERVAL:
            self._last_check = now
            self.stopped = self.trial.should_stop()
        return self.stopped

    def close(self) -> None:
        self.trial.close()


def _number(v: Any) -> float:
    """A metric value as a float: a number, a 0-d tensor or array (``.item()``)."""
    item = getattr(v, "item", None)
    out = float(item() if callable(item) else v)
    if math.isnan(out):
        logger.warning("the metric is NaN; zeus-run counts the epoch without convergence")
    return out
