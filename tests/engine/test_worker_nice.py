"""Training workers run below the dashboard's CPU priority (``$MASKLAB_WORKER_NICE``, default 10)."""
from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.parametrize("env, want", [({}, 10), ({"MASKLAB_WORKER_NICE": "0"}, 0), ({"MASKLAB_WORKER_NICE": "5"}, 5),
                                       ({"MASKLAB_WORKER_NICE": "x"}, 0), ({"MASKLAB_WORKER_NICE": "99"}, 19)])
def test_a_worker_lowers_its_priority_once(env, want):
    code = ("import os; from engine.runner.worker import lower_priority; "
            f"base = os.nice(0); a = lower_priority({env!r}); b = lower_priority({env!r}); print(base, a, b, os.nice(0))")
    base, *after = map(int, subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                           check=True).stdout.split())
    assert after == [max(base, want)] * 3  # a second call (a restart's worker) adds nothing
