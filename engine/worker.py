"""One run, start to end, in the current process: slot, status, metrics, fit, final status.

Started by :func:`engine.launcher.submit` as ``python -m engine.worker <run_dir>`` in its own
session, or called in-process by ``python -m engine run``. Only this code writes a run's
``status.json`` after submission.
"""

from __future__ import annotations

import fcntl
import os
import signal
import sys
import threading
import time
import traceback
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

from engine.config import RunConfig
from engine.errors import MasklabError
from engine.store import CANCEL_FILE, MetricsWriter, read_status, write_status
from engine.workspace import read_json

DEFAULT_MAX_RUNS = 2
STATUS_EVERY_S = 1.0


def max_runs() -> int:
    """How many runs may train at once on this machine: ``$MASKLAB_MAX_RUNS`` (default 2)."""
    return max(1, int(os.environ.get("MASKLAB_MAX_RUNS", DEFAULT_MAX_RUNS)))


@contextmanager
def run_slot(workspace: Path, should_stop: Callable[[], bool], poll_s: float = 0.5) -> Iterator[bool]:
    """Hold one of ``max_runs()`` slot locks while the body runs; yields False if stopped while waiting.

    The locks are ``flock``s on ``<workspace>/slots/slot-K.lock``; the kernel releases them when
    the process exits, so a killed worker never leaks a slot.
    """
    slots = workspace / "slots"
    slots.mkdir(parents=True, exist_ok=True)
    while True:
        for k in range(max_runs()):
            f = open(slots / f"slot-{k}.lock", "a+")
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                f.close()
                continue
            try:
                yield True
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)
                f.close()
            return
        if should_stop():
            yield False
            return
        time.sleep(poll_s)


def execute_run(run_dir: Path, *, on_step: Callable[[int], None] | None = None) -> str:
    """Run the config in ``run_dir`` to the end and record the outcome. Returns the final status.

    Never raises for a failed run: the error is written to the status (``failed``) and the
    traceback to stderr (``worker.log`` for background runs). SIGTERM or the ``cancel`` marker stop
    it after the current step (``cancelled``); a KeyboardInterrupt (Ctrl-C in the CLI) is recorded
    as ``cancelled`` and re-raised.
    """
    run_dir = Path(run_dir).resolve()
    run_id = run_dir.name
    workspace = run_dir.parent.parent
    base = read_status(run_dir)
    created = base.get("created_at", time.time())
    stop_flag = {"signal": False}
    cancel_marker = run_dir / CANCEL_FILE

    def should_stop() -> bool:
        return stop_flag["signal"] or cancel_marker.exists()

    def on_term(signum, frame):  # finish the current step, then stop
        stop_flag["signal"] = True

    in_main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, on_term) if in_main else None
    try:
        return _execute(run_dir, run_id, workspace, created, base, should_stop, on_step)
    finally:
        if in_main:
            signal.signal(signal.SIGTERM, previous)


def _execute(run_dir: Path, run_id: str, workspace: Path, created: float, base: dict,
             should_stop: Callable[[], bool], on_step: Callable[[int], None] | None) -> str:
    status = {"created_at": created, "pid": os.getpid(), "step": 0, "total_steps": base.get("total_steps", 0)}
    write_status(run_dir, {**status, "status": "queued"})
    writer = None
    try:
        cfg = RunConfig.from_dict(read_json(run_dir / "config.json"))
        status["total_steps"] = cfg.train.steps
        with run_slot(workspace, should_stop) as got_slot:
            if not got_slot:
                write_status(run_dir, {**status, "status": "cancelled", "ended_at": time.time()})
                return "cancelled"
            status["started_at"] = time.time()
            write_status(run_dir, {**status, "status": "running"})
            writer = MetricsWriter(run_dir, run_id)
            last = {"t": 0.0}

            def progress(step: int) -> None:
                status["step"] = step
                now = time.monotonic()
                if (now - last["t"] >= STATUS_EVERY_S or step == cfg.train.steps
                        or step % cfg.train.eval_interval == 0):  # a new val_loss: show it with its samples
                    last["t"] = now
                    write_status(run_dir, {**status, "status": "running", "latest": writer.latest})
                if on_step is not None:
                    on_step(step)

            # imported here so that a queued worker holds no torch memory
            import torch

            from engine.train import fit

            if not cfg.train.num_threads:  # share the CPU cores between the runs that may train at once
                torch.set_num_threads(max(1, (os.cpu_count() or 1) // max_runs()))

            result = fit(cfg, run_dir, writer, should_stop=should_stop, on_step=progress, workspace=workspace)
            writer.close()
            final = "cancelled" if result.stopped else "completed"
            write_status(run_dir, {**status, "status": final, "step": result.steps_done, "ended_at": time.time(),
                                   "latest": writer.latest, "device": result.device, "n_params": result.n_params})
            return final
    except BaseException as e:  # record every failure, including KeyboardInterrupt in the CLI
        if writer is not None:
            try:
                writer.close()
            except Exception:
                traceback.print_exc()
        if isinstance(e, KeyboardInterrupt):
            write_status(run_dir, {**status, "status": "cancelled", "ended_at": time.time(),
                                   "latest": writer.latest if writer else {}})
            raise
        msg = str(e) if isinstance(e, MasklabError) else f"{type(e).__name__}: {e}"
        traceback.print_exc()
        write_status(run_dir, {**status, "status": "failed", "error": msg, "ended_at": time.time(),
                               "latest": writer.latest if writer else {}})
        return "failed"


def main(argv: list[str] | None = None) -> int:
    """``python -m engine.worker RUN_DIR``: exit code 0 when completed or cancelled, 1 when failed."""
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m engine.worker RUN_DIR", file=sys.stderr)
        return 2
    final = execute_run(Path(argv[0]))
    sys.stdout.flush()
    sys.stderr.flush()
    return 1 if final == "failed" else 0


if __name__ == "__main__":
    sys.exit(main())
