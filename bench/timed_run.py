"""One run trained in the bench's own process through the worker's code path, timed.

The quality benches (``image_quality``, ``text_quality``, ``audio_probe``, ``paired_quality``) each
train real runs and report their figures next to the wall time, the CPU time and the machine's load,
since the development machine is shared and the wall time alone says little.
"""

from __future__ import annotations

import os
import resource
import time
from pathlib import Path

from engine.runner.worker import execute_run
from engine.store import create_run, get_run
from engine.tasks import resolve


def timed_run(config, workspace: Path) -> tuple[object, dict]:
    """Create a run of ``config`` (a :class:`engine.config.RunConfig`) in ``workspace`` and train it
    in this process (:func:`engine.runner.worker.execute_run`).

    Returns:
        ``(record, timing)``: the run's :class:`engine.store.RunRecord` after it ended, and
        ``{"run_id", "steps", "seconds" (wall), "cpu_seconds" (this process, user + system),
        "load_before", "load_after" (1/5/15-minute load averages)}``.

    Raises:
        RuntimeError: the run did not complete (its status and error).
    """
    run_id, d = create_run(resolve(config).to_dict(), workspace)
    load_before = os.getloadavg()
    t0, c0 = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF)
    status = execute_run(d)
    seconds, c1 = time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_SELF)
    rec = get_run(run_id, workspace)
    if status != "completed":
        raise RuntimeError(f"run {run_id} ended {status}: {rec.error}")
    return rec, {"run_id": run_id, "steps": rec.step, "seconds": seconds,
                 "cpu_seconds": (c1.ru_utime + c1.ru_stime) - (c0.ru_utime + c0.ru_stime),
                 "load_before": load_before, "load_after": os.getloadavg()}
