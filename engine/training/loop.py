"""The training loop: masked-modeling pre-training of one run, for any registered task.

``fit`` knows nothing about the modality (it drives an :class:`engine.tasks.Task`), nor about where
metrics go (it logs through a :class:`MetricsSink`) nor about processes (it polls ``should_stop``).
The worker (engine/runner/worker.py) and the foreground CLI wrap it.

Schedule (MAE, He et al. 2022, appendix A.1): AdamW (beta2 = 0.95, no weight decay on biases,
norms, tokens), linear warmup then half-cycle cosine. Step 0 is evaluated before any update, so
the val-loss curve starts at the untrained model. One state (model, optimiser, step, generators,
data order, task state) makes a checkpoint and resumes from it, as in Lightning Fabric.
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Protocol

import torch

from engine.config import RunConfig
from engine.runner.torchrun import SINGLE, DistContext, mask_seed
from engine.errors import ConfigError, DamagedFileError, NonFiniteLossError
from engine.masking import ratio_at
from engine.models import count_parameters
from engine.training.perf import adamw, count_step_flops, mfu, peak_flops
from engine.runner.resume import TASK_INFO, check_same_data  # task.json: what the task reports of its data
from engine.training.schedule import lr_at
from engine.store.checkpoints import load_checkpoint_state, load_weights, save_checkpoint
from engine.store.samples import save_samples
from engine.tasks import build_task
from engine.workspace import atomic_write_json



class MetricsSink(Protocol):
    """Where the loop sends metrics: ``log`` every step, ``flush`` before slow work."""

    def log(self, step: int, metrics: dict[str, float]) -> None: ...

    def flush(self) -> None: ...


@dataclass
class FitResult:
    """Outcome of :func:`fit`. ``stopped`` is True when ``should_stop`` ended it early."""

    steps_done: int
    stopped: bool
    val_loss_first: float
    val_loss_last: float
    device: str
    n_params: int


def resolve_device(name: str) -> torch.device:
    """``auto`` -> CUDA when available, else CPU. Raises RuntimeError for ``cuda`` without a GPU."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("train.device is 'cuda' but no CUDA device is available; use 'auto' or 'cpu'")
    return torch.device(name)


#: Rows per length group, in batches (Hugging Face's ``LengthGroupedSampler`` uses 50 as well).
LENGTH_GROUP_BATCHES = 50


