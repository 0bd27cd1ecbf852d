"""Training a stored run in this process: torch's threads and determinism, where it trains, and
:func:`train_here` (the single process, or a distributed run's writer rank). The worker imports this
only once it holds a slot, so a queued worker and the restart supervisor start without torch."""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path
from typing import Callable

import torch

from engine.errors import MasklabError, NonFiniteLossError, StorageError
from engine.runner.resources import PeakMemory, print_exc
from engine.store import MetricsWriter, read_status, write_status
from engine.training.dist import SINGLE
from engine.training.loop import train
from engine.training.writers import run_writers

STATUS_EVERY_S = 1.0


def configure_torch(threads: int, deterministic: bool) -> int:
    """Torch's CPU threads and ``train.deterministic`` (``torch.use_deterministic_algorithms`` and
    cuBLAS's fixed workspace, set before CUDA starts) for this process: the worker, or a rank. Returns the thread count torch now uses."""
    torch.set_num_threads(threads)
    if deterministic:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.backends.cudnn.benchmark = False
    if deterministic or torch.are_deterministic_algorithms_enabled():
        # only when it changes something: the call imports torch._inductor (1 to 2.5 s a process)
        torch.use_deterministic_algorithms(deterministic)
    return torch.get_num_threads()


def placement(launch) -> dict:
    """Where a run trains, for its status (Runs, Run detail): ``backend``, ``hosts``, ``processes``,
    and ``devices`` (``$CUDA_VISIBLE_DEVICES``, when set). ``launch``: the run's ``LaunchConfig``.
    A distributed run's writer rank replaces ``hosts`` and ``devices`` with every rank's once they
    have met (:func:`engine.runner.torchrun.run_ranks`)."""
    devices = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    return {"backend": launch.backend, "hosts": [socket.gethostname()], "processes": launch.world_size,
            **({"devices": [devices]} if devices else {})}


def train_here(run_dir: Path, cfg, should_stop: Callable[[], bool], *, on_step: Callable[[int], None] | None = None,
               resume_from: Path | None = None, dist=None, placement: dict | None = None) -> dict:
    """Train ``cfg`` in this process (the single process, or a distributed run's writer rank) with
    the run's metrics writer, writing the progress into ``status.json`` (its ``running`` status is
    the base) about every second and at each eval.

    Returns the outcome: ``status`` (``completed`` or ``cancelled``; ``failed`` or ``diverged``
    with ``error`` after an exception, whose traceback goes to stderr), ``steps_done``, ``device``,
    ``n_params`` (not after an exception), ``latest`` (the last value of each metric), ``step`` and
    ``peak_mem_bytes`` (the last progress) and ``placement`` (``placement`` merged into the status's).

    Raises:
        KeyboardInterrupt: after closing the writer (what was logged stays readable).
    """
    run_dir = Path(run_dir)
    status = read_status(run_dir)
    status["placement"] = {**status.get("placement", {}), **(placement or {})}
    writer = MetricsWriter(run_dir, run_dir.name)
    last = {"t": 0.0}
    memory = PeakMemory(cfg.train.device if cfg.train.device != "auto" else
                        ("cuda" if torch.cuda.is_available() else "cpu"))

    def progress(step: int) -> None:
        status["step"] = step
        status["peak_mem_bytes"] = memory.sample()  # /proc read: microseconds a step
        now = time.monotonic()
        if (now - last["t"] >= STATUS_EVERY_S or step == cfg.train.steps
                or step % cfg.train.eval_interval == 0):  # a new val_loss: show it with its samples
            last["t"] = now
            write_status(run_dir, {**status, "status": "running", "latest": writer.latest})
        if on_step is not None:
            on_step(step)

    write_status(run_dir, {**status, "status": "running"})
    try:
        result = train(cfg, run_writers(run_dir, writer, keep_checkpoints=cfg.train.keep_checkpoints),
                       should_stop=should_stop, on_step=progress, workspace=run_dir.parent.parent,
                       resume_from=resume_from, dist=dist or SINGLE)
        writer.close()
    except BaseException as e:
        try:
            writer.close(compact=False)  # keep what was logged; no compaction on a failing disk
        except Exception:
            print_exc()
        progress_now = {k: status[k] for k in ("step", "peak_mem_bytes", "placement") if k in status}
        if not isinstance(e, Exception):
            try:  # the exact step for the caller's final status (KeyboardInterrupt: cancelled)
                write_status(run_dir, {**status, "status": "running", "latest": writer.latest})
            except StorageError:
                pass
            raise
        print_exc()
        msg = str(e) if isinstance(e, MasklabError) else f"{type(e).__name__}: {e}"
        return {"status": "diverged" if isinstance(e, NonFiniteLossError) else "failed", "error": msg,
                "latest": writer.latest, **progress_now}
    return {"status": "cancelled" if result.stopped else "completed", "steps_done": result.steps_done,
            "device": result.device, "n_params": result.n_params, "latest": writer.latest,
            **{k: status[k] for k in ("step", "peak_mem_bytes", "placement") if k in status}}
