"""Masking: pure functions that draw a bool mask (True = masked), registered by name.

The dashboard imports this package to draw its mask preview (no model weights, no training), and
the training loop calls :func:`preview_masks` for the masks of its reconstruction grid, so the
preview shows exactly the masks the run uses.

Public API:
    MaskFn, MASKING_REGISTRY, register_masking, get_masking — the registry of strategies
    draw_mask(masking_cfg, shape, generator, eligible=None) — dispatch on ``masking.strategy``
    grid_shape(image_hw, patch_size) — (h, w) patch grid, with the divisibility check
    preview_masks(cfg, image_shape, n) — the run's fixed visualisation masks
    gather_visible, restore_order — apply a mask to a token sequence
"""

from __future__ import annotations

import torch

from engine.config import MaskingConfig, RunConfig
from engine.errors import ConfigError
from engine.masking.registry import MASKING_REGISTRY, MaskFn, check_ratio, get_masking, register_masking

# Strategies register themselves on import; import them after the registry exists.
from engine.masking import random as _random  # noqa: E402,F401  (registers "random")
from engine.masking.apply import gather_visible, restore_order  # noqa: E402
from engine.masking.random import random_mask  # noqa: E402

__all__ = [
    "MASKING_REGISTRY",
    "MaskFn",
    "check_ratio",
    "draw_mask",
    "gather_visible",
    "get_masking",
    "grid_shape",
    "preview_masks",
    "random_mask",
    "register_masking",
    "restore_order",
]


def draw_mask(
    cfg: MaskingConfig,
    shape: tuple[int, ...],
    generator: torch.Generator,
    eligible: torch.Tensor | None = None,
) -> torch.Tensor:
    """Draw a mask with the strategy and ratio of a masking config.

    Args:
        cfg: ``masking`` section of the run config (``strategy``, ``ratio``).
        shape: ``(B, *grid)``, e.g. ``(B, h, w)`` for an image patch grid.
        generator: explicit RNG (the mask lives on ``generator.device``, CPU for a default generator).
        eligible: optional bool tensor of ``shape``; False positions are never masked.

    Returns:
        Bool tensor of ``shape``; True = masked.

    Raises:
        ConfigError: unknown strategy (lists the known ones) or invalid ratio.
    """
    return get_masking(cfg.strategy)(shape, cfg.ratio, generator=generator, eligible=eligible)


def grid_shape(image_hw: tuple[int, int], patch_size: int) -> tuple[int, int]:
    """The patch grid ``(h, w) = (H // P, W // P)`` of an ``H x W`` image cut into ``P x P`` patches.

    Raises:
        ConfigError: ``P`` does not divide both ``H`` and ``W`` (or is < 1); the message names
            ``model.patch_size`` and lists the patch sizes that fit.
    """
    H, W = (int(v) for v in image_hw)
    P = int(patch_size)
    if P < 1 or H % P or W % P:
        fits = [p for p in range(1, min(H, W) + 1) if H % p == 0 and W % p == 0]
        raise ConfigError(
            f"model.patch_size: {patch_size} does not divide the image size {H}x{W} "
            f"(patch sizes that fit: {', '.join(map(str, fits))})"
        )
    return H // P, W // P


def preview_masks(cfg: RunConfig, image_shape: tuple[int, int, int], n: int) -> torch.Tensor:
    """The masks of the run's fixed visualisation batch: ``[n, h, w]`` bool (True = masked), on CPU.

    Exactly ``draw_mask(cfg.masking, (n, h, w), torch.Generator().manual_seed(cfg.train.seed))``:
    the training loop calls this for its reconstruction grid and the dashboard for its live
    preview, so both show the same masks for the same config.

    Args:
        cfg: the run config (uses ``masking``, ``model.patch_size``, ``train.seed``).
        image_shape: ``(C, H, W)`` of the dataset's images.
        n: number of masks (e.g. ``cfg.train.num_vis``).

    Raises:
        ConfigError: patch size does not divide ``H x W``, unknown strategy or bad ratio.
    """
    _, H, W = image_shape
    h, w = grid_shape((H, W), cfg.model.patch_size)
    return draw_mask(cfg.masking, (n, h, w), torch.Generator().manual_seed(cfg.train.seed))
