"""End-to-end: the real Streamlit server, Debian's Chromium through Playwright, real training workers.

- A: the sidebar shows exactly the ``st.navigation`` pages (no legacy ``pages/`` menu).
- B: New run -> Launch -> the Runs chart gains points -> Run detail shows the reconstruction grid.
- C: a run survives a restart of the Streamlit server and the new server shows it still running.
- D: Mask lab shows masks on real digits and the three statistics charts, and follows a strategy
  switch; New run offers the same strategies.
- E: a CSV of real questions is imported, an MLM run trains on it, the fill-in box answers.
- F: a reloaded URL restores each page's state (New run, Mask lab, Data, Runs, Run detail).
- G: Run detail's masking box: a click on a patch hides exactly that patch of the model input.
- H: a zip of real spoken digits with a manifest is uploaded, an audio run is launched from New run
  (its masks drawn on real spectrograms), and Run detail shows the spectrogram panels and players.

Screenshots go to ``test-artifacts/`` (git-ignored) for a human look.
"""

from __future__ import annotations

import base64
import csv as _csv
import io
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from urllib.parse import urljoin

import numpy as np
import playwright.sync_api as playwright_sync  # requirements-dev.txt: a missing one must fail, not skip
import pytest
from PIL import Image

from app.components.images import MASK_GREY
from app.components.matrix import ROWS as MATRIX_ROWS
from bench.fsdd import subset_zip
from engine.config import RunConfig
from engine.masking import MASKING_REGISTRY, strategies_for
from engine.runner.launcher import cancel, submit
from engine.store import HOLD_FILE, get_run, list_runs, read_metrics, run_dir
from engine.tasks import resolve
from tests.app.test_url_state import _finished

REPO = Path(__file__).resolve().parents[2]
ENTRY = REPO / "app" / "streamlit_app.py"

pytestmark = [pytest.mark.slow, pytest.mark.browser]
expect = playwright_sync.expect

CHROMIUM = "/usr/bin/chromium"
ARTIFACTS = REPO / "test-artifacts"
CHART = "canvas, svg.marks, .vega-embed"
NAV_TITLES = ["Data", "Models", "New run", "Mask lab", "Runs", "Run detail", "Compare", "Sweeps", "Presentation", "Audit"]  # the local admin also gets Audit


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(workspace: Path) -> tuple[subprocess.Popen, str]:
    """Start ``streamlit run`` on a free port with ``$MASKLAB_WORKSPACE=workspace``; wait for health."""
    port = free_port()
    env = {**os.environ, "MASKLAB_WORKSPACE": str(workspace)}
    log = open(workspace.parent / f"streamlit-{port}.log", "wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", str(ENTRY), "--server.headless", "true",
         "--server.address", "127.0.0.1", "--server.port", str(port), "--browser.gatherUsageStats", "false"],
        cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    wait_for_health(proc, url, log.name)
    return proc, url


def wait_for_health(proc: subprocess.Popen, url: str, log_name: str, timeout: float = 30) -> None:
    """Poll ``url``'s ``/_stcore/health`` until it answers ``ok``; stop the server and raise if it
    exits or does not answer within ``timeout`` seconds (its output is in ``log_name``)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"streamlit exited with {proc.returncode}; see {log_name}")
        try:
            with urllib.request.urlopen(url + "/_stcore/health", timeout=1) as r:
                if r.read() == b"ok":
                    return
        except OSError:
            time.sleep(0.2)
    stop_server(proc)
    raise RuntimeError(f"streamlit did not answer on {url} within {timeout:.0f} s")


def stop_server(proc: subprocess.Popen) -> None:
    """SIGTERM and wait until the process is gone (SIGKILL after 15 s)."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def cancel_all(workspace: Path) -> None:
    """Stop every worker still running in ``workspace`` (they outlive the server by design)."""
    for r in list_runs(workspace):
        if r.is_active:
            cancel(r.run_id, workspace)
    deadline = time.time() + 30
    while any(r.is_active for r in list_runs(workspace)) and time.time() < deadline:
        time.sleep(0.5)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return not stat.exists() or stat.read_text().split(") ")[-1][:1] != "Z"


