"""Uniform random masking with an exact count per sample (MAE's ``random_masking``).

References: He et al. 2022, "Masked Autoencoders Are Scalable Vision Learners", sec. 3 (random
sampling of patches without replacement, following a uniform distribution).
"""

from __future__ import annotations

import torch

from engine.masking.registry import check_ratio, register_masking


@register_masking("random")
def random_mask(
    shape: tuple[int, ...],
    ratio: float,
    *,
    generator: torch.Generator,
    eligible: torch.Tensor | None = None,
) -> torch.Tensor:
    """Mask ``round(ratio * n_eligible)`` positions of each sample, uniformly without replacement.

    Like MAE, each sample gets one uniform noise value per position and the positions with the
    smallest noise are masked (argsort of the noise, no Python loop over samples). The count is over
    the flattened grid: with ``shape = (B, h, w)`` each row of ``mask.flatten(1)`` has exactly
    ``n_mask`` True values. ``round`` is round-half-to-even (Python's and torch's). Without
    ``eligible`` every row has the same count, ``round(ratio * L)`` with ``L = prod(shape[1:])``,
    which :func:`engine.masking.apply.gather_visible` needs.

    Args:
        shape: ``(B, *grid)``, e.g. ``(B, L)`` or ``(B, h, w)``; at least 2 dims.
        ratio: fraction of eligible positions to mask, in [0, 1]. 0 masks nothing; 1 masks every
            eligible position.
        generator: explicit RNG; the noise (``B * L`` float32 uniforms) is drawn on
            ``generator.device``, so with the usual CPU generator the mask is a CPU tensor that the
            caller moves to its device. No global RNG is touched.
        eligible: optional bool tensor of ``shape``; False positions are never masked and do not
            count towards ``n_eligible``. A row with no eligible position is all False.

    Returns:
        Bool tensor of ``shape`` on ``generator.device``; True = masked (removed from the encoder input).

    Raises:
        ConfigError: ``ratio`` outside [0, 1] (the message names ``masking.ratio`` and the value).
        ValueError: ``shape`` has fewer than 2 dims, or ``eligible`` does not have ``shape``.

    References: He et al. 2022, "Masked Autoencoders Are Scalable Vision Learners" (models_mae.random_masking).
    """
    ratio = check_ratio(ratio)
    shape = tuple(int(s) for s in shape)
    if len(shape) < 2:
        raise ValueError(f"random_mask: shape must be (B, *grid) with at least 2 dims (got {shape})")
    B, L = shape[0], 1
    for s in shape[1:]:
        L *= s
    device = generator.device

    noise = torch.rand(B, L, generator=generator, device=device)  # (B, L) in [0, 1)
    if eligible is None:
        n_mask = torch.full((B, 1), round(ratio * L), dtype=torch.long, device=device)
    else:
        if tuple(eligible.shape) != shape:
            raise ValueError(f"random_mask: eligible has shape {tuple(eligible.shape)}, expected {shape}")
        ok = eligible.to(device=device, dtype=torch.bool).reshape(B, L)
        # Ineligible positions sort after every eligible one (noise < 1 < 2), so they are never among
        # the first n_mask <= n_eligible positions. The RNG stream is the same with or without eligible.
        noise = noise.masked_fill(~ok, 2.0)
        n_eligible = ok.sum(dim=1, keepdim=True)  # (B, 1)
        n_mask = torch.round(ratio * n_eligible.double()).long()

    ids_shuffle = torch.argsort(noise, dim=1, stable=True)  # (B, L): positions, smallest noise first
    rank = torch.argsort(ids_shuffle, dim=1)  # (B, L): rank of each position in the shuffle
    mask = rank < n_mask  # (B, L): the n_mask smallest-noise positions
    return mask.reshape(shape)
