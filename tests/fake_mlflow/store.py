"""The fake MLflow's store as a test reads it (`tests/fake_mlflow/mlflow`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

#: Put first on a child's PYTHONPATH for ``import mlflow`` to be the double.
PATH = Path(__file__).resolve().parent


def trial_runs(store: Path) -> dict[str, dict[str, Any]]:
    """The trial runs the exporter made, by their ``zeus_run.trial_id`` tag (each must be there once)."""
    data = json.loads(store.read_text()) if store.exists() else {"runs": {}}
    runs = [r for r in data["runs"].values() if r["tags"].get("zeus_run.role") == "trial"]
    ids = [r["tags"]["zeus_run.trial_id"] for r in runs]
    assert len(ids) == len(set(ids)), f"a trial exported twice: {sorted(ids)}"
    return {r["tags"]["zeus_run.trial_id"]: r for r in runs}
