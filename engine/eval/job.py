"""The evaluation of one kept checkpoint: what it computes (this module) and the job that runs it in
the background (:func:`run_job`, ``python -m engine.eval.job RUN_DIR [--step N]``).

What is measured, through the task seam only (:class:`engine.tasks.Task`), so every modality that
implements ``features`` / ``raw_features`` / ``evaluate`` is evaluated without a change here:

- **Representation quality** of frozen features (:mod:`engine.eval.representation`: linear probe,
  kNN k=20 cosine, k-means NMI/ARI, PCA/t-SNE maps) for three encoders, the same recipe on each:
  ``trained`` (the checkpoint), ``random_init`` (the same model at its initial weights: the run's
  own step 0, drawn from ``train.seed`` exactly as the run drew them) and ``raw_input``
  (:meth:`Task.raw_features`: pixels, TF-IDF...). ``chance`` is the share of val's most common
  class (what a constant guess scores). Train rows: the first ``evaluation.max_rows`` of the train
  split; val rows: the first ``evaluation.max_rows`` of the val split (rows are stored shuffled).
- **Reconstruction quality**: :meth:`Task.evaluate` at the checkpoint (``val_loss``; images
  ``val_mse``/``val_psnr`` on the masked patches; text ``val_top1``), on the run's fixed val masks;
  and :mod:`engine.eval.reconstruction` (images: SSIM on the masked patches and the whole image;
  audio: spectral error on the masked cells), each beside the task's trivial baselines.
- **Downstream**: a short fine-tune of the encoder with a linear head on the labelled train rows,
  val accuracy (:mod:`engine.eval.finetune`, ``evaluation.finetune_epochs``), from the checkpoint
  and, as its baseline, from the random init.
- **Cost**: the FLOPs of one training step (forward and backward, :mod:`engine.eval.flops`).

The job (:func:`run_job`) takes the run lock (so it never overlaps the run's own worker, a resume or
another evaluation of it), records ``evaluation/job.json`` (queued, running, completed or failed),
waits for a run slot like a training run (``$MASKLAB_MAX_RUNS``; its queue ticket is dated when it
was asked for) and writes the result through :mod:`engine.store.evaluations`. At the end of a run
the worker evaluates its final checkpoint itself, while it still holds its lock and slot
(``evaluation.auto``).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import numpy as np
import torch

from engine.config import RunConfig
from engine.errors import EvaluationError, MasklabError, RunLockedError
from engine.eval.finetune import finetune, finetune_inputs
from engine.eval.flops import train_step_flops
from engine.eval.reconstruction import reconstruction_quality
from engine.eval.representation import representation_figures
from engine.runner.queue import dequeue, run_slot
from engine.runner.resources import resolve_threads
from engine.store.checkpoints import checkpoint_complete, list_checkpoints, load_weights
from engine.store.evaluations import Evaluation, read_job, save_evaluation, write_job
from engine.store.lock import RunLock
from engine.tasks import build_task
from engine.workspace import read_json


def _chance(y: np.ndarray) -> float:
    y = y[y >= 0]
    return float(np.bincount(y).max() / len(y)) if len(y) else float("nan")


def evaluate_checkpoint(run_dir: Path, step: int | None = None, *, device: str = "cpu",
                        workspace=None) -> tuple[Evaluation, dict[str, np.ndarray]]:
    """Evaluate the run's kept checkpoint at ``step`` (the latest when None); see the module docstring.

    Seeds the global torch RNG with ``train.seed`` to rebuild the initial model (it is left seeded).

    Returns:
        ``(evaluation, maps)``: the figures, and the trained encoder's 2-D val maps (``pca``,
        ``tsne`` float32 ``[N, 2]``, ``labels`` int64 ``[N]``) for :func:`save_evaluation`.

    Raises:
        EvaluationError: no complete checkpoint (at ``step``), the dataset changed since the run
            (content hash differs from ``task.json``), no labels to probe, no raw-input features.
    """

    run_dir = Path(run_dir)
    t0 = time.time()
    ckpts = [p for p in list_checkpoints(run_dir) if checkpoint_complete(p)]
    if step is not None:
        ckpts = [p for p in ckpts if int(p.name.split("-")[1]) == step]
    if not ckpts:
        at = "" if step is None else f" at step {step}"
        raise EvaluationError(f"run {run_dir.name} has no complete checkpoint{at} to evaluate")
    ckpt = ckpts[-1]
    step = int(ckpt.name.split("-")[1])
    cfg = RunConfig.from_dict(read_json(run_dir / "config.json"))
    ev_cfg = cfg.evaluation
    torch.manual_seed(cfg.train.seed)  # the run's own initial weights
    task = build_task(cfg, torch.device(device), workspace)
    try:
        before = read_json(run_dir / "task.json").get("dataset_hash") or ""
    except (OSError, ValueError, AttributeError):
        before = ""  # a run of an older masklab: nothing to compare
    now = task.run_info().get("dataset_hash") or ""
    if before and now and before != now:
        raise EvaluationError(f"run {run_dir.name}: its dataset {cfg.data.dataset!r} changed since the run trained "
                              f"(content hash {before[:12]}, now {now[:12]}); its checkpoint cannot be evaluated on "
                              f"other data")
    n = ev_cfg.max_rows
    seed = cfg.train.seed
    cost = train_step_flops(task, seed)  # shapes only: the initial weights count as any
    ft_inputs = finetune_inputs(task, n) if ev_cfg.finetune_epochs else None
    downstream, notes = {}, []
    if ev_cfg.finetune_epochs and ft_inputs is None:
        notes.append(f"no fine-tune: task {task.name!r} gives no fine-tune inputs (Task.finetune_inputs)")
    if ft_inputs is not None:
        downstream["random_init"] = finetune(task.model, ft_inputs, seed=seed, epochs=ev_cfg.finetune_epochs).figures()
    task.model.eval()
    with torch.no_grad():
        random_init = (task.features("train", n), task.features("val", n))
        raw = task.raw_features(n)
        task.model.load_state_dict(load_weights(ckpt))
        task.model.eval()
        trained = (task.features("train", n), task.features("val", n))
        recon = {k: float(v) for k, v in task.evaluate().items()}
        quality = reconstruction_quality(task)
    if ft_inputs is not None:
        downstream = {"trained": finetune(task.model, ft_inputs, seed=seed, epochs=ev_cfg.finetune_epochs).figures(),
                      **downstream}
    out = {"trained": representation_figures(*trained, seed=seed, tsne_max_rows=ev_cfg.tsne_max_rows)}
    out["random_init"] = representation_figures(*random_init, seed=seed, maps=False)
    out["raw_input"] = representation_figures(*raw, seed=seed, maps=False)
    rep = {k: r.figures for k, r in out.items()}
    chance = _chance(trained[1][1])
    rep["chance"] = {"probe_acc": chance, "knn_acc": chance}
    yva = trained[1][1]
    ev = Evaluation(step=step, representation=rep, reconstruction=recon,
                    rows={"train": int((trained[0][1] >= 0).sum()), "val": int((yva >= 0).sum()),
                          "dim": int(trained[0][0].shape[1])},
                    seconds=round(time.time() - t0, 3), created_at=time.time(), downstream=downstream,
                    quality=quality, cost=cost, notes=notes)
    maps = dict(out["trained"].maps)
    if maps:
        maps["labels"] = yva[yva >= 0]
    return ev, maps


def evaluate_and_save(run_dir: Path, step: int | None = None, *, device: str = "cpu", workspace=None) -> Evaluation:
    """:func:`evaluate_checkpoint`, then store it (the caller holds the run lock) and record the job
    state (``running`` -> ``completed`` or ``failed`` with the error). Returns the evaluation.

    Raises:
        EvaluationError, StorageError: as :func:`evaluate_checkpoint` / :func:`save_evaluation`
            (recorded in ``job.json`` first).
    """
    started = time.time()
    write_job(run_dir, status="running", step=step, pid=os.getpid(), started_at=started)
    try:
        ev, maps = evaluate_checkpoint(run_dir, step, device=device, workspace=workspace)
        labels = maps.pop("labels", None)
        save_evaluation(run_dir, ev, maps, labels)
    except BaseException as e:
        msg = str(e) if isinstance(e, MasklabError) else f"{type(e).__name__}: {e}"
        write_job(run_dir, status="failed", step=step, error=msg, started_at=started, ended_at=time.time())
        raise
    write_job(run_dir, status="completed", step=ev.step, started_at=started, ended_at=time.time(),
              seconds=ev.seconds)
    return ev


def run_job(run_dir: Path, step: int | None = None) -> int:
    """The background evaluation job: run lock, queue ticket, run slot, :func:`evaluate_and_save`.

    Returns an exit code: 0 done, 1 failed (the reason in ``job.json`` and on stderr), 2 the run
    lock is held by another process (its worker or another job; nothing written).
    """
    run_dir = Path(run_dir).resolve()
    workspace = run_dir.parent.parent
    lock = RunLock(run_dir)
    try:
        lock.acquire()
    except RunLockedError as e:
        print(f"masklab: {e}", file=sys.stderr)
        return 2
    try:
        queued_at = float((read_job(run_dir.name, workspace) or {}).get("queued_at") or time.time())
        with run_slot(workspace, run_dir, lambda: False, queued_at=queued_at):
            torch.set_num_threads(resolve_threads(read_json(run_dir / "config.json").get("train", {})))
            evaluate_and_save(run_dir, step, workspace=workspace)
        return 0
    except Exception as e:  # noqa: BLE001 - recorded in job.json by evaluate_and_save
        print(f"masklab: evaluation of run {run_dir.name} failed: {e}", file=sys.stderr)
        return 1
    finally:
        dequeue(workspace, run_dir.name)
        lock.release()


def main(argv: list[str] | None = None) -> int:
    """``python -m engine.eval.job RUN_DIR [--step N]``: exit codes as :func:`run_job`."""
    args = sys.argv[1:] if argv is None else argv
    step = None
    if "--step" in args:
        i = args.index("--step")
        step = int(args[i + 1])
        args = args[:i] + args[i + 2:]
    if len(args) != 1:
        print("usage: python -m engine.eval.job RUN_DIR [--step N]", file=sys.stderr)
        return 2
    return run_job(Path(args[0]), step)


if __name__ == "__main__":
    sys.exit(main())
