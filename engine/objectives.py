"""Reconstruction objectives: MSE on masked patches only, with an optional per-patch normalised target.

References: He et al. 2022, "Masked Autoencoders Are Scalable Vision Learners", sec. 3
("Reconstruction target") and sec. 4 / Table 1c (normalised pixels, ``norm_pix_loss``).
"""

from __future__ import annotations

import torch


def masked_mse(pred: torch.Tensor, target: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean squared error per patch, averaged over the masked patches only.

    ``loss = sum_{b,l} mask[b,l] * mean_d (pred - target)^2 / sum_{b,l} mask[b,l]``. Visible patches
    do not contribute (not even a NaN in their prediction). With no masked patch the loss is a zero
    that stays in the autograd graph (its gradient is zero), so ``loss.backward()`` still works.

    Args:
        pred: ``[B, L, D]`` predictions (``D = P*P*C`` for pixel patches).
        target: ``[B, L, D]``.
        mask: ``[B, L]`` bool, True = masked (the patches that are scored). Moved to ``pred.device``.

    Returns:
        Scalar tensor (float32 or the dtype of ``pred``), units of the target squared.

    Raises:
        ValueError: shapes do not match.

    References: He et al. 2022, "Masked Autoencoders Are Scalable Vision Learners".
    """
    if pred.shape != target.shape or pred.dim() != 3 or tuple(mask.shape) != tuple(pred.shape[:2]):
        raise ValueError(
            f"masked_mse: expected pred, target [B, L, D] and mask [B, L]; got {tuple(pred.shape)}, "
            f"{tuple(target.shape)}, {tuple(mask.shape)}"
        )
    mask = mask.to(device=pred.device, dtype=torch.bool)
    per_patch = (pred - target).pow(2).mean(dim=-1)  # (B, L)
    per_patch = torch.where(mask, per_patch, torch.zeros_like(per_patch))
    # clamp_min(1): with no masked patch the sum is 0 and so is the loss, without a sync or a branch.
    return per_patch.sum() / mask.sum().clamp_min(1)


def normalize_patches(target: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """Normalise each patch to zero mean and unit variance over its ``D`` values (MAE's norm_pix_loss).

    ``(t - mean) / sqrt(var + eps)`` with the unbiased variance, as in MAE's ``forward_loss``.

    Args:
        target: ``[B, L, D]`` patches (``D = P*P*C``).
        eps: added to the variance; keeps flat patches finite.

    Returns:
        ``[B, L, D]``.

    Raises:
        ValueError: ``D < 2`` (a patch of one value has no variance; use ``P*P*C >= 2``).

    References: He et al. 2022, "Masked Autoencoders Are Scalable Vision Learners", sec. 4.
    """
    if target.shape[-1] < 2:
        raise ValueError(f"normalize_patches: need at least 2 values per patch, got D={target.shape[-1]}")
    mean = target.mean(dim=-1, keepdim=True)  # (B, L, 1)
    var = target.var(dim=-1, keepdim=True)  # (B, L, 1), unbiased like MAE
    return (target - mean) / (var + eps).sqrt()