def wait_until(fn, timeout: float, what: str, every: float = 0.5):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = fn()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


@pytest.fixture(scope="module")
def workspace_dir(tmp_path_factory) -> Path:
    ws = tmp_path_factory.mktemp("browser") / "workspace"
    ws.mkdir()
    # No automatic evaluation for this module's runs (its server's and its own submits): these flows
    # never look at one, and it holds a run in "evaluating" after its last step, so a wait for
    # "completed" timed out on a loaded machine. test_browser_compare / _sweep evaluate.
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MASKLAB_AUTO_EVAL", "0")
        yield ws
        cancel_all(ws)


@pytest.fixture(scope="module")
def server(workspace_dir) -> str:
    proc, url = start_server(workspace_dir)
    yield url
    stop_server(proc)


@pytest.fixture(scope="module")
def browser():
    with playwright_sync.sync_playwright() as p:
        b = p.chromium.launch(
            executable_path=CHROMIUM, headless=True,
            args=["--no-sandbox", "--disable-gpu", "--disable-quic", "--disable-background-networking"],
        )  # fmt: skip
        yield b
        b.close()


@pytest.fixture
def page(browser):
    # A tall viewport: Streamlit scrolls inside its own container, so full_page alone would cut the page.
    ctx = browser.new_context(viewport={"width": 1400, "height": 2200})
    pg = ctx.new_page()
    yield pg
    ctx.close()


