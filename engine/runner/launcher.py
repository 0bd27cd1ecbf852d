"""Job launcher: starts each run as its own OS process, resumes and cancels it. The UI's only way to train.

A submitted (or resumed) run is ``python -m engine.runner.worker <run_dir>`` in a new session (``setsid``):
signals sent to the Streamlit server's process group never reach it, so it keeps training through
a server restart. Its stdout/stderr go to ``<run_dir>/worker.log``. A run whose ``launch.backend``
is ``ray`` or ``slurm`` runs the same worker as a cluster job instead (:mod:`engine.runner.backends`);
cancel and resume work the same, and :func:`job_state` reports the job. Nothing here imports torch at
import time (the restart supervisor in :mod:`engine.runner.worker` starts workers through
:func:`start_worker`); resolving a config (:func:`engine.tasks.resolve`) does.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from engine.access.policy import Identity, authorized, current_identity
from engine.config import RUN_BUDGET, RunConfig, parse_eval_budget
from engine.data.dataset import counted
from engine.errors import BackendError, EvaluationError, QueueFullError, ResumeError, RunActiveError, RunLockedError
from engine.runner.backends import JobState, describe, get_backend, node_workspace, read_job, write_job
from engine.runner.queue import enqueue, max_queued, submit_lock, waiting_runs
from engine.runner.resume import check_same_data, prepare_resume, resume_config
from engine.store import ACTIVE, CANCEL_FILE, RunLock, create_run, get_run, read_status, run_dir, write_status
from engine.store.checkpoints import checkpoint_complete, list_checkpoints
from engine.store.evaluations import clear_cancel as clear_eval_cancel
from engine.store.evaluations import job_active
from engine.store.evaluations import request_cancel as request_eval_cancel
from engine.store.evaluations import write_job as write_eval_job
from engine.store.lock import signal_holder
from engine.store.runs import LOG_FILE, is_starting
from engine.workspace import read_json, storage_error, workspace_root

REPO_ROOT = Path(__file__).resolve().parents[2]


def submit(cfg: RunConfig, workspace=None, *, actor: Identity | None = None, resolved: bool = False) -> str:
    """Create the run (status ``queued``, queue ticket) and start its worker; return the run id.

    The run's config is ``resolve(cfg)`` (:func:`engine.tasks.resolve`, called here once), checked
    against its dataset (:func:`engine.tasks.checks.check_run`) and stored; the worker trains it as
    stored. ``resolved``: ``cfg`` already is :func:`engine.tasks.resolve`'s result (a sweep's
    configs) and is stored as it is. Returns at once; the worker waits for its turn (first come,
    first served) and a free slot (``$MASKLAB_MAX_RUNS``), then trains.

    Raises:
        ConfigError, DatasetError: from :func:`engine.tasks.resolve` or
            :func:`engine.tasks.checks.check_run`; no run is created.
        QueueFullError: ``$MASKLAB_MAX_QUEUED`` runs are already waiting; no run is created.
        StorageError: the run folder cannot be written (disk full...).
        PermissionDeniedError: ``actor`` (default: :func:`engine.access.policy.current_identity`) is not an
            editor, or demo mode; checked first, nothing is written.
    """
    from engine.tasks import resolve  # noqa: PLC0415 (the tasks (torch) load when a config is resolved, not when the dashboard or CLI imports this)
    from engine.tasks.checks import check_run  # noqa: PLC0415 (the tasks (torch) load when a config is resolved, not when the dashboard or CLI imports this)

    ws = workspace_root(workspace)
    with authorized("run.submit", f"new run on {cfg.data.dataset}", actor=actor, workspace=ws) as entry:
        if not resolved:
            cfg = resolve(cfg)
        check_run(cfg, ws)
        local = cfg.launch.backend == "local"
        if not local:  # BackendError (extra not installed, cluster unreachable) before anything is written
            get_backend(cfg.launch.backend).preflight(cfg.launch.model_dump())
        with submit_lock(ws):
            if local:  # a cluster run waits in its cluster's queue, not in this workspace's
                _check_queue_cap(ws)
            run_id, d = create_run(cfg.to_dict(), ws)
            if local:
                enqueue(ws, d)
        entry.update(target=run_id, dataset=cfg.data.dataset, task=cfg.task, backend=cfg.launch.backend)
        _start_job(d, ws)
    return run_id


def _start_job(d: Path, ws: Path) -> None:
    """Start the worker of the queued run folder ``d`` where its ``launch.backend`` says: a process
    here (local), or a cluster job whose record goes into the run folder (:data:`engine.runner.backends.JOB_FILE`).

    Raises:
        BackendError: the cluster cannot be reached or refused the job; the run is then recorded
            ``failed`` with that reason (resumable once the cluster is back).
    """
    raw = read_json(d / "config.json")
    launch = raw.get("launch") or {}
    name = launch.get("backend", "local")
    if name == "local":
        start_worker(d, ws)
        return
    backend = get_backend(name)
    n = len((read_job(d) or {}).get("jobs", [])) + 1
    try:
        job = backend.submit(d, launch, raw.get("train", {}), node_workspace(launch, ws), f"masklab-{d.name}-{n}")
    except BackendError as e:
        _record_end(d, "failed", str(e))
        raise
    write_job(d, job)


def resume(run_id: str, overrides: Sequence[str] = (), workspace=None, *, actor: Identity | None = None) -> int:
    """Continue a failed, cancelled, diverged or interrupted run from its latest complete checkpoint;
    return that checkpoint's step. Returns at once; the run queues like a new one (at the back).

    ``overrides`` (``key=value``, as ``--set``) change the config from that step on, e.g.
    ``train.lr=5e-4`` or ``train.steps=2000``; the run's ``config_history.json`` records it. The
    model, task, data and seed cannot change (:data:`engine.runner.resume.RESUME_FROZEN`). See
    :mod:`engine.runner.resume` for what is done, and :meth:`engine.training.state.TrainState.load_state_dict` for what is restored.

    Raises:
        RunNotFoundError: unknown run.
        RunLockedError: its worker is alive (queued or running).
        ResumeError: the run is completed or starting, or it has no complete checkpoint.
        ConfigError: a bad or frozen override, or ``train.steps`` not past the checkpoint.
        DatasetError: its dataset is gone, or its content changed since the run started.
        QueueFullError: ``$MASKLAB_MAX_QUEUED`` runs are already waiting. Nothing is changed on any error.
        StorageError: the run folder cannot be written.
        PermissionDeniedError: ``actor`` is not an editor, or demo mode (checked first).

    The audit line says ``ok`` once the worker is started; a worker that then ends ``failed`` or
    ``diverged`` adds a ``failed`` ``run.resume`` line (:data:`engine.runner.resume.RESUMED_BY`).
    """
    ws = workspace_root(workspace)
    with authorized("run.resume", run_id, actor=actor, workspace=ws) as entry:
        entry["overrides"] = list(overrides)
        who = actor if actor is not None else current_identity()  # as authorized found it: allowed
        return _resume(run_id, overrides, ws, {"name": who.name, "role": who.role, "source": who.source})


def _resume(run_id: str, overrides: Sequence[str], ws: Path, by: dict[str, str] | None = None) -> int:
    from engine.pretrained.runs import recorded_init  # noqa: PLC0415 (torch loads when a config is checked, not when the dashboard or CLI imports this)
    from engine.tasks.checks import check_run  # noqa: PLC0415 (the tasks (torch) load when a config is resolved, not when the dashboard or CLI imports this)

    d = run_dir(run_id, ws)

    def make_config(old: dict, step: int) -> dict:
        cfg = resume_config(old, overrides, step)
        with recorded_init(d):  # model.init_from as the run recorded it: its source may be gone since
            info = check_run(cfg, ws)
        check_same_data(d, getattr(info, "source_hash", "") or "")
        return cfg.to_dict()

    local = _launch_of(d).get("backend", "local") == "local"
    if not local:  # BackendError (extra not installed, cluster unreachable) before anything is changed
        get_backend(_launch_of(d)["backend"]).preflight(_launch_of(d))
    with submit_lock(ws):
        if local:
            _check_queue_cap(ws)
        step = prepare_resume(d, make_config, resumed_by=by)
        if _launch_of(d).get("backend", "local") == "local":  # an override may have changed the back-end
            enqueue(ws, d)
    _start_job(d, ws)
    return step


def _launch_of(d: Path) -> dict:
    """The ``launch`` section of a run's saved config (``{}``: local; unreadable configs fail later, in context)."""
    try:
        return dict(read_json(d / "config.json").get("launch") or {})
    except (OSError, ValueError, AttributeError, TypeError):
        return {}


