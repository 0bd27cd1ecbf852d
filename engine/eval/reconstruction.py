"""Reconstruction figures of the evaluation job beyond the task's own ``evaluate()``, each next to the
task's trivial baselines on the same validation inputs and masks.

- **Images** (image MIM): SSIM (Wang et al. 2004; scikit-image's ``structural_similarity``,
  ``data_range`` 1) of the *pasted* reconstruction (visible pixels kept, masked patches predicted,
  what a viewer sees) against the original, on the first :data:`SSIM_MAX_ROWS` fixed validation
  images with the run's fixed validation masks:

  - ``ssim``: the SSIM map averaged over the pixels of the masked patches (every pixel's local
    SSIM, so a window that straddles a patch border sees the visible context too);
  - ``ssim_full``: scikit-image's mean SSIM of the whole image (its border-cropped mean).

  The window is 7x7 (scikit-image's default) for images of at least 14 pixels a side, else the
  largest odd size up to half the side, at least 3 (digits, 8x8: 3x3); colour channels are scored
  apart and averaged. Predictors: ``trained`` (the checkpoint's reconstruction) and every baseline
  of :mod:`engine.eval.image_baselines` (``mean_image``, ``visible_mean``, ``biharmonic``, ``knn``),
  pasted the same way. A ``norm_pix_loss`` run gets no figure (its pixels need the hidden patch's
  own statistics, see :meth:`engine.tasks.image.recipe.ImageMIMTask.evaluate`).
- **Audio** (audio MAE and frames): spectral error over the masked cells (mel bin x
  frame) of the clips, never the padding, on the task's fixed validation windows and masks:

  - ``spec_l1``, ``spec_mse``: mean absolute and squared error of the normalised log-mel (units of
    each bin's train standard deviation; ``spec_mse`` is the task's ``val_spec_mse``);
  - ``lsd_db``: log-spectral distance, the root mean square of ``10 log10`` mel-power differences, dB;
  - ``spectral_convergence``: ``||M - M^||_F / ||M||_F`` of mel magnitudes ``M = sqrt(power)``
    pooled over the masked cells (Arik et al. 2019), a fraction (0 is perfect; predicting silence
    scores about 1).

  Predictors: ``trained``, ``mean_spec`` (each bin's train mean) and ``interp_spec`` (linear
  interpolation in time between the nearest visible cells), the task's own baselines.

Results: ``{predictor: {figure: value}}``, from the task's
:meth:`~engine.tasks.Task.reconstruction_quality` hook (images: :func:`image_quality`; audio: its
task's, with :class:`SpectralSums`); ``{}`` for a task without figures of this kind (text:
masked-token top-1 is already the task's figure).

References: Wang et al. 2004, "Image quality assessment: from error visibility to structural
similarity"; Arik, Jun & Diamos 2019, "Fast spectrogram inversion using multi-head convolutional
neural networks" (spectral convergence); Gray & Markel 1976 (log-spectral distance).
"""

from __future__ import annotations

import math

import numpy as np
import torch
from skimage.metrics import structural_similarity

from engine.eval.image_baselines import all_baselines, patchify, pixel_mask, unpatchify

#: Images scored by the SSIM figures (the first fixed validation images; biharmonic costs tens of ms each).
SSIM_MAX_ROWS = 256
SSIM_WIN = 7

def reconstruction_quality(task) -> dict[str, dict[str, float]]:
    """The task's reconstruction figures beside its baselines at its current weights
    (:meth:`engine.tasks.Task.reconstruction_quality`; the module docstring's for the built-in
    image and audio tasks), ``{}`` when none apply."""
    return task.reconstruction_quality()


# --- images -----------------------------------------------------------------------------------------


