"""The evaluation of one kept checkpoint: what it computes (this module) and the job that runs it in
the background (:func:`run_job`, ``python -m engine.eval.job RUN_DIR [--step N] [--budget X|full]``).

What is measured, through the task seam only (:class:`engine.tasks.Task`), so every modality that
implements ``features`` / ``raw_features`` / ``evaluate`` is evaluated without a change here:

- **Representation quality** of frozen features (:mod:`engine.eval.representation`: linear probe,
  kNN k=20 cosine, k-means NMI/ARI, PCA/t-SNE maps) for three encoders, the same recipe on each:
  ``trained`` (the checkpoint), ``random_init`` (the same model at its initial weights: the run's
  own step 0, drawn from ``train.seed`` exactly as the run drew them) and ``raw_input``
  (:meth:`Task.raw_features`: pixels, TF-IDF...). ``chance`` is the share of val's most common
  class (what a constant guess scores). Rows: at most ``evaluation.max_rows`` of each split, a seeded sample
  (:func:`engine.data.sampling.eval_rows`; not the first rows, which may hold a few classes only).
  Figures are a pure function of the features, labels and seed (``train.seed``; the raw input's
  :data:`RAW_INPUT_SEED`), so each is cached in the workspace by content
  (:func:`engine.store.evaluations.cached_figures`): the raw input's (and a shared random init's)
  are computed once per dataset, not once per run, and while the run trains (:mod:`engine.eval.prefetch`).
- **Reconstruction quality**: :meth:`Task.evaluate` at the checkpoint (``val_loss``; images
  ``val_mse``/``val_psnr`` on the masked patches; text ``val_top1``), on the run's fixed val masks;
  and :mod:`engine.eval.reconstruction` (images: SSIM on the masked patches and the whole image;
  audio: spectral error on the masked cells), each beside the task's trivial baselines.
- **Downstream**: a short fine-tune of the encoder with a linear head on the labelled train rows,
  val accuracy (:mod:`engine.eval.finetune`, ``evaluation.finetune_epochs``), from the checkpoint
  and, as its baseline, from the random init, the same number of steps each: what is left of the
  budget (:mod:`engine.eval.budget`, ``evaluation.budget``) once the phases above ran.
- **Cost**: the FLOPs of one training step (forward and backward, :mod:`engine.eval.flops`).

What the data cannot give is skipped and said, and the rest completes: on rows without two labelled
train classes and a labelled validation row (an unlabelled set, one class, no validation split:
:func:`engine.eval.representation.labels_problem`) the probe, kNN, k-means and fine-tune are not
computed (the 2-D map still is); raw-input features the data cannot give (a TF-IDF
without a word) leave that encoder out. Each is in ``Evaluation.skipped`` with its reason and in the notes.

The phases run in the order of :data:`engine.store.evaluations.PHASES`; each finished phase is stored
at once (a ``partial`` record), its progress goes to ``evaluation/job.json`` every few seconds
(:mod:`engine.eval.progress`), and a cancel keeps what was finished.

The job (:func:`run_job`) takes the run lock (so it never overlaps the run's own worker, a resume or
another evaluation of it), records ``evaluation/job.json`` (queued, running, completed, cancelled or failed),
waits for a run slot like a training run (``$MASKLAB_MAX_RUNS``; its queue ticket is dated when it
was asked for) and writes the result through :mod:`engine.store.evaluations`. At the end of a run
the worker evaluates its final checkpoint itself, while it still holds its lock and slot
(``evaluation.auto``).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from engine.config import RUN_BUDGET, RunConfig, parse_eval_budget
from engine.errors import EvaluationCancelled, EvaluationError, MasklabError, RunLockedError
from engine.eval.budget import EvalBudget, training_seconds
from engine.eval.figures import FIGURE_PHASES, PHASE_FIGURES, RAW_INPUT_SEED, encoder_figures
from engine.eval.finetune import STAT_ROWS, finetune, finetune_inputs, recipe_steps
from engine.eval.flops import train_step_flops
from engine.eval.prefetch import read_baselines
from engine.eval.progress import PHASES, EvalProgress
from engine.eval.reconstruction import reconstruction_quality
from engine.eval.representation import labels_problem, maps_2d, prepare, standardise
from engine.pretrained.runs import random_init_, recorded_init
from engine.runner.devices import run_gpus
from engine.runner.queue import dequeue, max_runs, run_slot
from engine.runner.resources import resolve_threads
from engine.store.checkpoints import checkpoint_complete, list_checkpoints, load_weights
from engine.store.evaluations import (
    Evaluation,
    cancel_requested,
    clear_cancel,
    read_job,
    save_evaluation,
    write_job,
)
from engine.store.lock import RunLock
from engine.store.metrics import read_run_table
from engine.store.runs import read_status
from engine.tasks import build_task
from engine.workspace import read_json


def _chance(y: np.ndarray) -> float:
    y = y[y >= 0]
    return float(np.bincount(y).max() / len(y)) if len(y) else float("nan")


def validated_at(run_dir: Path, step: int, cfg: RunConfig) -> dict[str, float]:
    """The validation figures (``val_*``) the run logged at ``step``: the training loop's
    :meth:`Task.evaluate` on the checkpoint's weights, the figures the evaluation would compute again.
    ``{}`` when it logged no ``val_loss`` there or validated under bfloat16 autocast (``train.amp``
    on a GPU)."""
    if cfg.train.amp and str(read_status(run_dir).get("device", "")).startswith("cuda"):
        return {}
    table, _ = read_run_table(run_dir)
    out: dict[str, float] = {}
    for s, k, v in zip(table.column("step").to_pylist(), table.column("key").to_pylist(), table.column("value").to_pylist()):
        if s == step and k.startswith("val_") and v is not None:
            out[k] = float(v)  # the last row of a step logged twice (a resume) wins
    return out if "val_loss" in out else {}


def evaluate_checkpoint(run_dir: Path, step: int | None = None, *, device: str = "cpu", workspace=None,
                        budget: float | str | None = RUN_BUDGET, progress: EvalProgress | None = None,
                        on_phase: Callable[[Evaluation, dict[str, np.ndarray]], None] | None = None,
                        wait: Callable[[], None] | None = None) -> tuple[Evaluation, dict[str, np.ndarray]]:
    """Evaluate the run's kept checkpoint at ``step`` (the latest when None); see the module docstring.

    Seeds the global torch RNG with ``train.seed`` to rebuild the initial model (it is left seeded).

    Args:
        budget: the share of the checkpoint's training time the evaluation may spend
            (:mod:`engine.eval.budget`); None: no limit; :data:`engine.config.RUN_BUDGET`: the run's
            ``evaluation.budget``.
        progress: reports the phases (:mod:`engine.eval.progress`) and stops the evaluation when
            cancelled; None: nothing is reported.
        on_phase: called with the evaluation so far (``status`` ``partial``) and the maps after each
            phase that adds figures (the job stores it, so finished phases survive a cancel).
        wait: called in the setup phase, before any figure (its time counts as the evaluation's): the
            worker waits there for the prefetch of the baselines' figures (:mod:`engine.eval.prefetch`).

    Returns:
        ``(evaluation, maps)``: the figures, and the trained encoder's 2-D val maps (``pca``,
        ``tsne`` float32 ``[N, 2]``, ``labels`` int64 ``[N]``) for :func:`save_evaluation`.

    Raises:
        EvaluationError: no complete checkpoint (at ``step``), or the dataset changed since the run
            (content hash differs from ``task.json``). What the data cannot give is skipped instead
            (module docstring).
        EvaluationCancelled: ``progress`` was cancelled (what ``on_phase`` received stands).
    """
    run_dir = Path(run_dir)
    t0 = time.time()
    progress = progress or EvalProgress(run_dir, step, quiet=True)
    progress.enter("setup")
    if wait is not None:
        wait()
    ckpts = [p for p in list_checkpoints(run_dir) if checkpoint_complete(p)]
    if step is not None:
        ckpts = [p for p in ckpts if int(p.name.split("-")[1]) == step]
    if not ckpts:
        at = "" if step is None else f" at step {step}"
        raise EvaluationError(f"run {run_dir.name} has no complete checkpoint{at} to evaluate")
    ckpt = ckpts[-1]
    step = int(ckpt.name.split("-")[1])
    progress.set_step(step)
    cfg = RunConfig.from_dict(read_json(run_dir / "config.json"))
    ev_cfg = cfg.evaluation
    torch.manual_seed(cfg.train.seed)  # the run's own initial weights
    with recorded_init(run_dir):  # the run's own record of its start: its source may be gone
        task = build_task(cfg, torch.device(device), workspace)
    random_init_(task, cfg.train.seed)  # a run from an imported model: its architecture's init, not the import
    try:
        before = read_json(run_dir / "task.json").get("dataset_hash") or ""
    except (OSError, ValueError, AttributeError):
        before = ""  # a run of an older masklab: nothing to compare
    now = task.run_info().get("dataset_hash") or ""
    if before and now and before != now:
        raise EvaluationError(f"run {run_dir.name}: its dataset {cfg.data.dataset!r} changed since the run trained "
                              f"(content hash {before[:12]}, now {now[:12]}); its checkpoint cannot be evaluated on "
                              f"other data")
    n, seed = ev_cfg.max_rows, cfg.train.seed
    plan = EvalBudget(ev_cfg.budget if budget == RUN_BUDGET else budget, training_seconds(run_dir, step))
    progress.set_budget(plan.budget_s)
    ev = Evaluation(step=step, representation={}, created_at=time.time(), status="partial",
                    cost=train_step_flops(task, seed))  # shapes only: the initial weights count as any
    ft_inputs = finetune_inputs(task, n) if ev_cfg.finetune_epochs and plan.fine_tunes else None
    if ev_cfg.finetune_epochs and plan.fine_tunes and ft_inputs is None:
        ev.notes.append(f"no fine-tune: task {task.name!r} gives no fine-tune inputs (Task.finetune_inputs)")
    init_state = {k: v.detach().clone() for k, v in task.model.state_dict().items()}
    maps: dict[str, np.ndarray] = {}

    def done(phase_maps: bool = False) -> None:  # a phase with figures ended: record it
        progress.leave()
        ev.phases = progress.phases_done
        ev.seconds = round(time.time() - t0, 3)
        if on_phase is not None:
            on_phase(ev, maps if phase_maps else {})

    progress.leave()
    progress.enter("features", total=5)
    pre = read_baselines(run_dir, now, n, workspace)  # the baselines' figures, prefetched while the run trained
    if torch.device(device).type != "cpu":
        pre.pop("random_init", None)  # computed on the CPU: its figures could differ in the last bits
    task.model.eval()
    random_init = raw = None
    classes, dataset = getattr(task, "class_names", ()), cfg.data.dataset
    with torch.no_grad():
        if "random_init" not in pre:
            random_init = [task.features("train", n)]
            progress.tick(1)
            random_init.append(task.features("val", n))
        progress.tick(2)
        # the rows' labels are every encoder's: with nothing to score, no raw-input features either
        unscored = labels_problem(random_init[0][1], random_init[1][1], classes, dataset) if random_init else None
        if "raw_input" not in pre and unscored is None:
            try:
                raw = task.raw_features(n)
            except EvaluationError as e:  # features this data cannot give (a TF-IDF without a word): left out
                ev.skipped["raw_input"] = str(e)
                ev.notes.append(f"no raw-input figures: {e}")
        progress.tick(3)
        task.model.load_state_dict(load_weights(ckpt))
        task.model.eval()
        t_rows = time.perf_counter()
        trained = [task.features("train", n)]
        progress.tick(4)
        trained.append(task.features("val", n))
        progress.tick(5)
        rows = len(trained[0][1]) + len(trained[1][1])
        row_s = (time.perf_counter() - t_rows) / max(rows, 1)
    yva = trained[1][1]
    unscored = labels_problem(trained[0][1], yva, classes, dataset)
    ev.rows = {"train": int((trained[0][1] >= 0).sum()), "val": int((yva >= 0).sum()),
               "dim": int(trained[0][0].shape[1])}
    done()
    progress.enter("reconstruction")
    with torch.no_grad():
        ev.reconstruction = validated_at(run_dir, step, cfg) or {k: float(v) for k, v in task.evaluate().items()}
        ev.quality = reconstruction_quality(task)
    done()
    if unscored is not None:  # nothing to score the features on: said, and the rest completes
        skipped = [*FIGURE_PHASES, *(["finetune"] if ft_inputs is not None else [])]
        ev.skipped.update(dict.fromkeys(skipped, unscored))
        ev.notes.append(f"not computed: {', '.join(PHASES[p] for p in skipped)}: {unscored}")
        ft_inputs = None
        progress.enter("map")
        (Xtr, ytr), (Xva, yva) = trained
        Xva, yva = Xva[yva >= 0], yva[yva >= 0]
        if len(Xva) >= 2:  # the trained features' map, standardised as the figures' features are
            maps.update(maps_2d(standardise(Xtr[ytr >= 0] if (ytr >= 0).any() else Xva, Xva)[1], seed,
                                ev_cfg.tsne_max_rows))
            maps["labels"] = yva
        done(phase_maps=True)
    else:
        prepared = _representation(ev, trained, random_init, raw, pre, progress, done, seed,
                                   workspace if workspace is not None else run_dir.parent.parent)
        progress.enter("map")
        maps.update(maps_2d(prepared[2], seed, ev_cfg.tsne_max_rows))
        if maps:
            maps["labels"] = yva[yva >= 0]
        done(phase_maps=True)
    if ft_inputs is not None and (unfit := labels_problem(ft_inputs.y_train, ft_inputs.y_val, classes, dataset)):
        ev.skipped["finetune"] = unfit  # its own rows hold too few labels
        ev.notes.append(f"no fine-tune: {unfit}")
        ft_inputs = None
    if ft_inputs is not None:
        if plan.train_s is None and plan.share is not None:
            ev.notes.append("the run recorded no training time: the fine-tune follows its full recipe, "
                            "with no budget")
        progress.enter("finetune")
        n_tr, n_va = int((ft_inputs.y_train >= 0).sum()), int((ft_inputs.y_val >= 0).sum())
        head_rows, after_rows = min(n_tr, STAT_ROWS), min(n_tr, STAT_ROWS) + n_va
        recipe = recipe_steps(ft_inputs, ev_cfg.finetune_epochs)
        plan.recipe_steps = recipe
        if not plan.room_for_finetune(time.time() - t0, row_s, head_rows + after_rows):
            ev.notes.append(_no_room(plan, run_dir.name, 2 * (head_rows + after_rows) * row_s))
        else:
            def fit(step_s: float, head_s: float, rows_s: float) -> int:  # after the trained encoder's first step
                steps = plan.plan_finetune(time.time() - t0, recipe, step_s, rows_s, after_rows, head_s=head_s,
                                           steps_done=1)
                progress.tick(1, total=2 * steps)
                return steps

            tune = {"seed": seed, "epochs": ev_cfg.finetune_epochs, "max_steps": recipe}
            progress.tick(0, total=2 * recipe)
            ev.downstream["trained"] = finetune(task.model, ft_inputs, **tune, plan=fit,
                                                on_step=lambda k, _: progress.tick(k)).figures()
            steps = plan.finetune_steps
            if on_phase is not None:  # the trained encoder's figure shows before the baseline's
                on_phase(ev, {})
            task.model.load_state_dict(init_state)
            ev.downstream["random_init"] = finetune(task.model, ft_inputs, **{**tune, "max_steps": steps},
                                                    on_step=lambda k, _: progress.tick(steps + k)).figures()
            if steps < plan.recipe_steps:
                ev.notes.append(f"fine-tune shortened by the budget: {steps} of the recipe's {plan.recipe_steps} "
                                f"steps ({plan.share:g} x {plan.train_s:.0f} s of training)")
        progress.leave()
    ev.budget = plan.figures()
    ev.phases = progress.phases_done
    ev.status = "complete"
    ev.seconds = round(time.time() - t0, 3)
    return ev, maps


def _no_room(plan: EvalBudget, run_id: str, rows_s: float) -> str:
    """The note of an evaluation whose cheap phases left the fine-tune no room in its budget."""
    if plan.train_s == 0:
        return (f"no fine-tune: the checkpoint is at step 0 (no training time for the budget to share); "
                f"ask for the full recipe (python -m engine evaluate {run_id} --budget full)")
    return (f"no fine-tune: the cheap phases spent {plan.cheap_s:.0f} s and the fine-tune's heads and figures "
            f"alone would take {rows_s:.0f} s of the budget's {plan.budget_s:.0f} s ({plan.share:g} x "
            f"{plan.train_s:.0f} s of training); ask for a larger budget (python -m engine evaluate {run_id} --budget 2)")


def _representation(ev: Evaluation, trained, random_init, raw, pre: dict, progress: EvalProgress,
                    done: Callable[[], None], seed: int, cache_at) -> tuple:
    """The probe, kNN and k-means phases (:data:`FIGURE_PHASES`) of each encoder into ``ev.representation``:
    from its features (``trained``, ``random_init``, ``raw``: ``(train, val)`` pairs of ``(X, y)``, None when
    prefetched or left out) or from the prefetched figures ``pre``; ``chance`` beside the probe and kNN.
    Returns the trained encoder's prepared features (:func:`engine.eval.representation.prepare`)."""
    feats = {"trained": prepare(*trained)}
    for enc, X in (("random_init", random_init), ("raw_input", raw)):
        if X is not None:
            feats[enc] = prepare(*X)
    yva = trained[1][1]
    chance = _chance(yva)
    encoders = ("trained", "random_init", "raw_input")
    ev.representation = {enc: {} for enc in encoders}
    seeds = {enc: RAW_INPUT_SEED if enc == "raw_input" else seed for enc in encoders}
    for phase in FIGURE_PHASES:
        progress.enter(phase, total=len(encoders))
        for i, enc in enumerate(encoders):
            if enc in feats:
                ev.representation[enc].update(encoder_figures(phase, feats[enc], seeds[enc], cache_at))
            elif enc in pre:  # prefetched: its figures of this phase, so a cancelled evaluation keeps the phases it ran
                ev.representation[enc].update({k: pre[enc][k] for k in PHASE_FIGURES[phase] if k in pre[enc]})
            progress.tick(i + 1)
        if phase == "probe":
            ev.representation["chance"] = {"probe_acc": chance}
        if phase == "knn":
            ev.representation["chance"]["knn_acc"] = chance
        done()
    return feats["trained"]


