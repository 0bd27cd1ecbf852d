"""Shared fixtures: an isolated workspace per test and the read-only ../shared datasets."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("MASKLAB_SHARED", REPO.parent / "shared"))


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
