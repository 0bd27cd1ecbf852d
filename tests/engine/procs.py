"""Finding this machine's processes by their command line (tests that kill or wait for workers)."""

from __future__ import annotations

import time
from pathlib import Path


def pids_with_args(*needles: bytes, without: bytes | None = None, suffix: bytes | None = None) -> list[int]:
    """PIDs whose command line has every argument in ``needles``, none equal to ``without``, and
    (if given) one ending with ``suffix``."""
    out = []
    for p in Path("/proc").iterdir():
        try:
            cmd = (p / "cmdline").read_bytes().split(b"\0")
        except (OSError, ValueError):
            continue
        if (all(n in cmd for n in needles) and (without is None or without not in cmd)
                and (suffix is None or any(a.endswith(suffix) for a in cmd))):
            out.append(int(p.name))
    return out


def wait_until(pred, timeout: float, what: str, poll: float = 0.2) -> None:
    """Poll ``pred()`` until it is true; AssertionError naming ``what`` after ``timeout`` seconds."""
    end = time.time() + timeout
    while time.time() < end:
        if pred():
            return
        time.sleep(poll)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")
