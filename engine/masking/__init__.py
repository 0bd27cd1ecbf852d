"""Masking: pure functions that draw a bool mask (True = masked), registered by name.

Drawing a mask and applying it are separate: a strategy only says *which* positions are hidden;
:mod:`engine.masking.apply` gathers the visible tokens for an MAE encoder, and
:mod:`engine.masking.mlm` does BERT's 80/10/10 replacement for a token model.

The dashboard imports this package to draw its mask preview (no model weights, no training), and
the training loop calls :func:`preview_masks` for the masks of its reconstruction grid, so the
preview shows exactly the masks the run uses.

Public API:
    MASKING_REGISTRY, MaskingStrategy, register_masking, get_masking, strategies_for — the registry
    GRID_KINDS, register_grid_kind, strategies_on — grid kinds: what a strategy works on, what a
        modality's units form (:mod:`engine.modalities.grids`)
    draw_mask(masking_cfg, shape, generator, eligible=None, ratio=None, **side_inputs) — dispatch
    ratio_at(masking_cfg, step, total_steps) — the ratio schedule
    grid_shape(image_hw, patch_size) — (h, w) patch grid, with the divisibility check
    preview_masks(cfg, image_shape, n, images=None, attention=None) — the run's fixed visualisation masks
    image_side_inputs(cfg, images, patch_size, attention=None) — an image strategy's side inputs
    attention_inputs(cfg, shape, generator, attention=None) — the ``attention`` side input, random
        scores where no model gives it (previews, probes, text and audio runs)
    identical_masks_warning(strategy, params, grid_shape, ratio) — says when every sample would get
        the same mask (Mask lab and New run show it)
    gather_visible, restore_order — apply a mask to a token sequence (MAE)
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch

from engine.errors import ConfigError
from engine.masking import attention as _attention  # noqa: E402,F401  attention
from engine.masking import block as _block  # noqa: E402,F401  block
from engine.masking import hierarchical as _hierarchical  # noqa: E402,F401  hierarchical

# Strategies register themselves on import; import them after the registry exists.
from engine.masking import random as _random  # noqa: E402,F401  random, bernoulli
from engine.masking import rules as _rules  # noqa: E402,F401  periodic, region
from engine.masking import segment as _segment  # noqa: E402,F401  sentence_span
from engine.masking import span as _span  # noqa: E402,F401  span
from engine.masking import specaugment as _specaugment  # noqa: E402,F401  time_mask, freq_mask, specaugment
from engine.masking import tube as _tube  # noqa: E402,F401  tube
from engine.masking import units as _units  # noqa: E402,F401  whole_word, superpixel, voiced
from engine.masking.apply import gather_visible, restore_order  # noqa: E402
from engine.masking.random import bernoulli_mask, mask_lowest, pick_uniform, random_mask  # noqa: E402
from engine.masking.registry import (
    MASKING_REGISTRY,
    SIDE_INPUTS,
    MaskingStrategy,
    NoParams,
    StrategyParams,
    check_ratio,
    get_masking,
    register_masking,
    strategies_for,
    strategies_on,
)
from engine.masking.schedule import ratio_at  # noqa: E402
from engine.masking.units import superpixel_segments
from engine.modalities.grids import GRID_KINDS, register_grid_kind

if TYPE_CHECKING:
    from engine.config import MaskingConfig, RunConfig

__all__ = [
    "GRID_KINDS",
    "MASKING_REGISTRY",
    "SIDE_INPUTS",
    "MaskingStrategy",
    "NoParams",
    "StrategyParams",
    "attention_inputs",
    "bernoulli_mask",
    "check_ratio",
    "draw_mask",
    "gather_visible",
    "get_masking",
    "grid_shape",
    "identical_masks_warning",
    "image_side_inputs",
    "mask_lowest",
    "pick_uniform",
    "preview_masks",
    "random_mask",
    "ratio_at",
    "register_grid_kind",
    "register_masking",
    "restore_order",
    "strategies_for",
    "strategies_on",
]


def draw_mask(
    cfg: "MaskingConfig",
    shape: tuple[int, ...],
    generator: torch.Generator,
    eligible: torch.Tensor | None = None,
    *,
    ratio: float | None = None,
    **side_inputs: torch.Tensor,
) -> torch.Tensor:
    """Draw a mask with the strategy, ratio and parameters of a masking config.

    Args:
        cfg: ``masking`` section of the run config (``strategy``, ``ratio``, ``params``).
        shape: ``(B, *grid)``, e.g. ``(B, h, w)`` for an image patch grid.
        generator: explicit RNG (the mask lives on ``generator.device``, CPU for a default generator).
        eligible: optional bool tensor of ``shape``; False positions are never masked.
        ratio: overrides ``cfg.ratio`` (the training loop passes :func:`ratio_at` of the step).
        side_inputs: the strategy's ``needs`` (e.g. ``segments=[B, h, w]``); others are ignored.

    Returns:
        Bool tensor of ``shape``; True = masked.

    Raises:
        ConfigError: unknown strategy (lists the known ones), invalid ratio or parameter.
        ValueError: ``shape`` is not a grid the strategy accepts, or a side input it needs is missing.
    """
    strategy = get_masking(cfg.strategy)
    params = strategy.parse_params(cfg.params).model_dump()
    missing = [n for n in strategy.needs if side_inputs.get(n) is None]
    if missing:
        raise ValueError(f"masking strategy {strategy.name!r} needs {', '.join(missing)} "
                         f"({'; '.join(SIDE_INPUTS[n] for n in missing)})")
    side = {n: side_inputs[n] for n in strategy.needs}
    r = cfg.ratio if ratio is None else ratio
    return strategy.fn(shape, r, generator=generator, eligible=eligible, **params, **side)


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


def attention_inputs(
    cfg: "MaskingConfig", shape: tuple[int, ...], generator: torch.Generator, attention: torch.Tensor | None = None,
) -> dict[str, torch.Tensor]:
    """The ``attention`` side input of a strategy that needs it (``attention``), else ``{}``.

    With ``attention`` given (a model's scores, e.g. a teacher's class-token attention from
    :func:`engine.methods.attention.cls_attention`, ``[B, *grid]`` or flat ``[B, L]``), it is
    returned in the grid's shape. Without one (a preview or a pre-flight probe with no checkpoint,
    a text or audio run: no model there gives attention), the scores are uniform random,
    ``torch.rand(shape)`` drawn from ``generator`` before the mask is drawn from it, so the mask is
    a uniform random one with the strategy's exact count, and the same for the same seed.

    Args:
        cfg: the ``masking`` config. shape: the mask's ``(B, *grid)``.
        generator: the RNG the mask is then drawn from (the random scores come first from it).
        attention: float scores, or None.

    Raises:
        ValueError: ``attention`` does not have ``B`` rows of ``prod(grid)`` values (the message
            names both shapes).
    """
    if "attention" not in get_masking(cfg.strategy).needs:
        return {}
    shape = tuple(int(s) for s in shape)
    if attention is None:
        return {"attention": torch.rand(shape, generator=generator, device=generator.device)}
    if attention.numel() != math.prod(shape) or attention.shape[0] != shape[0]:
        raise ValueError(f"masking strategy {cfg.strategy!r}: attention has shape {tuple(attention.shape)}, "
                         f"expected {shape}")
    return {"attention": attention.reshape(shape)}


def image_side_inputs(
    cfg: "MaskingConfig", images: torch.Tensor | None, patch_size: int, attention: torch.Tensor | None = None,
    *, generator: torch.Generator | None = None,
) -> dict[str, torch.Tensor]:
    """The side inputs an image strategy needs, computed from the images themselves.

    Args:
        cfg: the ``masking`` config.
        images: ``[B, C, H, W]`` float in [0, 1] (or None when the strategy needs nothing).
        patch_size: ``P``.
        attention: for ``attention``: ``[B, h, w]`` (or ``[B, h*w]``) scores of a model, e.g. the
            run's teacher (:func:`engine.methods.attention.cls_attention`); None: uniform random
            scores (:func:`attention_inputs`), drawn from ``generator``.
        generator: where random scores come from (then draw the mask from the same generator);
            None: ``torch.Generator().manual_seed(0)``, the same scores at every call.

    Returns:
        ``{}``, ``{"segments": int64 [B, h, w]}`` (SLIC superpixels per patch) for ``superpixel``, or
        ``{"attention": float [B, h, w]}`` for ``attention``.

    Raises:
        ValueError: the strategy needs the images but ``images`` is None (``attention`` with its
            scores given needs none), or ``attention`` is not ``[B, h, w]``.
    """
    strategy = get_masking(cfg.strategy)
    if "attention" in strategy.needs:
        if images is not None:
            B, grid = images.shape[0], grid_shape(tuple(images.shape[2:]), patch_size)
        elif attention is not None and attention.dim() == 3:
            B, grid = attention.shape[0], tuple(attention.shape[1:])
        else:
            raise ValueError(f"masking strategy {cfg.strategy!r} needs the images or [B, h, w] attention scores")
        g = torch.Generator().manual_seed(0) if generator is None else generator
        return attention_inputs(cfg, (B, *grid), g, attention)
    if "segments" not in strategy.needs:
        return {}
    if images is None:
        raise ValueError(f"masking strategy {cfg.strategy!r} needs the images (superpixels)")

    params = strategy.parse_params(cfg.params)
    return {"segments": superpixel_segments(images, patch_size, n_segments=params.n_segments,
                                            compactness=params.compactness)}


def preview_masks(
    cfg: "RunConfig", image_shape: tuple[int, int, int], n: int, images: torch.Tensor | None = None,
    attention: torch.Tensor | None = None,
) -> torch.Tensor:
    """The masks of the run's fixed visualisation batch: ``[n, h, w]`` bool (True = masked), on CPU.

    Exactly ``draw_mask(cfg.masking, (n, h, w), torch.Generator().manual_seed(cfg.train.seed))``
    (with the side inputs computed from ``images`` when the strategy needs them): the training loop
    calls this for its reconstruction grid and the dashboard for its live preview, so both show the
    same masks for the same config and images. The ratio is ``masking.ratio`` (step 0 of a schedule).
    For ``attention``, the scores are ``attention`` when given (a model's, ``[n, h, w]``), else
    uniform random ones drawn first from that generator (:func:`attention_inputs`).

    Args:
        cfg: the run config (uses ``masking``, ``model.patch_size``, ``train.seed``).
        image_shape: ``(C, H, W)`` of the dataset's images.
        n: number of masks (e.g. ``cfg.train.num_vis``).
        images: ``[n, C, H, W]`` float in [0, 1]; needed by strategies with image side inputs.
        attention: ``[n, h, w]`` (or ``[n, h*w]``) float scores for ``attention``; None: random.

    Raises:
        ConfigError: patch size does not divide ``H x W``, unknown strategy or bad ratio.
        ValueError: the strategy needs ``images`` and none were given, or ``attention`` has another shape.
    """
    _, H, W = image_shape
    h, w = grid_shape((H, W), cfg.model.patch_size)
    g = torch.Generator().manual_seed(cfg.train.seed)
    if "attention" in get_masking(cfg.masking.strategy).needs:
        side = attention_inputs(cfg.masking, (n, h, w), g, attention)
    else:
        side = image_side_inputs(cfg.masking, images, cfg.model.patch_size)
    return draw_mask(cfg.masking, (n, h, w), g, **side)


def identical_masks_warning(
    strategy: str,
    params: dict | None,
    grid_shape: tuple[int, ...],
    ratio: float,
    *,
    side_inputs: dict[str, torch.Tensor] | None = None,
    n: int = 256,
    seed: int = 0,
) -> str | None:
    """A warning when ``strategy`` with these settings hides the same positions in every sample, else None.

    Draws ``n`` masks ``[n, *grid_shape]`` from one seeded generator, every sample with the same
    inputs, and looks for positions masked in all of them. All masks equal means the strategy has
    nothing left to draw (ratio 0 or 1, a budget that takes every unit); some positions in every
    mask means a fixed part (a block that only fits at the centre): a run would never show the
    encoder those positions. ``n = 256`` keeps chance out of it: a position masked with probability
    0.95 is still free in some mask (``0.95 ** 256 < 2e-6``). Rule-based strategies
    (``stochastic=False``: ``periodic``, ``region``) are the same for every sample by design and get
    None, as does a strategy that needs side inputs (``word_ids``, ``segments``...) when
    ``side_inputs`` (one sample's, ``[1, ...]``) are not given.

    Args:
        strategy: a registered name. params: ``masking.params`` (None: the defaults).
        grid_shape: the grid without the batch, e.g. ``(7, 7)`` patches or ``(128,)`` tokens.
        ratio: the mask ratio.

    Raises:
        ConfigError: unknown strategy, bad ratio or parameter (the message names the field).
        ValueError: ``grid_shape`` is not a grid the strategy accepts.
    """
    s = get_masking(strategy)
    if not s.stochastic or n < 2:
        return None
    side = {}
    for need in s.needs:
        if side_inputs is None or side_inputs.get(need) is None:
            return None
        x = side_inputs[need]
        side[need] = x.expand(n, *x.shape[1:])
    grid = tuple(int(d) for d in grid_shape)
    mask = s.fn((n, *grid), ratio, generator=torch.Generator().manual_seed(seed),
                **s.parse_params(params).model_dump(), **side)
    flat = mask.reshape(n, -1)
    L, size = flat.shape[1], "x".join(map(str, grid))
    always = flat.all(dim=0)
    k = int(always.sum())
    if L == 0 or (k == 0 and not bool((flat == flat[:1]).all())):
        return None
    fix = "Change the ratio or the parameters (or the grid) until the masks vary."
    if bool((flat == flat[:1]).all()):
        what = "nothing" if k == 0 else "every position" if k == L else f"the same {k} of {L} positions"
        return (f"Every sample gets the same mask: {strategy} with these settings on the {size} grid hides {what} "
                f"in each of {n} draws, so training sees one fixed mask. {fix}")
    where = torch.stack(torch.unravel_index(always.nonzero().flatten()[:4], grid), dim=1).tolist()
    at = ", ".join(str(w[0]) if len(w) == 1 else f"({', '.join(map(str, w))})" for w in where) + (", ..." if k > 4 else "")
    return (f"A fixed part: {strategy} with these settings on the {size} grid hides {k} of {L} positions in "
            f"every one of {n} draws (at {at}), so training never shows them to the encoder. {fix}")
