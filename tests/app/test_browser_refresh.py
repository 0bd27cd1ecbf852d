"""Real browser (issue 41), Run detail:

- F5 keeps the interactive boxes' inputs (the image chosen and the patches hidden in the masking
  box; the caption typed and the image picked in the retrieval box), which a click in the box writes
  to the URL. The session's shared image and paired runs, in a copy the server opens.
- A running run's panels refresh every 2 s; once it ends the page reruns once and then asks the
  server for nothing (counted on the browser's socket).

Screenshots in test-artifacts/live-*.png."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from urllib.parse import parse_qs, urlparse

import playwright.sync_api as playwright_sync
import pytest

from engine.config import RunConfig
from engine.store import create_run, write_status
from engine.tasks import resolve
from tests.app.test_browser import (  # noqa: F401
    ARTIFACTS,
    REPO,
    browser,
    expect,
    page,
    settle,
    shot,
    start_server,
    stop_server,
)

pytestmark = [pytest.mark.slow, pytest.mark.browser]


def query(page) -> dict[str, str]:  # noqa: F811
    return {k: v[0] for k, v in parse_qs(urlparse(page.url).query).items()}


def reload(page) -> None:  # noqa: F811
    """F5: a new session; only the URL carries the state over."""
    url = page.url
    page.reload()
    assert page.url == url
    settle(page, 60_000)


def box_shot(box, name: str) -> None:
    """A screenshot of the box alone, scrolled into view (Streamlit scrolls inside its own container)."""
    ARTIFACTS.mkdir(exist_ok=True)
    box.scroll_into_view_if_needed()
    for _ in range(40):  # at most 20 s for its images to load and decode
        if box.locator("img").evaluate_all("els => els.every(e => e.complete && e.naturalWidth > 0)"):
            break
        box.page.wait_for_timeout(500)
    box.screenshot(path=str(ARTIFACTS / f"{name}.png"))


def pick(page, box, label: str, option: re.Pattern) -> None:  # noqa: F811
    """Choose ``option`` in the box's select ``label`` (opened again if a rerun closed its list)."""
    combo = box.get_by_role("combobox", name=label)
    for attempt in range(3):
        settle(page)
        combo.click()
        try:
            page.get_by_role("option", name=option).click(timeout=10_000)
            break
        except playwright_sync.TimeoutError:
            page.keyboard.press("Escape")
            if attempt == 2:
                shot(page, "live-pick-failed")
                raise
    settle(page)


