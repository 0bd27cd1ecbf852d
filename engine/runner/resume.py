"""Resuming a run from its latest complete checkpoint: by hand (``python -m engine resume``, the
Resume buttons) or by the restart policy (``train.max_restarts``, see :mod:`engine.runner.worker`).

A resume has two halves, both done by the holder of the run lock:

1. **Mark** (:func:`prepare_resume`, in the caller's process: the launcher, or the restart
   supervisor): take the run's lock (so its worker is provably gone and cannot start meanwhile),
   check that the run is resumable (``failed``, ``cancelled``, ``diverged``, ``interrupted``) and
   has a complete checkpoint, build the config it continues with (the run's config plus
   overrides, :func:`resume_config`), delete the ``cancel`` marker and dead writers' temporary
   files, append that config to ``config_history.json`` with the checkpoint's step, and write
   status ``queued`` with ``resume_from`` = that step. Release the lock; the caller then starts a
   worker.
2. **Continue** (:func:`reset_after`, in the worker once it has a slot): drop the metrics rows and
   samples after the checkpoint's step (a killed worker may have logged beyond it), then
   :func:`engine.training.loop.setup` loads the checkpoint (:meth:`~engine.training.state.TrainState.load_state_dict`).

Which fields a resume may change: anything but :data:`RESUME_FROZEN` (the model, task and data,
which the checkpoint's weights, optimiser state and data order belong to, and ``train.seed``, which
fixes the validation masks). ``train.steps`` must stay after the checkpoint's step. Nothing here
imports torch (the restart supervisor stays small); :func:`resume_config` imports it to resolve a
changed config.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from engine.config import RunConfig, apply_overrides
from engine.errors import ConfigError, DatasetError, ResumeError
from engine.runner.queue import dequeue
from engine.store.checkpoints import checkpoint_step, latest_complete_checkpoint
from engine.store.history import append_config_history, config_diff
from engine.store.lock import RunLock
from engine.store.metrics import truncate_metrics
from engine.store.runs import (
    ACTIVE,
    CANCEL_FILE,
    CONFIG_FILE,
    RESUMABLE,
    cluster_mark,
    is_starting,
    read_status_checked,
    write_status,
)
from engine.store.samples import delete_samples_after
from engine.workspace import read_json, remove_temps, unlink_quietly

#: Status field: the checkpoint step a queued run resumes from (0: start over, restart policy only).
RESUME_FIELD = "resume_from"
#: Config fields a resume may not change (dotted prefixes), and why.
RESUME_FROZEN = {
    "task": "the checkpoint's weights and optimiser state belong to the run's task",
    "task_params": "the checkpoint's weights and optimiser state belong to the run's task",
    "task_params.": "the checkpoint's weights and optimiser state belong to the run's task",
    "data.": "the checkpoint's data order and the run's metrics belong to the run's dataset and tokenizer",
    "model.": "the checkpoint's weights belong to the run's model",
    "train.seed": "the generators continue from the checkpoint and the validation masks come from the seed",
}
TASK_INFO = "task.json"  # Task.run_info() of a run (dataset hash, tokenizer id...), written through the run-info writer (engine.training.writers)
PRIOR_FIELD = "prior_s"
"""Status field: seconds the run's earlier legs ran (before its latest resume), for its duration."""
RESUMED_BY = "resumed_by"
"""Status field: who resumed the run by hand (``{name, role, source}``), kept through automatic
restarts; a worker that then ends ``failed`` or ``diverged`` adds a ``run.resume`` audit line in
their name (the launch's own line says ``ok``: the worker had started)."""


def frozen_changes(old: dict[str, Any], new: dict[str, Any]) -> dict[str, list[Any]]:
    """The fields of :data:`RESUME_FROZEN` that differ between two resolved configs (dotted name -> [old, new])."""
    return {k: v for k, v in config_diff(old, new).items()
            if any(k == f or (f.endswith(".") and k.startswith(f)) for f in RESUME_FROZEN)}


def resume_config(old: dict[str, Any], overrides: Sequence[str], step: int):
    """The config a resume from ``step`` trains with: ``old`` (the run's resolved config) with
    ``overrides`` (``key=value``, as ``--set``) applied. Returns a ``RunConfig``: ``old`` as it is
    when the overrides change no field, else a new config version, resolved once
    (:func:`engine.tasks.resolve`).

    Raises:
        ConfigError: an invalid value; a change to a field of :data:`RESUME_FROZEN` (the message
            names the field, both values and why); ``train.steps`` not after ``step``.
    """
    base = RunConfig.from_dict(copy.deepcopy(old))
    new = RunConfig.from_dict(apply_overrides(copy.deepcopy(old), list(overrides)))
    if new != base:  # a new config version (a strategy's params, say, may need its defaults)
        from engine.tasks import resolve  # noqa: PLC0415 (the tasks (torch) load when a config is resolved, not when the dashboard or CLI imports this)

        new = resolve(new)
    frozen = frozen_changes(base.to_dict(), new.to_dict())
    if frozen and new != base:
        # compared with the old config resolved now: a task that gained parameters since the run
        # started fills in their defaults (what the old run trained), which is no change; resolved
        # only here, so a resume resolves its new version once
        frozen = frozen_changes(resolve(base).to_dict(), new.to_dict())
    if frozen:
        raise ConfigError("; ".join(
            f"{k}: a resume cannot change it ({a!r} -> {b!r}): "
            f"{next(why for f, why in RESUME_FROZEN.items() if k == f or (f.endswith('.') and k.startswith(f)))}; "
            f"start a new run instead" for k, (a, b) in frozen.items()))
    if new.train.steps <= step:
        raise ConfigError(f"train.steps: {new.train.steps} does not go past the checkpoint it resumes from (step "
                          f"{step}); set train.steps above {step}")
    return new


