"""The dashboard's response time while a large import runs, against its idle response time.

    python bench/import_responsiveness.py                 # 20,000 images of 64x64, 15 loads each phase
    python bench/import_responsiveness.py --images 2000 --loads 5

What is measured, on the real server (``python -m app.serve`` on a free loopback port, a temporary
workspace with one run) and Debian's Chromium (Playwright):

- ``page``: a full load of the Runs page, from ``goto`` until its run table is drawn and Streamlit has
  finished the script (the status widget is gone): what a user waits for.
- ``health``: ``/_stcore/health`` over HTTP: the server's event loop alone.

Each is measured ``--loads`` times idle, then the same number of times while a background import
(``engine.data.jobs.start_import``, its own process) decodes a zip of random RGB PNGs. The import's
own duration and progress at the end are printed too, and the medians and ratios as JSON.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import sys
import tempfile
import time
import urllib.request
import zipfile
from pathlib import Path

import numpy as np
from PIL import Image

from engine.access.policy import Identity
from engine.config import RunConfig
from engine.data.jobs import import_status, start_import
from engine.store import create_run, write_status
from engine.tasks import resolve
from tests.app.test_browser import CHROMIUM
from tests.app.test_browser_access import serve, stop_server

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def make_zip(path: Path, n: int, side: int) -> Path:
    """``n`` random RGB PNGs of ``side`` px in two class folders (stored, so the zip is their size)."""
    rng = np.random.default_rng(0)
    with zipfile.ZipFile(path, "w") as z:
        for i in range(n):
            buf = io.BytesIO()
            Image.fromarray(rng.integers(0, 256, (side, side, 3), dtype=np.uint8)).save(buf, "PNG", compress_level=1)
            z.writestr(f"{'ab'[i % 2]}/{i:06d}.png", buf.getvalue())
    return path


def timings(url: str, page, loads: int) -> dict[str, list[float]]:
    """``loads`` page loads and health requests, in seconds."""
    from playwright.sync_api import expect  # noqa: PLC0415 (an optional extra (requirements-bench.txt / the OIDC test provider): imported by the case that uses it)

    out: dict[str, list[float]] = {"page": [], "health": []}
    for _ in range(loads):
        t = time.perf_counter()
        with urllib.request.urlopen(url + "/_stcore/health", timeout=30) as r:
            r.read()
        out["health"].append(time.perf_counter() - t)
        t = time.perf_counter()
        page.goto(url)
        expect(page.get_by_test_id("stDataFrame").first).to_be_visible(timeout=60_000)
        page.wait_for_timeout(100)
        expect(page.get_by_test_id("stStatusWidget")).to_have_count(0, timeout=60_000)
        out["page"].append(time.perf_counter() - t)
    return out


def run(images: int, side: int, loads: int, workdir: Path) -> dict:
    """Idle timings, then timings during an import of ``images`` PNGs; returns the figures."""
    from playwright.sync_api import sync_playwright  # noqa: PLC0415 (an optional extra (requirements-bench.txt / the OIDC test provider): imported by the case that uses it)

    ws = workdir / "workspace"
    ws.mkdir()
    os.environ["MASKLAB_WORKSPACE"] = str(ws)
    _, d = create_run(resolve(RunConfig.from_dict({"name": "shown"})).to_dict())
    write_status(d, {"status": "completed", "step": 100, "total_steps": 100})
    src = make_zip(workdir / "big.zip", images, side)
    proc, url = serve(ws)
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, headless=True,
                                        args=["--no-sandbox", "--disable-gpu", "--disable-quic"])  # fmt: skip
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            timings(url, page, 2)  # warm-up: first imports of the page's modules
            idle = timings(url, page, loads)
            t0 = time.perf_counter()
            job = start_import(src, "big", actor=Identity("bench", "editor"), image_size=32)
            while import_status(job).done == 0 and import_status(job).active:
                time.sleep(0.05)
            busy = timings(url, page, loads)
            during = import_status(job)
            while import_status(job).active:
                time.sleep(0.2)
            final = import_status(job)
            browser.close()
    finally:
        stop_server(proc)
    med = {f"{k}_{phase}_ms": round(1000 * statistics.median(v), 1)
           for phase, t in (("idle", idle), ("import", busy)) for k, v in t.items()}  # fmt: skip
    return {**med, "page_ratio": round(med["page_import_ms"] / med["page_idle_ms"], 2),
            "health_ratio": round(med["health_import_ms"] / med["health_idle_ms"], 2),
            "images": images, "side": side, "loads": loads, "zip_mb": round(src.stat().st_size / 2**20, 1),
            "import_state": final.state, "import_s": round(time.perf_counter() - t0, 1),
            "import_progress_after_busy_loads": f"{during.done}/{during.total}",
            "cpus": os.cpu_count()}  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--images", type=int, default=20_000)
    p.add_argument("--side", type=int, default=64)
    p.add_argument("--loads", type=int, default=15)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        print(json.dumps(run(args.images, args.side, args.loads, Path(tmp)), indent=2))


if __name__ == "__main__":
    main()