def evaluate(run_id: str, step: int | None = None, workspace=None, *, budget: float | str | None = RUN_BUDGET,
             actor: Identity | None = None) -> int:
    """Evaluate a saved checkpoint of an ended run in the background (:mod:`engine.eval.job`): the
    job queues for a run slot like a training run and writes its results with the run. Returns the
    checkpoint step it will evaluate (the latest complete one when ``step`` is None). ``budget``: the
    share of the checkpoint's training time it may spend (:mod:`engine.eval.budget`; None: no limit;
    :data:`engine.config.RUN_BUDGET`: the run's ``evaluation.budget``); a deeper evaluation asks for
    more. :func:`cancel` stops it.

    Raises:
        RunNotFoundError: unknown run.
        RunActiveError: the run is queued or running (it is evaluated at its end when
            ``evaluation.auto``), or an evaluation of it is already queued or running.
        EvaluationError: no complete checkpoint (at ``step``).
        ConfigError: ``budget`` is not one of those (:func:`engine.config.parse_eval_budget`).
        QueueFullError: ``$MASKLAB_MAX_QUEUED`` runs are already waiting. Nothing is started on any error.
        PermissionDeniedError: ``actor`` (default :func:`engine.access.policy.current_identity`) is not an
            editor, or demo mode (checked first).
    """
    budget = parse_eval_budget(budget)
    with authorized("run.evaluate", run_id, actor=actor, workspace=workspace):
        return _evaluate(run_id, step, workspace, budget)


