#!/usr/bin/env bash
# The framework tests (marker `frameworks`): the Hugging Face and Lightning examples
# (configs/hf_tiny.yaml, configs/lightning_tiny.yaml) with the real packages, 5
# recurrences each under `zeus-run run` and under ask/tell, on the CPU.
# Not in .ci/run: installing transformers and Lightning and running the four jobs
# would take .ci/run past its budget.
# Installs PyTorch's CPU build (torch==2.13.0, from this machine's local file where
# there is one) first, so that the extras do not pull a CUDA build, then the extras.
# Usage: scripts/test_frameworks.sh [PYTEST_ARGS...]
set -euo pipefail
cd "$(dirname "$0")/.."

[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/pip install -q -e '.[test]'
.venv/bin/python -c 'import torch' 2>/dev/null || .venv/bin/pip install -q "torch==${ZEUS_TORCH_VERSION:-2.13.0}"
.venv/bin/pip install -q -e '.[test,hf,lightning]'
.venv/bin/python -c 'import torch, transformers, lightning; print(f"test_frameworks: torch {torch.__version__}, transformers {transformers.__version__}, lightning {lightning.__version__}")'
exec env -u PYTHONUNBUFFERED .venv/bin/python -m pytest -q -m frameworks "$@"
