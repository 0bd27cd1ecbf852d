#!/usr/bin/env bash
# Install (if needed) and start the masklab dashboard on http://127.0.0.1:8501 with the bundled data.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
echo "masklab: http://127.0.0.1:${PORT:-8501}  (workspace: ${MASKLAB_WORKSPACE:-./workspace})"
exec .venv/bin/python -m streamlit run app/streamlit_app.py --server.headless true \
  --server.address 127.0.0.1 --server.port "${PORT:-8501}" --browser.gatherUsageStats false