def _evaluate(run_id: str, step: int | None, workspace, budget: float | str | None = RUN_BUDGET) -> int:
    ws = workspace_root(workspace)
    rec = get_run(run_id, ws)
    if rec.status in ACTIVE:
        raise RunActiveError(f"run {run_id} is {rec.status}; its final checkpoint is evaluated when it completes "
                             f"(evaluation.auto), other checkpoints once it has ended")
    steps = [int(p.name.split("-")[1]) for p in list_checkpoints(rec.path) if checkpoint_complete(p)]
    if step is not None and step not in steps or not steps:
        at = "" if step is None else f" at step {step}"
        kept = f" (kept: {', '.join(map(str, steps))})" if steps else ""
        raise EvaluationError(f"run {run_id} has no complete checkpoint{at} to evaluate{kept}")
    step = steps[-1] if step is None else step
    with submit_lock(ws):
        if job_active(run_id, ws):
            raise RunActiveError(f"an evaluation of run {run_id} is already queued or running")
        _check_queue_cap(ws)
        clear_eval_cancel(rec.path)
        write_eval_job(rec.path, status="queued", step=step, queued_at=time.time(), budget=budget)
    cmd = [sys.executable, "-m", "engine.eval.job", str(rec.path), "--step", str(step)]
    if budget != RUN_BUDGET:
        cmd += ["--budget", "full" if budget is None else repr(float(budget))]
    _start(cmd, rec.path, ws)
    return step