def evaluate_and_save(run_dir: Path, step: int | None = None, *, device: str = "cpu", workspace=None,
                      budget: float | str | None = RUN_BUDGET,
                      should_stop: Callable[[], bool] | None = None, wait: Callable[[], None] | None = None,
                      ) -> Evaluation:
    """:func:`evaluate_checkpoint` with its progress in ``job.json`` (:mod:`engine.eval.progress`),
    each finished phase stored as it ends, then the whole evaluation (the caller holds the run
    lock). The job ends ``completed``, ``cancelled`` (``should_stop`` turned true; the finished
    phases are kept, the record says ``cancelled``) or ``failed`` with the error; ``wait`` as
    :func:`evaluate_checkpoint`. Returns the evaluation.

    Raises:
        EvaluationError, StorageError: as :func:`evaluate_checkpoint` / :func:`save_evaluation`
            (recorded in ``job.json`` first).
        EvaluationCancelled: cancelled (recorded, with what was kept).
    """
    started = time.time()
    last: list[Evaluation] = []

    def store(ev: Evaluation, maps: dict[str, np.ndarray]) -> None:
        maps = dict(maps)
        labels = maps.pop("labels", None)
        save_evaluation(run_dir, ev, maps, labels)
        last[:] = [ev]

    progress = EvalProgress(run_dir, step, should_stop=should_stop, started_at=started, pid=os.getpid())
    try:
        with progress:
            ev, maps = evaluate_checkpoint(run_dir, step, device=device, workspace=workspace, budget=budget,
                                           progress=progress, on_phase=store, wait=wait)
            store(ev, maps)
    except BaseException as e:
        cancelled = isinstance(e, EvaluationCancelled)
        msg = str(e) if isinstance(e, MasklabError) else f"{type(e).__name__}: {e}"
        kept = list(progress.phases_done)
        if last:
            ev = last[0]
            ev.status = "cancelled" if cancelled else "failed"
            ev.notes.append(f"{'cancelled' if cancelled else 'failed'} during "
                            f"{PHASES.get(progress.phase or '', 'its start')}: {msg}")
            try:
                save_evaluation(run_dir, ev)
            except MasklabError:
                pass  # the record of the last finished phase stands
        write_job(run_dir, status="cancelled" if cancelled else "failed", step=step, error=msg, started_at=started,
                  ended_at=time.time(), phases_done=progress.phases_done, phase=progress.phase, kept=kept)
        raise
    write_job(run_dir, status="completed", step=ev.step, started_at=started, ended_at=time.time(),
              seconds=ev.seconds, phases_done=ev.phases)
    return ev


