"""Applying a mask to a token sequence: gather the visible tokens, and put a sequence back in order.

Drawing a mask (:mod:`engine.masking.random` and friends) and applying it are separate steps, so
any strategy plugs into any model.

References: He et al. 2022, "Masked Autoencoders Are Scalable Vision Learners" (``ids_keep`` /
``ids_restore`` of models_mae.random_masking).
"""

from __future__ import annotations

import torch


def gather_visible(
    x: torch.Tensor, mask: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Keep the visible (unmasked) tokens of each row, in their original order.

    A stable argsort of the mask puts each row's visible positions first (in order), then its masked
    positions (in order): ``ids_shuffle``. Its inverse permutation ``ids_restore`` brings a sequence
    laid out as ``[visible tokens, masked tokens]`` back to the original order (see
    :func:`restore_order`), which is how MAE's decoder places its mask tokens.

    Rows may have different visible counts (strategies without an exact count: Bernoulli,
    SpecAugment, superpixels...). Then every row keeps ``V = max visible count`` slots and ``pad``
    marks the slots of a row past its own count: they hold masked tokens that the encoder must
    not attend to (a key-padding mask) and the decoder replaces by its mask token. With equal
    counts (MAE's exact-count random masking) ``pad`` is None and nothing is padded.

    Args:
        x: ``[B, L, D]`` tokens.
        mask: ``[B, L]`` bool, True = masked (removed). Moved to ``x.device``.

    Returns:
        ``(x_visible [B, V, D], ids_keep [B, V], ids_restore [B, L], pad [B, V] bool or None)``;
        index tensors are int64 on ``x.device``; in each row the real visible ids come first and in
        increasing order.

    Raises:
        ValueError: ``mask`` is not ``[B, L]`` for ``x`` ``[B, L, D]``.

    References: He et al. 2022, "Masked Autoencoders Are Scalable Vision Learners".
    """
    if x.dim() != 3 or tuple(mask.shape) != tuple(x.shape[:2]):
        raise ValueError(
            f"gather_visible: expected x [B, L, D] and mask [B, L]; got {tuple(x.shape)} and {tuple(mask.shape)}"
        )
    B, L, D = x.shape
    mask = mask.to(device=x.device, dtype=torch.bool)
    n_visible = (~mask).sum(dim=1)  # (B,)
    V = int(n_visible.max()) if B > 0 else L
    ragged = B > 0 and bool((n_visible != V).any())

    ids_shuffle = torch.argsort(mask.to(torch.uint8), dim=1, stable=True)  # (B, L): visible first
    ids_restore = torch.argsort(ids_shuffle, dim=1)  # (B, L): inverse permutation
    ids_keep = ids_shuffle[:, :V]  # (B, V)
    x_visible = torch.gather(x, 1, ids_keep.unsqueeze(-1).expand(-1, -1, D))  # (B, V, D)
    pad = torch.arange(V, device=x.device)[None, :] >= n_visible[:, None] if ragged else None  # (B, V)
    return x_visible, ids_keep, ids_restore, pad


def restore_order(x_shuffled: torch.Tensor, ids_restore: torch.Tensor) -> torch.Tensor:
    """Undo the visible-first shuffle of :func:`gather_visible`.

    Args:
        x_shuffled: ``[B, L, D]``, laid out as ``[visible tokens, masked tokens]``.
        ids_restore: ``[B, L]`` from :func:`gather_visible`.

    Returns:
        ``[B, L, D]`` in the original (row-major grid) order.
    """
    D = x_shuffled.shape[-1]
    return torch.gather(x_shuffled, 1, ids_restore.unsqueeze(-1).expand(-1, -1, D))
