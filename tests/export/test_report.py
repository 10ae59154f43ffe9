"""``zeus-run report``: one self-contained HTML file with the summary, tables, plot and audit."""

from __future__ import annotations

import base64
import re

import pytest

from tests.export.helpers import real_run, zeus

# One xdist worker runs the whole module and its module-scoped fixture (`.ci/run`: -n 2 --dist loadgroup).
pytestmark = pytest.mark.xdist_group("test_report")


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    return real_run(tmp_path_factory.mktemp("report"), "alpha", 3)


def test_report_is_self_contained_with_summary_tables_plot_and_audit(run_dir, tmp_path):
    pytest.importorskip("matplotlib")
    out = tmp_path / "report.html"
    done = zeus("report", str(run_dir), "-o", str(out))
    assert done.returncode == 0, done.stderr
    text = out.read_text()
    assert "<title>zeus-run report: alpha</title>" in text
    for heading in ("Summary", "Decision audit", "Plots", "Per batch size", "Recurrences"):
        assert f"<h2>{heading}</h2>" in text
    assert "passed: re-folding the history reproduces all" in text
    # Nothing is loaded from elsewhere: every src is a data: URI, no link or script tags.
    srcs = re.findall(r'src="([^"]*)"', text)
    assert srcs and all(s.startswith("data:image/png;base64,") for s in srcs)
    assert "<script" not in text and "<link" not in text and "url(" not in text and "@import" not in text
    png = base64.b64decode(srcs[0].split(",", 1)[1])
    assert png[:8] == b"\x89PNG\r\n\x1a\n"


def test_report_states_a_failed_audit(run_dir, tmp_path):
    import shutil

    from zeus_run.views.jobs import load_job
    from zeus_run.views.report import audit_text

    copy = tmp_path / "edited"
    shutil.copytree(run_dir, copy)
    spec = copy / "spec.yaml"
    spec.write_text(spec.read_text().replace("default_batch_size: 2", "default_batch_size: 4"))
    ok, text = audit_text(load_job(copy))
    assert not ok and text.startswith("failed after 0 matching decisions")


def test_report_of_a_spec_is_a_usage_error(tmp_path):
    spec = tmp_path / "job.yaml"
    spec.write_text("name: x\n")
    done = zeus("report", str(spec))
    assert done.returncode == 2 and "job spec" in done.stderr


def test_report_counts_runs_marks_estimates_and_words_stop_reasons(run_dir):
    from zeus_run.views.jobs import load_job
    from zeus_run.views.report import reason_text, render_report

    text = render_report(load_job(run_dir))
    assert "1 runs" not in text
    assert re.search(r"over (1 run\b|[02-9]\d* runs)", text)  # the default's baseline, counted
    # The job's energy is an estimate (no GPU): every energy figure in the tables carries ~.
    assert "<td>~" in text
    assert "target_reached" not in text and "reached the target" in text
    assert reason_text("cost_threshold").startswith("stopped early")
    assert reason_text("something-new") == "something-new"
