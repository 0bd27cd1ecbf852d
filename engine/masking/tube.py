"""Tube masking (VideoMAE): one random spatial mask per video, the same at every frame.

References: Tong et al. 2022, "VideoMAE: Masked Autoencoders are Data-Efficient Learners for
Self-Supervised Video Pre-Training", sec. 3.3 (tube masking with an extremely high ratio, 90%).
"""

from __future__ import annotations

import torch

from engine.masking.random import mask_lowest
from engine.masking.registry import check_eligible, check_ratio, get_masking, register_masking


@register_masking("tube", grid_dims=(3,), grids=("tube-3d",), exact=False,
                  summary="VideoMAE tube masking: one random spatial mask repeated over all frames (Tong et al. 2022)")
def tube_mask(
    shape: tuple[int, ...],
    ratio: float,
    *,
    generator: torch.Generator,
    eligible: torch.Tensor | None = None,
) -> torch.Tensor:
    """Mask the same ``round(ratio * n)`` spatial patches at every frame of each video (tubes).

    Each sample draws one uniform random spatial mask of exactly ``round(ratio * n_spatial)``
    patches (MAE's sort of noise, :func:`~engine.masking.random.mask_lowest`) and repeats it along
    time, so a masked patch is hidden at every frame and cannot be copied from a neighbouring frame
    (the temporal redundancy VideoMAE's tubes remove).

    Eligibility: a spatial position ``(y, x)`` is eligible only if it is eligible at *every* frame
    (a tube never crosses an ineligible cell), and ``n_spatial`` counts those positions. The count
    is exact per frame (``round(ratio * n_spatial)`` True in each ``mask[b, t]``), not over the
    whole ``T * H * W`` grid, which is why the registry records ``exact=False``: when eligibility
    varies over time, ``T * round(ratio * n_spatial)`` differs from ``round(ratio * n_eligible)``.

    Edge cases: ``ratio = 0`` masks nothing; ``ratio = 1`` masks every spatially eligible position
    at every frame; a row with no spatially eligible position is all False; ``T = 0`` or an empty
    spatial grid gives an empty mask; ``T = 1`` is MAE's random masking of one image.

    Args:
        shape: ``(B, T, H, W)``: frames (or temporal patch groups) x spatial patch grid.
        ratio: fraction of spatially eligible positions to mask, in [0, 1] (VideoMAE: 0.9).
        generator: explicit RNG (``B * H * W`` float32 uniforms on ``generator.device``).
        eligible: optional bool ``[B, T, H, W]``; see Eligibility above.

    Returns:
        Bool ``[B, T, H, W]`` on ``generator.device`` (contiguous); True = masked.

    Raises:
        ConfigError: ``ratio`` outside [0, 1].
        ValueError: ``shape`` is not ``(B, T, H, W)``, or ``eligible`` does not have ``shape``.

    References: Tong et al. 2022, "VideoMAE", sec. 3.3.
    """
    ratio = check_ratio(ratio)
    shape = get_masking("tube").check_shape(shape)
    B, T, H, W = shape
    device = generator.device
    ok = check_eligible(eligible, shape, device, "tube")
    noise = torch.rand(B, H * W, generator=generator, device=device)
    if ok is None:
        spatial = mask_lowest(noise, round(ratio * H * W))
    else:
        ok_s = ok.all(dim=1).reshape(B, H * W)  # eligible at every frame
        noise = noise.masked_fill(~ok_s, 2.0)
        n_mask = torch.round(ratio * ok_s.sum(dim=1, keepdim=True).double()).long()
        spatial = mask_lowest(noise, n_mask)
    return spatial.reshape(B, 1, H, W).expand(B, T, H, W).contiguous()
