"""Real browser (issue 11): a paired run's Run detail, trained here on real Tux Paint stamps, shows
the joint reconstruction (masked patches and masked tokens next to the model's reconstruction of
both, the caption from the image alone) and the retrieval box answers in both directions;
screenshot in test-artifacts/paired-run-detail.png."""

from __future__ import annotations

import re

import pytest

from engine.data import ImportOptions, import_source
from engine.store import load_samples
from tests.app.test_browser import browser, expect, page, settle, shot, start_server, stop_server  # noqa: F401
from tests.stamps import completed_run, pairs_zip

pytestmark = [pytest.mark.slow, pytest.mark.browser]
NUM_VIS = 4
CFG = {"name": "pairs-browser", "task": "paired",
       "data": {"dataset": "pairs", "tokenizer": {"vocab_size": 300, "max_len": 24}}, "model": {"preset": "tiny"},
       "train": {"steps": 4, "batch_size": 8, "eval_interval": 4, "checkpoint_interval": 4, "num_vis": NUM_VIS,
                 "warmup_steps": 0, "num_threads": 1}}


def test_paired_run_detail_joint_reconstruction_and_retrieval(workspace, shared_data, page):  # noqa: F811
    z = pairs_zip(shared_data, workspace.parent / "pairs.zip", per_class=dict.fromkeys(("animals", "food", "vehicles"), 12))
    assert import_source(z, "pairs", ImportOptions(val_fraction=0.25), image_size=16, geometry="pad").accepted == 36
    run_id = completed_run(CFG, workspace)
    sample = load_samples(run_id, workspace=workspace)
    proc, url = start_server(workspace)
    try:
        page.goto(f"{url}/run_detail?run={run_id}")
        expect(page.get_by_role("heading", name="Joint reconstructions of validation pairs")).to_be_visible(timeout=90_000)
        expect(page.get_by_text(re.compile(rf"Step 4 · {NUM_VIS} fixed validation pairs"))).to_be_visible(timeout=30_000)
        for label in ("masked caption", "model's tokens", "caption from the image alone"):
            expect(page.get_by_text(label, exact=False)).to_have_count(NUM_VIS, timeout=20_000)
        # the hidden tokens are highlighted in the captions
        assert page.locator("span[style*='background:#ffd54f']").count() >= 2 * int(sample["text_mask"].any(1).sum())
        box = page.locator(f".st-key-retrieval_box_{run_id}")
        expect(page.get_by_role("heading", name="Retrieval")).to_be_visible(timeout=30_000)
        settle(page)
        # text -> images: the box starts with the first pair's caption; a typed caption gets 5 images
        field = box.get_by_label("Caption", exact=True)
        expect(field).to_have_value(sample.meta["captions"][0])
        field.fill("A red apple.")
        field.press("Enter")
        settle(page)
        found = box.get_by_test_id("stImageCaption").filter(has_text=re.compile(r"^\d\. "))
        expect(found).to_have_count(5, timeout=30_000)
        expect(found.first).to_contain_text("1. ")
        # image -> captions: the table of the 5 nearest captions, the image's own one marked
        box.get_by_role("tab", name="Image → captions").click()
        grid = box.get_by_test_id("stDataFrame")
        expect(grid).to_be_visible(timeout=20_000)
        expect(grid).to_contain_text("similarity")
        shot(page, "paired-run-detail")
    finally:
        stop_server(proc)
