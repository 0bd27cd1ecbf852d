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


def paired_reports(bench, out: dict, workspace: Path, recipe, cli: list[str], capsys) -> tuple[str, str, list[str]]:
    """bench/paired_quality.py's report of ``out`` (the run just trained), then its CLI with ``cli``
    (``--collect`` of ``workspace``: the same run read back from the store). Returns both reports'
    text and the first's figure lines; asserts the second has the same figure lines."""
    bench.print_report(out, str(workspace), recipe)
    assert bench.main(cli) == 0
    first, second = capsys.readouterr().out.split("paired: ")[1:]

    def figures(report: str) -> list[str]:
        return [line for line in report.splitlines() if line.startswith("  ") and not line.startswith("  seed ")]

    assert figures(first) == figures(second)
    return first, second, figures(first)
