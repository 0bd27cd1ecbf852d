"""Data-parallel training of one run on several processes, GPUs or nodes, under torchrun.

A run whose ``launch`` section asks for more than one process (:class:`engine.config.LaunchConfig`:
``nproc_per_node`` x ``nnodes``) still has one worker (:mod:`engine.runner.worker`): it takes the run lock,
waits for its turn and a slot, writes ``running``, and then, instead of training in its own process,
starts PyTorch's elastic launcher as its child (:func:`run_ranks`)::

    python -m torch.distributed.run --nproc_per_node N --max_restarts 0 \\
        (--standalone | --nnodes M --node_rank K --rdzv_backend c10d --rdzv_endpoint HOST:PORT --rdzv_id RUN_ID) \\
        -m engine.runner.torchrun RUN_DIR [--resume-from STEP]

Each rank (:func:`rank_main`) joins the process group (NCCL on CUDA, gloo on CPU) and calls
:func:`engine.training.loop.fit` with its :class:`DistContext`. Another node joins the same run with
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

import hashlib
import os
import signal
import socket
import subprocess
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

MAIN_NODE_ENV = "MASKLAB_MAIN_NODE"
#: The writer rank's record of how training ended: ``status`` (completed, cancelled, failed,
#: diverged), ``steps_done``, ``device``, ``n_params``, ``latest``, ``error``.
RESULT_FILE = "dist-result.json"
#: Seconds a cancelled run's torchrun may take to stop by itself before it is terminated.
STOP_GRACE_S = 60.0


def mask_seed(seed: int, rank: int, step: int = 0) -> int:
    """Seed of the training-mask generator of ``rank`` (from step ``step`` on).

    Rank 0 at step 0 gets ``seed`` itself, so a single-process run draws exactly the masks it
    always drew; every other (rank, step) gets a seed in ``[0, 2**63)`` from SHA-256 of
    ``(seed, rank, step)``: different streams per rank, the same on every re-run. ``step`` > 0 is
    used only when a resume changes the number of ranks (the checkpoint has no state for the new ones).
    """
    if rank == 0 and step == 0:
        return int(seed)
    digest = hashlib.sha256(f"masklab-mask:{int(seed)}:{int(rank)}:{int(step)}".encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


@dataclass(frozen=True)
class DistContext:
    """This process's place in a run: ``rank`` of ``world_size`` processes, ``local_rank`` on its
    node, whether it is the ``writer`` (see the module docstring), and its ``device`` (None: from
    ``train.device``). The default is the single process: every method is then a no-op."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    writer: bool = True
    device: Any = None

    def any(self, flag: bool) -> bool:
        """True if ``flag`` is True on any rank (an all-reduce MAX; every rank must call it)."""
        if self.world_size == 1:
            return bool(flag)
        import torch
        import torch.distributed as tdist

        t = torch.tensor([1.0 if flag else 0.0], device=self._comm_device())
        tdist.all_reduce(t, op=tdist.ReduceOp.MAX)
        return bool(t.item() > 0)

    def mean(self, values: list[float]) -> list[float]:
        """Each value averaged over the ranks (one all-reduce; every rank must call it)."""
        if self.world_size == 1:
            return list(values)
        import torch
        import torch.distributed as tdist

        t = torch.tensor(values, dtype=torch.float64 if self._comm_device().type == "cpu" else torch.float32,
                         device=self._comm_device())
        tdist.all_reduce(t)
        return (t / self.world_size).tolist()

    def gather_state(self, state) -> list:
        """Every rank's ``state`` (a CPU tensor, e.g. a generator state), in rank order; every rank must call it."""
        if self.world_size == 1:
            return [state]
        import torch.distributed as tdist

        out: list = [None] * self.world_size
        tdist.all_gather_object(out, state)
        return out

    def wrap(self, task) -> Callable:
        """``task.train_loss``, under DistributedDataParallel when there are several ranks: the
        task's model is held by a module whose forward is the task's loss, so DDP averages the
        gradients of every task without the task knowing (``find_unused_parameters``: a task may
        leave some parameters out of a step)."""
        if self.world_size == 1:
            return task.train_loss
        import torch
        from torch.nn.parallel import DistributedDataParallel

        class TaskStep(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.model = task.model  # registered: DDP syncs and averages its parameters

            def forward(self, idx, generator, ratio):
                return task.train_loss(idx, generator, ratio)

        on_cuda = self._comm_device().type == "cuda"
        return DistributedDataParallel(TaskStep(), device_ids=[self._comm_device()] if on_cuda else None,
                                       find_unused_parameters=True)

    def _comm_device(self):
        import torch

        return self.device if self.device is not None else torch.device("cpu")


SINGLE = DistContext()


class NullSink:
    """The metrics sink of the ranks that do not write (:class:`engine.training.loop.MetricsSink`)."""

    def log(self, step: int, metrics: dict[str, float]) -> None:
        pass

    def flush(self) -> None:
        pass


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
    cmd += ["-m", "engine.runner.torchrun", str(run_dir)]
    if resume_from:
        cmd += ["--resume-from", str(int(resume_from))]
    return cmd


def _die_with_parent(sig: int = signal.SIGKILL) -> None:
    """Ask the kernel to send ``sig`` to this process when its parent dies (Linux ``PR_SET_PDEATHSIG``);
    a no-op elsewhere."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, int(sig), 0, 0, 0)  # 1 = PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _start_torchrun(cmd: list[str], env: dict[str, str]) -> subprocess.Popen:
    from engine.runner.launcher import REPO_ROOT

    return subprocess.Popen(cmd, cwd=REPO_ROOT, env=env, stdin=subprocess.DEVNULL, close_fds=True,
                            preexec_fn=_die_with_parent)


def _rank_env(launch: dict, threads: int, *, main: bool) -> dict[str, str]:
    from engine.runner.launcher import worker_env
    from engine.workspace import workspace_root

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
    from engine.store.runs import CANCEL_FILE, read_status
    from engine.workspace import read_json, unlink_quietly

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
        from engine.runner.worker import exit_reason

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
    from engine.errors import ConfigError, RunActiveError
    from engine.runner.resume import RESUME_FIELD
    from engine.store.runs import CONFIG_FILE, get_run, read_status
    from engine.runner.worker import resolve_threads
    from engine.workspace import read_json

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


# --- one rank -----------------------------------------------------------------------------------------------


def rank_main(argv: list[str]) -> None:
    """``python -m engine.runner.torchrun RUN_DIR [--resume-from STEP]``: one rank, started by torchrun
    (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK`` and the rendezvous in its environment). Never returns:
    leaves with ``os._exit`` (0, or 1 after an error, whose traceback goes to stderr)."""
    import traceback

    _die_with_parent()
    run_dir = Path(argv[0]).resolve()
    resume_from = int(argv[argv.index("--resume-from") + 1]) if "--resume-from" in argv else None
    code = 1
    try:
        code = _rank(run_dir, resume_from)
    except BaseException:  # noqa: BLE001 - reported, then the process leaves at once
        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except OSError:
            pass
        os._exit(code)


def _rank(run_dir: Path, resume_from: int | None) -> int:
    import torch
    import torch.distributed as tdist

    from engine.config import RunConfig
    from engine.store.checkpoints import CKPT_DIR
    from engine.store.runs import CANCEL_FILE, CONFIG_FILE
    from engine.training.loop import fit
    from engine.runner.worker import configure_torch
    from engine.workspace import atomic_write_json, read_json

    # DDP's notice when a gradient's memory layout differs from its bucket's (e.g. a 1-channel
    # patch-embedding conv): a copy per step, not an error; it would fill the log of every run.
    warnings.filterwarnings("ignore", message="Grad strides do not match bucket view strides")
    cfg = RunConfig.from_dict(read_json(run_dir / CONFIG_FILE))
    rank, world, local = (int(os.environ[k]) for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK"))
    configure_torch(max(1, cfg.train.num_threads // cfg.launch.nproc_per_node), cfg.train.deterministic)
    cuda = cfg.train.device == "cuda" or (cfg.train.device == "auto" and torch.cuda.is_available())
    device = torch.device("cuda", local) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    tdist.init_process_group("nccl" if cuda else "gloo")
    main = os.environ.get(MAIN_NODE_ENV) == "1" and local == 0
    places: list = [None] * world
    tdist.all_gather_object(places, (main, socket.gethostname(), os.environ.get("CUDA_VISIBLE_DEVICES", "")))
    writer_rank = next((r for r, p in enumerate(places) if p[0]), 0)
    ctx = DistContext(rank, world, local, rank == writer_rank, device)
    stop = {"signal": False}
    signal.signal(signal.SIGTERM, lambda *_: stop.update(signal=True))
    marker = run_dir / CANCEL_FILE

    def should_stop() -> bool:
        return stop["signal"] or marker.exists()

    ckpt = run_dir / CKPT_DIR / f"step-{resume_from:07d}" if resume_from else None
    workspace = run_dir.parent.parent
    if not ctx.writer:  # an error here is this rank's (rank_main prints it); the writer records the run's
        fit(cfg, run_dir, NullSink(), should_stop=should_stop, workspace=workspace, resume_from=ckpt, dist=ctx)
        code = 0
    else:
        from engine.runner.worker import train_here

        hosts = sorted({p[1] for p in places})
        devices = sorted({p[2] for p in places if p[2]})
        placement = {"hosts": hosts, "processes": world, **({"devices": devices} if devices else {})}
        outcome = train_here(run_dir, cfg, should_stop, resume_from=ckpt, dist=ctx, placement=placement)
        atomic_write_json(run_dir / RESULT_FILE, outcome, what=f"the outcome of run {run_dir.name}")
        code = 0 if outcome["status"] in ("completed", "cancelled") else 1
    if code == 0:
        tdist.destroy_process_group()
    return code


if __name__ == "__main__":
    rank_main(sys.argv[1:])
