"""The worker's side of the baselines' prefetch (:mod:`engine.eval.prefetch`): start the process beside
the training, let the final evaluation wait for it, stop it when the run ends otherwise. Torch-free:
the worker imports it before it holds a slot."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from engine.runner.launcher import REPO_ROOT

#: Set to ``0`` to compute the baselines in the evaluation instead (a machine whose cores training fills).
PREFETCH_ENV = "MASKLAB_EVAL_PREFETCH"
#: The variables that set the BLAS and OpenMP threads of numpy, scikit-learn and torch.
BLAS_THREADS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
#: How often the waiting evaluation looks at the prefetch (seconds).
POLL_S = 0.05


def start_prefetch(run_dir: Path, env: dict[str, str] | None = None) -> subprocess.Popen | None:
    """Start ``python -m engine.eval.prefetch RUN_DIR`` (stdout discarded, stderr the caller's), its
    BLAS on one thread (spinning BLAS threads starve at a low priority); None when it cannot start
    (the evaluation then computes the baselines itself)."""
    env = {**(os.environ if env is None else env), **{k: "1" for k in BLAS_THREADS}}
    try:
        return subprocess.Popen([sys.executable, "-m", "engine.eval.prefetch", str(run_dir)], cwd=REPO_ROOT, env=env,
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, close_fds=True)
    except OSError:
        return None


def waiter(proc: subprocess.Popen | None) -> Callable[[], None]:
    """What the evaluation calls in its setup phase: wait for the prefetch ``proc`` to end (a cancel
    interrupts the wait like any phase; the worker then stops the prefetch with :func:`stop_prefetch`)."""

    def wait() -> None:
        while proc is not None and proc.poll() is None:
            time.sleep(POLL_S)

    return wait


def stop_prefetch(proc: subprocess.Popen | None) -> None:
    """Kill the prefetch if it still runs (the run failed or was cancelled) and reap it."""
    if proc is not None and proc.poll() is None:
        proc.kill()
    if proc is not None:
        proc.wait()
