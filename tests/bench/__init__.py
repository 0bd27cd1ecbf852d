"""Scaled-down versions of the bench/ scripts (slow tests)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parents[2] / "bench"


def load_bench(name: str):
    """The module ``bench/<name>.py`` (bench/ is not a package)."""
    spec = importlib.util.spec_from_file_location(name, BENCH_DIR / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # dataclasses look their module up while the class is built
    spec.loader.exec_module(mod)
    return mod
