"""``MlflowClient`` over a JSON store shared by every process of a test (see `mlflow`'s docstring)."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import uuid
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

from mlflow.exceptions import MlflowException

_TERM = re.compile(r"tags\.`([^`]+)`\s*=\s*'((?:[^'\\]|\\.)*)'")


@contextlib.contextmanager
def _store(write: bool = True) -> Iterator[dict[str, Any]]:
    path = os.environ["FAKE_MLFLOW_STORE"]
    with open(path, "a+", encoding="utf-8") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        f.seek(0)
        text = f.read()
        data = json.loads(text) if text.strip() else {"experiments": {}, "runs": {}}
        yield data
        if write:
            f.seek(0)
            f.truncate()
            f.write(json.dumps(data))
            f.flush()


def _run(run_id: str, r: dict[str, Any]) -> SimpleNamespace:
    metrics = {k: v[-1][0] for k, v in r["metrics"].items() if v}
    info = SimpleNamespace(run_id=run_id, status=r["status"], experiment_id=r["experiment_id"])
    data = SimpleNamespace(tags=dict(r["tags"]), params=dict(r["params"]), metrics=metrics)
    return SimpleNamespace(info=info, data=data)


class _Page(list):
    token = None


class MlflowClient:
    def __init__(self, tracking_uri: str | None = None) -> None:
        self.tracking_uri = tracking_uri

    def get_experiment_by_name(self, name: str) -> SimpleNamespace | None:
        with _store(write=False) as s:
            found = [i for i, n in s["experiments"].items() if n == name]
        return SimpleNamespace(experiment_id=found[0], name=name) if found else None

    def create_experiment(self, name: str) -> str:
        with _store() as s:
            exp_id = str(len(s["experiments"]) + 1)
            s["experiments"][exp_id] = name
        return exp_id

    def create_run(self, experiment_id: str, start_time: int | None = None, run_name: str = "", tags=None):
        run_id = uuid.uuid4().hex
        r = {"experiment_id": experiment_id, "status": "RUNNING", "tags": dict(tags or {}), "params": {}}
        r |= {"metrics": {}, "run_name": run_name, "start_time": start_time, "end_time": None}
        with _store() as s:
            s["runs"][run_id] = r
        return _run(run_id, r)

    def get_run(self, run_id: str) -> SimpleNamespace:
        with _store(write=False) as s:
            if run_id not in s["runs"]:
                raise MlflowException(f"no run {run_id}")
            return _run(run_id, s["runs"][run_id])

    def search_runs(self, experiment_ids, filter_string: str = "", max_results: int = 1000, page_token=None):
        terms = _TERM.findall(filter_string)
        with _store(write=False) as s:
            page = _Page(
                _run(i, r)
                for i, r in s["runs"].items()
                if r["experiment_id"] in experiment_ids
                and all(r["tags"].get(k) == v.replace("\\'", "'") for k, v in terms)
            )
        return page

    def log_batch(self, run_id: str, metrics=(), params=(), tags=()) -> None:
        with _store() as s:
            r = s["runs"][run_id]
            for m in metrics:
                r["metrics"].setdefault(m.key, []).append([m.value, m.step])
            for p in params:
                r["params"][p.key] = p.value
            for t in tags:
                r["tags"][t.key] = t.value

    def set_tag(self, run_id: str, key: str, value: str) -> None:
        with _store() as s:
            s["runs"][run_id]["tags"][key] = value

    def set_terminated(self, run_id: str, status: str = "FINISHED", end_time: int | None = None) -> None:
        with _store() as s:
            s["runs"][run_id] |= {"status": status, "end_time": end_time}

    def update_run(self, run_id: str, status: str | None = None, name: str | None = None) -> None:
        with _store() as s:
            if status is not None:
                s["runs"][run_id]["status"] = status

    def delete_run(self, run_id: str) -> None:
        with _store() as s:
            s["runs"].pop(run_id, None)
