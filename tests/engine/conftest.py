"""Fixtures of the engine tests."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture
def one_thread():
    """Run the test's torch code on one thread (restored after). Tiny models train several times
    faster on one thread than on two when other processes share the machine's 2 cores."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