def _check_queue_cap(ws: Path) -> None:
    """Raise QueueFullError while ``$MASKLAB_MAX_QUEUED`` runs wait (call holding ``submit_lock``)."""
    waiting, cap = len(waiting_runs(ws, prune=True)), max_queued()
    if waiting >= cap:
        raise QueueFullError(
            f"the queue is full: {counted(waiting, 'run')} {'is' if waiting == 1 else 'are'} waiting for a slot "
            f"(MASKLAB_MAX_QUEUED={cap}); wait for one to start, cancel one (python -m engine cancel RUN_ID), or "
            "raise MASKLAB_MAX_QUEUED where the dashboard and the CLI are started")


def start_worker(d: Path, workspace=None, *, supervised: bool = False) -> subprocess.Popen:
    """Start ``python -m engine.runner.worker <d>`` for a run folder whose status is ``queued``; return its process.

    A launch (``supervised`` False) gets its own session and ``<d>/worker.log`` as stdout/stderr,
    and a thread reaps it so that no zombie lingers in a long-lived server. The restart supervisor
    (``supervised`` True) starts ``--once`` workers that share its session and log and waits for them itself.

    Internal, with no permission check: :func:`submit` and :func:`resume` call it (through
    ``_start_job``) after their role check, the restart supervisor for a run already launched; it is
    not in :mod:`engine.api`, so no page can call it.
    """
    ws = workspace_root(workspace)
    cmd = [sys.executable, "-m", "engine.runner.worker", *(["--once"] if supervised else []), str(d)]
    if supervised:
        return subprocess.Popen(cmd, cwd=REPO_ROOT, env=worker_env(ws), stdin=subprocess.DEVNULL, close_fds=True)
    return _start(cmd, d, ws)


def worker_env(ws: Path) -> dict[str, str]:
    """The environment of a process the launcher starts: ours, with ``MASKLAB_WORKSPACE`` = ``ws`` and
    the checkout first on ``PYTHONPATH``."""
    env = {**os.environ, "MASKLAB_WORKSPACE": str(ws)}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    return env


def _start(cmd: list[str], d: Path, ws: Path) -> subprocess.Popen:
    """Start ``cmd`` in its own session with ``<d>/worker.log`` as stdout/stderr; a thread reaps it."""
    env = worker_env(ws)
    with open(Path(d) / LOG_FILE, "ab") as log:
        proc = subprocess.Popen(cmd, cwd=REPO_ROOT, env=env, stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True, close_fds=True)
    threading.Thread(target=proc.wait, name=f"reap-{Path(d).name}", daemon=True).start()
    return proc


def cancel(run_id: str, workspace=None, *, actor: Identity | None = None) -> bool:
    """Ask a queued or running run to stop, or, for an ended run, its queued or running evaluation
    job (:func:`evaluate`; it stops at its next progress report and keeps the phases it finished).
    Returns False if neither was active.

    Writes the ``cancel`` marker (the worker polls it every step and while queued) and sends
    SIGTERM to the process that holds the run's lock, found through the kernel
    (:func:`engine.store.lock.signal_holder`), never through a stored PID; the worker finishes
    its current step and records ``cancelled``.

    Raises:
        RunNotFoundError: unknown run id.
        PermissionDeniedError: ``actor`` is not an editor, or demo mode (checked first).
    """
    with authorized("run.cancel", run_id, actor=actor, workspace=workspace) as entry:
        rec = get_run(run_id, workspace)
        entry["was"] = rec.status
        if rec.status not in ACTIVE:
            if not job_active(run_id, workspace):
                return False
            entry["was"] = "evaluating"
            request_eval_cancel(rec.path)
            return True
        d = run_dir(run_id, workspace)
        try:
            (d / CANCEL_FILE).touch()
        except OSError:  # a full disk: the signal below still reaches a running worker
            pass
        signal_holder(d, signal.SIGTERM)
        job = read_job(d)
        if job is not None:
            _cancel_job(d, job)
        return True


#: Seconds :func:`cancel` gives a cluster run's worker to stop by itself (the ``cancel`` marker) and
#: record ``cancelled`` before its job is stopped (Ray kills the entrypoint a few seconds after stop_job).
CLUSTER_STOP_GRACE_S = 20.0


