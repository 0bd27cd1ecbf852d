"""Trivial baselines for masked-patch reconstruction, scored on the same masks as a run.

A reconstruction figure means something only next to what needs no learning. Each baseline here
returns a prediction of every patch, ``[N, L, P*P*C]`` in pixel units, so the caller scores it with
the run's own objective on the run's own masks (only masked patches count).

- :func:`mean_image_patches`: the mean training image (what an MAE that only learned the average
  predicts; He et al. 2022 report pixel losses against it implicitly).

References: He et al. 2022, "Masked Autoencoders Are Scalable Vision Learners".
"""

from __future__ import annotations

import torch


def patchify(imgs: torch.Tensor, patch_size: int) -> torch.Tensor:
    """``imgs [N, C, H, W] -> [N, L, P*P*C]``, the layout of ``MaskedAutoencoderViT.patchify``
    (row-major patches, each flattened as (p_row, p_col, channel))."""
    N, C, H, W = imgs.shape
    P = patch_size
    x = imgs.reshape(N, C, H // P, P, W // P, P).permute(0, 2, 4, 3, 5, 1)
    return x.reshape(N, (H // P) * (W // P), P * P * C)


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
