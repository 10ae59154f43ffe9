#!/usr/bin/env bash
# The integration tests (marker `integrations`): Zeus 0.16's batch-size client against
# `zeus-run serve`, exports against a real MLflow
# store and tracking server, promtool, a Prometheus Pushgateway, and the HTML
# report in headless Chromium. They are not in .ci/run: installing MLflow and the
# Debian packages and starting the servers would take .ci/run past its budget.
# Installs what they need (scripts/install_integrations.sh), then runs them; a
# test whose program could not be installed skips and says why.
# Usage: scripts/test_integrations.sh [PYTEST_ARGS...]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_integrations.sh
exec env -u PYTHONUNBUFFERED .venv/bin/python -m pytest -q -m integrations "$@"
