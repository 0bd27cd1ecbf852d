"""One run, start to end, in the current process: run lock, queue, slot, status, metrics, fit, final status.

Started by :func:`engine.runner.launcher.submit` (or ``resume``) as ``python -m engine.runner.worker <run_dir>``
in its own session, or called in-process by ``python -m engine run``. The worker holds the run lock
(:mod:`engine.store.lock`) from before it writes ``queued`` until it exits; only the lock holder
writes a run's files after submission. A status ``queued`` with ``resume_from`` (written by
:func:`engine.runner.resume.prepare_resume`) makes it continue from that checkpoint. With
``train.max_restarts`` set, ``python -m engine.runner.worker`` is a supervisor (:func:`supervise`) that
runs the training worker as a child (``--once``) and resumes it when it dies.

How a run ends, by what happens to its worker:

============================================  ==========================================
SIGTERM, ``cancel`` marker (engine.runner.launcher)   ``cancelled`` after the current step
SIGINT / Ctrl-C                                ``cancelled`` (KeyboardInterrupt re-raised)
non-finite loss (NonFiniteLossError)           ``diverged``, with the loop's message
a write fails (StorageError: disk full...)     ``failed``, "no space left on device while writing ..."
any other exception                            ``failed``, with the error; traceback in worker.log
SIGKILL, SIGHUP, SIGQUIT, SIGSEGV, OOM, power   nothing written: readers see the lock free and
                                               report ``interrupted`` (resumable; under the restart
                                               policy, resumed automatically)
============================================  ==========================================

On a full disk the final status write itself may fail: the worker then deletes its temporary
files and its 64 KiB reserve file (``.reserve.tmp``, written when it starts) and tries once more.
If even that fails, the status file keeps its last value (``running``), the lock is released at
exit, and readers report the run ``interrupted``; the reason is in worker.log if the log's disk
had room.
"""

from __future__ import annotations

import _thread
import os
import signal
import sys
import threading
import time
from contextlib import nullcontext
from pathlib import Path
from types import SimpleNamespace
from typing import Callable

from engine.access import journal
from engine.config import RunConfig
from engine.errors import EvaluationCancelled, MasklabError, NonFiniteLossError, ResumeError, RunLockedError, StorageError
from engine.runner.backends import REASON_PREFIX, WORKSPACE_EXIT, check_workspace
from engine.runner.devices import run_gpus
from engine.runner.launcher import start_worker, worker_env
from engine.runner.prefetch import PREFETCH_ENV, start_prefetch, stop_prefetch, waiter
from engine.runner.queue import dequeue, enqueue, max_runs, run_slot
from engine.runner.resources import exit_reason, print_exc, resolve_threads, say
from engine.runner.resume import PRIOR_FIELD, RESUME_FIELD, RESUMED_BY, prepare_resume, reset_after
from engine.runner.torchrun import run_ranks
from engine.store import CANCEL_FILE, HOLD_FILE, read_status, write_status
from engine.store.checkpoints import CKPT_DIR, checkpoint_problem
from engine.store.evaluations import write_job
from engine.store.lock import RunLock
from engine.store.paths import CONFIG_FILE
from engine.store.runs import get_run
from engine.workspace import atomic_write_json, read_json, remove_temps, unlink_quietly, write_new_file

#: The slot number of a cluster job (it holds none of the workspace's slots).
CLUSTER_SLOT = -1
RESERVE_FILE, RESERVE_BYTES = ".reserve.tmp", 64 * 1024


#: How often a held worker looks for the ``hold`` marker to go (seconds).
HOLD_POLL_S = 0.1