def check_same_data(run_dir: Path, dataset_hash: str) -> None:
    """Refuse to continue a run on other data than it started with (``task.json``'s ``dataset_hash``).

    Nothing is compared when either hash is unknown (a run or dataset of an older masklab).

    Raises:
        DatasetError: the dataset's content changed since the run started.
    """
    try:
        before = read_json(Path(run_dir) / TASK_INFO).get("dataset_hash") or ""
    except (OSError, ValueError, AttributeError):
        return
    if before and dataset_hash and before != dataset_hash:
        raise DatasetError(f"run {Path(run_dir).name}: its dataset changed since the run started (content hash "
                           f"{before[:12]}, now {dataset_hash[:12]}); resuming would train on other data; start a new "
                           f"run on the new data")


def prepare_resume(run_dir: Path, make_config: Callable[[dict[str, Any], int], dict[str, Any]] | None = None, *,
                   restart: int | None = None, lock_timeout: float = 1.0,
                   resumed_by: dict[str, str] | None = None) -> int:
    """Mark a run to resume from its latest complete checkpoint (see the module docstring, step 1).
    Returns the step it resumes from. The caller starts its worker afterwards.

    Args:
        run_dir: the run folder.
        make_config: ``(old_config, step) -> new_config`` (resolved dicts), called under the lock;
            None keeps the config (the restart policy).
        restart: the restart policy's count (1 for the first automatic restart): the run keeps its
            place in the queue (its first ``queued_at``), a ``cancel`` marker is left alone, and a
            run without a checkpoint starts over (``resume_from`` 0). None: a resume by hand.
        lock_timeout: seconds to wait for the run lock (a reader's probe holds it for microseconds).
        resumed_by: who resumes it by hand (:data:`RESUMED_BY`); a restart keeps the run's.

    Raises:
        RunLockedError: the run's worker is alive (or ``doctor --repair`` is working on it).
        ResumeError: the run is completed, starting, or has no complete checkpoint (by hand).
        ConfigError, DatasetError: from ``make_config``.
        StorageError: the history or status cannot be written.
    """
    d = Path(run_dir)
    lock = RunLock(d).acquire(timeout=lock_timeout)
    try:
        st, damaged = read_status_checked(d)
        if damaged:
            raise ResumeError(f"{damaged[0]}; run `python -m engine doctor --repair`, then resume")
        status = st.get("status", "queued")
        if status in ACTIVE:
            if is_starting(d, st):
                raise ResumeError(f"run {d.name} is starting (it was queued moments ago); nothing to resume")
            status = "interrupted"  # we hold its lock: its worker is gone
        if status not in RESUMABLE:
            raise ResumeError(f"run {d.name} is {status}; only {', '.join(RESUMABLE)} runs can be resumed")
        ckpt = latest_complete_checkpoint(d)
        if ckpt is None and restart is None:
            raise ResumeError(f"run {d.name} has no complete checkpoint to resume from (it ended before its first "
                              f"checkpoint); submit its config again to start over")
        step = checkpoint_step(ckpt) if ckpt is not None else 0
        config = read_json(d / CONFIG_FILE)
        if make_config is not None:
            config = make_config(config, step)
        if restart is None:
            unlink_quietly(d / CANCEL_FILE)
        remove_temps(d)
        dequeue(d.parent.parent, d.name)  # a ticket of a worker that died while queued
        append_config_history(d, step, config)
        now = time.time()
        created = st.get("created_at", now)
        write_status(d, {
            "status": "queued", "created_at": created, "queued_at": st.get("queued_at", created) if restart else now,
            "step": step, "total_steps": int(config.get("train", {}).get("steps", 0)), RESUME_FIELD: step,
            PRIOR_FIELD: prior_seconds(st, now), **({"restarts": restart} if restart else {}), **cluster_mark(config),
            **({RESUMED_BY: by} if (by := st.get(RESUMED_BY) if restart else resumed_by) else {}),
        })
        return step
    finally:
        lock.release()


def prior_seconds(st: dict, now: float) -> float:
    """Seconds of every leg of a run up to the end of its status ``st`` (the one a resume replaces):
    its earlier legs' :data:`PRIOR_FIELD` plus this leg's ``ended_at`` (else its last update, else
    ``now``) minus ``started_at``; steps redone after the checkpoint count in both legs."""
    prior = float(st.get(PRIOR_FIELD) or 0.0)
    started = st.get("started_at")
    if started is None:  # this leg never started (cancelled while queued)
        return prior
    end = st.get("ended_at") or st.get("updated_at") or now
    return prior + max(0.0, float(end) - float(started))


def reset_after(run_dir: Path, step: int) -> None:
    """Drop the run's metrics rows and samples after ``step`` (all of them for step 0: a start over),
    so the resumed run logs every step once. Only for the holder of the run lock.

    Raises:
        DamagedFileError: a metrics file cannot be read (``python -m engine doctor --repair`` moves it aside).
        StorageError: the metrics cannot be rewritten.
    """
    keep = step if step > 0 else -1
    truncate_metrics(run_dir, keep)
    delete_samples_after(run_dir, keep)