def test_reload_keeps_the_interactive_boxes_inputs(shared_runs, tmp_path, page):  # noqa: F811
    ws, ids = shared_runs.copy("image_mae", "paired_image_text", dest=tmp_path / "workspace")
    proc, url = start_server(ws)
    try:
        # the masking box: image 3, every patch shown, then patch 07 hidden
        run_id = ids["image_mae"]
        page.goto(f"{url}/run_detail?run={run_id}")
        expect(page.get_by_role("heading", name="Mask it yourself")).to_be_visible(timeout=90_000)
        box = page.locator(f".st-key-mim_box_{run_id}")
        expect(box.get_by_text(re.compile(r"\d+ of 16 patches hidden · checkpoint of step 20"))).to_be_visible(timeout=60_000)
        settle(page)
        pick(page, box, "Validation image", re.compile(r"^3 · "))
        for attempt in range(4):  # a click that lands while the box's fragment reruns is lost: Show all again
            box.get_by_role("button", name="Show all").click()
            try:
                expect(box.get_by_text("0 of 16 patches hidden")).to_be_visible(timeout=10_000)
                break
            except AssertionError:
                if attempt == 3:
                    raise
        settle(page)
        box.get_by_role("button", name="07", exact=True).click()
        expect(box.get_by_text("1 of 16 patches hidden")).to_be_visible(timeout=20_000)
        settle(page)
        q = query(page)
        assert (q["run"], q["box_image"], q["box_hidden"], q["box_ckpt"]) == (run_id, "2", "[6]", "20"), q
        box_shot(box, "live-masking-box-before-reload")
        reload(page)
        box = page.locator(f".st-key-mim_box_{run_id}")
        expect(box.get_by_text("1 of 16 patches hidden · checkpoint of step 20")).to_be_visible(timeout=60_000)
        expect(box.get_by_role("combobox", name="Validation image")).to_have_value(re.compile(r"^3 · "))
        assert query(page) == q
        settle(page)  # the page above the box still lays out after a reload: shoot the box once it stands
        box_shot(box, "live-masking-box-after-reload")

        # the retrieval box: a caption typed, and an image picked on the other tab
        run_id = ids["paired_image_text"]
        page.goto(f"{url}/run_detail?run={run_id}")
        expect(page.get_by_role("heading", name="Retrieval")).to_be_visible(timeout=90_000)
        box = page.locator(f".st-key-retrieval_box_{run_id}")
        field = box.get_by_label("Caption", exact=True)
        expect(field).to_be_visible(timeout=60_000)
        settle(page)
        field.fill("A red apple.")
        field.press("Enter")
        settle(page)
        box.get_by_role("tab", name="Image → captions").click()
        expect(box.get_by_role("combobox", name="Validation image")).to_be_visible(timeout=20_000)
        pick(page, box, "Validation image", re.compile(r"^3 · "))
        expect(box.get_by_test_id("stDataFrame")).to_be_visible(timeout=20_000)
        # the box's fragment writes the pick to the URL when its rerun ends (the table of image 0 may
        # still be on screen until then)
        expect(page).to_have_url(re.compile(r"[?&]box_image=2(&|$)"), timeout=20_000)
        q = query(page)
        assert (q["box_caption"], q["box_image"]) == ("A red apple.", "2"), q
        reload(page)
        box = page.locator(f".st-key-retrieval_box_{run_id}")
        expect(box.get_by_label("Caption", exact=True)).to_have_value("A red apple.", timeout=60_000)
        found = box.get_by_test_id("stImageCaption").filter(has_text=re.compile(r"^\d\. "))
        expect(found).to_have_count(5, timeout=30_000)
        settle(page)
        box_shot(box, "live-retrieval-box-after-reload")
        box.get_by_role("tab", name="Image → captions").click()
        expect(box.get_by_role("combobox", name="Validation image")).to_have_value(re.compile(r"^3 · "))
        assert query(page) == q
        box_shot(box, "live-retrieval-box-image-after-reload")
    finally:
        stop_server(proc)


def test_a_live_run_refreshes_until_it_ends_then_the_page_stays_still(workspace, page):  # noqa: F811
    """While the run trains, its panels rerun every 2 s (the browser asks the server for each); when
    it ends, one refresh sees it, the page reruns once and then asks nothing more."""
    run_id, d = create_run(resolve(RunConfig.from_dict({"name": "live-browser", "train": {"steps": 50}})).to_dict())
    holder = subprocess.Popen([sys.executable, "-c", (  # a live worker: it holds the run's lock
        "import sys, time; from engine.store import RunLock; l = RunLock(sys.argv[1]).acquire(); "
        "print('held', flush=True); time.sleep(600)"), str(d)], cwd=REPO, stdout=subprocess.PIPE, text=True)  # fmt: skip
    asked: list[float] = []  # every message the browser sends: a rerun request (of the page or of a fragment)
    page.on("websocket", lambda ws: ws.on("framesent", lambda _: asked.append(time.time())))
    proc, url = start_server(workspace)
    try:
        assert holder.stdout.readline().strip() == "held"
        write_status(d, {"status": "running", "step": 10, "total_steps": 50, "pid": holder.pid})
        page.goto(f"{url}/run_detail?run={run_id}")
        expect(page.get_by_role("heading", name="Validation figure and baselines")).to_be_visible(timeout=90_000)
        expect(page.get_by_text("running · 20%")).to_be_visible(timeout=30_000)
        settle(page)
        n = len(asked)
        for _ in range(30):  # Playwright delivers the socket's events while the test waits through it
            if len(asked) >= n + 2:
                break
            page.wait_for_timeout(1_000)
        assert len(asked) >= n + 2, "the running run's panels did not refresh twice in 30 s"
        write_status(d, {"status": "completed", "step": 50, "total_steps": 50, "pid": holder.pid})
        expect(page.get_by_text("Step of 50")).to_be_visible(timeout=30_000)
        expect(page.get_by_text("running · 20%")).to_have_count(0, timeout=30_000)
        settle(page)
        page.wait_for_timeout(1_000)  # a refresh already asked for lands
        n = len(asked)
        page.wait_for_timeout(6_000)  # three refresh periods
        assert len(asked) == n, f"the page of an ended run asked for {len(asked) - n} reruns in 6 s"
        shot(page, "live-ended-run")
    finally:
        holder.kill()
        holder.wait()
        stop_server(proc)
