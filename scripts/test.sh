#!/usr/bin/env bash
# Install the test extras (venv, pinned requirements, Debian Chromium), lint with ruff, and run the pytest suite under
# tests/ on two workers (pytest-xdist; a test module to one worker, the browser and multi-process tests
# one after another), then print the 40 slowest setups and calls. Extra arguments go to pytest and
# override these, e.g. `bash scripts/test.sh tests/engine/test_masking.py -n 0` or
# `bash scripts/test.sh -m "slow or not slow"`.
set -euo pipefail
cd "$(dirname "$0")/.."
# MASKLAB_TEST_CLUSTER=1 also installs the cluster extra (Ray, submitit), so that their tests run (CI does).
bash scripts/install.sh --dev ${MASKLAB_TEST_CLUSTER:+--cluster}
# Lint first (ruff.toml: pyflakes, import order, imports at the top unless marked lazy with a reason).
.venv/bin/ruff check .
exec .venv/bin/python -m pytest -n "${MASKLAB_TEST_WORKERS:-2}" --dist loadscope --durations=40 "$@"