def execute_run(run_dir: Path, *, on_step: Callable[[int], None] | None = None) -> str:
    """Run the config in ``run_dir`` to the end and record the outcome. Returns the final status.

    Never raises for a failed run: the error is written to the status (``failed``, or ``diverged``
    for a non-finite loss) and the traceback to stderr (``worker.log`` for background runs). SIGTERM
    or the ``cancel`` marker stop it after the current step (``cancelled``); a KeyboardInterrupt
    (Ctrl-C in the CLI) is recorded as ``cancelled`` and re-raised. While the ``hold`` marker exists
    it waits before its next step (polled every 0.1 s; a cancel ends the wait); distributed runs
    do not hold.

    Raises:
        RunLockedError: another live process holds the run lock (nothing is written).
        KeyboardInterrupt: after recording ``cancelled``.
    """
    run_dir = Path(run_dir).resolve()
    stop_flag = {"signal": False}
    cancel_marker, hold_marker = run_dir / CANCEL_FILE, run_dir / HOLD_FILE

    def should_stop() -> bool:
        while hold_marker.exists() and not (stop_flag["signal"] or cancel_marker.exists()):
            time.sleep(HOLD_POLL_S)
        return stop_flag["signal"] or cancel_marker.exists()

    def on_term(signum, frame):  # finish the current step, then stop
        stop_flag["signal"] = True

    # The handler goes in before the lock is taken: cancel signals lock holders only, so a SIGTERM
    # can never find this process holding the lock without its handler.
    in_main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, on_term) if in_main else None
    lock = RunLock(run_dir)
    try:
        lock.acquire()
        return _execute(run_dir, should_stop, on_step)
    finally:
        if in_main:
            signal.signal(signal.SIGTERM, previous)
        if lock.held:
            unlink_quietly(run_dir / RESERVE_FILE)
        lock.release()


def _final(run_dir: Path, status: dict) -> None:
    """Write the final status (:func:`_write_final`); a resume by hand that ends ``failed`` or
    ``diverged`` is also an audit line in the name of who resumed it (:data:`RESUMED_BY`)."""
    _write_final(run_dir, status)
    by = status.get(RESUMED_BY)
    if status.get("status") in ("failed", "diverged") and isinstance(by, dict):
        who = SimpleNamespace(name=by.get("name", "?"), role=by.get("role", ""), source=by.get("source", ""))
        journal.record("run.resume", run_dir.name, "failed", who, run_dir.parent.parent, quiet=True,
                       reason=status.get("error") or status["status"], status=status["status"],
                       step=status.get("step"), worker=True)


def _write_final(run_dir: Path, status: dict) -> None:
    """Write the final status; on a full disk free this run's temporary files and reserve, retry once."""
    try:
        write_status(run_dir, status)
        return
    except StorageError as e:
        say(f"masklab: writing the final status failed ({e}); freeing temporary files and the reserve")
    remove_temps(run_dir)
    try:
        write_status(run_dir, status)
    except StorageError as e:
        say(f"masklab: could not record status {status['status']!r} of run {run_dir.name}: {e}; "
             f"readers will report it interrupted")


