"""The training loop: masked-modeling pre-training of one run, for any registered task.

As in litgpt: :func:`setup` builds one :class:`~engine.training.state.TrainState` (model,
optimiser, generators, data order, step, task state; a checkpoint is its ``state_dict``),
:func:`fit` runs the steps on it and :func:`validate` evaluates; :func:`train` is the three in a
row, what the worker and every torchrun rank call. The loop knows nothing about the modality (it
drives an :class:`engine.tasks.Task`), nor about files (it writes metrics, checkpoints, samples and
the task's run info through injected :class:`~engine.training.writers.Writers`), nor about
processes (it polls ``should_stop``).

Schedule (MAE, He et al. 2022, appendix A.1): AdamW (beta2 = 0.95, no weight decay on biases,
norms, tokens), linear warmup then half-cycle cosine. Step 0 is evaluated before any update, so
the val-loss curve starts at the untrained model.
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

from engine.config import RunConfig, vocab_shortfall
from engine.errors import ConfigError, DamagedFileError, NonFiniteLossError
from engine.models import count_parameters
from engine.pretrained.runs import recorded_init
from engine.store.checkpoints import load_checkpoint_state, load_weights
from engine.tasks import build_task
from engine.training.dist import SINGLE, DistContext, mask_seed
from engine.training.perf import adamw, count_rows_flops, mfu, mfu_basis, peak_flops
from engine.training.state import LENGTH_GROUP_BATCHES, TrainState, epoch_order  # noqa: F401 (documented here)
from engine.training.writers import MetricsSink, Writers  # noqa: F401 (MetricsSink: documented here)


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


def param_groups(model: torch.nn.Module, weight_decay: float) -> list[dict]:
    """AdamW groups: weight decay on matrices only (not on biases, norms, tokens, 1-D params)."""
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        (no_decay if p.ndim < 2 or name.endswith("token") else decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def setup(cfg: RunConfig, writers: Writers, *, workspace=None, resume_from: Path | None = None,
          dist: DistContext = SINGLE) -> TrainState:
    """Build the :class:`TrainState` of ``cfg`` in this process, and write the task's run info.

    The task built from ``train.seed`` (its model
    from the seeded global RNG), ``writers.info`` given the task's :meth:`~engine.tasks.Task.run_info`
    (writer rank only), the optimiser (fused AdamW where the parameters allow it,
    :func:`engine.training.perf.adamw`), ``g_mask`` (this rank's, :func:`engine.training.dist.mask_seed`)
    and ``g_data`` (``seed + 1``, the same on every rank), then either the first epoch's order or,
    with ``resume_from`` (a complete checkpoint folder of this run), everything
    :meth:`TrainState.load_state_dict` restores. With the same config, the run then continues
    bit-identically on CPU (same thread count); a changed ``train.lr`` or ``train.steps`` takes
    effect from the next step.

    Args:
        cfg: validated run config. writers: where the run info goes (and, on resume, what it is
            checked against). workspace: the datasets' workspace. dist: this process's place in a
            data-parallel run (the default is the single process).

    Raises:
        DatasetError, ConfigError: the dataset or the model configuration is unusable; on resume, the
            dataset's content changed since the run started.
        DamagedFileError: the checkpoint to resume from cannot be read or does not fit the model.
        ConfigError: the effective batch (``min(train.batch_size, train rows)``) does not split over the ranks.
    """
    t = cfg.train
    device = dist.device if dist.device is not None else resolve_device(t.device)
    if t.num_threads:
        torch.set_num_threads(t.num_threads)
    torch.manual_seed(t.seed)  # model init
    if resume_from is None:
        task = build_task(cfg, device, workspace)
    else:  # model.init_from as the run recorded it (its source may be gone; the checkpoint holds the weights)
        with recorded_init(Path(resume_from).parent.parent):
            task = build_task(cfg, device, workspace)
    info = {"task": cfg.task, **task.run_info(), "device": str(device),  # the dashboard shows the device while it trains
            **mfu_basis(device, t.amp)}  # and the peak its mfu is measured against
    if resume_from is not None:
        writers.info.check_resume(info)
    if dist.writer:
        writers.info.write(info)
        tok = cfg.data.tokenizer  # text tasks' (None elsewhere)
        if tok is not None and not cfg.model.init_from and (
                far := vocab_shortfall(tok.model_dump(), info.get("vocab_size"), cfg.data.dataset)):
            print(f"masklab: warning: {far}", file=sys.stderr)  # the worker log (Run detail says it too)
    if t.compile:
        task.model.compile()  # in place: the state dict keeps its keys (no ``_orig_mod.`` prefix)
    opt = adamw(param_groups(task.model, t.weight_decay), lr=t.lr, betas=(0.9, 0.95))
    g_mask = torch.Generator().manual_seed(mask_seed(t.seed, dist.rank))  # training masks, this rank's
    g_data = torch.Generator().manual_seed(t.seed + 1)  # batch order (the same on every rank)
    if task.batch_size % dist.world_size:
        raise ConfigError(f"train.batch_size: the effective batch {task.batch_size} (min(train.batch_size, "
                          f"{task.n_train} train rows)) must split evenly over the {dist.world_size} training processes")
    state = TrainState(cfg, task, opt, device, g_mask, g_data, dist, train_loss=dist.wrap(task),
                       lengths=task.train_lengths() if t.group_by_length else None)
    if resume_from is None:
        state.new_epoch()
    else:
        load_checkpoint(state, Path(resume_from))
    return state


def load_checkpoint(state: TrainState, ckpt: Path) -> None:
    """Restore ``state`` from the checkpoint folder ``ckpt`` (:meth:`TrainState.load_state_dict`).

    Raises:
        DamagedFileError: unreadable files, or weights / optimiser state that do not fit the model.
    """
    saved = load_checkpoint_state(ckpt)
    saved["model"] = load_weights(ckpt)
    try:
        state.load_state_dict(saved)
    except ValueError as e:
        raise DamagedFileError(f"{ckpt}: {e}") from None


def validate(state: TrainState, writers: Writers) -> float:
    """The task's validation metrics at ``state.step`` (``val_loss`` always uses ``masking.ratio``
    with fixed masks, so its curve stays comparable across a ratio schedule) and a reconstruction
    sample, logged and flushed. Returns ``val_loss``; NaN on a rank that does not write (it does
    not evaluate).

    Raises:
        NonFiniteLossError: a validation figure is NaN or infinite.
    """
    if not state.dist.writer:
        return float("nan")
    model, task = state.model, state.task
    model.eval()
    with torch.no_grad(), state.autocast():
        metrics = task.evaluate()
        sample = task.sample(state.step)
    if sample is not None:
        writers.samples.save(sample)
    model.train()
    for k, v in metrics.items():
        if not math.isfinite(v):
            raise NonFiniteLossError(f"{k} became {v} at step {state.step}; lower train.lr (now {state.cfg.train.lr}) "
                                     f"or check the data")
    writers.metrics.log(state.step, metrics)
    writers.metrics.flush()
    return metrics["val_loss"]


def checkpoint(state: TrainState, writers: Writers) -> None:
    """Save ``state`` through ``writers.checkpoints`` (writer rank; every rank must call it), after
    flushing the metrics: a kill between the two would otherwise resume after rows never written.

    Raises:
        NonFiniteLossError: a weight is NaN or infinite (no checkpoint of this step is written).
    """
    # A weight that became NaN/inf in this step's update leaves this step's loss finite (it was
    # computed before the update): never keep such a checkpoint as the "last good" one.
    bad = [name for name, p in state.model.named_parameters() if not bool(torch.isfinite(p).all())]
    if bad:
        raise NonFiniteLossError(f"the weights became NaN or infinite at step {state.step} ({bad[0]}"
                                 f"{f' and {len(bad) - 1} more' if len(bad) > 1 else ''}); no checkpoint of this "
                                 f"step was written; lower train.lr (now {state.cfg.train.lr}) or check the data")
    saved = state.state_dict()  # on every rank: it gathers the ranks' mask generators
    if not state.dist.writer:
        return
    writers.metrics.flush()
    writers.checkpoints.save(state.step, saved)


def fit(state: TrainState, writers: Writers, *, should_stop: Callable[[], bool] = lambda: False,
        on_step: Callable[[int], None] | None = None) -> FitResult:
    """Train ``state`` from ``state.step`` to ``train.steps``, writing only through ``writers``.

    A fresh state (step 0) first logs the task's baselines and :func:`validate` of the untrained
    model; a resumed one goes on at its step + 1 (step 0 is not repeated). Logged every step:
    ``loss`` (the objective on the masked units), ``lr``, ``mask_ratio`` (actual fraction masked; it
    follows ``masking.schedule``), ``loss/<term>`` for a mixed objective, ``throughput`` (samples/s),
    ``step_time`` (s), and on a GPU of :data:`engine.training.perf.GPU_PEAK_FLOPS` ``mfu`` (a step's
    counted matmul FLOPs / step time / the datasheet peak of its dtype). Every ``train.eval_interval``
    steps and at the end: :func:`validate`; every ``train.checkpoint_interval`` steps, at the end and
    at a stop: :func:`checkpoint`. With ``train.steps`` 0 (an imported model shown on a dataset,
    ``model.init_from``) step 0 is evaluated and checkpointed, nothing trained.

    With several ranks (``state.dist``, :mod:`engine.runner.torchrun`) every rank takes its slice of
    each global batch of ``train.batch_size`` rows, ``loss`` and the other step figures are means
    over the ranks, ``throughput`` the global samples/s, and stopping is agreed by all ranks each
    step. Only the writer rank evaluates and writes.

    Args:
        should_stop: polled once per step; True ends training after the current step.
        on_step: called with the number of completed steps after each step (writer rank).

    Raises:
        NonFiniteLossError: the training or validation loss, or the weights at a checkpoint, became
            NaN or infinite (no checkpoint of that step is written).
    """
    t, dist, task, opt, model = state.cfg.train, state.dist, state.task, state.optimizer, state.model
    if state.step == 0:
        if dist.writer:
            with torch.no_grad():
                writers.metrics.log(0, task.baselines())
        state.val_first = state.val_last = validate(state, writers)
    last_ckpt, stopped = state.step, False
    model.train()
    use_amp = state.device.type == "cuda" and t.amp
    peak = peak_flops(state.device, torch.bfloat16 if use_amp else torch.float32)
    if peak:  # the global batch's FLOPs run on every rank's device: MFU over all of them
        peak *= dist.world_size
    step_flops = _count_flops(state) if peak else None
    while state.step < t.steps:
        if dist.any(should_stop()):  # every rank stops at the same step
            stopped = True
            break
        t0 = time.perf_counter()
        idx = state.next_batch()  # this rank's slice
        lr = state.lr()
        for group in opt.param_groups:
            group["lr"] = lr
        with state.autocast():
            loss, logs = state.train_loss(idx, state.g_mask, state.mask_ratio())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        task.after_step(state.step + 1)
        loss_v = float(loss.detach())  # syncs the device, so step_time is real
        logs = {k: float(v) for k, v in logs.items()}
        if dist.world_size > 1:  # the figures of the global batch: means over the ranks' equal slices
            loss_v, *values = dist.mean([loss_v, *logs.values()])
            logs = dict(zip(logs, values))
        if not math.isfinite(loss_v):
            raise NonFiniteLossError(
                f"loss became {loss_v} at step {state.step + 1}; lower train.lr (now {t.lr}) or check the data")
        dt = time.perf_counter() - t0
        state.step += 1
        step = state.step
        if dist.writer:
            metrics = {"loss": loss_v, "lr": lr, **logs, "throughput": state.batch / dt, "step_time": dt}
            if step_flops:
                metrics["mfu"] = mfu(step_flops, dt, peak)
            writers.metrics.log(step, metrics)
        if step % t.eval_interval == 0 or step == t.steps:
            state.val_last = validate(state, writers)
        if step % t.checkpoint_interval == 0 or step == t.steps:
            checkpoint(state, writers)
            last_ckpt = step
        if on_step is not None and dist.writer:
            on_step(step)
    if stopped and state.step > last_ckpt or t.steps == 0:  # 0 steps: the initial model is the run's checkpoint
        checkpoint(state, writers)
    writers.metrics.flush()
    return FitResult(state.step, stopped, state.val_first, state.val_last, str(state.device), count_parameters(model))


def train(cfg: RunConfig, writers: Writers, *, should_stop: Callable[[], bool] = lambda: False,
          on_step: Callable[[int], None] | None = None, workspace=None, resume_from: Path | None = None,
          dist: DistContext = SINGLE) -> FitResult:
    """:func:`setup` then :func:`fit`: train ``cfg`` (from scratch, or from the checkpoint folder
    ``resume_from``), writing through ``writers`` (:func:`engine.training.writers.run_writers` for a
    run folder). Raises what :func:`setup` and :func:`fit` raise."""
    state = setup(cfg, writers, workspace=workspace, resume_from=resume_from, dist=dist)
    return fit(state, writers, should_stop=should_stop, on_step=on_step)


def _count_flops(state: TrainState) -> int | None:
    """Model FLOPs of one training step (:func:`engine.training.perf.count_step_flops`), measured once on a
    throwaway step over the first batch of ``state.perm``: its own mask generator, the global RNGs
    restored afterwards and the gradients cleared, so the run is the same as without it. None if it fails."""
    task, cfg, device, batch = state.task, state.cfg, state.device, state.batch
    idx = state.perm[:batch].long() if len(state.perm) >= batch else torch.arange(min(batch, task.n_train))

    def step_for(rows: int):
        g = torch.Generator().manual_seed(cfg.train.seed)
        return lambda: task.train_loss(idx[:rows], g, cfg.masking.ratio)[0]

    def free() -> None:
        state.optimizer.zero_grad(set_to_none=True)
        if device.type == "cuda":
            torch.cuda.empty_cache()

    try:
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []), state.autocast():
            flops, rows = count_rows_flops(step_for, len(idx), free)
        if rows < len(idx):
            print(f"masklab: model FLOPs counted on {rows} of the batch's {len(idx)} rows (the count's math "
                  "attention did not fit the whole batch) and scaled", file=sys.stderr)
    except Exception as e:  # a counting problem must never stop a run
        print(f"masklab: model FLOPs not counted ({type(e).__name__}: {e}); no mfu metric", file=sys.stderr)
        flops = None
    free()
    if device.type == "cuda":  # the run's peak memory is its training's, not this throwaway step's
        torch.cuda.reset_peak_memory_stats(device)
    return flops
