"""Job launcher: starts each run as its own OS process, resumes and cancels it. The UI's only way to train.

A submitted (or resumed) run is ``python -m engine.worker <run_dir>`` in a new session (``setsid``):
signals sent to the Streamlit server's process group never reach it, so it keeps training through
a server restart. Its stdout/stderr go to ``<run_dir>/worker.log``. Nothing here imports torch at
import time (the restart supervisor in :mod:`engine.worker` starts workers through
:func:`start_worker`); validating a config does.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

from engine.config import RunConfig
from engine.errors import QueueFullError
from engine.resume import check_same_data, prepare_resume, resume_config
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
    from engine.checks import check_run

    ws = workspace_root(workspace)
    check_run(cfg, ws)
    with submit_lock(ws):
        _check_queue_cap(ws)
        run_id, d = create_run(cfg.to_dict(), ws)
        enqueue(ws, d)
    start_worker(d, ws)
    return run_id


def resume(run_id: str, overrides: Sequence[str] = (), workspace=None) -> int:
    """Continue a failed, cancelled, diverged or interrupted run from its latest complete checkpoint;
    return that checkpoint's step. Returns at once; the run queues like a new one (at the back).

    ``overrides`` (``key=value``, as ``--set``) change the config from that step on, e.g.
    ``train.lr=5e-4`` or ``train.steps=2000``; the run's ``config_history.json`` records it. The
    model, task, data and seed cannot change (:data:`engine.resume.RESUME_FROZEN`). See
    :mod:`engine.resume` for what is done, and :func:`engine.train.fit` for what is restored.

    Raises:
        RunNotFoundError: unknown run.
        RunLockedError: its worker is alive (queued or running).
        ResumeError: the run is completed or starting, or it has no complete checkpoint.
        ConfigError: a bad or frozen override, or ``train.steps`` not past the checkpoint.
        DatasetError: its dataset is gone, or its content changed since the run started.
        QueueFullError: ``$MASKLAB_MAX_QUEUED`` runs are already waiting. Nothing is changed on any error.
        StorageError: the run folder cannot be written.
    """
    from engine.checks import check_run

    ws = workspace_root(workspace)
    d = run_dir(run_id, ws)

    def make_config(old: dict, step: int) -> dict:
        cfg = resume_config(old, overrides, step)
        info = check_run(cfg, ws)
        check_same_data(d, getattr(info, "source_hash", "") or "")
        return cfg.to_dict()

    with submit_lock(ws):
        _check_queue_cap(ws)
        step = prepare_resume(d, make_config)
        enqueue(ws, d)
    start_worker(d, ws)
    return step


def _check_queue_cap(ws: Path) -> None:
    """Raise QueueFullError while ``$MASKLAB_MAX_QUEUED`` runs wait (call holding ``submit_lock``)."""
    waiting, cap = len(waiting_runs(ws, prune=True)), max_queued()
    if waiting >= cap:
        raise QueueFullError(
            f"the queue is full: {waiting} runs are waiting for a slot (MASKLAB_MAX_QUEUED={cap}); wait for one "
            f"to start, cancel one (python -m engine cancel RUN_ID), or raise MASKLAB_MAX_QUEUED where the "
            f"dashboard and the CLI are started")


def start_worker(d: Path, workspace=None, *, supervised: bool = False) -> subprocess.Popen:
    """Start ``python -m engine.worker <d>`` for a run folder whose status is ``queued``; return its process.

    A launch (``supervised`` False) gets its own session and ``<d>/worker.log`` as stdout/stderr,
    and a thread reaps it so that no zombie lingers in a long-lived server. The restart supervisor
    (``supervised`` True) starts ``--once`` workers that share its session and log and waits for them itself.
    """
    ws = workspace_root(workspace)
    env = {**os.environ, "MASKLAB_WORKSPACE": str(ws)}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    cmd = [sys.executable, "-m", "engine.worker", *(["--once"] if supervised else []), str(d)]
    if supervised:
        return subprocess.Popen(cmd, cwd=REPO_ROOT, env=env, stdin=subprocess.DEVNULL, close_fds=True)
    with open(Path(d) / LOG_FILE, "ab") as log:
        proc = subprocess.Popen(cmd, cwd=REPO_ROOT, env=env, stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True, close_fds=True)
    threading.Thread(target=proc.wait, name=f"reap-{Path(d).name}", daemon=True).start()
    return proc


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
