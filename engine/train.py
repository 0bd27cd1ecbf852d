"""The training loop: masked-autoencoder pre-training of one run.

``fit`` knows nothing about where metrics go (it logs through a :class:`MetricsSink`) nor about
processes (it polls ``should_stop``). The worker (engine/worker.py) and the foreground CLI wrap it.

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

import numpy as np
import torch

from engine.checks import check_run
from engine.config import RunConfig
from engine.data import load_dataset
from engine.errors import NonFiniteLossError
from engine.masking import draw_mask, get_masking, grid_shape, image_side_inputs, preview_masks, ratio_at
from engine.models import build_model, count_parameters
from engine.schedule import lr_at
from engine.store.checkpoints import save_checkpoint
from engine.store.samples import ReconSample, save_samples

EVAL_MAX_IMAGES = 2048  # val loss is averaged over at most this many fixed val images


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

    Logged every step: ``loss`` (MSE on masked patches), ``lr``, ``mask_ratio`` (actual fraction
    masked; it follows ``masking.schedule``), ``throughput`` (samples/s), ``step_time`` (s). At
    step 0, every ``train.eval_interval`` steps and at the end: ``val_loss`` plus a reconstruction
    sample. The val loss always uses ``masking.ratio`` with fixed masks, so its curve stays
    comparable across a ratio schedule.

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

    ds = load_dataset(cfg.data.dataset, workspace)
    x_train, _ = ds.tensors("train")
    x_val, y_val = ds.tensors("val")
    if len(x_val) == 0:  # tiny uploads may have no val split: evaluate on train images
        x_val, y_val = ds.tensors("train")
    image_shape = tuple(x_train.shape[1:])
    gh, gw = grid_shape(image_shape[1:], cfg.model.patch_size)

    model = build_model(cfg, image_shape).to(device)
    opt = torch.optim.AdamW(param_groups(model, t.weight_decay), lr=t.lr, betas=(0.9, 0.95))
    use_amp = device.type == "cuda" and t.amp
    x_train = x_train.to(device)
    x_eval = x_val[:EVAL_MAX_IMAGES].to(device)
    vis_x = x_val[: t.num_vis].to(device)
    vis_mask = preview_masks(cfg, image_shape, len(vis_x), images=x_val[: t.num_vis]).flatten(1).to(device)  # == UI

    def draw_masks(xb: torch.Tensor, g: torch.Generator, ratio: float) -> torch.Tensor:
        """``[len(xb), L]`` bool masks for a batch (side inputs such as superpixels from its images)."""
        side = image_side_inputs(cfg.masking, xb.float().cpu() if needs_images else None, cfg.model.patch_size)
        return draw_mask(cfg.masking, (len(xb), gh, gw), g, ratio=ratio, **side).flatten(1).to(device)

    needs_images = bool(get_masking(cfg.masking.strategy).needs)

    # The same val masks at every eval, drawn once (superpixels of the val images are computed once).
    g_eval = torch.Generator().manual_seed(t.seed + 10_000)
    eval_masks = [draw_masks(x_eval[i : i + 256], g_eval, cfg.masking.ratio) for i in range(0, len(x_eval), 256)]
    g_mask = torch.Generator().manual_seed(t.seed)  # training masks
    g_data = torch.Generator().manual_seed(t.seed + 1)  # batch order
    batch = min(t.batch_size, len(x_train))

    def autocast():
        return torch.autocast(device.type, dtype=torch.bfloat16, enabled=use_amp)

    @torch.no_grad()
    def evaluate(step: int) -> float:
        model.eval()
        total, n = 0.0, 0
        for i, mask in zip(range(0, len(x_eval), 256), eval_masks):
            xb = x_eval[i : i + 256]
            with autocast():
                loss, _ = model(xb, mask)
            total += float(loss) * len(xb)
            n += len(xb)
        with autocast():
            rec = model.reconstruct(vis_x, vis_mask)
        save_samples(out_dir, ReconSample(
            step=step, images=vis_x.float().cpu().numpy(), mask=vis_mask.view(-1, gh, gw).cpu().numpy(),
            pred_img=rec["pred_img"].float().cpu().numpy(), pasted=rec["pasted"].float().cpu().numpy(),
            labels=y_val[: len(vis_x)].numpy(), class_names=tuple(ds.info.class_names),
            patch_size=cfg.model.patch_size,
        ))
        model.train()
        val = total / max(n, 1)
        sink.log(step, {"val_loss": val})
        sink.flush()
        return val

    val_first = val_last = evaluate(0)
    perm = torch.randperm(len(x_train), generator=g_data)
    pos, step, stopped = 0, 0, False
    model.train()
    while step < t.steps:
        if should_stop():
            stopped = True
            break
        t0 = time.perf_counter()
        if pos + batch > len(perm):
            perm, pos = torch.randperm(len(x_train), generator=g_data), 0
        xb = x_train[perm[pos : pos + batch].to(device)]
        pos += batch
        mask = draw_masks(xb, g_mask, ratio_at(cfg.masking, step, t.steps))
        lr = lr_at(step, base_lr=t.lr, min_lr=t.min_lr, warmup_steps=t.warmup_steps, total_steps=t.steps)
        for group in opt.param_groups:
            group["lr"] = lr
        with autocast():
            loss, _ = model(xb, mask)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        loss_v = float(loss.detach())  # syncs the device, so step_time is real
        if not math.isfinite(loss_v):
            raise NonFiniteLossError(
                f"loss became {loss_v} at step {step + 1}; lower train.lr (now {t.lr}) or check the data")
        dt = time.perf_counter() - t0
        step += 1
        sink.log(step, {"loss": loss_v, "lr": lr, "mask_ratio": float(mask.float().mean()),
                        "throughput": batch / dt, "step_time": dt})
        if step % t.eval_interval == 0 or step == t.steps:
            val_last = evaluate(step)
        if step % t.checkpoint_interval == 0 or step == t.steps:
            save_checkpoint(out_dir, step, model, opt, cfg, {"g_mask": g_mask.get_state(), "g_data": g_data.get_state()},
                            keep=t.keep_checkpoints)
        if on_step is not None:
            on_step(step)
    if stopped and step > 0:
        save_checkpoint(out_dir, step, model, opt, cfg, {"g_mask": g_mask.get_state(), "g_data": g_data.get_state()},
                        keep=t.keep_checkpoints)
    sink.flush()
    return FitResult(step, stopped, val_first, val_last, str(device), count_parameters(model))
