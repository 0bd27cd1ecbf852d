"""Shared fixtures: an isolated workspace per test and the read-only ../shared datasets."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("MASKLAB_SHARED", REPO.parent / "shared"))


def pytest_configure(config):
    """No automatic evaluation at a run's end anywhere in the session, module- and session-scoped
    fixtures included (the ``workspace`` fixture only covers a test's own runs): a test that checks
    one turns it on for its runs, with ``evaluation.max_rows`` sized to what it reads. Each
    pytest-xdist worker trains on one torch thread: two workers share the 2 cores instead of
    oversubscribing them (tiny models run several times slower on threads that other processes want)."""
    os.environ["MASKLAB_AUTO_EVAL"] = "0"
    if os.environ.get("PYTEST_XDIST_WORKER"):
        import torch

        torch.set_num_threads(1)


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups
def pytest_collection_modifyitems(config, items):
    """Real-browser tests (a Streamlit server and Chromium each) run one at a time, on one worker."""
    for item in items:
        if item.get_closest_marker("browser"):
            item.add_marker(pytest.mark.xdist_group("browser"))


@pytest.fixture
def workspace(tmp_path, monkeypatch) -> Path:
    """A fresh workspace folder, also exported as $MASKLAB_WORKSPACE for subprocesses."""
    ws = tmp_path / "workspace"
    ws.mkdir()
    monkeypatch.setenv("MASKLAB_WORKSPACE", str(ws))
    monkeypatch.setenv("MASKLAB_AUTO_EVAL", "0")  # tests of the evaluation turn it on where they need it
    return ws


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """../shared/data (real datasets for tests; never copied into the repo)."""
    d = SHARED / "data"
    if not d.is_dir():
        pytest.fail(f"{d} not found: tests need ../shared beside the checkout (or set MASKLAB_SHARED)")
    return d