def _execute(run_dir: Path, should_stop: Callable[[], bool], on_step: Callable[[int], None] | None) -> str:
    run_id, workspace = run_dir.name, run_dir.parent.parent
    base = read_status(run_dir)
    created = base.get("created_at", time.time())
    # A resume (engine.runner.resume.prepare_resume) wrote status queued with the checkpoint step to continue from.
    resume_from = base.get(RESUME_FIELD) if base.get("status") == "queued" else None
    status = {"created_at": created, "queued_at": base.get("queued_at", created), "pid": os.getpid(),
              "step": int(resume_from or 0), "total_steps": base.get("total_steps", 0),
              **{k: base[k] for k in (RESUME_FIELD, PRIOR_FIELD, "restarts", RESUMED_BY)
                 if resume_from is not None and k in base}}
    prefetch = None  # the baselines' figures computed while training (engine.eval.prefetch)
    try:
        try:  # room for the final status on a full disk (best effort: without it, the run goes on)
            unlink_quietly(run_dir / RESERVE_FILE)
            write_new_file(run_dir / RESERVE_FILE, bytes(RESERVE_BYTES))
        except OSError:
            unlink_quietly(run_dir / RESERVE_FILE)
        write_status(run_dir, {**status, "status": "queued"})
        raw = read_json(run_dir / CONFIG_FILE)  # plain JSON: validating imports torch, not before a slot
        status["total_steps"] = int(raw.get("train", {}).get("steps", 0))
        # A cluster job (launch.backend ray/slurm) was scheduled by its cluster, which gave it its
        # CPUs and GPUs: it takes no slot of this workspace's queue.
        on_cluster = (raw.get("launch") or {}).get("backend", "local") != "local"
        queue = nullcontext(None if should_stop() else CLUSTER_SLOT) if on_cluster else run_slot(
            workspace, run_dir, should_stop)
        with queue as slot:
            if slot is None:
                _final(run_dir, {**status, "status": "cancelled", "ended_at": time.time()})
                return "cancelled"
            gpus = [] if on_cluster else run_gpus(slot, max_runs(), raw.get("train", {}), raw.get("launch") or {})
            if gpus:  # this slot's GPUs, before CUDA starts (torchrun and its ranks inherit it)
                os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(gpus)
            if not on_cluster:  # which slot and GPUs it holds: New run's GPU panel (engine.runner.gpus)
                status.update(slot=slot, gpus=gpus)
            # Only now (with a slot) import torch and the training code: a queued worker holds no torch memory.
            from engine.runner import execution  # noqa: PLC0415  (torch only once the run has a slot)

            cfg = RunConfig.from_dict(raw)  # resolved when stored (submit, resume): only validated here
            if not cfg.train.num_threads:  # record the resolved count, so the config says what ran
                cfg.train.num_threads = resolve_threads(raw.get("train", {}), raw.get("launch") or {})
                atomic_write_json(run_dir / CONFIG_FILE, cfg.to_dict(), what=f"the config of run {run_id}")
            threads = execution.configure_torch(cfg.train.num_threads, cfg.train.deterministic)
            status.update(started_at=time.time(), num_threads=threads,
                          deterministic=cfg.train.deterministic, placement=execution.placement(cfg.launch))
            write_status(run_dir, {**status, "status": "running"})
            evaluates = cfg.evaluation.auto and os.environ.get(AUTO_EVAL_ENV, "1") != "0"
            if evaluates and os.environ.get(PREFETCH_ENV, "1") != "0":  # lower priority; the evaluation waits for it
                prefetch = start_prefetch(run_dir, worker_env(workspace))
            ckpt = None
            if resume_from is not None:  # drop what a killed worker logged after the checkpoint
                reset_after(run_dir, int(resume_from))
                if resume_from:
                    ckpt = run_dir / CKPT_DIR / f"step-{int(resume_from):07d}"
                    problem = checkpoint_problem(ckpt)
                    if problem:
                        raise ResumeError(f"checkpoint step {resume_from} of run {run_id} cannot be resumed from: "
                                          f"{problem}")
            if cfg.launch.distributed:  # torchrun's ranks train; the writer rank reports the outcome
                out = run_ranks(run_dir, cfg.launch.model_dump(), cfg.train.num_threads, resume_from, should_stop,
                                on_step)
            else:
                out = execution.train_here(run_dir, cfg, should_stop, on_step=on_step, resume_from=ckpt)
            status.update({k: out[k] for k in ("step", "peak_mem_bytes", "placement") if k in out})
            if "torchrun_exit" in out:  # 0: every rank of this node exited cleanly
                status["torchrun_exit"] = out["torchrun_exit"]
            latest = out.get("latest", {})
            if out["status"] in ("failed", "diverged"):
                _final(run_dir, {**status, "status": out["status"], "error": out.get("error", ""),
                                 "ended_at": time.time(), "latest": latest})
                return out["status"]
            final = out["status"]
            ended = time.time()  # training's end: the wall time leaves the evaluation out
            if final == "completed" and evaluates:
                write_status(run_dir, {**status, "status": "running", "phase": "evaluating", "latest": latest,
                                       "trained_at": ended})  # the evaluation's budget is a share of training
                _evaluate_final(run_dir, out["device"], workspace, out["steps_done"], should_stop, waiter(prefetch))
            _final(run_dir, {**status, "status": final, "step": out["steps_done"], "ended_at": ended,
                             "latest": latest, "device": out["device"], "n_params": out["n_params"]})
            return final
    except BaseException as e:  # record every failure, including KeyboardInterrupt in the CLI
        last = read_status(run_dir)  # the last progress written
        latest = last.get("latest") or {}
        status.update({k: last[k] for k in ("step", "peak_mem_bytes") if k in last})
        if isinstance(e, KeyboardInterrupt):
            _final(run_dir, {**status, "status": "cancelled", "ended_at": time.time(), "latest": latest})
            raise
        final = "diverged" if isinstance(e, NonFiniteLossError) else "failed"
        msg = str(e) if isinstance(e, MasklabError) else f"{type(e).__name__}: {e}"
        print_exc()
        _final(run_dir, {**status, "status": final, "error": msg, "ended_at": time.time(), "latest": latest})
        return final
    finally:
        stop_prefetch(prefetch)
        dequeue(workspace, run_id)


AUTO_EVAL_ENV = "MASKLAB_AUTO_EVAL"
"""Set to ``0`` to skip every run's automatic evaluation in this environment (a test suite, a demo)."""


