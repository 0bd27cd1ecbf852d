"""bench/ui_scale.py, scaled down: 130 runs (10 of 2,000 steps), one cold process, one warm render
and one filter change of Runs, Compare of 5 runs with the shared image run's samples and evaluation
copied in; the figures' line is printed and every section of Compare renders."""

from __future__ import annotations

import re

import pytest

from tests.bench import load_bench


@pytest.mark.slow
def test_prints_every_figure_beside_its_target(shared_runs, tmp_path, monkeypatch, capsys):
    bench = load_bench("ui_scale")
    run = shared_runs.get("image_mae")
    monkeypatch.setenv("MASKLAB_WORKSPACE", str(tmp_path / "ws"))  # restored after; the bench sets it
    rc = bench.main(["--runs", "130", "--long", "10", "--steps", "2000", "--short-steps", "20", "--repeats", "1",
                     "--compare", "5", "--workspace", str(tmp_path / "ws"),
                     "--sample-run", str(run.workspace / "runs" / run.run_id)])
    out = capsys.readouterr().out.splitlines()
    assert rc == 0
    assert re.fullmatch(r"runs_cold_s=[\d.]+ runs_warm_s=[\d.]+ runs_filter_s=[\d.]+ compare50_s=[\d.]+", out[-1]), out
    assert any("(table: 100 rows on its first page)" in ln for ln in out), out
    assert any("Curves / Configs and results / Reconstructions of the validation inputs / Downstream" in ln
               for ln in out), out
    assert sum("target <=" in ln for ln in out) == 4 and any("load average" in ln for ln in out)
