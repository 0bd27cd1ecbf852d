"""Real browser: the Compare page on 4 saved runs trained and evaluated here (digits, tiny MAE at 4
mask ratios): curves, config diff, reconstruction grid and downstream table render; screenshot in
test-artifacts/compare-4-runs.png."""

from __future__ import annotations

import pytest

from engine.config import RunConfig
from engine.runner.worker import execute_run
from engine.store import create_run
from engine.tasks import resolve
from tests.app.test_browser import CHART, browser, expect, page, settle, shot, start_server, stop_server  # noqa: F401

pytestmark = [pytest.mark.slow, pytest.mark.browser]
BASE = {"data": {"dataset": "digits"}, "model": {"preset": "tiny", "patch_size": 2},
        "evaluation": {"max_rows": 300, "tsne_max_rows": 0, "budget": None},  # 12 steps: no limit, or no fine-tune
        "train": {"steps": 12, "batch_size": 32, "eval_interval": 6, "checkpoint_interval": 12, "warmup_steps": 2,
                  "device": "cpu", "num_threads": 1}}


def test_compare_four_saved_runs(workspace, monkeypatch, page):  # noqa: F811
    monkeypatch.setenv("MASKLAB_AUTO_EVAL", "1")
    ids = []
    for ratio in (0.25, 0.5, 0.75, 0.9):
        run_id, d = create_run(resolve(RunConfig.from_dict({**BASE, "name": f"r{ratio}", "masking": {"ratio": ratio}})).to_dict())
        assert execute_run(d) == "completed"
        ids.append(run_id)
    proc, url = start_server(workspace)
    try:
        page.goto(f"{url}/compare?runs={','.join(ids)}")
        expect(page.get_by_text("Download HTML report")).to_be_visible(timeout=90_000)
        settle(page)
        for h in ("Curves", "Config differences", "Reconstructions of the validation inputs",
                  "Downstream: probes and fine-tuning", "Training cost"):
            expect(page.get_by_role("heading", name=h)).to_be_visible()
        assert page.locator(CHART).count() >= 2  # the curves and the probe bars
        diff = page.locator("table").nth(0)
        expect(diff).to_contain_text("masking.ratio")
        for ratio in ("0.25", "0.5", "0.75", "0.9"):
            expect(diff).to_contain_text(ratio)
        assert page.locator("img").count() >= 9  # original + masked and reconstruction per run
        expect(page.get_by_text("original", exact=True)).to_be_visible()
        quality = page.locator("table").nth(1)  # under the grid: SSIM beside the best baseline
        expect(quality).to_contain_text("SSIM, masked patches · best baseline")
        down = page.locator("table").filter(has_text="linear probe").first
        expect(down).to_contain_text("★")
        expect(page.locator("table").filter(has_text="fine-tune · random init").first).to_be_visible()
        expect(page.locator("table").filter(has_text="GFLOPs per step").first).to_be_visible()
        shot(page, "compare-4-runs")
    finally:
        stop_server(proc)
