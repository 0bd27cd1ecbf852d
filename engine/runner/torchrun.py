"""Data-parallel training of one run on several processes, GPUs or nodes, under torchrun.

A run whose ``launch`` section asks for more than one process (:class:`engine.config.LaunchConfig`:
``nproc_per_node`` x ``nnodes``) still has one worker (:mod:`engine.runner.worker`): it takes the run lock,
waits for its turn and a slot, writes ``running``, and then, instead of training in its own process,
starts PyTorch's elastic launcher as its child (:func:`run_ranks`)::

    python -m torch.distributed.run --nproc_per_node N --max_restarts 0 \\
        (--standalone | --nnodes M --node_rank K --rdzv_backend c10d --rdzv_endpoint HOST:PORT --rdzv_id RUN_ID) \\
        -m engine.runner.rank RUN_DIR [--resume-from STEP]

Each rank (:func:`engine.runner.rank.rank_main`) joins the process group (NCCL on CUDA, gloo on CPU) and calls
:func:`engine.training.loop.train` with its :class:`DistContext`. Another node joins the same run with
``python -m engine join RUN_ID --node-rank K`` (:func:`join`): the same torchrun command with its own
node rank; it holds no lock and writes nothing.

Run identity stays the worker's run lock:

* **One writer.** The *writer rank* is local rank 0 of the launch that holds the lock (flagged by
  ``$MASKLAB_MAIN_NODE``; c10d may give it any global rank). It alone writes metrics, samples,
  checkpoints, ``task.json`` and the progress in ``status.json`` (its parent holds the lock and is
  idle meanwhile), and at the end :data:`RESULT_FILE`, the run's outcome. The worker records the
  final status from that file, never from exit codes: gloo may abort a rank at interpreter exit
  after a successful run (see ``../shared/docs/env-recipe.md``), so ranks leave with ``os._exit``
  right after ``destroy_process_group``.
* **Cancel** reaches the lock holder (the worker) as today; it makes sure the ``cancel`` marker
  exists, which every rank polls each step; the ranks agree to stop at the same step (an all-reduce
  of their flags), the writer checkpoints and records ``cancelled``. A torchrun that has not ended
  :data:`STOP_GRACE_S` seconds later (e.g. still waiting for a node that never came) is terminated.
* **Death.** torchrun dies with the worker and each rank with torchrun (``PR_SET_PDEATHSIG``), so
  no rank trains or writes once the lock is free: readers see ``interrupted``, as for one process.
  A rank that dies (OOM, a Python error) ends the run ``failed`` (resumable).
"""

from __future__ import annotations

import ctypes
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

from engine.errors import ConfigError, RunActiveError
from engine.runner.launcher import REPO_ROOT, worker_env
from engine.runner.resources import exit_reason, resolve_threads
from engine.runner.resume import RESUME_FIELD
from engine.store.runs import CANCEL_FILE, CONFIG_FILE, get_run, read_status
from engine.workspace import read_json, unlink_quietly, workspace_root

MAIN_NODE_ENV = "MASKLAB_MAIN_NODE"
#: The writer rank's record of how training ended: ``status`` (completed, cancelled, failed,
#: diverged), ``steps_done``, ``device``, ``n_params``, ``latest``, ``error``.
RESULT_FILE = "dist-result.json"
#: Seconds a cancelled run's torchrun may take to stop by itself before it is terminated.
STOP_GRACE_S = 60.0


# --- launching ----------------------------------------------------------------------------------------------


def torchrun_command(launch: dict, run_dir: Path, *, node_rank: int | None = None,
                     resume_from: int | None = None) -> list[str]:
    """The torchrun command line of one node of a run (see the module docstring).

    Args:
        launch: the run's resolved ``launch`` section (a dict). node_rank: this node's rank (default
        ``launch.node_rank``). resume_from: the checkpoint step the ranks continue from.
    """
    nnodes = int(launch.get("nnodes", 1))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(int(launch["nproc_per_node"])),
           "--max_restarts", "0"]
    if nnodes == 1:
        cmd.append("--standalone")
    else:
        rank = int(launch.get("node_rank", 0) if node_rank is None else node_rank)
        cmd += ["--nnodes", str(nnodes), "--node_rank", str(rank), "--rdzv_backend", "c10d",
                "--rdzv_endpoint", str(launch["rdzv_endpoint"]), "--rdzv_id", Path(run_dir).name]
    cmd += ["-m", "engine.runner.rank", str(run_dir)]
    if resume_from:
        cmd += ["--resume-from", str(int(resume_from))]
    return cmd