def shot(page, name: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def settle(page, timeout: float = 30_000) -> None:
    """Wait until Streamlit is not running the script (the status widget is gone)."""
    page.wait_for_timeout(300)
    expect(page.get_by_test_id("stStatusWidget")).to_have_count(0, timeout=timeout)


def type_into(page, label: str, value: str) -> None:
    """Type ``value`` into the input labelled ``label``, press Enter, wait for the rerun."""
    box = page.get_by_label(label, exact=True)
    box.fill(value)
    box.press("Enter")
    settle(page)


def click_when_live(page, locator, timeout: float = 30) -> None:
    """Click an element of a self-refreshing fragment: while a fragment reruns, Streamlit marks its
    elements inert (not clickable), so retry short clicks between reruns."""
    deadline = time.time() + timeout
    while True:
        try:
            locator.first.click(timeout=2_000)
            return
        except playwright_sync.TimeoutError:
            if time.time() > deadline:
                raise


def test_a_sidebar_shows_exactly_the_navigation_pages(server, page):
    page.goto(server)
    expect(page.get_by_role("heading", name="Runs")).to_be_visible(timeout=20_000)
    links = page.get_by_test_id("stSidebarNavLink")
    expect(links).to_have_count(len(NAV_TITLES))
    titles = [t.strip() for t in links.get_by_test_id("stMarkdownContainer").all_inner_texts()]
    assert titles == NAV_TITLES
    assert page.get_by_test_id("stSidebarNavSeparator").count() == 0  # no second (legacy) menu
    expect(page.get_by_text("No runs yet.")).to_be_visible(timeout=30_000)
    shot(page, "a1-runs-empty")

    links.filter(has_text="Data").click()
    expect(page.get_by_role("heading", name="Samples")).to_be_visible(timeout=30_000)
    expect(page.get_by_test_id("stImage").locator("img")).to_have_count(24, timeout=20_000)
    expect(page.get_by_text(re.compile(r"^\d · val$")).first).to_be_visible()  # captions: class · split
    page.locator(CHART).first.wait_for(state="visible", timeout=20_000)  # counts per class
    settle(page)
    shot(page, "a2-data-digits")


def test_b_launch_watch_curves_and_reconstructions(server, page, workspace_dir):
    page.goto(server + "/new_run")
    expect(page.get_by_role("heading", name="Mask preview")).to_be_visible(timeout=30_000)
    page.get_by_test_id("stSelectbox").filter(has_text="Dataset").click()
    page.get_by_role("option", name="digits").click()
    # Long enough that a fast machine is still training while the test watches; held (the `hold`
    # marker) once its views are seen, so that it takes no core while the test cancels it.
    for label, value in [("Steps", "2000"), ("Batch size", "64"), ("Eval interval (steps)", "50"),
                         ("Run name", "browser-e2e")]:
        type_into(page, label, value)
    expect(page.get_by_test_id("stImage")).to_have_count(16)  # preview: 8 originals + 8 masked
    shot(page, "b1-new-run")

    page.get_by_role("button", name="Launch").click()
    success = page.get_by_test_id("stAlertContentSuccess")
    expect(success).to_contain_text("Launched run", timeout=20_000)
    run_id = re.search(r"Launched run (\S+) \(", success.inner_text()).group(1)
    assert "(digits, 2,000 steps x batch 64, " in success.inner_text()  # what was launched, in words
    cfg = get_run(run_id, workspace_dir).config
    assert cfg["name"] == "browser-e2e" and cfg["data"]["dataset"] == "digits"
    assert cfg["train"]["steps"] == 2000 and cfg["train"]["eval_interval"] == 50 and cfg["train"]["batch_size"] == 64

    page.get_by_role("link", name="Compare runs").click()
    expect(page.get_by_role("heading", name="Runs")).to_be_visible(timeout=20_000)
    caption = page.get_by_text(re.compile(r"\d+ loss points · latest step per run: .*: step \d+"))

    def points() -> tuple[int, int]:
        m = re.search(r"(\d+) loss points · latest step per run: .*browser-e2e · \w+: step (\d+)",
                      caption.inner_text(timeout=20_000))
        return int(m.group(1)), int(m.group(2))

    first = wait_until(lambda: points()[0] >= 3 and points(), 90, "the first loss points on the Runs page")
    page.locator(CHART).first.wait_for(state="visible", timeout=20_000)
    second = wait_until(lambda: points()[0] > first[0] and points(), 60, "the loss chart to gain points")
    assert second[1] > first[1]  # the self-refreshing fragment shows later steps
    stored = read_metrics([run_id], ["loss"], workspace=workspace_dir)
    assert stored["step"].max() >= second[1]
    expect(page.get_by_text(re.compile(r"browser-e2e · \S+ · running · step \d+ / 2000"))).to_be_visible()
    shot(page, "b2-runs-live")

    page.goto(f"{server}/run_detail?run={run_id}")
    expect(page.get_by_role("heading", name="Reconstructions")).to_be_visible(timeout=20_000)
    expect(page.get_by_text("Reconstruction + visible patches")).to_be_visible(timeout=60_000)
    images = page.get_by_test_id("stImage").locator("img")
    # main view + 4 rows x 8 fixed validation images (+ the masking box once a checkpoint is kept)
    wait_until(lambda: images.count() >= 40, 20, "the reconstruction views")
    # The live run's views redraw as checkpoints arrive, so count decoded images in one pass until 40
    # have loaded; a broken image never does and times this out.
    wait_until(lambda: page.evaluate("""() => [...document.querySelectorAll('[data-testid="stImage"] img')]
                                          .filter(i => i.complete && i.naturalWidth > 0).length""") >= 40,
               30, "40 decoded reconstruction images")
    expect(page.get_by_text(re.compile(r"Step \d+ · 8 fixed validation images"))).to_be_visible()
    (run_dir(run_id, workspace_dir) / HOLD_FILE).touch()  # still running, no more steps
    shot(page, "b3-run-detail")

    page.goto(server)  # Runs is the default page, served at the root URL
    expect(page.get_by_role("heading", name="Runs")).to_be_visible(timeout=20_000)
    click_when_live(page, page.get_by_role("button", name="Cancel"))
    expect(page.get_by_text(re.compile(r"Cancel \*?\*?browser-e2e"))).to_be_visible(timeout=20_000)  # it asks first
    assert get_run(run_id, workspace_dir).status == "running"
    shot(page, "b4-cancel-asks")
    click_when_live(page, page.get_by_role("button", name="Yes, cancel"))
    wait_until(lambda: get_run(run_id, workspace_dir).status == "cancelled", 30, "the run to be cancelled")


def test_c_run_survives_server_restart(page, workspace_dir):
    cfg = resolve(RunConfig.from_dict({"name": "survivor", "train": {"steps": 20000, "batch_size": 32, "eval_interval": 500}}))
    proc, url = start_server(workspace_dir)
    try:
        run_id = submit(cfg, workspace_dir)
        wait_until(lambda: get_run(run_id, workspace_dir).step >= 2, 90, "the worker to start training")
    finally:
        stop_server(proc)
    assert proc.poll() is not None
    rec = get_run(run_id, workspace_dir)
    assert rec.status == "running" and rec.pid and pid_alive(rec.pid)
    before = rec.step
    wait_until(lambda: get_run(run_id, workspace_dir).step > before + 2, 30, "steps while no server runs")
    between = get_run(run_id, workspace_dir).step
    (run_dir(run_id, workspace_dir) / HOLD_FILE).touch()  # alive until the cancel below, on no core

    proc, url = start_server(workspace_dir)
    try:
        page.goto(url)  # Runs, the default page
        line = page.get_by_text(re.compile(rf"survivor · {run_id} · running · step \d+ / 20000"))
        expect(line).to_be_visible(timeout=30_000)
        shown = int(re.search(r"step (\d+) /", line.inner_text()).group(1))
        assert shown >= between > before
        shot(page, "c-runs-after-restart")
    finally:
        stop_server(proc)
        cancel(run_id, workspace_dir)


def other_image_strategy() -> str:
    """A registered image strategy other than the default, preferably one with parameters."""
    others = [n for n in strategies_for("image", 2) if n != RunConfig().masking.strategy]
    assert others, "only the default masking strategy is registered for images"
    return next((n for n in others if MASKING_REGISTRY[n].params.model_fields), others[0])


def pick_strategy(page, name: str) -> None:
    page.get_by_test_id("stSelectbox").filter(has_text="Masking strategy").click()
    page.get_by_role("option", name=name, exact=True).click()
    settle(page)


def test_d_mask_lab_charts_and_strategy_switch(server, page):
    page.goto(server + "/mask_lab")
    expect(page.get_by_role("heading", name="Mask lab")).to_be_visible(timeout=30_000)
    images = page.get_by_test_id("stImage").locator("img")
    expect(images).to_have_count(16, timeout=30_000)  # 8 validation digits: original and masked
    charts = page.get_by_test_id("stVegaLiteChart")
    expect(charts).to_have_count(3, timeout=30_000)
    for i in range(3):
        charts.nth(i).locator(CHART).first.wait_for(state="visible", timeout=20_000)  # ratio, regions, heatmap
    expect(page.get_by_test_id("stMetric").filter(has_text="Masks / s")).to_be_visible()
    settle(page)
    assert all(images.nth(i).evaluate("img => img.naturalWidth > 0") for i in range(16))
    masked_before = [images.nth(i).get_attribute("src") for i in range(8, 16)]

    name = other_image_strategy()
    pick_strategy(page, name)
    expect(page.get_by_role("combobox", name="Masking strategy")).to_have_value(name)
    for field in MASKING_REGISTRY[name].params.model_fields:  # its parameter form
        expect(page.get_by_text(field, exact=True).first).to_be_visible()
    wait_until(lambda: [images.nth(i).get_attribute("src") for i in range(8, 16)] != masked_before, 30,
               "the masked images to follow the strategy")  # fmt: skip
    expect(charts).to_have_count(3)
    settle(page)
    shot(page, "mask-lab")

    page.goto(server + "/new_run")
    expect(page.get_by_role("heading", name="Mask preview")).to_be_visible(timeout=30_000)
    pick_strategy(page, name)
    expect(page.get_by_text(f"reconstruction grid ({name})")).to_be_visible(timeout=20_000)
    expect(page.get_by_test_id("stImage")).to_have_count(16)
    page.get_by_text("Resolved config").click()
    expect(page.get_by_test_id("stJson")).to_contain_text(name)
    settle(page)
    shot(page, "new-run-strategy")


def launch_short_run(page, url: str, preview: str, fields: dict[str, str], name: str) -> str:
    """Open New run at ``url``, wait for the mask preview (its caption matching ``preview``), type
    ``fields`` (label -> value), take screenshot ``name``, Launch; returns the launched run's id."""
    page.goto(url)
    expect(page.get_by_role("heading", name="Mask preview")).to_be_visible(timeout=30_000)
    expect(page.get_by_text(re.compile(preview))).to_be_visible(timeout=60_000)
    for label, value in fields.items():
        type_into(page, label, value)
    shot(page, name)
    page.get_by_role("button", name="Launch").click()
    success = page.get_by_test_id("stAlertContentSuccess")
    expect(success).to_contain_text("Launched run", timeout=30_000)
    return re.search(r"Launched run (\S+) \(", success.inner_text()).group(1)


def test_e_text_csv_upload_mlm_run_and_fill_in_box(server, page, workspace_dir, shared_data, tmp_path):
    """Upload a small CSV of real questions, launch an MLM run on it, and see the fill-in box answer."""
    rows = (shared_data / "trec" / "train.tsv").read_text(encoding="utf-8").splitlines()[:301]
    csv_path = tmp_path / "questions.csv"

    with open(csv_path, "w", newline="", encoding="utf-8") as f:
        w = _csv.writer(f)
        for r in rows:
            w.writerow(r.split("\t"))
    page.goto(server + "/data")
    expect(page.get_by_role("heading", name="Data")).to_be_visible(timeout=30_000)
    page.get_by_text("Import a dataset").click()
    page.get_by_test_id("stFileUploaderDropzoneInput").set_input_files(str(csv_path))
    expect(page.get_by_text(re.compile(r"questions\.csv: text \(csv\) · 300 texts to import · 6 classes"))).to_be_visible(timeout=30_000)
    name = page.get_by_label("Dataset name", exact=True)
    name.fill("questions")
    name.press("Enter")
    settle(page)
    page.get_by_role("button", name="Import").click()
    expect(page.get_by_test_id("stAlertContentSuccess")).to_contain_text("Imported all 300 texts", timeout=30_000)
    expect(page.get_by_role("heading", name="Length")).to_be_visible(timeout=30_000)
    settle(page)
    shot(page, "e1-data-questions")

    run_id = launch_short_run(page, server + "/new_run?dataset=questions", r"The 8 fixed validation texts of questions",
                              {"Steps": "40", "Batch size": "16", "Eval interval (steps)": "20"}, "e2-new-run-text")
    assert get_run(run_id, workspace_dir).config["task"] == "text_mlm"
    wait_until(lambda: get_run(run_id, workspace_dir).status == "completed", 180, "the MLM run to complete")

    page.goto(f"{server}/run_detail?run={run_id}")
    expect(page.get_by_role("heading", name="Fill in the blanks")).to_be_visible(timeout=30_000)
    expect(page.get_by_text("Model input:")).to_be_visible(timeout=30_000)  # the default sentence has [MASK]s
    table = page.get_by_test_id("stDataFrame").last
    expect(table).to_be_visible(timeout=30_000)
    settle(page)
    # hide one more word by clicking it: the predictions follow
    before = page.get_by_text("Model input:").inner_text()
    page.get_by_test_id("stButtonGroup").get_by_role("button").first.click()
    settle(page)
    expect(page.get_by_text("Model input:")).not_to_have_text(before, timeout=20_000)
    shot(page, "e3-fill-in")


def url_has(page, *parts: str, timeout: float = 30) -> None:
    """Wait until the page's URL holds every ``parts`` (the page writes its state as it runs; the
    Playwright page sees URL changes only while it is asked something, hence its own wait)."""
    deadline = time.time() + timeout
    while not all(p in page.url for p in parts):
        if time.time() > deadline:
            raise AssertionError(f"the URL {page.url} lacks {[p for p in parts if p not in page.url]}")
        page.wait_for_timeout(500)


def reload_and_settle(page, timeout: float = 30) -> None:
    """F5: a new session; only the URL carries the state over. Reloads once the URL has stopped
    changing (a rerun may still be writing derived fields, e.g. the warm-up steps that follow Steps)."""
    deadline = time.time() + timeout
    url = page.url
    while True:
        page.wait_for_timeout(1000)
        if page.url == url:
            break
        if time.time() > deadline:
            raise AssertionError(f"the URL kept changing for {timeout} s: {page.url}")
        url = page.url
    page.reload()
    assert page.url == url
    settle(page, 60_000)


def test_f_reloaded_urls_restore_each_page(server, page, workspace_dir):
    """Every page keeps the state that matters in its URL: a reload (a new session) shows the same view."""
    # New run: the dataset, a strategy and a field
    page.goto(server + "/new_run?dataset=digits")
    expect(page.get_by_role("heading", name="Mask preview")).to_be_visible(timeout=30_000)
    pick_strategy(page, "block")
    type_into(page, "Steps", "77")
    url_has(page, "train.steps=77", "masking.strategy=block")
    reload_and_settle(page)
    expect(page.get_by_label("Steps", exact=True)).to_have_value("77", timeout=30_000)
    expect(page.get_by_role("combobox", name="Masking strategy")).to_have_value("block")
    page.get_by_text("As YAML or a command line").click()
    expect(page.get_by_text("--set train.steps=77").first).to_be_visible(timeout=20_000)
    shot(page, "f1-new-run-reloaded")

    # Mask lab: strategy and the batch for statistics
    page.goto(server + "/mask_lab")
    expect(page.get_by_role("heading", name="Mask lab")).to_be_visible(timeout=30_000)
    pick_strategy(page, "bernoulli")
    type_into(page, "Batch for statistics", "64")
    url_has(page, "masking.strategy=bernoulli", "n=64")
    reload_and_settle(page)
    expect(page.get_by_role("combobox", name="Masking strategy")).to_have_value("bernoulli", timeout=30_000)
    expect(page.get_by_label("Batch for statistics", exact=True)).to_have_value("64")
    expect(page.get_by_text(re.compile(r"^64 masks of"))).to_be_visible(timeout=30_000)

    # Data: the dataset shown
    page.goto(server + "/data")
    expect(page.get_by_role("heading", name="Samples")).to_be_visible(timeout=30_000)
    page.get_by_test_id("stSelectbox").filter(has_text="Dataset").click()
    page.get_by_role("option", name=re.compile(r"^fortunes")).click()
    expect(page.get_by_role("heading", name="Length")).to_be_visible(timeout=30_000)
    settle(page)
    reload_and_settle(page)
    expect(page.get_by_role("heading", name="Length")).to_be_visible(timeout=30_000)
    assert "dataset=fortunes" in page.url

    # Runs: smoothing, log axis, x axis (with the runs of the tests above, or one finished run)
    if not list_runs(workspace_dir):
        _finished("url-state", workspace_dir)
    page.goto(server)  # Runs is the default page, at the root
    expect(page.get_by_role("heading", name="Runs", exact=True)).to_be_visible(timeout=30_000)
    page.get_by_role("slider", name="EMA smoothing").focus()
    page.keyboard.press("ArrowRight")
    settle(page)
    page.get_by_text("log y axis").click()
    settle(page)
    page.get_by_text("time since start").click()
    settle(page)
    url_has(page, "smoothing=0.61", "y=log", "x=relative")
    reload_and_settle(page)
    expect(page.get_by_role("slider", name="EMA smoothing")).to_have_value("0.61", timeout=30_000)
    expect(page.get_by_role("checkbox", name="log y axis")).to_be_checked()
    expect(page.get_by_role("radio", name="time since start")).to_be_checked()
    shot(page, "f2-runs-reloaded")

    # Run detail: the run and its axes
    run_id = list_runs(workspace_dir)[-1].run_id  # the oldest: not the default
    page.goto(f"{server}/run_detail?run={run_id}&x=wall")
    expect(page.get_by_role("heading", name="Validation figure and baselines")).to_be_visible(timeout=30_000)
    settle(page)
    reload_and_settle(page)
    expect(page.get_by_role("combobox", name="Run")).to_have_value(re.compile(re.escape(run_id)), timeout=30_000)
    expect(page.get_by_role("radio", name="wall clock")).to_be_checked()


def _png(page, img) -> "np.ndarray":
    """The pixels of a rendered ``<img>`` (its ``src``: inline as the dashboard draws them, else fetched
    from the server), ``(H, W, 3)`` uint8."""
    src = img.get_attribute("src")
    body = (base64.b64decode(src.split(",", 1)[1]) if src.startswith("data:")
            else page.request.get(urljoin(page.url, src)).body())
    return np.asarray(Image.open(io.BytesIO(body)).convert("RGB"))


def test_g_interactive_masking(server, page, workspace_dir):
    """Run detail's masking box: clicking a patch's button hides exactly that patch of the model
    input (the rendered masked image), clicking it again shows it; the reconstruction follows."""
    cfg = resolve(RunConfig.from_dict({"name": "masking-box", "train": {"steps": 20, "batch_size": 32, "eval_interval": 10,
                                                                "checkpoint_interval": 20}}))
    run_id = submit(cfg, workspace_dir)
    wait_until(lambda: get_run(run_id, workspace_dir).status == "completed", 120, "the run to complete")
    page.goto(f"{server}/run_detail?run={run_id}")
    expect(page.get_by_role("heading", name="Mask it yourself")).to_be_visible(timeout=30_000)
    box = page.locator(f".st-key-mim_box_{run_id}")
    expect(box.get_by_text(re.compile(r"\d+ of 16 patches hidden · checkpoint of step 20"))).to_be_visible(timeout=30_000)
    box.get_by_role("button", name="Show all").click()
    expect(box.get_by_text("0 of 16 patches hidden")).to_be_visible(timeout=20_000)
    settle(page)
    imgs = box.get_by_test_id("stImage").locator("img")
    expect(imgs).to_have_count(4)
    original = _png(page, imgs.nth(3))
    before = _png(page, imgs.nth(0))
    assert (before == original).all()  # nothing hidden: the model input is the image
    k = before.shape[0] // 4  # displayed pixels per patch (4x4 grid of 2x2-px patches, upscaled)
    grey = round(MASK_GREY * 255)

    def hidden_patches(img) -> set[tuple[int, int]]:
        changed = set()
        for r in range(4):
            for c in range(4):
                cell = img[r * k : (r + 1) * k, c * k : (c + 1) * k]
                if not (cell == original[r * k : (r + 1) * k, c * k : (c + 1) * k]).all():
                    assert (cell == grey).all(), f"patch {(r, c)} changed but is not flat grey"
                    changed.add((r, c))
        return changed

    recon_before = _png(page, imgs.nth(1))
    for label, expected in [("07", {(1, 2)}), ("12", {(1, 2), (2, 3)}), ("07", {(2, 3)})]:
        src = imgs.nth(0).get_attribute("src")
        box.get_by_role("button", name=label, exact=True).click()
        wait_until(lambda: imgs.nth(0).get_attribute("src") != src, 20, f"the model input after clicking {label}")
        settle(page)
        assert hidden_patches(_png(page, imgs.nth(0))) == expected
        expect(box.get_by_text(f"{len(expected)} of 16 patches hidden")).to_be_visible()
    assert not (_png(page, imgs.nth(1)) == recon_before).all()  # the reconstruction follows the mask
    shot(page, "f-interactive-masking")


def test_h_audio_upload_run_spectrograms_and_players(server, page, workspace_dir, shared_data, tmp_path):
    """Upload FSDD clips with their manifest, launch an audio_frames run, see spectrograms and players."""
    z = subset_zip(shared_data, tmp_path / "spoken.zip", "0123", ("jackson", "theo"), 3)
    page.goto(server + "/data")
    expect(page.get_by_role("heading", name="Data")).to_be_visible(timeout=30_000)
    page.get_by_text("Import a dataset").click()
    page.get_by_test_id("stFileUploaderDropzoneInput").set_input_files(str(z))
    expect(page.get_by_text(re.compile(r"spoken\.zip: audio \(audio zip\) · 24 audio files to import · 4 classes"))).to_be_visible(
        timeout=30_000)
    settle(page)
    # the form proposes the clips' own rate, read from their headers; 16 kHz is picked here to see the warning
    rate = page.get_by_role("combobox", name="Sample rate (Hz)")
    expect(rate).to_have_value("8,000 Hz")
    expect(page.get_by_text("The clips were recorded at 8,000 Hz (24 clips' headers read).")).to_be_visible()
    rate.click()
    page.get_by_role("option", name="16,000 Hz", exact=True).click()
    settle(page)
    page.get_by_role("button", name="Import").click()
    expect(page.get_by_test_id("stAlertContentSuccess")).to_contain_text("Imported all 24 clips", timeout=60_000)
    # FSDD is recorded at 8 kHz and 16 kHz was picked: the report warns that the high bins are empty
    expect(page.get_by_test_id("stAlertContentWarning")).to_contain_text(
        "24 clips: recorded at 8,000 Hz, upsampled to 16,000 Hz: the mel bins above 4,000 Hz hold nothing")
    expect(page.get_by_role("heading", name="Clips", exact=True)).to_be_visible(timeout=30_000)
    settle(page)
    expect(page.locator("audio")).to_have_count(6, timeout=30_000)  # a player under each spectrogram
    shot(page, "h1-data-audio")

    run_id = launch_short_run(page, server + "/new_run?dataset=spoken&task=audio_frames&data.audio.n_mels=32&"
                              "data.audio.clip_seconds=0.5", r"fixed validation clips of spoken",
                              {"Steps": "4", "Batch size": "8", "Eval interval (steps)": "2"}, "h2-new-run-audio")
    assert get_run(run_id, workspace_dir).config["task"] == "audio_frames"
    wait_until(lambda: get_run(run_id, workspace_dir).status == "completed", 240, "the audio run to complete")

    page.goto(f"{server}/run_detail?run={run_id}")
    expect(page.get_by_role("heading", name="Spectrograms and audio")).to_be_visible(timeout=30_000)
    expect(page.get_by_text("Griffin-Lim of the reconstruction").first).to_be_visible(timeout=30_000)
    settle(page)
    n = get_run(run_id, workspace_dir).config["train"]["num_vis"]
    # the samples panel's own (Streamlit) captions and players; the steps matrix below it has its own
    expect(page.get_by_test_id("stCaptionContainer").get_by_text("reconstruction", exact=True)).to_have_count(n, timeout=30_000)
    expect(page.get_by_test_id("stAudio")).to_have_count(3 * n, timeout=30_000)  # recording, Griffin-Lim of the original and of the reconstruction
    expect(page.locator(".mx audio")).to_have_count(3 * min(n, MATRIX_ROWS), timeout=30_000)  # the matrix: a player per row at steps 0, 2, 4
    shot(page, "h3-run-detail-audio")
