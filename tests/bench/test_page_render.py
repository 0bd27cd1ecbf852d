"""bench/page_render.py, scaled down: two pages on the shared image run, one warm render each."""

from __future__ import annotations

import pytest

from tests.bench import load_bench


@pytest.mark.slow
def test_prints_one_line_per_page_next_to_its_target(shared_runs, monkeypatch, capsys):
    bench = load_bench("page_render")
    run = shared_runs.get("image_mae")
    monkeypatch.setenv("MASKLAB_WORKSPACE", str(run.workspace))  # restored after; main() sets it too
    rc = bench.main(["--workspace", str(run.workspace), "--pages", "runs,run_detail", "--renders", "1", "--no-box"])
    out = capsys.readouterr().out.splitlines()
    assert rc == 0, out
    pages = [ln for ln in out if " warm " in ln]
    assert [ln.split()[0] for ln in pages] == ["runs", "run_detail"], out  # run_detail: once per run (one here)
    assert all("target <= 1 s" in ln for ln in pages) and not any("FAILED" in ln for ln in out), out
    assert "digits-mae" in pages[1]