def die_with_parent(sig: int = signal.SIGKILL) -> None:
    """Ask the kernel to send ``sig`` to this process when its parent dies (Linux ``PR_SET_PDEATHSIG``);
    a no-op elsewhere."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, int(sig), 0, 0, 0)  # 1 = PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _start_torchrun(cmd: list[str], env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen(cmd, cwd=REPO_ROOT, env=env, stdin=subprocess.DEVNULL, close_fds=True,
                            preexec_fn=die_with_parent)


def _rank_env(launch: dict, threads: int, *, main: bool) -> dict[str, str]:
    env = worker_env(workspace_root())
    env[MAIN_NODE_ENV] = "1" if main else "0"
    env["OMP_NUM_THREADS"] = str(max(1, threads // int(launch["nproc_per_node"])))
    return env


def run_ranks(run_dir: Path, launch: dict, threads: int, resume_from: int | None,
              should_stop: Callable[[], bool], on_step: Callable[[int], None] | None = None) -> dict:
    """The worker's side of a distributed run: start torchrun for this (the main) node, wait for it,
    and return the writer rank's outcome (:data:`RESULT_FILE`, a dict with ``status``) with ``torchrun_exit``,
    torchrun's exit code (0: every rank of this node exited cleanly).

    ``threads``: the run's resolved ``train.num_threads``, shared by this node's ranks. While waiting,
    ``should_stop()`` (a SIGTERM, the cancel marker) makes sure the ``cancel`` marker exists (the
    ranks poll it), and terminates torchrun if it has not ended :data:`STOP_GRACE_S` s later.
    Without a result file the outcome is ``cancelled`` after a stop request (the ranks had not met
    yet, e.g. a node never came), else ``failed`` with the exit code (a rank died, the rendezvous
    failed); the reasons are in ``worker.log``. ``on_step`` is called with the step the
    writer rank last recorded in the status (the CLI's progress bar), at most every 0.2 s.
    """
    run_dir = Path(run_dir)
    result = run_dir / RESULT_FILE
    unlink_quietly(result)
    proc = _start_torchrun(torchrun_command(launch, run_dir, resume_from=resume_from),
                           _rank_env(launch, threads, main=True))
    stop_at = None
    try:
        while proc.poll() is None:
            if stop_at is None and should_stop():
                stop_at = time.monotonic()
                (run_dir / CANCEL_FILE).touch()
            elif stop_at is not None and time.monotonic() - stop_at > STOP_GRACE_S:
                proc.terminate()
                stop_at = float("inf")
            if on_step is not None:
                on_step(int(read_status(run_dir).get("step", 0)))
            time.sleep(0.2)
    except BaseException:  # KeyboardInterrupt in the CLI: ask the ranks to stop, wait for them
        (run_dir / CANCEL_FILE).touch()
        try:
            proc.wait(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            proc.kill()
        raise
    try:
        out = read_json(result)
    except (OSError, ValueError):
        out = None
    if not isinstance(out, dict) or "status" not in out:
        if stop_at is not None:  # cancelled before the ranks trained (e.g. while waiting for a node)
            return {"status": "cancelled", "steps_done": int(read_status(run_dir).get("step", 0)), "device": None,
                    "n_params": None, "torchrun_exit": proc.returncode}
        return {"status": "failed", "error": f"the training processes ended without a result (torchrun: "
                f"{exit_reason(proc.returncode)}); see the worker log", "torchrun_exit": proc.returncode}
    return {**out, "torchrun_exit": proc.returncode}


def join(run_dir: Path, node_rank: int) -> int:
    """Train node ``node_rank`` of a multi-node run with the node that holds it (``python -m engine
    join``): runs this node's torchrun to its end and returns its exit code. Holds no lock and
    writes nothing; start it on each other node, after a submit or a resume of the run.

    Raises:
        ConfigError: the run is not a multi-node run, or ``node_rank`` is not one of its other nodes.
        RunActiveError: the run is not queued or running (there is nothing to join: resume it first).
    """
    run_dir = Path(run_dir)
    raw = read_json(run_dir / CONFIG_FILE)
    launch = raw.get("launch") or {}
    nnodes = int(launch.get("nnodes", 1))
    if nnodes < 2:
        raise ConfigError(f"run {run_dir.name} trains on one node (launch.nnodes = {nnodes}); nothing to join")
    if not 0 <= node_rank < nnodes or node_rank == int(launch.get("node_rank", 0)):
        raise ConfigError(f"--node-rank {node_rank}: run {run_dir.name} has nodes 0..{nnodes - 1} and node "
                          f"{launch.get('node_rank', 0)} is the one that holds it; join with another rank")
    rec = get_run(run_dir.name, run_dir.parent.parent)
    if not rec.is_active:
        raise RunActiveError(f"run {run_dir.name} is {rec.status}: there is nothing to join; resume it "
                             f"(python -m engine resume {run_dir.name}), then join")
    resume_from = read_status(run_dir).get(RESUME_FIELD)
    threads = resolve_threads(raw.get("train", {}))
    proc = _start_torchrun(torchrun_command(launch, run_dir, node_rank=node_rank, resume_from=resume_from),
                           _rank_env(launch, threads, main=False))
    try:
        return proc.wait()
    except KeyboardInterrupt:
        proc.terminate()
        return proc.wait()
