"""Attention-guided masking (AttMask): hide the positions a model attends to most (or least).

Each position of a sample comes with a score (the ``attention`` side input, ``[B, *grid]``, e.g. a
teacher ViT's class-token attention to each patch, :func:`engine.methods.attention.cls_attention`);
the strategy hides the ``round(ratio * n)`` top-ranked eligible positions of each sample. Where no
model gives the scores (the dashboard's previews without a checkpoint, the pre-flight probes, a text
or audio run), :func:`engine.masking.attention_inputs` draws them uniformly at random, which makes
the mask a uniform random one with an exact count.

References: Kakogeorgiou et al. 2022, "What to Hide from Your Students: Attention-Guided Masked
Image Modeling", ECCV (AttMask-High hides the most attended patches, AttMask-Low the least).
"""

from __future__ import annotations

import math
from typing import Literal

import torch
from pydantic import Field

from engine.masking.random import pick_uniform
from engine.masking.registry import StrategyParams, check_eligible, check_ratio, get_masking, register_masking


class AttentionParams(StrategyParams):
    """Parameters of :func:`attention_mask`."""

    mode: Literal["most", "least"] = Field(
        "most",
        description="hide the most attended positions (AttMask-High, the paper's choice) or the least "
                    "attended ones (AttMask-Low)",
    )
    random_share: float = Field(
        0.0, ge=0.0, le=1.0,
        description="share of the masked positions drawn uniformly at random among the eligible positions "
                    "the attention left visible, instead of by attention rank (0: all by rank; 1: uniform random)",
    )


@register_masking(
    "attention", params=AttentionParams, grid_dims=(1, 2), grids=("seq-1d", "patch-2d", "spec-2d"), exact=True,
    needs=("attention",),
    summary="the most (or least) attended positions by a model's class-token attention (AttMask, "
            "Kakogeorgiou et al. 2022)",
)
def attention_mask(
    shape: tuple[int, ...],
    ratio: float,
    *,
    generator: torch.Generator,
    eligible: torch.Tensor | None = None,
    attention: torch.Tensor,
    mode: str = "most",
    random_share: float = 0.0,
) -> torch.Tensor:
    """Mask each sample's most (``mode="most"``) or least attended eligible positions.

    **Rule.** Per row, ``n`` = eligible positions and ``k = round(ratio * n)`` (round half to even,
    as :func:`~engine.masking.random.random_mask`); ``k_rand = round(random_share * k)`` of them are
    drawn uniformly without replacement among the eligible positions left after the other
    ``k - k_rand``, which are the top of the attention ranking (highest scores for ``most``,
    lowest for ``least``). The count is exact; ineligible positions are never masked.
    Ties in the scores are broken by the generator: the positions are first put in a uniformly
    random order (one uniform per position, sorted), then stably sorted by score, so equal scores
    rank in random order. ``random_share = 1`` ignores the scores (a uniform random mask of ``k``).

    Args:
        shape: ``(B, L)`` tokens or frames, or ``(B, h, w)`` / ``(B, F, T)`` patches.
        ratio: fraction of the eligible positions to mask, in [0, 1].
        generator: explicit RNG (``B * L`` uniforms for the tie-breaking order, then
            :func:`~engine.masking.random.pick_uniform`'s draws for the random share).
        eligible: optional bool tensor of ``shape``; False positions are never masked.
        attention: float ``[B, *grid]`` = ``shape``, how much each position is attended (higher =
            more attended; only the order within a row matters). Moved to ``generator.device``.
        mode: ``"most"`` (AttMask-High) or ``"least"`` (AttMask-Low).
        random_share: share of the ``k`` masked positions drawn at random instead, in [0, 1].

    Returns:
        Bool tensor of ``shape`` on ``generator.device``; True = masked.

    Raises:
        ConfigError: ``ratio`` outside [0, 1].
        ValueError: ``shape`` is not a 1-D or 2-D grid, ``attention`` / ``eligible`` do not have
            ``shape``, ``attention`` holds NaN, or ``mode`` / ``random_share`` are out of range.

    References: Kakogeorgiou et al. 2022, "What to Hide from Your Students: Attention-Guided Masked
    Image Modeling", ECCV, sec. 3.2 (AttMask-High / AttMask-Low).
    """
    ratio = check_ratio(ratio)
    shape = get_masking("attention").check_shape(shape)
    if mode not in ("most", "least"):
        raise ValueError(f"masking strategy 'attention': mode must be 'most' or 'least' (got {mode!r})")
    if not 0.0 <= random_share <= 1.0:
        raise ValueError(f"masking strategy 'attention': random_share must be in [0, 1] (got {random_share!r})")
    if attention is None or tuple(attention.shape) != shape:
        got = None if attention is None else tuple(attention.shape)
        raise ValueError(f"masking strategy 'attention': attention has shape {got}, expected {shape}")
    device = generator.device
    ok = check_eligible(eligible, shape, device, "attention")
    B, L = shape[0], math.prod(shape[1:])
    scores = attention.detach().to(device=device, dtype=torch.float64).reshape(B, L)
    if bool(scores.isnan().any()):
        raise ValueError("masking strategy 'attention': attention holds NaN")
    ok = torch.ones(B, L, dtype=torch.bool, device=device) if ok is None else ok.reshape(B, L)
    if B == 0 or L == 0:
        return torch.zeros(shape, dtype=torch.bool, device=device)
    n = ok.sum(dim=1)  # (B,)
    k = torch.round(ratio * n.double()).long()
    k_rand = torch.round(random_share * k.double()).long()
    k_rank = k - k_rand

    # Rank: a uniformly random order first (the tie-break), then a stable sort by score, ineligible
    # positions last (an infinite score is clamped to the largest finite double, so it still sorts
    # before them).
    scores = torch.nan_to_num(scores, posinf=torch.finfo(torch.float64).max, neginf=torch.finfo(torch.float64).min)
    perm = torch.argsort(torch.rand(B, L, generator=generator, device=device), dim=1)  # (B, L)
    key = scores if mode == "least" else -scores  # ascending key: the first are the ones to hide
    key = key.masked_fill(~ok, float("inf")).gather(1, perm)
    order = perm.gather(1, torch.sort(key, dim=1, stable=True).indices)  # (B, L): positions, first to hide first
    take = torch.arange(L, device=device)[None, :] < k_rank[:, None]  # (B, L): the first k_rank of the order
    mask = torch.zeros(B, L, dtype=torch.bool, device=device).scatter_(1, order, take)
    if bool((k_rand > 0).any()):
        pick_uniform(ok & ~mask, k_rand, generator=generator, into=mask)
    return mask.reshape(shape)
