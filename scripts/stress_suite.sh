#!/usr/bin/env bash
# Run the test suite N times beside two CPU hogs, to show that it only fails for real.
#
#   scripts/stress_suite.sh [N] [PYTEST ARGS...]    N runs (default 3); the arguments go to pytest
#
# Each run's pytest summary line and duration are printed; the last line counts
# the green runs. Exit status: 0 when every run passed, 1 otherwise (each failed
# run's output is kept in a temporary file, named in the output).
#
# Examples:
#   scripts/stress_suite.sh                       # the whole suite, 3 times
#   scripts/stress_suite.sh 1 -m "not slurm"      # once, without the real-Slurm tests
#
# The real-Slurm tests need a cluster named by ZEUS_SLURM_CONF (see scripts/slurm_dev.sh);
# without one they skip. pytest runs without PYTHONUNBUFFERED, as on users' machines, cron
# and Slurm (a development machine that sets it for every process would hide buffered output).
set -euo pipefail
cd "$(dirname "$0")/.."

n=${1:-3}
[[ $n =~ ^[0-9]+$ && $n -ge 1 ]] || {
    echo "usage: scripts/stress_suite.sh [N] [PYTEST ARGS...] (N: runs, at least 1)" >&2
    exit 2
}
(($# > 0)) && shift
python=${PYTHON:-.venv/bin/python}

hogs=()
stop_hogs() {
    ((${#hogs[@]} == 0)) || kill "${hogs[@]}" 2>/dev/null || true
}
trap stop_hogs EXIT
for _ in 1 2; do
    (while :; do :; done) &
    hogs+=($!)
done
echo "stress_suite: $n run(s) of pytest $* beside 2 CPU hogs (pids ${hogs[*]}) on $(nproc) core(s), PYTHONUNBUFFERED unset"

# pytest's counts line ("823 passed, 2 skipped in 400.1s"), whatever -q or -r options were given.
counts() { grep -E '[0-9]+ (passed|failed|errors?)( |,|$)' "$1" | tail -n 1 | sed -E 's/^=+ *//; s/ *=+$//'; }

quiet=(-q) # once: -qq would drop the counts line
for a in "$@"; do [[ $a == -q || $a == --quiet ]] && quiet=(); done

green=0
for ((i = 1; i <= n; i++)); do
    log=$(mktemp -t stress-suite-XXXXXX.log)
    t0=$SECONDS
    if env -u PYTHONUNBUFFERED "$python" -m pytest "${quiet[@]}" -p no:cacheprovider "$@" >"$log" 2>&1; then
        green=$((green + 1))
        echo "run $i/$n: green in $((SECONDS - t0)) s: $(counts "$log")"
        rm -f "$log"
    else
        echo "run $i/$n: FAILED in $((SECONDS - t0)) s: $(counts "$log") (output: $log)"
        grep -E '^(FAILED|ERROR) ' "$log" || true
    fi
done
echo "stress_suite: $green/$n runs green"
((green == n))
