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
from engine.store import ACTIVE, CANCEL_FILE, create_run, get_run, run_dir
from engine.store.runs import worker_alive
from engine.workspace import workspace_root

REPO_ROOT = Path(__file__).resolve().parents[1]


def submit(cfg: RunConfig, workspace=None) -> str:
    """Create the run (resolved config, status ``queued``) and start its worker; return the run id.

    Returns at once; the worker waits for a free slot (``$MASKLAB_MAX_RUNS``), then trains.

    Raises:
        ConfigError, DatasetError: from :func:`engine.checks.check_run`; no run is created.
    """
    ws = workspace_root(workspace)
    check_run(cfg, ws)
    run_id, d = create_run(cfg.to_dict(), ws)
    env = {**os.environ, "MASKLAB_WORKSPACE": str(ws)}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    with open(d / "worker.log", "ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "engine.worker", str(d)],
            cwd=REPO_ROOT, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True, close_fds=True,
        )
    # Reap the child when it exits so no zombie lingers in a long-lived server process.
    threading.Thread(target=proc.wait, name=f"reap-{run_id}", daemon=True).start()
    return run_id


def cancel(run_id: str, workspace=None) -> bool:
    """Ask a queued or running run to stop. Returns False if it had already ended.

    Writes the ``cancel`` marker (the worker polls it every step) and sends SIGTERM to the
    worker's process group; the worker finishes its current step and records ``cancelled``.
    Raises :class:`~engine.errors.RunNotFoundError` for an unknown id.
    """
    rec = get_run(run_id, workspace)
    if rec.status not in ACTIVE:
        return False
    (run_dir(run_id, workspace) / CANCEL_FILE).touch()
    if rec.pid and worker_alive(rec.pid, run_id):
        try:
            if os.getpgid(rec.pid) == rec.pid:  # a background worker leads its own group
                os.killpg(rec.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    return True
