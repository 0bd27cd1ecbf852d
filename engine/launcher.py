"""Job launcher: starts each run as its own OS process and cancels it. The UI's only way to train.

A submitted run is ``python -m engine.worker <run_dir>`` in a new session (``setsid``): signals
sent to the Streamlit server's process group never reach it, so it keeps training through a
server restart. Its stdout/stderr go to ``<run_dir>/worker.log``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

from engine.checks import check_run
from engine.config import RunConfig
from engine.errors import QueueFullError
from engine.runqueue import enqueue, max_queued, submit_lock, waiting_runs
from engine.store import ACTIVE, CANCEL_FILE, create_run, get_run, run_dir
from engine.store.lock import signal_holder
from engine.store.runs import LOG_FILE
from engine.workspace import workspace_root

REPO_ROOT = Path(__file__).resolve().parents[1]


def submit(cfg: RunConfig, workspace=None) -> str:
    """Create the run (resolved config, status ``queued``, queue ticket) and start its worker; return the run id.

    Returns at once; the worker waits for its turn (first come, first served) and a free slot
    (``$MASKLAB_MAX_RUNS``), then trains.

    Raises:
        ConfigError, DatasetError: from :func:`engine.checks.check_run`; no run is created.
        QueueFullError: ``$MASKLAB_MAX_QUEUED`` runs are already waiting; no run is created.
        StorageError: the run folder cannot be written (disk full...).
    """
    ws = workspace_root(workspace)
    check_run(cfg, ws)
    with submit_lock(ws):
        waiting, cap = len(waiting_runs(ws, prune=True)), max_queued()
        if waiting >= cap:
            raise QueueFullError(
                f"the queue is full: {waiting} runs are waiting for a slot (MASKLAB_MAX_QUEUED={cap}); wait for one "
                f"to start, cancel one (python -m engine cancel RUN_ID), or raise MASKLAB_MAX_QUEUED where the "
                f"dashboard and the CLI are started")
        run_id, d = create_run(cfg.to_dict(), ws)
        enqueue(ws, d)
    env = {**os.environ, "MASKLAB_WORKSPACE": str(ws)}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    with open(d / LOG_FILE, "ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "engine.worker", str(d)],
            cwd=REPO_ROOT, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True, close_fds=True,
        )
    # Reap the child when it exits so no zombie lingers in a long-lived server process.
    threading.Thread(target=proc.wait, name=f"reap-{run_id}", daemon=True).start()
    return run_id


def cancel(run_id: str, workspace=None) -> bool:
    """Ask a queued or running run to stop. Returns False if it had already ended (or was interrupted).

    Writes the ``cancel`` marker (the worker polls it every step and while queued) and sends
    SIGTERM to the process that holds the run's lock, found through the kernel
    (:func:`engine.store.lock.signal_holder`), never through a stored PID; the worker finishes
    its current step and records ``cancelled``.

    Raises:
        RunNotFoundError: unknown run id.
    """
    rec = get_run(run_id, workspace)
    if rec.status not in ACTIVE:
        return False
    d = run_dir(run_id, workspace)
    try:
        (d / CANCEL_FILE).touch()
    except OSError:  # a full disk: the signal below still reaches a running worker
        pass
    signal_holder(d, signal.SIGTERM)
    return True
