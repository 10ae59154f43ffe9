#!/usr/bin/env bash
# Install what the integration tests (pytest -m integrations) need, for
# scripts/test_integrations.sh and developers:
#   - promtool (Debian's prometheus package), prometheus-pushgateway and chromium
#     from Debian packages (apt-get, as root; skipped with a note where apt-get
#     cannot run: the tests needing them then skip and say why);
#   - MLflow, the optional extra `.[mlflow]`, into .venv;
#   - Zeus 0.16 (`zeus==0.16.0`: its batch-size client, which the server's Zeus
#     protocol test drives unchanged), into .venv.
# Usage: scripts/install_integrations.sh   (from anywhere; idempotent)
set -uo pipefail
cd "$(dirname "$0")/.."

apt_packages=(prometheus prometheus-pushgateway chromium)
missing=()
command -v promtool >/dev/null 2>&1 || missing+=(prometheus)
command -v prometheus-pushgateway >/dev/null 2>&1 || missing+=(prometheus-pushgateway)
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
if ((${#missing[@]})); then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        # Installing must not start the packages' services (a test starts its own
        # pushgateway on a free loopback port): policy-rc.d refuses service starts.
        policy=/usr/sbin/policy-rc.d
        created_policy=0
        if [ ! -e "$policy" ]; then printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod +x "$policy" && created_policy=1; fi
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq >/dev/null &&
            apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null ||
            echo "install_integrations: apt-get install ${missing[*]} failed; those tests will skip" >&2
        if ((created_policy)); then rm -f "$policy"; fi
    else
        echo "install_integrations: not root or no apt-get; ${missing[*]} not installed, those tests will skip" >&2
    fi
fi
for tool in promtool prometheus-pushgateway chromium; do
    printf 'install_integrations: %-24s %s\n' "$tool" "$(command -v "$tool" || echo 'not installed')"
done

[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/pip install -q -e '.[test,mlflow]' ||
    echo "install_integrations: pip install '.[mlflow]' failed; the MLflow tests will skip" >&2
.venv/bin/python -c 'import mlflow; print("install_integrations: mlflow", mlflow.__version__)' 2>/dev/null || true
.venv/bin/pip install -q 'zeus==0.16.0' ||
    echo "install_integrations: pip install zeus==0.16.0 failed; the Zeus client test will skip" >&2
.venv/bin/python -c 'import zeus.optimizer.batch_size.client, importlib.metadata as m; print("install_integrations: zeus", m.version("zeus"))' 2>/dev/null || true
exit 0
