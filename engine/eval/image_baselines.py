"""Trivial baselines for masked-patch reconstruction, scored on the same masks as a run.

A reconstruction figure means something only next to what needs no learning. Each baseline here
returns a prediction of every patch, ``[N, L, P*P*C]`` in pixel units ([0, 1]), so the caller
scores it with the run's own objective on the run's own masks (only masked patches count), and in
pixel space with :func:`masked_pixel_sse` (MSE and PSNR comparable across objectives):

- :func:`mean_image_patches`: the mean training image (what an MAE that only learned the average
  predicts).
- :func:`visible_mean_patches`: each image's own mean over its visible pixels, per channel, at
  every patch (a flat grey of the right brightness).
- :func:`biharmonic_patches`: biharmonic inpainting of the masked pixels from the visible ones
  (scikit-image's ``inpaint_biharmonic``; Damelin & Hoang 2018), the classical smooth fill-in.
- :func:`knn_patches`: the average of the ``k`` training images nearest to the image on its
  visible pixels only (squared Euclidean distance over the visible pixels), a non-parametric
  estimate of the conditional mean that a pixel-loss model learns.

Shapes: N images, C channels, H/W pixels, P patch size, h/w = H/P, W/P the patch grid, L = h*w
patches in row-major order; a patch is flattened as (p_row, p_col, channel), MAE's ``patchify``
layout. Masks are bool ``[N, L]`` (or ``[N, h, w]``), True = masked (hidden).

References: He et al. 2022, "Masked Autoencoders Are Scalable Vision Learners" (patch layout,
masked-patch loss); Damelin & Hoang 2018, "On Surface Completion and Image Inpainting by
Biharmonic Functions: Numerical Aspects" (scikit-image's inpainting).
"""

from __future__ import annotations

import math

import numpy as np
import torch
from skimage.restoration import inpaint_biharmonic

#: Names of the baselines :func:`all_baselines` computes, in the order the dashboard lists them.
BASELINES = ("mean_image", "visible_mean", "biharmonic", "knn")
#: Training images averaged by the kNN baseline.
KNN_K = 10
#: Fill value of a baseline for an image with no visible pixel at all (nothing to condition on).
NO_VISIBLE_FILL = 0.5