def _cancel_job(d: Path, job: dict) -> None:
    """Cancel a cluster run's job (after the marker is written): a job whose worker has not started
    is stopped at once and the run recorded ``cancelled``; a running worker gets
    :data:`CLUSTER_STOP_GRACE_S` to finish its step and record ``cancelled``, then its job is stopped
    (``stop_job``, ``scancel``) in case it did not. Raises BackendError (cluster unreachable)."""
    backend = get_backend(job["backend"])
    if not read_status(d).get("pid"):  # still in the cluster's queue
        backend.cancel(job)
        _record_end(d, "cancelled", "")
        return
    end = time.monotonic() + CLUSTER_STOP_GRACE_S
    while time.monotonic() < end and read_status(d).get("status") in ACTIVE:
        time.sleep(0.2)
    if not backend.state(job).ended:
        backend.cancel(job)


def _record_end(d: Path, status: str, error: str) -> bool:
    """Record how a cluster run ended when its worker could not (it never started, or its job died):
    takes the run lock (proof that no worker of this host holds it), and writes ``status`` only if the
    file still says queued or running. Returns True if it wrote."""
    try:
        lock = RunLock(d).acquire(timeout=1.0)
    except RunLockedError:
        return False
    try:
        st = read_status(d)
        if st.get("status", "queued") not in ACTIVE:
            return False
        keep = {k: st[k] for k in ("created_at", "queued_at", "started_at", "step", "total_steps", "latest",
                                   "placement", "resume_from", "restarts") if k in st}
        write_status(d, {**keep, "status": status, "ended_at": time.time(), **({"error": error} if error else {})})
        return True
    finally:
        lock.release()


def job_state(run_id: str, workspace=None) -> JobState | None:
    """The state of a cluster run's latest job (:mod:`engine.runner.backends`), or None for a local run.

    The run store stays the source of truth for the run; this is what its cluster says about the job.
    A job that has ended while the run still says queued or running (its worker never started, e.g.
    it could not write the workspace, or it was killed) makes the run ``failed`` here, with the
    job's reason (the worker's own where it printed one).

    Raises:
        RunNotFoundError: unknown run. BackendError: the cluster cannot be reached, or the extra
        is not installed.
    """
    d = run_dir(run_id, workspace)
    job = read_job(d)
    if job is None:
        return None
    state = get_backend(job["backend"]).state(job)
    if state.ended and read_status(d).get("status") in ACTIVE:
        _record_end(d, "failed", state.reason or f"its {describe(job)} ended ({state.state}) before the worker "
                    f"recorded an outcome; see the job's log")
    return state


def delete_run(run_id: str, workspace=None, *, actor: Identity | None = None) -> None:
    """Delete an ended run: its folder (config, metrics, checkpoints, samples, log) goes at once.

    The run's lock is taken first, so its worker is provably gone and cannot start meanwhile; the
    folder is renamed to a hidden name in ``runs/`` (readers stop listing it at that instant), then
    removed.

    Raises:
        RunNotFoundError: unknown run id.
        RunLockedError: the run is queued or running (cancel it first); nothing is deleted.
        PermissionDeniedError: ``actor`` is not an admin, or demo mode (checked first).
        StorageError: the folder cannot be renamed (read-only workspace...).
    """
    with authorized("run.delete", run_id, actor=actor, workspace=workspace):
        d = run_dir(run_id, workspace)  # RunNotFoundError; a run with a damaged config can be deleted
        try:
            lock = RunLock(d).acquire(timeout=1.0)
        except RunLockedError:
            raise RunLockedError(f"run {run_id} is queued or running: cancel it first, then delete it") from None
        try:
            if is_starting(d):
                raise ResumeError(f"run {run_id} is starting (it was queued moments ago): cancel it first")
            gone = d.with_name(f".deleted-{run_id}-{os.getpid()}")
            try:
                os.rename(d, gone)
            except OSError as e:
                raise storage_error(e, f"run {run_id} (deleting it)", d) from e
        finally:
            lock.release()
        shutil.rmtree(gone, ignore_errors=True)