#: Seconds between two looks at the stop flag and the ``cancel`` marker during the final evaluation.
EVAL_CANCEL_POLL_S = 0.5


def _evaluate_final(run_dir: Path, device: str, workspace: Path, step: int | None,
                    should_stop: Callable[[], bool], wait: Callable[[], None] | None = None) -> None:
    """The automatic evaluation of a completed run's final checkpoint (step ``step``; ``evaluation.auto``,
    unless ``$MASKLAB_AUTO_EVAL`` is 0), in the worker while it still holds the run lock and its slot.
    Its failure does not fail the run: the reason is in ``evaluation/job.json`` and the log.

    Cancel (SIGTERM, SIGINT (Ctrl-C) or the ``cancel`` marker, ``should_stop``) stops it at its next
    progress report (:mod:`engine.eval.progress`), or within about :data:`EVAL_CANCEL_POLL_S` plus
    the running library call: a watcher thread interrupts the main thread, whose handler raises
    :class:`EvaluationCancelled`. The job is recorded ``cancelled`` with that reason, the phases it
    finished are kept (a ``cancelled`` evaluation record), and the run stays ``completed`` (its
    training ended). ``wait``: the wait for the baselines' prefetch, in the evaluation's setup phase."""
    from engine.eval.job import evaluate_and_save  # noqa: PLC0415 (the evaluation (torch, scikit-learn) loads once training has ended)

    why = (f"cancelled during the final evaluation; start one again from Compare or with python -m engine "
           f"evaluate {run_dir.name}")
    if should_stop():  # cancelled once the status said "evaluating", before the job started
        now = time.time()
        try:
            write_job(run_dir, status="cancelled", step=step, error=why, started_at=now, ended_at=now)
        except (MasklabError, OSError):  # a full disk: the training result stands all the same
            print_exc()
        print(f"final evaluation of {run_dir.name} cancelled", file=sys.stderr, flush=True)
        return
    in_main = threading.current_thread() is threading.main_thread()
    done = threading.Event()
    raised = threading.Event()  # once only: a second SIGTERM must not cut the job's own "failed" record

    def on_term(signum, frame):
        if not done.is_set() and not raised.is_set():
            raised.set()
            raise EvaluationCancelled(why)

    def watch():
        while not done.wait(EVAL_CANCEL_POLL_S):
            if should_stop() and not raised.is_set():
                _thread.interrupt_main(signal.SIGTERM)
                return

    # SIGTERM (a cancel) and SIGINT (Ctrl-C in the CLI) both stop the evaluation only
    previous = {sig: signal.signal(sig, on_term) for sig in (signal.SIGTERM, signal.SIGINT)} if in_main else {}
    watcher = threading.Thread(target=watch, name="eval-cancel", daemon=True) if in_main else None
    if watcher is not None:
        watcher.start()
    try:
        evaluate_and_save(run_dir, step, device=device, workspace=workspace, should_stop=should_stop, wait=wait)
    except EvaluationCancelled:
        print(f"final evaluation of {run_dir.name} cancelled", file=sys.stderr, flush=True)
    except Exception:  # noqa: BLE001 - recorded in job.json; the training result stands
        print_exc()
    finally:
        done.set()
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def supervise(run_dir: Path, max_restarts: int) -> int:
    """The restart policy (``train.max_restarts``, as torchrun's elastic agent): run the worker as a
    child process and, when it dies without recording an outcome, resume the run from its latest
    checkpoint and start a new one, up to ``max_restarts`` times. Returns the exit code (the last
    worker's; 1 when it gave up).

    "Died without recording an outcome" is what readers call ``interrupted``: the child is gone, its
    run lock is free and the status still says queued/running (SIGKILL, the OOM killer, a segfault).
    A run that ends ``completed``, ``cancelled``, ``failed`` or ``diverged`` is not restarted: a
    Python error or a non-finite loss would come back the same way. A ``cancel`` marker stops the
    restarts too. A restart is :func:`engine.runner.resume.prepare_resume` (history entry, status queued
    with ``resume_from`` and ``restarts``, without a checkpoint: from step 0) and keeps the run's
    place in the queue. SIGTERM / SIGINT sent to the supervisor are passed on to the worker, and
    nothing is restarted afterwards. The supervisor holds no lock, imports no torch and writes only
    while it holds the run lock (inside ``prepare_resume``).
    """
    run_dir = Path(run_dir).resolve()
    workspace = run_dir.parent.parent
    state: dict = {"child": None, "stop": False}

    def forward(signum, frame):
        state["stop"] = True
        child = state["child"]
        if child is not None and child.poll() is None:
            child.send_signal(signum)

    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGTERM, signal.SIGINT)}
    restarts = 0
    try:
        while True:
            child = state["child"] = start_worker(run_dir, workspace, supervised=True)
            rc = child.wait()
            if state["stop"] or rc == 2 or get_run(run_dir.name, workspace).status != "interrupted":
                return rc
            why = exit_reason(rc)
            if (run_dir / CANCEL_FILE).exists():
                say(f"masklab: the worker of run {run_dir.name} died ({why}) after a cancel request; not restarting")
                return 1
            if restarts >= max_restarts:
                say(f"masklab: the worker of run {run_dir.name} died ({why}); no restart left (train.max_restarts="
                     f"{max_restarts}); the run stays interrupted: resume it by hand")
                return 1
            restarts += 1
            try:
                step = prepare_resume(run_dir, restart=restarts, lock_timeout=10.0)
                enqueue(workspace, run_dir)
            except (MasklabError, OSError) as e:  # resumed by hand meanwhile, a full disk...
                say(f"masklab: not restarting run {run_dir.name}: {e}")
                return 1
            say(f"masklab: the worker of run {run_dir.name} died ({why}); restart {restarts}/{max_restarts} "
                 f"from step {step}")
            if state["stop"]:
                return 1
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


