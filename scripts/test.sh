#!/usr/bin/env bash
# Install the test extras (venv, pinned requirements, Debian Chromium) and run the whole test suite.
# Extra arguments go to pytest, e.g. `bash scripts/test.sh -m "not slow"`.
set -euo pipefail
cd "$(dirname "$0")/.."
# MASKLAB_TEST_CLUSTER=1 also installs the cluster extra (Ray, submitit), so that their tests run (CI does).
bash scripts/install.sh --dev ${MASKLAB_TEST_CLUSTER:+--cluster}
exec .venv/bin/python -m pytest "$@"