def patchify(imgs: torch.Tensor, patch_size: int) -> torch.Tensor:
    """``imgs [N, C, H, W] -> [N, L, P*P*C]``, the layout of ``MaskedAutoencoderViT.patchify``
    (row-major patches, each flattened as (p_row, p_col, channel))."""
    N, C, H, W = imgs.shape
    P = patch_size
    x = imgs.reshape(N, C, H // P, P, W // P, P).permute(0, 2, 4, 3, 5, 1)
    return x.reshape(N, (H // P) * (W // P), P * P * C)


def unpatchify(patches: torch.Tensor, patch_size: int, image_shape: tuple[int, int, int]) -> torch.Tensor:
    """``patches [N, L, P*P*C] -> imgs [N, C, H, W]``, the inverse of :func:`patchify`.

    Args:
        image_shape: ``(C, H, W)``.
    """
    C, H, W = image_shape
    P = patch_size
    x = patches.reshape(patches.shape[0], H // P, W // P, P, P, C).permute(0, 5, 1, 3, 2, 4)
    return x.reshape(patches.shape[0], C, H, W)


def pixel_mask(mask: torch.Tensor, patch_size: int, grid: tuple[int, int]) -> torch.Tensor:
    """A patch mask as a pixel mask: ``[N, L]`` or ``[N, h, w]`` bool -> ``[N, h*P, w*P]`` bool
    (True = the pixel lies in a masked patch).

    Args:
        grid: ``(h, w)``, the patch grid (needed to unflatten a ``[N, L]`` mask).
    """
    m = mask.reshape(mask.shape[0], *grid).bool()
    return m.repeat_interleave(patch_size, dim=1).repeat_interleave(patch_size, dim=2)


def mean_image_patches(x_train: torch.Tensor, n: int, patch_size: int) -> torch.Tensor:
    """The training mean image as the prediction of every patch of ``n`` images.

    Args:
        x_train: ``[N_train, C, H, W]`` training images in [0, 1].
        n: number of images to predict.
        patch_size: ``P``.

    Returns:
        ``[n, L, P*P*C]`` (a broadcast view: the same mean image for each row).
    """
    mean = x_train.float().mean(dim=0, keepdim=True)  # (1, C, H, W)
    return patchify(mean, patch_size).expand(n, -1, -1)


def visible_mean_patches(imgs: torch.Tensor, mask: torch.Tensor, patch_size: int) -> torch.Tensor:
    """Each image's mean over its visible pixels, per channel, as the prediction of every patch.

    Args:
        imgs: ``[N, C, H, W]`` in [0, 1].
        mask: ``[N, L]`` or ``[N, h, w]`` bool, True = masked.
        patch_size: ``P``.

    Returns:
        ``[N, L, P*P*C]``: for image ``n`` and channel ``c`` the value
        ``sum(visible pixels of channel c) / count(visible pixels)``; :data:`NO_VISIBLE_FILL` for
        an image without a visible pixel.
    """
    N, C, H, W = imgs.shape
    vis = ~pixel_mask(mask, patch_size, (H // patch_size, W // patch_size)).to(imgs.device)  # (N, H, W)
    count = vis.flatten(1).sum(dim=1)  # (N,)
    total = (imgs.float() * vis[:, None]).flatten(2).sum(dim=2)  # (N, C)
    mean = torch.where(count[:, None] > 0, total / count.clamp_min(1)[:, None], NO_VISIBLE_FILL)  # (N, C)
    return patchify(mean[:, :, None, None].expand(N, C, H, W), patch_size)


def biharmonic_patches(imgs: torch.Tensor, mask: torch.Tensor, patch_size: int) -> torch.Tensor:
    """Biharmonic inpainting of the masked pixels of each image from its visible ones.

    Each image is solved on its own with ``skimage.restoration.inpaint_biharmonic`` (one sparse
    linear system per connected masked region; channels share the mask); visible pixels keep their
    values, so only the masked patches differ from the input. The result is clipped to [0, 1] (the
    biharmonic fill may overshoot near sharp edges). Cost: about a millisecond per 8x8 image and tens
    of milliseconds per 28x28 image at mask ratio 0.75 on one CPU core (it grows with the masked area).

    Args:
        imgs: ``[N, C, H, W]`` in [0, 1] (any device; solved on the CPU in float64).
        mask: ``[N, L]`` or ``[N, h, w]`` bool, True = masked.
        patch_size: ``P``.

    Returns:
        ``[N, L, P*P*C]`` float32 on ``imgs.device``; an image without a visible pixel is filled
        with :data:`NO_VISIBLE_FILL`.

    References: Damelin & Hoang 2018 (the method scikit-image implements).
    """
    N, C, H, W = imgs.shape
    pm = pixel_mask(mask, patch_size, (H // patch_size, W // patch_size)).cpu().numpy()  # (N, H, W)
    x = imgs.detach().float().cpu().numpy().transpose(0, 2, 3, 1).astype(np.float64)  # (N, H, W, C)
    out = np.empty_like(x)
    for i in range(N):
        if pm[i].all():
            out[i] = NO_VISIBLE_FILL
        elif not pm[i].any():
            out[i] = x[i]
        else:
            out[i] = inpaint_biharmonic(x[i], pm[i], channel_axis=-1)
    filled = torch.from_numpy(np.clip(out, 0.0, 1.0).astype(np.float32)).permute(0, 3, 1, 2)
    return patchify(filled, patch_size).to(imgs.device)


def knn_patches(imgs: torch.Tensor, mask: torch.Tensor, x_train: torch.Tensor, patch_size: int,
                k: int = KNN_K, chunk: int = 256) -> torch.Tensor:
    """The mean of the ``k`` training images nearest to each image on its visible pixels.

    The distance between image ``n`` and training image ``t`` counts only the pixels visible in
    ``n``: ``d(n, t) = sum_{p visible in n} sum_c (imgs[n, c, p] - x_train[t, c, p])^2``, computed
    for all pairs at once as ``|v x|^2 - 2 (v x) . t + v . t^2`` (``v`` the visible-pixel mask).
    Ties are broken by ``torch.topk`` (no particular order); with no visible pixel every training
    image is equally near and ``k`` arbitrary ones are averaged.

    Args:
        imgs: ``[N, C, H, W]`` in [0, 1].
        mask: ``[N, L]`` or ``[N, h, w]`` bool, True = masked.
        x_train: ``[N_train, C, H, W]`` in [0, 1] (the run's training split).
        patch_size: ``P``.
        k: neighbours averaged (at most ``N_train``).
        chunk: images per distance matrix (``chunk x N_train`` floats in memory).

    Returns:
        ``[N, L, P*P*C]`` float32 on ``imgs.device``.

    Raises:
        ValueError: ``k < 1`` or image shapes differ.
    """
    if k < 1:
        raise ValueError(f"knn_patches: k must be >= 1, got {k}")
    if tuple(imgs.shape[1:]) != tuple(x_train.shape[1:]):
        raise ValueError(f"knn_patches: images {tuple(imgs.shape[1:])} and training images "
                         f"{tuple(x_train.shape[1:])} differ in shape")
    N, C, H, W = imgs.shape
    k = min(k, len(x_train))
    train = x_train.float().to(imgs.device).flatten(1)  # (T, C*H*W)
    train_sq = train.pow(2)
    vis = (~pixel_mask(mask, patch_size, (H // patch_size, W // patch_size))).to(imgs.device)  # (N, H, W)
    vis = vis[:, None].expand(N, C, H, W).flatten(1).float()  # (N, C*H*W)
    x = imgs.float().flatten(1) * vis
    out = []
    for i in range(0, N, chunk):
        xv, v = x[i : i + chunk], vis[i : i + chunk]
        d = xv.pow(2).sum(1, keepdim=True) - 2.0 * xv @ train.T + v @ train_sq.T  # (n, T)
        idx = d.topk(k, dim=1, largest=False).indices  # (n, k)
        out.append(train[idx].mean(dim=1))  # (n, C*H*W)
    mean = torch.cat(out).reshape(N, C, H, W) if out else imgs.new_zeros((0, C, H, W))
    return patchify(mean, patch_size)


def all_baselines(imgs: torch.Tensor, mask: torch.Tensor, x_train: torch.Tensor, patch_size: int,
                  k: int = KNN_K, biharmonic_rows: int | None = None) -> dict[str, torch.Tensor]:
    """Every baseline's prediction for one batch, by the names of :data:`BASELINES`.

    Args:
        imgs: ``[N, C, H, W]`` in [0, 1]; mask: ``[N, L]`` bool (True = masked);
        x_train: ``[N_train, C, H, W]``; patch_size: ``P``; k: kNN neighbours.
        biharmonic_rows: inpaint only the first this many images (the slow baseline); ``None`` =
            all, ``0`` = leave ``biharmonic`` out.

    Returns:
        ``{name: [n, L, P*P*C]}`` in pixel units; ``n = N`` except for ``biharmonic`` (the first
        ``min(N, biharmonic_rows)`` images).
    """
    out = {
        "mean_image": mean_image_patches(x_train, len(imgs), patch_size),
        "visible_mean": visible_mean_patches(imgs, mask, patch_size),
        "biharmonic": None,
        "knn": knn_patches(imgs, mask, x_train, patch_size, k),
    }
    n_bih = len(imgs) if biharmonic_rows is None else min(len(imgs), biharmonic_rows)
    if n_bih:
        out["biharmonic"] = biharmonic_patches(imgs[:n_bih], mask[:n_bih], patch_size)
    else:
        del out["biharmonic"]
    return out


def masked_pixel_sse(pred: torch.Tensor, target: torch.Tensor, mask: torch.Tensor) -> tuple[float, int]:
    """Sum of squared errors over the pixels of the masked patches, and how many values it sums.

    The prediction is clipped to [0, 1] first (the pixel range; what a display shows), so a figure
    never counts error outside the range the target can take. Pool sums over batches and divide
    once (:func:`psnr`) to get the masked-patch pixel MSE of a whole validation set.

    Args:
        pred, target: ``[N, L, P*P*C]`` in pixel units ([0, 1]).
        mask: ``[N, L]`` bool, True = masked (scored).

    Returns:
        ``(sse, count)``: the float sum and the number of values (masked patches x ``P*P*C``).
    """
    m = mask.reshape(pred.shape[:2]).to(pred.device).bool()
    err = (pred.float().clamp(0.0, 1.0) - target.float()).pow(2).sum(dim=-1)  # (N, L)
    return float(err[m].sum()), int(m.sum()) * pred.shape[-1]


#: PSNR is capped here (an MSE below 1e-10): a perfect prediction still logs a finite figure.
PSNR_MAX_DB = 100.0


def psnr(mse: float) -> float:
    """Peak signal-to-noise ratio in dB for pixels in [0, 1]: ``10 log10(1 / mse)``, at most
    :data:`PSNR_MAX_DB` (the training loop refuses non-finite metrics)."""
    return min(PSNR_MAX_DB, 10.0 * math.log10(1.0 / max(mse, 1e-10)))