def ssim_window(height: int, width: int) -> int:
    """The SSIM window side for an image of ``height x width`` pixels (module docstring)."""
    side = min(height, width)
    if side >= 2 * SSIM_WIN:
        return SSIM_WIN
    w = max(3, side // 2)
    return w if w % 2 else w - 1


def masked_ssim(pred: np.ndarray, target: np.ndarray, pixel_mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """SSIM of each image over its masked pixels and over the whole image.

    Args:
        pred, target: float ``[N, C, H, W]`` in [0, 1] (``pred`` the pasted reconstruction).
        pixel_mask: bool ``[N, H, W]``, True = the pixel lies in a masked patch.

    Returns:
        ``(masked [N], full [N])`` float64: the SSIM map averaged over the masked pixels (NaN for
        an image with none), and scikit-image's mean SSIM of the whole image.

    Raises:
        ValueError: shapes differ, or an image is smaller than 3x3 pixels.
    """
    if pred.shape != target.shape or pixel_mask.shape != (target.shape[0], *target.shape[2:]):
        raise ValueError(f"masked_ssim: prediction {pred.shape}, target {target.shape} and mask "
                         f"{pixel_mask.shape} must be [N, C, H, W], [N, C, H, W] and [N, H, W]")
    N, C, H, W = target.shape
    if min(H, W) < 3:
        raise ValueError(f"masked_ssim: images of {H}x{W} pixels are too small for SSIM (3x3 at least)")
    win = ssim_window(H, W)
    masked, full = np.full(N, np.nan), np.zeros(N)
    for i in range(N):
        score, smap = structural_similarity(target[i].astype(np.float64), pred[i].astype(np.float64), win_size=win,
                                            data_range=1.0, channel_axis=0, full=True)
        full[i] = score
        if pixel_mask[i].any():
            masked[i] = smap.mean(axis=0)[pixel_mask[i]].mean()
    return masked, full


@torch.no_grad()
def image_quality(task, max_rows: int = SSIM_MAX_ROWS) -> dict[str, dict[str, float]]:
    """SSIM of the checkpoint and of every image baseline (module docstring) on the task's fixed
    validation images and masks (``task.x_eval``, ``task.eval_masks``, ``task.baseline_reference()``):
    :meth:`engine.tasks.image.recipe.ImageMIMTask.reconstruction_quality`."""
    if task.cfg.objective.norm_pix_loss:
        return {}
    P, shape = task.cfg.model.patch_size, task.image_shape
    sums: dict[str, list[np.ndarray]] = {}
    x_ref = task.baseline_reference()
    start = 0
    for mask in task.eval_masks:
        if start >= max_rows:
            break
        mask = mask[: max_rows - start]
        xb = task.x_eval[start : start + len(mask)].float()
        start += len(mask)
        pm = pixel_mask(mask, P, task.grid)  # (n, H, W)
        pasted = {"trained": task.model.reconstruct(xb, mask)["pasted"].float()}
        target_p = patchify(xb, P)
        for name, pred in all_baselines(xb, mask, x_ref, P).items():
            m = mask[:, :, None].to(pred.device)
            pasted[name] = unpatchify(torch.where(m, pred.float().clamp(0, 1), target_p), P, shape)
        x, pmn = xb.cpu().numpy(), pm.cpu().numpy()
        for name, img in pasted.items():
            masked, full = masked_ssim(img.cpu().numpy(), x, pmn)
            sums.setdefault(name, []).append(np.stack([masked, full]))
    out = {}
    for name, parts in sums.items():
        a = np.concatenate(parts, axis=1)
        out[name] = {"ssim": float(np.nanmean(a[0])) if np.isfinite(a[0]).any() else float("nan"),
                     "ssim_full": float(a[1].mean()), "rows": float(a.shape[1])}
    return out


# --- audio ------------------------------------------------------------------------------------------


class SpectralSums:
    """Pooled sums of the spectral figures over batches (:meth:`add`), then :meth:`figures`."""

    def __init__(self):
        self.abs = self.sq = self.db_sq = self.diff_mag = self.mag = self.cells = 0.0

    def add(self, pred: torch.Tensor, target: torch.Tensor, scored: torch.Tensor, mean: torch.Tensor,
            std: torch.Tensor) -> None:
        """Add one batch.

        Args:
            pred, target: normalised log-mel ``[B, F, T]``; scored: bool ``[B, F, T]`` (masked real cells);
            mean, std: ``[F]``, the normalisation (log-mel = normalised * std + mean, natural log of power).
        """
        d = (pred.float() - target.float())[scored]
        self.abs += float(d.abs().sum())
        self.sq += float(d.pow(2).sum())
        s = std.float()[None, :, None].expand_as(target)[scored]
        self.db_sq += float(((10.0 / math.log(10.0)) * d * s).pow(2).sum())
        lp = (pred.float() * std[None, :, None] + mean[None, :, None])[scored]
        lt = (target.float() * std[None, :, None] + mean[None, :, None])[scored]
        mag_p, mag_t = torch.exp(lp / 2), torch.exp(lt / 2)  # mel magnitude = sqrt(power)
        self.diff_mag += float((mag_t - mag_p).pow(2).sum())
        self.mag += float(mag_t.pow(2).sum())
        self.cells += float(scored.sum())

    def figures(self) -> dict[str, float]:
        """``spec_l1``, ``spec_mse``, ``lsd_db``, ``spectral_convergence`` (module docstring), ``cells``."""
        c = max(self.cells, 1.0)
        return {"spec_l1": self.abs / c, "spec_mse": self.sq / c, "lsd_db": math.sqrt(self.db_sq / c),
                "spectral_convergence": math.sqrt(self.diff_mag / max(self.mag, 1e-30)), "cells": self.cells}
