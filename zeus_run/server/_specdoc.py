"""A job spec as a client sends it to the server: YAML text or a JSON object, ``command`` optional.

The server launches nothing (its clients run the trials), so a spec registered
through it may leave ``command`` out; it gets `NO_COMMAND`, which makes a
``zeus-run run`` on the job's run directory say why it cannot launch a trial.
"""

from __future__ import annotations

from typing import Any

import yaml

#: The command of a job registered without one.
NO_COMMAND = [
    "sh",
    "-c",
    "echo 'this job was registered on a zeus-run server without a command: its clients launch its trials' >&2; exit 2",
]


def with_command(spec_doc: str | dict[str, Any]) -> str | dict[str, Any]:
    """``spec_doc`` with `NO_COMMAND` where it has no ``command`` (YAML text stays text, for its line numbers)."""
    if isinstance(spec_doc, dict):
        return spec_doc if "command" in spec_doc else {**spec_doc, "command": NO_COMMAND}
    from zeus_run.spec import YamlLimitError, load_yaml

    try:
        data = load_yaml(spec_doc).data  # bounded: a client's text (no alias bombs, no deep nesting)
    except YamlLimitError:
        return spec_doc  # the spec's parser names the problem
    if not isinstance(data, dict) or "command" in data:
        return spec_doc
    return yaml.safe_dump({**data, "command": NO_COMMAND}, sort_keys=False)
