"""Real browser: a 2-value x 1-seed sweep of the mask ratio launched from New run's Sweep section
(tiny MAE on digits, real workers, evaluated at their end) and seen on the Sweeps page through the
link the launch gives; screenshots in test-artifacts/sweep-1-new-run.png and sweep-2-sweeps.png."""

from __future__ import annotations

import re

import pandas as pd
import pytest

from engine.runner.sweep import sweep_of, sweep_table
from engine.store import get_run
from tests.app.test_browser import (  # noqa: F401
    CHART,
    browser,
    cancel_all,
    expect,
    page,
    settle,
    shot,
    start_server,
    stop_server,
    type_into,
    wait_until,
)

pytestmark = [pytest.mark.slow, pytest.mark.browser]
# The link carries an evaluation sized to the test (probes and a one-epoch fine-tune on 300 rows): with
# the defaults (2,000 rows, five epochs) evaluating the two runs took most of this test's 96 s.
FORM = ("dataset=digits&train.steps=8&train.batch_size=32&train.eval_interval=4&name=bsweep"
        "&evaluation.max_rows=300&evaluation.tsne_max_rows=0&evaluation.finetune_epochs=1")


def test_a_sweep_launched_from_new_run_shows_on_the_sweeps_page(workspace, monkeypatch, page):  # noqa: F811
    monkeypatch.setenv("MASKLAB_AUTO_EVAL", "1")  # the server's workers evaluate each run at its end
    proc, url = start_server(workspace)
    try:
        page.goto(f"{url}/new_run?{FORM}")
        expect(page.get_by_role("heading", name="Mask preview")).to_be_visible(timeout=60_000)
        page.get_by_text("Sweep", exact=True).click()
        settle(page)
        type_into(page, "Values (comma-separated)", "0.5, 0.75")
        type_into(page, "Replicates per value", "1")
        expect(page.get_by_text("2 runs (2 values × 1 seed) · 8 steps each · 16 steps in all")).to_be_visible()
        assert "sweep_values=0.5%2C+0.75" in page.url and "sweep_replicates=1" in page.url
        shot(page, "sweep-1-new-run")

        page.get_by_role("button", name="Launch sweep").click()
        success = page.get_by_test_id("stAlertContentSuccess")
        expect(success).to_contain_text("Queued sweep", timeout=30_000)
        sid = re.search(r"Queued sweep (\w{6}): 2 runs \(masking.ratio = 0.5, 0.75 × seed 0, 16 steps in all\)",
                        success.inner_text()).group(1)
        page.get_by_role("link", name="Open this sweep on the Sweeps page").click()
        expect(page.get_by_role("heading", name="Sweeps")).to_be_visible(timeout=30_000)
        assert f"sweep={sid}" in page.url
        expect(page.get_by_role("combobox", name="Sweep")).to_have_value(f"bsweep · masking.ratio · 2 runs · {sid}",
                                                                         timeout=30_000)

        def evaluated():  # the probe is stored while the run's final evaluation goes on: wait for its end too
            t = sweep_table(sid, workspace)
            return [t] if len(t) == 2 and t["probe_acc"].notna().all() and (t["status"] == "completed").all() else None

        (table,) = wait_until(evaluated, 240, "both runs of the sweep to train and be evaluated", every=2)
        assert list(table["value"]) == [0.5, 0.75] and list(table["seed"]) == [0, 0]
        for run_id, value in zip(table["run_id"], table["value"]):
            rec = get_run(run_id, workspace)
            assert rec.status == "completed" and rec.config["masking"]["ratio"] == value
            assert rec.config["evaluation"]["max_rows"] == 300  # carried from the link into every run
            assert sweep_of(rec.name)["id"] == sid
        page.reload()
        expect(page.get_by_text("2 of 2 runs evaluated", exact=False)).to_be_visible(timeout=60_000)
        page.locator(CHART).first.wait_for(state="visible", timeout=30_000)
        settle(page)
        for acc in table["probe_acc"]:
            assert not pd.isna(acc)
            expect(page.locator("table").last).to_contain_text(f"{acc:.1%}")
        shot(page, "sweep-2-sweeps")
    finally:
        stop_server(proc)
        cancel_all(workspace)
