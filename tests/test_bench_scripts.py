"""The benchmarks start as bench/README.md runs them (``.venv/bin/python bench/X.py``): the script's
own folder comes first on its path, not the checkout, so the venv must hold the checkout
(scripts/install.sh writes its ``masklab-checkout.pth``). Fifteen of the scripts failed with
``No module named 'engine'`` before it did."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(Path(sys.prefix).resolve() != (REPO / ".venv").resolve(), reason="not the checkout's .venv")
def test_a_script_under_bench_imports_the_repositorys_packages():
    code = "import app, bench, engine; print(engine.__file__)"
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO / "bench", capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str(REPO / "engine" / "__init__.py"), out.stdout