def job_device(slot: int, train: dict) -> str:
    """The device an evaluation job of run slot ``slot`` runs on: ``"cuda"`` on the slot's GPU (set as
    ``CUDA_VISIBLE_DEVICES`` before CUDA starts, as the worker does for a training run of that slot)
    when the run's ``train.device`` (a plain dict, as in ``config.json``) allows CUDA and CUDA is
    there; else ``"cpu"``."""
    gpus = run_gpus(slot, max_runs(), train, {"nproc_per_node": 1})
    if gpus:
        os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(gpus)
    return "cuda" if train.get("device", "auto") != "cpu" and torch.cuda.is_available() else "cpu"


def run_job(run_dir: Path, step: int | None = None, budget: float | str | None = RUN_BUDGET) -> int:
    """The background evaluation job: run lock, queue ticket, run slot, :func:`evaluate_and_save`
    on the slot's device (:func:`job_device`; with ``budget``, as :func:`evaluate_checkpoint`), stopped by
    :func:`engine.store.evaluations.request_cancel`.

    Returns an exit code: 0 done, 1 failed (the reason in ``job.json`` and on stderr), 2 the run
    lock is held by another process (its worker or another job; nothing written), 3 cancelled
    (the finished phases are kept).
    """
    run_dir = Path(run_dir).resolve()
    workspace = run_dir.parent.parent
    lock = RunLock(run_dir)
    try:
        lock.acquire()
    except RunLockedError as e:
        print(f"masklab: {e}", file=sys.stderr)
        return 2
    stop = lambda: cancel_requested(run_dir)  # noqa: E731
    try:
        queued_at = float((read_job(run_dir.name, workspace) or {}).get("queued_at") or time.time())
        with run_slot(workspace, run_dir, stop, queued_at=queued_at) as slot:
            if slot is None:  # cancelled while queued
                write_job(run_dir, status="cancelled", step=step, error="cancelled while queued",
                          ended_at=time.time())
                return 3
            train = read_json(run_dir / "config.json").get("train", {})
            torch.set_num_threads(resolve_threads(train))
            evaluate_and_save(run_dir, step, device=job_device(slot, train), workspace=workspace, budget=budget,
                              should_stop=stop)
        return 0
    except EvaluationCancelled as e:
        print(f"masklab: {e}", file=sys.stderr)
        return 3
    except Exception as e:  # noqa: BLE001 - recorded in job.json by evaluate_and_save
        print(f"masklab: evaluation of run {run_dir.name} failed: {e}", file=sys.stderr)
        return 1
    finally:
        clear_cancel(run_dir)
        dequeue(workspace, run_dir.name)
        lock.release()


def main(argv: list[str] | None = None) -> int:
    """``python -m engine.eval.job RUN_DIR [--step N] [--budget X]``: exit codes as :func:`run_job`."""
    args = list(sys.argv[1:] if argv is None else argv)
    opts: dict[str, str] = {}
    for flag in ("--step", "--budget"):
        if flag in args:
            i = args.index(flag)
            opts[flag] = args[i + 1]
            args = args[:i] + args[i + 2:]
    if len(args) != 1:
        print("usage: python -m engine.eval.job RUN_DIR [--step N] [--budget X|full]", file=sys.stderr)
        return 2
    step = int(opts["--step"]) if "--step" in opts else None
    try:
        budget = parse_eval_budget(opts.get("--budget", RUN_BUDGET))
    except MasklabError as e:
        print(f"masklab: {e}", file=sys.stderr)
        return 2
    return run_job(Path(args[0]), step, budget)


if __name__ == "__main__":
    sys.exit(main())
