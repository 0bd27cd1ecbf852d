"""One rank of a data-parallel run: ``python -m engine.runner.rank RUN_DIR [--resume-from STEP]``,
started by torchrun (:mod:`engine.runner.torchrun`, which also describes the writer rank, cancel and death)."""

from __future__ import annotations

import os
import signal
import socket
import sys
import traceback
import warnings
from pathlib import Path

import torch
import torch.distributed as tdist

from engine.config import RunConfig
from engine.runner.execution import configure_torch, train_here
from engine.runner.torchrun import MAIN_NODE_ENV, RESULT_FILE, die_with_parent
from engine.store.checkpoints import CKPT_DIR
from engine.store.runs import CANCEL_FILE, CONFIG_FILE
from engine.training.dist import DistContext
from engine.training.loop import train
from engine.training.writers import NullSink, run_writers
from engine.workspace import atomic_write_json, read_json


def rank_main(argv: list[str]) -> None:
    """``python -m engine.runner.rank RUN_DIR [--resume-from STEP]``: one rank, started by torchrun
    (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK`` and the rendezvous in its environment). Never returns:
    leaves with ``os._exit`` (0, or 1 after an error, whose traceback goes to stderr)."""
    die_with_parent()
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
        train(cfg, run_writers(run_dir, NullSink()), should_stop=should_stop, workspace=workspace, resume_from=ckpt,
              dist=ctx)
        code = 0
    else:
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
