"""Helpers of the AppTest page tests: open a page with URL parameters, read its image captions."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from streamlit.testing.v1 import AppTest

REPO = Path(__file__).resolve().parents[2]
ENTRY = REPO / "app" / "streamlit_app.py"


@contextmanager
def lock_holder(run_dir: Path) -> Iterator[subprocess.Popen]:
    """Another process that holds run folder ``run_dir``'s lock (a live worker, or an evaluation job)
    until the block ends; yields it (its ``pid`` goes in a status). Killed at the end: the run then
    reads as its process gone."""
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; from engine.store import RunLock; l = RunLock(sys.argv[1]).acquire(); "
        "print('held', flush=True); time.sleep(600)"), str(run_dir)], cwd=REPO, stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == "held"
        yield holder
    finally:
        holder.kill()
        holder.wait()


def open_with(page: str, params: dict[str, str]) -> AppTest:
    """A fresh session (a fresh browser tab) on ``page`` with ``params`` in its URL, run once;
    asserts that it raised nothing and showed no error."""
    at = AppTest.from_file(str(ENTRY), default_timeout=120)
    at.run().switch_page(page)
    at.query_params.clear()  # a link replaces the whole query string (the first page kept its own there)
    for k, v in params.items():
        at.query_params[k] = v
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]
    assert not served_media(at), served_media(at)
    return at


def served_media(at: AppTest) -> list[str]:
    """The page's images and players that the browser would fetch from Streamlit's media files
    rather than read inline (``data:`` URLs): each can be dropped by a rerun before it is fetched
    (app/components/media.py). Every page opened by :func:`open_with` must have none."""
    urls = [img.url for el in at.get("image") for img in el.proto.imgs] + [el.proto.url for el in at.get("audio")]
    return [u[:80] for u in urls if not u.startswith("data:")]


def captions(at: AppTest) -> list[str]:
    """The captions of every image on the page, in order."""
    return [img.caption for el in at.get("image") for img in el.proto.imgs]


def n_images(at: AppTest) -> int:
    """How many images the page shows."""
    return sum(len(el.proto.imgs) for el in at.get("image"))


def page_html(at: AppTest) -> str:
    """The bodies of every ``st.html`` element of the page, one after the other."""
    return "\n".join(el.proto.body for el in at.get("html"))


def figure_columns(at: AppTest) -> set[str]:
    """Column titles of Run detail's figure table (the run and its baselines by figure)."""
    return set(next(d.value for d in at.dataframe if "predictor" in d.value.columns).columns)