def epoch_order(n: int, batch: int, generator: torch.Generator, lengths: torch.Tensor | None = None,
                group_batches: int = LENGTH_GROUP_BATCHES) -> torch.Tensor:
    """One epoch's order of the train rows ``[0, n)``: ``[n]``, int32 (int64 from ``n >= 2**31``),
    read by the loop ``batch`` at a time.

    Without ``lengths``: ``torch.randperm(n)``. With ``lengths`` (int ``[n]``, e.g. real tokens per
    text; :meth:`engine.tasks.Task.train_lengths`), length-grouped batching: a random permutation
    is cut into groups of ``group_batches * batch`` rows, each group is sorted by length and cut into
    batches, and the full batches are shuffled. Every batch is still a random draw of rows (the
    rows of an epoch are the same; only which rows share a batch changes), but the rows of a
    batch have similar lengths, so a batch cut to its longest row (the text tasks' batching) carries
    little padding: on TREC (WordPiece 4000, batch 64) a training step costs about half as much CPU.
    The ``n % batch`` rows the loop leaves out at the end of the epoch are a random draw taken
    before the grouping (not the longest or shortest rows). References: Hugging Face Trainer's
    ``group_by_length`` (``LengthGroupedSampler``); fairseq's length-bucketed batches.

    Memory: the permutation is sorted group by group in place and the batches are shuffled into one
    new array, so at most two ``[n]`` arrays of 4 bytes a row exist at once (the order of a split of
    millions of texts is part of a training process's memory; issue 15).

    Args:
        n: number of train rows; batch: rows per batch (>= 1); generator: every random number.

    Raises:
        ValueError: ``lengths`` is not ``[n]``, or ``batch < 1``.
    """
    if batch < 1:
        raise ValueError(f"epoch_order: batch must be >= 1 (got {batch})")
    perm = torch.randperm(n, generator=generator, dtype=torch.int32 if n < 2**31 else torch.int64)
    if lengths is None:
        return perm
    if tuple(lengths.shape) != (n,):
        raise ValueError(f"epoch_order: lengths must be [n] = [{n}] (got {tuple(lengths.shape)})")
    full = n - n % batch
    size = max(1, group_batches) * batch
    for start in range(0, full, size):
        g = perm[start : min(start + size, full)]
        g.copy_(g[torch.argsort(lengths[g], stable=True)])
    out = torch.empty_like(perm)
    shuffle = torch.randperm(full // batch, generator=generator)
    torch.index_select(perm[:full].view(-1, batch), 0, shuffle, out=out[:full].view(-1, batch))
    out[full:] = perm[full:]
    return out


def param_groups(model: torch.nn.Module, weight_decay: float) -> list[dict]:
    """AdamW groups: weight decay on matrices only (not on biases, norms, tokens, 1-D params)."""
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        (no_decay if p.ndim < 2 or name.endswith("token") else decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def fit(
    cfg: RunConfig,
    out_dir: Path,
    sink: MetricsSink,
    *,
    should_stop: Callable[[], bool] = lambda: False,
    on_step: Callable[[int], None] | None = None,
    workspace=None,
    resume_from: Path | None = None,
    dist: DistContext = SINGLE,
) -> FitResult:
    """Train ``cfg`` and write checkpoints and reconstruction samples under ``out_dir``.

    Logged every step: ``loss`` (the objective on the masked units), ``lr``, ``mask_ratio`` (actual
    fraction masked; it follows ``masking.schedule``), ``loss/<term>`` for a mixed objective,
    ``throughput`` (samples/s), ``step_time`` (s), and on a GPU of :data:`engine.training.perf.GPU_PEAK_FLOPS`
    ``mfu`` (model FLOPs utilisation: a step's counted matmul FLOPs / step time / the datasheet peak of
    the step's dtype). At step 0, every ``train.eval_interval`` steps
    and at the end: the task's validation metrics (``val_loss`` and e.g. ``val_top1``) plus a
    reconstruction sample. The val loss always uses ``masking.ratio`` with fixed masks, so its
    curve stays comparable across a ratio schedule.

    Resume (``resume_from``, a complete checkpoint folder of this run): the model's weights, the
    optimiser, ``g_mask``, ``g_data``, the global torch RNG (and CUDA's), the data order (this
    epoch's permutation and the position in it) and the task's own state
    (:meth:`~engine.tasks.Task.state_dict`) are restored; the LR and mask-ratio schedules are pure
    functions of the step (:func:`engine.training.schedule.lr_at`, :func:`engine.masking.ratio_at`), so they
    continue too. Step 0's baselines and eval are not repeated; the first step logged is the
    checkpoint's step + 1; the sink is flushed before each checkpoint is written, so a run killed at
    any point resumes with no gap in its stored rows. With the same config, the run continues
    bit-identically on CPU (same thread count); a changed ``train.lr`` or ``train.steps`` takes
    effect from the next step.

    Args:
        cfg: validated run config.
        out_dir: the run folder (``checkpoints/`` and ``samples/`` are written there).
        sink: metrics destination.
        should_stop: polled once per step; True ends training after the current step.
        on_step: called with the number of completed steps after each step.
        resume_from: a checkpoint folder (``checkpoints/step-NNNNNNN``) to continue from; None trains
            from scratch.
        dist: this process's place in a data-parallel run (:mod:`engine.runner.torchrun`; the default is
            the single process). Every rank draws the same epoch order and takes its slice of each
            global batch of ``train.batch_size`` rows (so the rows of a step do not depend on the
            number of ranks), draws its masks from its own generator (seeded with
            :func:`engine.runner.torchrun.mask_seed`; rank 0's is the single process's), and its
            gradients are averaged by DistributedDataParallel. ``loss`` and the other step figures
            are averages over the ranks, ``throughput`` the global samples/s; stopping is agreed by
            all ranks each step. Only the writer rank evaluates and writes metrics, samples,
            checkpoints and ``task.json``; the others pass any ``sink`` (nothing is logged to it).

    Raises:
        NonFiniteLossError: the training or validation loss, or the weights at a checkpoint, became
            NaN or infinite (no checkpoint of that step is written).
        DatasetError, ConfigError: the dataset or the model configuration is unusable; on resume, the
            dataset's content changed since the run started.
        DamagedFileError: the checkpoint to resume from cannot be read.
        ConfigError: the effective batch (``min(train.batch_size, train rows)``) does not split over the ranks.
    """
    t = cfg.train
    out_dir = Path(out_dir)
    device = dist.device if dist.device is not None else resolve_device(t.device)
    if t.num_threads:
        torch.set_num_threads(t.num_threads)
    torch.manual_seed(t.seed)  # model init
    task = build_task(cfg, device, workspace)
    info = {"task": cfg.task, **task.run_info(), "device": str(device)}  # the dashboard shows the device while it trains
    if resume_from is not None:
        check_same_data(out_dir, info.get("dataset_hash") or "")
    if dist.writer:
        atomic_write_json(out_dir / TASK_INFO, info)
    model = task.model
    if t.compile:
        model.compile()  # in place: the state dict keeps its keys (no ``_orig_mod.`` prefix)
    # Fused AdamW (one kernel for every tensor) where the parameters allow it: engine.training.perf.adamw.
    opt = adamw(param_groups(model, t.weight_decay), lr=t.lr, betas=(0.9, 0.95))
    use_amp = device.type == "cuda" and t.amp
    g_mask = torch.Generator().manual_seed(mask_seed(t.seed, dist.rank))  # training masks, this rank's
    g_data = torch.Generator().manual_seed(t.seed + 1)  # batch order (the same on every rank)
    batch = task.batch_size  # the global batch
    if batch % dist.world_size:
        raise ConfigError(f"train.batch_size: the effective batch {batch} (min(train.batch_size, {task.n_train} train "
                          f"rows)) must split evenly over the {dist.world_size} training processes")
    share = batch // dist.world_size
    train_loss = dist.wrap(task)  # task.train_loss, under DistributedDataParallel when there are several ranks
    lengths = task.train_lengths() if t.group_by_length else None

    def new_epoch() -> torch.Tensor:
        return epoch_order(task.n_train, batch, g_data, lengths)

    def autocast():
        return torch.autocast(device.type, dtype=torch.bfloat16, enabled=use_amp)

    def evaluate(step: int) -> float:
        if not dist.writer:
            return float("nan")
        model.eval()
        with torch.no_grad(), autocast():
            metrics = task.evaluate()
            sample = task.sample(step)
        if sample is not None:
            save_samples(out_dir, sample)
        model.train()
        for k, v in metrics.items():
            if not math.isfinite(v):
                raise NonFiniteLossError(f"{k} became {v} at step {step}; lower train.lr (now {t.lr}) or check the data")
        sink.log(step, metrics)
        sink.flush()
        return metrics["val_loss"]

    def checkpoint(step: int) -> None:
        # A weight that became NaN/inf in this step's update leaves this step's loss finite (it was
        # computed before the update): never keep such a checkpoint as the "last good" one.
        bad = [name for name, p in model.named_parameters() if not bool(torch.isfinite(p).all())]
        if bad:
            raise NonFiniteLossError(f"the weights became NaN or infinite at step {step} ({bad[0]}"
                                     f"{f' and {len(bad) - 1} more' if len(bad) > 1 else ''}); no checkpoint of this "
                                     f"step was written; lower train.lr (now {t.lr}) or check the data")
        mask_states = dist.gather_state(g_mask.get_state())  # every rank's, so a resume continues each
        if not dist.writer:
            return
        # The rows up to this step are stored before its checkpoint exists: a kill between the two
        # would otherwise resume after rows that were never written (a gap in the curve).
        sink.flush()
        rng = {"g_mask": g_mask, "g_data": g_data, **({"g_mask_ranks": mask_states} if dist.world_size > 1 else {})}
        if device.type == "cuda":
            rng["cuda"] = torch.cuda.get_rng_state_all()
        save_checkpoint(out_dir, step, model, opt, cfg, rng, keep=t.keep_checkpoints,
                        loop={"perm": perm, "pos": pos, "val_first": val_first, "val_last": val_last},
                        task_state=task.state_dict())

    if resume_from is None:
        if dist.writer:
            with torch.no_grad():
                sink.log(0, task.baselines())
        val_first = val_last = evaluate(0)
        perm = new_epoch()
        pos = step = 0
    else:
        step, perm, pos, val_first, val_last = _restore(resume_from, task, opt, g_mask, g_data, device, dist)
    last_ckpt, stopped = step, False
    model.train()
    peak = peak_flops(device, torch.bfloat16 if use_amp else torch.float32)
    if peak:  # the global batch's FLOPs run on every rank's device: MFU over all of them
        peak *= dist.world_size
    step_flops = _count_flops(task, opt, device, batch, perm, autocast, cfg) if peak else None
    while step < t.steps:
        if dist.any(should_stop()):  # every rank stops at the same step
            stopped = True
            break
        t0 = time.perf_counter()
        if pos + batch > len(perm):
            perm = None  # the finished epoch's order goes before the next is drawn: one [n] array at a time
            perm, pos = new_epoch(), 0
        idx = perm[pos : pos + batch][dist.rank * share : (dist.rank + 1) * share].long()  # this rank's slice
        pos += batch
        lr = lr_at(step, base_lr=t.lr, min_lr=t.min_lr, warmup_steps=t.warmup_steps, total_steps=t.steps)
        for group in opt.param_groups:
            group["lr"] = lr
        with autocast():
            loss, logs = train_loss(idx, g_mask, ratio_at(cfg.masking, step, t.steps))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        task.after_step(step + 1)
        loss_v = float(loss.detach())  # syncs the device, so step_time is real
        logs = {k: float(v) for k, v in logs.items()}
        if dist.world_size > 1:  # the figures of the global batch: means over the ranks' equal slices
            loss_v, *values = dist.mean([loss_v, *logs.values()])
            logs = dict(zip(logs, values))
        if not math.isfinite(loss_v):
            raise NonFiniteLossError(
                f"loss became {loss_v} at step {step + 1}; lower train.lr (now {t.lr}) or check the data")
        dt = time.perf_counter() - t0
        step += 1
        if dist.writer:
            metrics = {"loss": loss_v, "lr": lr, **logs, "throughput": batch / dt, "step_time": dt}
            if step_flops:
                metrics["mfu"] = mfu(step_flops, dt, peak)
            sink.log(step, metrics)
        if step % t.eval_interval == 0 or step == t.steps:
            val_last = evaluate(step)
        if step % t.checkpoint_interval == 0 or step == t.steps:
            checkpoint(step)
            last_ckpt = step
        if on_step is not None and dist.writer:
            on_step(step)
    if stopped and step > last_ckpt:
        checkpoint(step)
    sink.flush()
    return FitResult(step, stopped, val_first, val_last, str(device), count_parameters(model))


def _count_flops(task, opt, device: torch.device, batch: int, perm: torch.Tensor, autocast, cfg) -> int | None:
    """Model FLOPs of one training step (:func:`engine.training.perf.count_step_flops`), measured once on a
    throwaway step over the first batch of ``perm``: its own mask generator, the global RNGs restored
    afterwards and the gradients cleared, so the run is the same as without it. None if it fails."""
    idx = perm[:batch].long() if len(perm) >= batch else torch.arange(min(batch, task.n_train))
    g = torch.Generator().manual_seed(cfg.train.seed)
    try:
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []), autocast():
            flops = count_step_flops(lambda: task.train_loss(idx, g, cfg.masking.ratio)[0])
    except Exception as e:  # a counting problem must never stop a run
        print(f"masklab: model FLOPs not counted ({type(e).__name__}: {e}); no mfu metric", file=sys.stderr)
        flops = None
    opt.zero_grad(set_to_none=True)
    return flops


def _restore(ckpt: Path, task, opt: torch.optim.Optimizer, g_mask: torch.Generator, g_data: torch.Generator,
             device: torch.device, dist: DistContext = SINGLE) -> tuple[int, torch.Tensor, int, float, float]:
    """Load checkpoint ``ckpt`` into the task's model, ``opt``, the generators, the global RNGs and
    the task's state. Returns ``(step, perm, pos, val_first, val_last)``.

    Rank ``r > 0`` of a data-parallel run takes its mask generator from ``rng.g_mask_ranks[r]``
    when the checkpoint was written by as many ranks; otherwise (the number of processes changed)
    it draws a fresh one from ``mask_seed(seed, r, step)``.

    The optimiser keeps the current config's hyperparameters (a resume may change
    ``train.weight_decay``); only its moments and step counts come from the checkpoint.

    Raises:
        DamagedFileError: unreadable files, or weights / optimiser state that do not fit the model.
    """
    state = load_checkpoint_state(ckpt)
    try:
        task.model.load_state_dict(load_weights(ckpt))
        settings = [{k: v for k, v in g.items() if k != "params"} for g in opt.param_groups]
        opt.load_state_dict(state["optimizer"])
    except (RuntimeError, ValueError, KeyError) as e:
        raise DamagedFileError(f"{ckpt}: does not fit this run's model ({str(e).splitlines()[0][:200]})") from None
    for group, kept in zip(opt.param_groups, settings):
        group.update(kept)
    rng, loop = state.get("rng", {}), state.get("loop") or {}
    step = int(state["step"])
    ranks = rng.get("g_mask_ranks") or []
    if dist.rank == 0:
        g_mask.set_state(rng["g_mask"])
    elif len(ranks) == dist.world_size:
        g_mask.set_state(ranks[dist.rank])
    else:
        g_mask.manual_seed(mask_seed(int(state["config"]["train"]["seed"]), dist.rank, step))
    g_data.set_state(rng["g_data"])
    task.load_state_dict(state.get("task") or {})
    perm, pos = loop.get("perm"), int(loop.get("pos", 0))
    if perm is None or len(perm) != task.n_train:
        print(f"masklab: checkpoint step {step} has no data order for {task.n_train} rows (written by an older "
              f"masklab); a new epoch order is drawn from the restored generator", file=sys.stderr)
        perm, pos = torch.empty(0, dtype=torch.long), 0  # the loop draws a new permutation at once
    nan = float("nan")
    val_first, val_last = float(loop.get("val_first", nan)), float(loop.get("val_last", nan))
    # Last, so nothing above (model build, loading) moves them: dropout etc. continue where they were.
    torch.set_rng_state(state["torch_rng"])
    if device.type == "cuda" and "cuda" in rng:
        torch.cuda.set_rng_state_all(rng["cuda"])
    return step, perm, pos, val_first, val_last  # int32 as saved (int64 from older checkpoints)
