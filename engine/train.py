"""The training loop: masked-modeling pre-training of one run, for any registered task.

``fit`` knows nothing about the modality (it drives an :class:`engine.tasks.Task`), nor about where
metrics go (it logs through a :class:`MetricsSink`) nor about processes (it polls ``should_stop``).
The worker (engine/worker.py) and the foreground CLI wrap it.

Schedule (MAE, He et al. 2022, appendix A.1): AdamW (beta2 = 0.95, no weight decay on biases,
norms, tokens), linear warmup then half-cycle cosine. Step 0 is evaluated before any update, so
the val-loss curve starts at the untrained model.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Protocol

import torch

from engine.checks import check_run
from engine.config import RunConfig
from engine.errors import NonFiniteLossError
from engine.masking import ratio_at
from engine.models import count_parameters
from engine.schedule import lr_at
from engine.store.checkpoints import save_checkpoint
from engine.store.samples import save_samples
from engine.tasks import build_task
from engine.workspace import atomic_write_json

TASK_INFO = "task.json"  # what the task reports of its data (dataset hash, tokenizer id...), see Task.run_info


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
) -> FitResult:
    """Train ``cfg`` and write checkpoints and reconstruction samples under ``out_dir``.

    Logged every step: ``loss`` (the objective on the masked units), ``lr``, ``mask_ratio`` (actual
    fraction masked; it follows ``masking.schedule``), ``loss/<term>`` for a mixed objective,
    ``throughput`` (samples/s), ``step_time`` (s). At step 0, every ``train.eval_interval`` steps
    and at the end: the task's validation metrics (``val_loss`` and e.g. ``val_top1``) plus a
    reconstruction sample. The val loss always uses ``masking.ratio`` with fixed masks, so its
    curve stays comparable across a ratio schedule.

    Args:
        cfg: validated run config.
        out_dir: the run folder (``checkpoints/`` and ``samples/`` are written there).
        sink: metrics destination.
        should_stop: polled once per step; True ends training after the current step.
        on_step: called with the number of completed steps after each step.

    Raises:
        NonFiniteLossError: the training loss became NaN or infinite.
        DatasetError, ConfigError: the dataset or the model configuration is unusable.
    """
    t = cfg.train
    out_dir = Path(out_dir)
    check_run(cfg, workspace)
    device = resolve_device(t.device)
    if t.num_threads:
        torch.set_num_threads(t.num_threads)
    torch.manual_seed(t.seed)  # model init
    task = build_task(cfg, device, workspace)
    atomic_write_json(out_dir / TASK_INFO, {"task": cfg.task, **task.run_info()})
    model = task.model
    opt = torch.optim.AdamW(param_groups(model, t.weight_decay), lr=t.lr, betas=(0.9, 0.95))
    use_amp = device.type == "cuda" and t.amp
    g_mask = torch.Generator().manual_seed(t.seed)  # training masks
    g_data = torch.Generator().manual_seed(t.seed + 1)  # batch order
    batch = task.batch_size

    def autocast():
        return torch.autocast(device.type, dtype=torch.bfloat16, enabled=use_amp)

    def evaluate(step: int) -> float:
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
        save_checkpoint(out_dir, step, model, opt, cfg, {"g_mask": g_mask.get_state(), "g_data": g_data.get_state()},
                        keep=t.keep_checkpoints)

    with torch.no_grad():
        sink.log(0, task.baselines())
    val_first = val_last = evaluate(0)
    perm = torch.randperm(task.n_train, generator=g_data)
    pos, step, stopped = 0, 0, False
    model.train()
    while step < t.steps:
        if should_stop():
            stopped = True
            break
        t0 = time.perf_counter()
        if pos + batch > len(perm):
            perm, pos = torch.randperm(task.n_train, generator=g_data), 0
        idx = perm[pos : pos + batch]
        pos += batch
        lr = lr_at(step, base_lr=t.lr, min_lr=t.min_lr, warmup_steps=t.warmup_steps, total_steps=t.steps)
        for group in opt.param_groups:
            group["lr"] = lr
        with autocast():
            loss, logs = task.train_loss(idx, g_mask, ratio_at(cfg.masking, step, t.steps))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        task.after_step(step + 1)
        loss_v = float(loss.detach())  # syncs the device, so step_time is real
        if not math.isfinite(loss_v):
            raise NonFiniteLossError(
                f"loss became {loss_v} at step {step + 1}; lower train.lr (now {t.lr}) or check the data")
        dt = time.perf_counter() - t0
        step += 1
        sink.log(step, {"loss": loss_v, "lr": lr, **{k: float(v) for k, v in logs.items()},
                        "throughput": batch / dt, "step_time": dt})
        if step % t.eval_interval == 0 or step == t.steps:
            val_last = evaluate(step)
        if step % t.checkpoint_interval == 0 or step == t.steps:
            checkpoint(step)
        if on_step is not None:
            on_step(step)
    if stopped and step > 0:
        checkpoint(step)
    sink.flush()
    return FitResult(step, stopped, val_first, val_last, str(device), count_parameters(model))
