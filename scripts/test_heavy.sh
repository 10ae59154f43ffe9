#!/usr/bin/env bash
# The heavy checks, the second test command besides .ci/run (whose budget is 9 minutes on an idle
# 2-core machine; these take about as long again):
#   - the tests marked `heavy` (those also marked integrations or frameworks run with their own commands):
#     matrices run end to end (one job through every door, the same work
#     charged alike at every door, the launcher killed at many moments, every door mixed in one
#     history, a failed night under every door);
#   - the checks' own check (scripts/check_the_checks.py --quick): each bug the checks exist for
#     planted, one at a time, against the tests that must catch it (exit 1 unless an assertion of a
#     named test catches every one);
#   - a job's life, short form (scripts/job_life.py --short: 9 nights, every door, every fault kind
#     once; exit 1 unless every invariant held after every night). The whole life is its own
#     command: scripts/job_life.py --nights 60.
# Run it before merging work on the doors, the launcher, the executors or the accounting.
# Without PYTHONUNBUFFERED, as on users' machines, cron and Slurm.
# Usage: scripts/test_heavy.sh [PYTEST_ARGS...]
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/pip install -q -e '.[test]'
env -u PYTHONUNBUFFERED .venv/bin/python -m pytest -q -n 2 -m "heavy and not integrations and not frameworks" "$@"
env -u PYTHONUNBUFFERED .venv/bin/python scripts/check_the_checks.py --quick
env -u PYTHONUNBUFFERED .venv/bin/python scripts/job_life.py --short
wall=$(($(date +%s) - start))
printf 'test_heavy: passed in %dm %02ds wall\n' $((wall / 60)) $((wall % 60))
