#!/usr/bin/env bash
# Install (if needed) and start the masklab dashboard on http://127.0.0.1:8501 with the bundled data.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
echo "masklab: http://${MASKLAB_ADDRESS:-127.0.0.1}:${PORT:-8501}  (workspace: ${MASKLAB_WORKSPACE:-./workspace})"
# app.serve binds 127.0.0.1 unless MASKLAB_ADDRESS says otherwise, and then only with sign-in configured.
exec .venv/bin/python -m app.serve --port "${PORT:-8501}"
