"""A job's files stay inside the job: the files a spec registered through the server may name.

A client that registers a spec decides which files the operator's own
commands later read (``zeus-run history`` reads the accounting CSVs, an MLflow
export writes its store). So every file such a spec names must lie inside
the job's run directory (``ROOT/JOB``; relative paths start there) or inside a
directory the operator allows (``zeus-run serve --allow-path DIR``), reached
without ``..`` and without a symbolic link below that directory. The spec is
checked as sent, before it is validated (validation looks for the files, and
its answer would tell a client which files exist). Checked:

* ``accounting.carbon_g_per_kwh`` and ``accounting.price_per_kwh`` when they name a CSV, and
  ``start.forecast.csv`` (the forecast an ask's start is planned on);
* ``export.mlflow.tracking_uri`` when it names a local store (``file:``, ``sqlite:``, a path);
* the scripts in ``command``: arguments ending in ``.py``, ``.sh``, ``.bash`` or
  ``.ipynb``, and any argument with a ``..`` part (an interpreter such as
  ``/usr/bin/python3`` is not a file the spec brings, and is left alone).

``optimizer.warm_from`` (a run directory a warm start reads whole) must be another job of the
server's root (``../other-job``; not a hidden entry of the root) or inside an allowed directory.

``workdir`` and ``run_dir`` are not checked: they do not apply on the server (the client runs
the script where it is) and are ignored.

An accounting series or forecast must also be one (`check_series`): a CSV of
``timestamp,value`` rows, read at registration, and never one of the files
zeus-run keeps in the job (``history.jsonl``, ``spec.yaml``, ``running.json``,
a trial's files), whose lines the operator's ``history`` would then try to
read as rates.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import Any

from zeus_run.server._errors import ApiError

_SCRIPT_SUFFIXES = (".py", ".sh", ".bash", ".ipynb")
#: What zeus-run itself keeps in a run directory (top level); with ``trials/`` and hidden files, no spec may
#: name them as its own input.
_JOB_FILES = frozenset({"history.jsonl", "spec.yaml", "running.json", "trials", "report.html"})
#: Largest accounting series read at registration (unit: bytes).
MAX_SERIES_BYTES = 64 << 20


def check_paths(spec: Mapping[str, Any], job_dir: Path, allowed: Sequence[Path] = ()) -> None:
    """Refuse a spec (its settings as sent) that names a file outside ``job_dir`` and ``allowed``.

    Raises:
        ApiError: 422 ``path_not_allowed`` naming every such field (the first in ``field``).
    """
    problems = []
    for field, value in named_files(spec):
        why = outside(value, job_dir, allowed)
        if why is not None:
            problems.append((field, f"{field} = {value[:200]!r}: {why}"))
    warm = _section(spec, "optimizer").get("warm_from")
    if isinstance(warm, str):
        why = _outside_root(warm, job_dir, allowed)
        if why is not None:
            problems.append(("optimizer.warm_from", f"optimizer.warm_from = {warm[:200]!r}: {why}"))
    if problems:
        raise ApiError(
            422,
            "; ".join(p[1] for p in problems)
            + ". A job registered through the server may name files only inside its run directory (relative "
            "paths start there) or a directory the operator allows with `zeus-run serve --allow-path DIR`.",
            "path_not_allowed",
            "body.spec." + problems[0][0],
        )


def named_files(spec: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    """``(field, path)`` for each file the spec (its settings as sent) names; values of the wrong type are left
    to the spec's validation."""
    yield from _series(spec)
    uri = _section(_section(spec, "export"), "mlflow").get("tracking_uri")
    store = _local_store(uri) if isinstance(uri, str) else None
    if store is not None:
        yield "export.mlflow.tracking_uri", store
    command = spec.get("command")
    if isinstance(command, str):
        try:
            argv = shlex.split(command)
        except ValueError:
            argv = command.split()
    else:
        argv = [a for a in command if isinstance(a, str)] if isinstance(command, list) else []
    for i, arg in enumerate(argv):
        if arg.endswith(_SCRIPT_SUFFIXES) or ".." in PurePosixPath(arg).parts:
            yield f"command[{i}]", arg


