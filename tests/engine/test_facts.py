"""engine/tasks/facts.json, what the run list knows about the built-in tasks and masking strategies without
torch, is what the registries say; and the Runs page renders without importing torch."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from engine.facts import FACTS_FILE, generate, masking_uses_ratio, task_fact
from engine.masking import get_masking
from engine.tasks import get_task

REPO = Path(__file__).resolve().parents[2]


def test_the_facts_file_is_what_the_registries_say():
    assert json.loads(FACTS_FILE.read_text(encoding="utf-8")) == generate(), (
        "engine/tasks/facts.json is stale: run `python -m engine.facts` and commit it")
    assert tuple(task_fact("text_mlm", "headline")) == get_task("text_mlm").headline
    assert masking_uses_ratio("periodic") is get_masking("periodic").uses_ratio is False


def test_the_runs_page_renders_without_torch(shared_runs):
    workspace = shared_runs.get("image_mae").workspace  # read only: the page lists its one run
    code = ("import sys; from streamlit.testing.v1 import AppTest; "
            "at = AppTest.from_file('app/streamlit_app.py', default_timeout=120).run(); "
            "assert not at.exception, [e.value for e in at.exception]; "
            "assert len(at.dataframe[0].value) == 1; "
            "print(sorted(m for m in ('torch', 'scipy.signal', 'sklearn') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO,
                         env={**os.environ, "MASKLAB_WORKSPACE": str(workspace)})
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "[]"  # a cold start loads none of them (seconds each)
