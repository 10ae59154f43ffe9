"""Registering a job: a spec in, its run directory made or brought up to date, as ``zeus-run run`` would.

``PUT /v1/jobs/{job}`` with a spec:

* a new job: the spec is validated (as ``zeus-run check``) and saved in ``ROOT/JOB``;
* the same spec again: nothing changes;
* ``workdir`` and ``run_dir`` do not apply on the server and are ignored (the run directory is
  ``ROOT/JOB``; a stored spec's ``workdir``, a launcher's that runs the same directory, is kept);
* a changed spec: `zeus_run.door.opening.compatibility` decides, the rule ``zeus-run
  run`` resumes a run directory by. Where ``run`` would resume (``recurrences``,
  ``lease``, ``command``, ``accounting``, ``export:`` ...), the new spec is saved
  and every later ask follows it; the answer lists the fields that changed.
  Where ``run`` would need ``--force`` (a decision setting: ``eta``,
  ``batch_sizes``, ...), 409 ``spec_conflict`` names the differing fields and
  nothing changes.

Every file the spec names must stay inside the job (`zeus_run.server._paths`).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from zeus_run.door.opening import compatibility, open_job
from zeus_run.engine.position import position
from zeus_run.remote import job_path
from zeus_run.rundir.rates import note_change
from zeus_run.rundir.resume import keep_recorded_revision
from zeus_run.rundir.store import SPEC_NAME
from zeus_run.server._errors import ApiError
from zeus_run.server._paths import check_paths, check_series
from zeus_run.spec import YamlLimitError, load_yaml, parse_spec

logger = logging.getLogger(__name__)

#: Stored-spec keys that say where the spec came from or where a launcher runs it, not what it sets: the server
#: ignores them in a registered spec (the run directory is ROOT/JOB; the client runs the script where it is).
_NOT_SETTINGS = frozenset({"source", "run_dir", "workdir"})
#: Keys of a registered spec that do not apply on the server, dropped before validation.
_IGNORED = ("workdir", "run_dir")


def register(path: Path, name: str, spec_doc: str | dict[str, Any], allowed: Sequence[Path] = ()) -> dict[str, Any]:
    """Validate ``spec_doc`` and make, keep or update the run directory ``path`` of job ``name``.

    Returns:
        ``{"job", "spec", "created", "changed"}``: the resolved spec, whether the job is new, and
        the settings this spec changed (dotted names; empty when it was already the job's spec).

    Raises:
        SpecError: The spec is invalid.
        ApiError: Its name is not the job's (422), it names a file outside the job (422), or it
            changes a decision setting of a job with history (409).
    """
    import yaml

    from zeus_run.server._specdoc import with_command

    spec_doc = with_command(spec_doc)  # the server launches nothing: `command` may be left out
    settings = _settings(spec_doc)
    if any(k in settings for k in _IGNORED):  # a spec that runs registers as it is (`workdir: .` included)
        settings = {k: v for k, v in settings.items() if k not in _IGNORED}
        spec_doc = settings
    text = spec_doc if isinstance(spec_doc, str) else yaml.safe_dump(spec_doc, sort_keys=False)
    check_paths(settings, path, allowed)  # first: validation would look for the files
    check_series(settings, path)
    # SpecError: the same problems, in the same words, as `zeus-run check`; relative paths start at the job
    spec = parse_spec(text, source=path / SPEC_NAME)
    if spec.name != name:
        raise ApiError(
            422,
            f"spec.name = {spec.name!r} differs from the job name {name!r} in the URL. "
            f"Register it as {job_path(spec.name)} or set name: {name}.",
            "invalid_field",
            "body.spec.name",
        )
    spec = dataclasses.replace(spec, run_dir=path)
    # A brief holder, opened as every door opens a job: another worker process may register or ask at the same
    # moment. A dead launcher's trials are left to the next ask or run (a registration adopts nothing).
    with open_job(path, spec, "register") as job:
        rd = job.rd
        spec = keep_recorded_revision(spec, path)  # as `zeus-run run` resumes it
        diffs, _ = compatibility(path, spec)  # what `zeus-run run` resumes by
        if diffs:
            raise ApiError(
                409,
                f"Job {name!r} has history under another spec, and `zeus-run run` would not resume it with this "
                f"one without --force: {'; '.join(diffs)}. Keep those settings, or register the new spec under a "
                "new job name to start afresh.",
                "spec_conflict",
                "body.spec." + diffs[0].split(":", 1)[0].split(" ", 1)[0],
            )
        stored = rd.stored_spec()
        if stored is not None and isinstance(stored.get("workdir"), str):
            spec = dataclasses.replace(spec, workdir=Path(stored["workdir"]))  # a launcher's (`run`) stays its own
        changed = [] if stored is None else changed_settings(stored, spec.to_dict())
        for notice in note_change(
            rd.path, stored, spec.accounting, lambda: position(rd.history.read(), spec.max_tries).recurrence
        ):
            logger.warning("job %s: %s", name, notice)  # a changed rate applies from the next recurrence
        if stored is None or changed:
            rd.keep_spec(spec)  # the spec in force; the one it replaces is kept as spec.<n>.yaml
    return {"job": name, "spec": spec.to_dict(), "created": stored is None, "changed": changed}


def _settings(spec_doc: str | dict[str, Any]) -> dict[str, Any]:
    """The settings as sent (a YAML text parsed within the spec's limits); {} if it is no mapping (validation
    then says why)."""
    if isinstance(spec_doc, dict):
        return spec_doc
    try:
        data = load_yaml(spec_doc).data
    except YamlLimitError:
        return {}
    return data if isinstance(data, dict) else {}


def changed_settings(stored: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """The settings (``recurrences``, ``export.mlflow`` ...) in which ``new`` differs from ``stored``."""
    out = []
    for key in [k for k in new if k not in _NOT_SETTINGS] + [k for k in stored if k not in new]:
        if key in _NOT_SETTINGS:
            continue
        old_v, new_v = stored.get(key), new.get(key)
        if isinstance(old_v, dict) and isinstance(new_v, dict):
            out += [f"{key}.{sub}" for sub in dict.fromkeys([*new_v, *old_v]) if old_v.get(sub) != new_v.get(sub)]
        elif old_v != new_v:
            out.append(key)
    return out