def _series(spec: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    """``(field, path)`` for each intensity, price or forecast CSV the spec names."""
    accounting = _section(spec, "accounting")
    for name in ("carbon_g_per_kwh", "price_per_kwh"):
        if isinstance(accounting.get(name), str):
            yield f"accounting.{name}", accounting[name]
    forecast = _section(spec, "start").get("forecast")
    if isinstance(forecast, str) and forecast.startswith("csv:"):  # the resolved form a stored spec keeps
        yield "start.forecast", forecast[4:]
    elif isinstance(forecast, Mapping) and isinstance(forecast.get("csv"), str):
        yield "start.forecast.csv", forecast["csv"]


def _section(doc: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    value = doc.get(name)
    return value if isinstance(value, Mapping) else {}


def outside(value: str, base: Path, allowed: Sequence[Path]) -> str | None:
    """Why ``value`` (relative to ``base``) is not a file inside ``base`` or an allowed directory; None if it is."""
    if ".." in PurePosixPath(value).parts:
        return "'..' is not allowed in a path"
    full = Path(os.path.normpath(value if os.path.isabs(value) else base / value))
    tops = [Path(f(top)) for top in (base, *allowed) for f in (os.path.normpath, os.path.realpath)]
    for top in tops:  # NOTE: links above a directory are the operator's: compared as written and resolved
        if full != top and top not in full.parents:
            continue
        here = top
        for part in full.relative_to(top).parts:
            here = here / part
            if os.path.islink(here):
                return f"{here.relative_to(top)} is a symbolic link, which the server does not follow"
        return None
    return "outside the job's run directory and every --allow-path directory"


def _outside_root(value: str, job_dir: Path, allowed: Sequence[Path]) -> str | None:
    """Why the run directory ``value`` (relative to ``job_dir``) is not another job of the server's root (or inside
    an allowed directory); None if it is. A warm start reads a run directory whole: another job's on this server
    (``../other-job``), never one outside the root, nor the root's own hidden files (``.deleted/``, tokens)."""
    if "\0" in value:
        return "not a usable path"
    full = os.path.normpath(value if os.path.isabs(value) else job_dir / os.path.expanduser(value))
    root = job_dir.parent
    inside = Path(full) != root and root in Path(full).parents
    if inside and any(part.startswith(".") for part in Path(full).relative_to(root).parts):
        return "is one of the server's own files, not a job"
    return outside(full, root, allowed) if inside else outside(full, job_dir, allowed)


def _local_store(uri: str) -> str | None:
    """The local path an MLflow tracking URI names (None: a remote server)."""
    if uri.startswith(("http://", "https://", "databricks", "postgresql", "mysql", "mssql")):
        return None
    if uri.startswith("sqlite:///"):
        return uri.removeprefix("sqlite:///") or "."  # sqlite:////abs is absolute, sqlite:///rel relative
    if uri.startswith("file://"):
        return uri.removeprefix("file://") or "/"
    if uri.startswith("file:"):
        return uri.removeprefix("file:")
    return uri if "://" not in uri else None


def check_series(spec: Mapping[str, Any], job_dir: Path) -> None:
    """Refuse an accounting series that is one of the job's own files or is no ``timestamp,value`` CSV (run after
    `check_paths`: the files are inside the job or an allowed directory, reached without links).

    Raises:
        ApiError: 422 ``invalid_field`` naming the field.
    """
    from zeus_run.accounting import AccountingError, read_series

    for name, value in _series(spec):
        field = f"body.spec.{name}"
        full = Path(os.path.normpath(value if os.path.isabs(value) else job_dir / value))
        inside = full == job_dir or job_dir in full.parents
        parts = full.relative_to(job_dir).parts if inside else ()
        if inside and (not parts or parts[0] in _JOB_FILES or any(p.startswith(".") for p in parts)):
            raise ApiError(
                422,
                f"{name} = {value[:200]!r} is one of the files zeus-run keeps in the job, not a rate "
                "series. Name a CSV of timestamp,value rows of your own.",
                "invalid_field",
                field,
            )
        try:
            size = os.stat(full).st_size
        except OSError:
            size = 0  # read_series names it as missing
        if size > MAX_SERIES_BYTES:
            raise ApiError(
                422,
                f"{name} = {value[:200]!r} is larger than {MAX_SERIES_BYTES >> 20} MiB: not a rate series.",
                "invalid_field",
                field,
            )
        try:
            read_series(full, shown=value[:200])
        except AccountingError as exc:
            raise ApiError(422, str(exc), "invalid_field", field) from None
