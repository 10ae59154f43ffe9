"""zeus-run: run recurring training jobs with the Zeus energy optimizer.

The package root stays light (no numpy, no YAML) because training scripts
import `zeus_run.train` from it; ``zeus_run.Job`` (the ask/tell Python API,
`zeus_run.asktell`) is loaded on first use.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without loading typing (mypy reads it alike)
if TYPE_CHECKING:
    from typing import Any

__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    if name == "Job":
        from zeus_run.asktell import Job

        return Job
    raise AttributeError(f"module 'zeus_run' has no attribute {name!r}")
