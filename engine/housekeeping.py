"""Deleting runs and datasets, and the disk space they use.

- :func:`delete_run`: a queued or running run (or one whose evaluation job is queued or running) is
  refused with :class:`~engine.errors.RunActiveError`, unless ``cancel=True`` (the caller has asked
  the user): then it is cancelled first and deleted once its worker has gone. The run lock is taken
  before anything is removed, so no worker, resume, evaluation or ``doctor --repair`` of it can be
  running meanwhile; the folder is first renamed to a hidden name (``runs/.deleted-<id>-<hex>``, one
  atomic rename: readers never see half a run), then removed.
- :func:`delete_dataset`: removes ``datasets/<name>`` the same way. A run keeps everything it needs
  to be shown (config, metrics, samples, evaluations and checkpoints live in its own folder), so its
  results stay viewable; only resuming or evaluating it again needs the data (they say so).
  A bundled dataset comes back on its next use.
- :func:`disk_usage`: bytes under a folder (the Runs and Data pages and the CLI show it).
"""

from __future__ import annotations

import os
import secrets
import shutil
from pathlib import Path

from engine.errors import DatasetError, RunActiveError, RunLockedError


def disk_usage(path: Path) -> int:
    """Bytes of the regular files under ``path`` (0 when it is missing); links are not followed."""
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            try:
                total += os.lstat(os.path.join(root, f)).st_size
            except OSError:
                pass
    return total


def _remove(folder: Path, hidden: str) -> None:
    trash = folder.parent / f".deleted-{hidden}-{secrets.token_hex(3)}"
    os.replace(folder, trash)
    shutil.rmtree(trash, ignore_errors=True)


def delete_run(run_id: str, workspace=None, *, cancel: bool = False, timeout: float = 60.0) -> int:
    """Delete a run folder; returns the bytes freed.

    Raises:
        RunNotFoundError: unknown run.
        RunActiveError: the run or its evaluation is queued or running and ``cancel`` is False, or
            it did not stop within ``timeout`` seconds after the cancel. Nothing is removed then.
    """
    from engine.launcher import cancel as cancel_run
    from engine.runqueue import dequeue
    from engine.store import RunLock, get_run
    from engine.store.evaluations import job_active
    from engine.workspace import workspace_root

    rec = get_run(run_id, workspace)
    evaluating = job_active(run_id, workspace)
    if (rec.is_active or evaluating) and not cancel:
        what = f"is {rec.status}" if rec.is_active else "is being evaluated"
        raise RunActiveError(f"run {run_id} {what}: cancel it first (python -m engine cancel {run_id}), or delete "
                             f"with --cancel to cancel and then delete it")
    if rec.is_active:
        cancel_run(run_id, workspace)
    lock = RunLock(rec.path)
    try:
        lock.acquire(timeout=timeout if (rec.is_active or evaluating) else 10.0)
    except RunLockedError:
        raise RunActiveError(f"run {run_id} did not stop within {timeout:.0f} s; nothing was deleted") from None
    try:
        size = disk_usage(rec.path)
        _remove(rec.path, run_id)
    finally:
        lock.release()
    dequeue(workspace_root(workspace), run_id)
    return size


def delete_dataset(name: str, workspace=None) -> int:
    """Delete ``datasets/<name>``; returns the bytes freed. Runs that used it keep their results.

    Raises:
        DatasetError: no such dataset in the workspace.
    """
    from engine.data.storage import datasets_dir, is_registered

    folder = datasets_dir(workspace) / name
    if not is_registered(name, workspace):
        raise DatasetError(f"no dataset {name!r} in this workspace (python -m engine data list)")
    size = disk_usage(folder)
    _remove(folder, name)
    return size


def runs_using(dataset: str, workspace=None) -> list[str]:
    """Ids of the saved runs whose config names ``dataset`` (shown before a dataset is deleted)."""
    from engine.store import list_runs

    return [r.run_id for r in list_runs(workspace) if (r.config.get("data") or {}).get("dataset") == dataset]


__all__ = ["delete_dataset", "delete_run", "disk_usage", "runs_using"]
