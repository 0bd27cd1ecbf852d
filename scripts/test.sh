#!/usr/bin/env bash
# Install the test extras (venv, pinned requirements, Debian Chromium) and run the whole test suite.
# Extra arguments go to pytest, e.g. `bash scripts/test.sh -m "not slow"`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh --dev
exec .venv/bin/python -m pytest "$@"