NICE_ENV, DEFAULT_NICE = "MASKLAB_WORKER_NICE", 10


def lower_priority(environ: dict[str, str] | None = None) -> int:
    """Lower this worker's CPU priority by ``$MASKLAB_WORKER_NICE`` (default 10; 0 leaves it): on a
    machine that also serves the dashboard, pages are drawn before training steps (bench/load.py).
    A process already that nice (a restart's worker, under its supervisor) stays as it is. Returns
    the niceness now; an invalid value or a refused change leaves it as it was."""
    try:
        want = max(0, min(int((os.environ if environ is None else environ).get(NICE_ENV, DEFAULT_NICE)), 19))
        return os.nice(max(0, want - os.nice(0)))
    except (ValueError, OSError):
        return os.nice(0)


def main(argv: list[str] | None = None) -> int:
    """``python -m engine.runner.worker [--once] [--cluster] RUN_DIR``: exit code 0 when completed or
    cancelled, 1 when failed or diverged (or the restart policy gave up), 2 when another live
    process holds the run (nothing written), 3 (``--cluster``, a cluster job's worker) when it
    cannot read or write the run folder on this node: it then writes nothing and prints the reason
    (:func:`engine.runner.backends.check_workspace`), which the dashboard records as the run's failure.

    A run whose config sets ``train.max_restarts`` runs under :func:`supervise`, which starts
    ``--once`` workers (``--once``: this process trains, whatever the config says)."""
    argv = sys.argv[1:] if argv is None else argv
    # A process that ignores a signal passes it on ignored to its children: a server started under
    # nohup ignores SIGHUP, one started with `&` from a script (job control off) ignores SIGINT, and
    # Python then installs no KeyboardInterrupt handler. The worker has its own session, so no
    # terminal sends it either; an explicit one must act as the table above says.
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    once, on_cluster = "--once" in argv, "--cluster" in argv
    args = [a for a in argv if a not in ("--once", "--cluster")]
    if len(args) != 1:
        print("usage: python -m engine.runner.worker [--once] [--cluster] RUN_DIR", file=sys.stderr)
        return 2
    run_dir = Path(args[0])
    lower_priority()
    if on_cluster:  # fail fast where the workspace is not shared or not writable (engine.runner.backends)

        problem = check_workspace(run_dir)
        if problem:
            say(REASON_PREFIX + problem)
            return WORKSPACE_EXIT
    if not once:
        try:
            restarts = int(read_json(run_dir / CONFIG_FILE).get("train", {}).get("max_restarts") or 0)
        except (OSError, ValueError, TypeError, AttributeError):
            restarts = 0  # the worker reports an unreadable config
        if restarts > 0:
            return supervise(run_dir, restarts)
    try:
        final = execute_run(run_dir)
    except RunLockedError as e:
        say(f"masklab: {e}")
        return 2
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except OSError:
        pass
    return 1 if final in ("failed", "diverged") else 0


if __name__ == "__main__":
    sys.exit(main())
