"""Real browser: the Compare page on 4 saved, evaluated runs (the session's shared runs
tests/runs.COMPARE_FOUR: digits, tiny MAE, two seeds of two mask ratios): curves, configs and
results, the reconstruction matrix (its step control, a typed step, the arrow keys and the view
toggle move every column), seed groups and the downstream table render; screenshots in
test-artifacts/compare-4-runs*.png."""

from __future__ import annotations

import pytest

from tests.app.test_browser import CHART, browser, expect, page, settle, shot, start_server, stop_server  # noqa: F401
from tests.runs import COMPARE_FOUR

pytestmark = [pytest.mark.slow, pytest.mark.browser]


def test_compare_four_saved_runs(shared_runs, workspace, page):  # noqa: F811
    _, by_kind = shared_runs.copy(*COMPARE_FOUR, dest=workspace)
    ids = [by_kind[k] for k in COMPARE_FOUR]  # r0.5-s0, r0.5-s1, r0.75-s0, r0.75-s1
    proc, url = start_server(workspace)
    try:
        page.goto(f"{url}/compare?runs={','.join(ids)}")
        expect(page.get_by_text("Download HTML report")).to_be_visible(timeout=90_000)
        settle(page)
        for h in ("Curves", "Configs and results", "Reconstructions of the validation inputs",
                  "Downstream: probes and fine-tuning", "Training cost"):
            expect(page.get_by_role("heading", name=h)).to_be_visible()
        assert page.locator(CHART).count() >= 2  # the curves (two seed groups with bands) and the probe bars
        expect(page.get_by_text("2 seed group(s) of 4 runs")).to_be_visible()
        quality = page.locator("table").filter(has_text="SSIM, masked patches · best baseline")
        expect(quality.first).to_be_visible()
        results = page.locator("table").filter(has_text="baseline · training mean image").first
        expect(results).to_contain_text("masking.ratio")  # configs and results, the baselines pinned under them
        down = page.locator("table").filter(has_text="▸ masking.ratio=0.5 (2 seeds)").first
        expect(down).to_contain_text("▸ masking.ratio=0.75 (2 seeds)")
        expect(down).to_contain_text("baseline · random init")
        expect(page.locator("table").filter(has_text="GFLOPs per step").first).to_be_visible()

        # The matrix: one step control for every column; its buttons, a typed step and the arrow keys.
        matrix = page.locator(".mx").first
        matrix.scroll_into_view_if_needed()
        heads = matrix.locator(".head .sub:not(.warn)")
        expect(heads).to_have_count(4)
        expect(heads).to_have_text(["step 12"] * 4)
        assert matrix.locator("img").count() == 4 * 6  # 6 fixed inputs a run, the reconstruction view
        shot(page, "compare-4-runs")
        matrix.get_by_role("button", name="◀").click()
        expect(heads).to_have_text(["step 6"] * 4, timeout=30_000)
        box = matrix.get_by_label("type a step")
        box.fill("0")
        box.press("Enter")
        expect(heads).to_have_text(["step 0"] * 4, timeout=30_000)
        page.get_by_role("heading", name="Reconstructions of the validation inputs").click()
        page.keyboard.press("ArrowRight")
        expect(heads).to_have_text(["step 6"] * 4, timeout=30_000)
        assert "mstep=6" in page.url
        matrix.get_by_role("button", name="error map").click()
        expect(matrix.locator("img[alt=error]")).to_have_count(4 * 6, timeout=30_000)
        matrix.get_by_role("button", name="before / after").click()
        expect(matrix.get_by_label("wipe")).to_be_visible(timeout=30_000)
        expect(matrix.locator("img[alt=reconstruction]")).to_have_count(4 * 6)
        assert "mview=wipe" in page.url
        shot(page, "compare-4-runs-wipe")
    finally:
        stop_server(proc)
