"""A cron trigger (``run --next -q``) loads nothing it does not show (issue 55, item 10): no rich, no views, no ssl,
no numpy (its policy keeps no window), and no pydantic (its command line is read without typer's parser:
`zeus_run.cli._fastrun`)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

JOB = """\
name: trigger
command: ["{python}", "-S", "-c", "print('val=1.0', flush=True)"]
batch_sizes: [1, 2]
default_batch_size: 1
target_metric: 0.5
recurrences: null
metric: {regex: 'val=(?P<value>[0-9.]+)'}
energy: {source: estimate, watts: 100}
"""


def test_a_quiet_trigger_loads_no_rich_no_views_no_ssl_no_numpy_and_no_pydantic(tmp_path):
    (tmp_path / "job.yaml").write_text(JOB)
    zeus = str(Path(sys.executable).with_name("zeus-run"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("ZEUS_") or k == "ZEUS_RUN_POWERCAP_ROOT"}
    done = subprocess.run(
        [sys.executable, "-X", "importtime", zeus, "run", "job.yaml", "--next", "-q"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    loaded = {ln.rsplit("|", 1)[-1].strip() for ln in done.stderr.splitlines() if ln.startswith("import time:")}
    assert "zeus_run.launcher" in loaded  # it ran, and -X importtime saw its imports
    heavy = sorted(
        m
        for m in loaded
        if m.split(".")[0] in ("rich", "ssl", "_ssl", "numpy", "pydantic") or m.startswith("zeus_run.views.")
    )
    assert heavy in ([], ["zeus_run.views.provenance", "zeus_run.views.rows"]), heavy
    assert (tmp_path / "runs" / "history.jsonl").exists() or any((tmp_path / "runs").rglob("history.jsonl"))
