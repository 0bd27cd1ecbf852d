"""Rule-based (deterministic) masks: a periodic pattern and a fixed region.

Neither strategy draws random numbers: the mask depends only on the shape, the parameters and
``eligible``, so every sample of a batch gets the same pattern. They are the controls of a masking
ablation ("does the model just interpolate a regular grid?", "can it inpaint a hole / predict the
future?") and have their own budget, so ``masking.ratio`` is ignored (``uses_ratio=False``); it is
still validated so that a bad config fails the same way for every strategy.

``periodic`` is the regular-lattice family of MAE's "grid" sampling, not that exact pattern: MAE's
grid keeps one patch of every 2x2 block (75% masked), ``periodic`` masks about 1/k of the units
(k = 2 with ``axis="flat"`` on a grid of odd width is a checkerboard).

References:
    He et al. 2022, "Masked Autoencoders Are Scalable Vision Learners", sec. 4 / Fig. 6 ("grid"
    sampling: keep one of every four patches); Xie et al. 2022, "SimMIM", sec. 4.1 (masking
    strategy ablations); Pathak et al. 2016, "Context Encoders: Feature Learning by Inpainting"
    (a fixed central region); masked prediction of future frames for "the last n frames".
"""

from __future__ import annotations

from typing import Literal

import torch
from pydantic import Field, ValidationInfo, field_validator

from engine.masking.registry import (
    StrategyParams,
    check_eligible,
    check_ratio,
    get_masking,
    register_masking,
)


def _finish(pattern: torch.Tensor, shape: tuple[int, ...], ok: torch.Tensor | None) -> torch.Tensor:
    """Broadcast a per-sample ``pattern`` (``shape[1:]``, bool) to ``shape`` and apply ``eligible``."""
    mask = pattern.unsqueeze(0).expand(shape)
    if ok is not None:
        return mask & ok
    return mask.contiguous()  # a real tensor: callers may write into it


# --- periodic ---------------------------------------------------------------------------------------


class PeriodicParams(StrategyParams):
    """Parameters of ``periodic``: mask every ``k``-th unit, starting at ``offset``."""

    k: int = Field(2, ge=1, description="period: every k-th unit is masked, about 1/k of the grid "
                                        "(k=1 masks everything)")
    offset: int = Field(0, ge=0, description="index of the first masked unit, in [0, k)")
    axis: Literal["flat", "first", "last"] = Field(
        "flat",
        description="flat: positions of the grid in row-major order; last: along the last grid axis "
                    "(whole time frames of [B, F, T], columns of [B, H, W], positions of [B, L]); "
                    "first: along the first grid axis (frequency bins, rows, video frames)",
    )

    # A field validator (not a model validator) so the error is located at masking.params.offset;
    # k is declared first, so it is already validated (absent from info.data when it is invalid).
    @field_validator("offset")
    @classmethod
    def _offset_below_k(cls, offset: int, info: ValidationInfo) -> int:
        k = info.data.get("k")
        if k is not None and offset >= k:
            raise ValueError(f"offset ({offset}) must be < k ({k})")
        return offset


@register_masking("periodic", params=PeriodicParams, grid_dims=(1, 2, 3), uses_ratio=False, stochastic=False,
                  summary="every k-th unit (position, row or column), deterministic "
                          "(regular grid as in MAE Fig. 6)")
def periodic_mask(
    shape: tuple[int, ...],
    ratio: float = 0.0,
    *,
    generator: torch.Generator,
    eligible: torch.Tensor | None = None,
    k: int = 2,
    offset: int = 0,
    axis: str = "flat",
) -> torch.Tensor:
    """Mask every ``k``-th unit starting at ``offset``: the same deterministic pattern for every sample.

    A unit with index ``i`` is masked when ``i % k == offset``. The index is

    - ``axis="flat"``: the position in the flattened grid (row-major), so on a ``[B, H, W]`` grid
      whose width is a multiple of ``k`` the pattern is whole columns, otherwise a diagonal lattice;
    - ``axis="last"``: the index along the last grid axis, so whole columns of ``[B, H, W]``, whole
      time frames of ``[B, F, T]`` (frequency first, time last) or positions of ``[B, L]`` are masked;
    - ``axis="first"``: the index along the first grid axis (rows of ``[B, H, W]``, frequency bins
      of ``[B, F, T]``, frames of ``[B, T, H, W]``; same as ``last`` for ``[B, L]``).

    The masked fraction is about ``1 / k`` of the grid (exactly ``ceil((n - offset) / k) / n`` along
    an axis of length ``n``). ``ratio`` is validated but ignored (``uses_ratio=False``).

    Edge cases: ``k = 1`` masks every eligible position; an axis shorter than ``offset + 1`` (e.g.
    ``T = 1`` with ``offset = 1``) gets nothing masked; an empty grid (``L = 0``) gives an empty mask.
    ``eligible`` only removes positions: the pattern is laid over grid positions, not over the
    eligible ones (a padded sequence keeps the same phase as an unpadded one), so an all-ineligible
    row is all False.

    Args:
        shape: ``(B, *grid)``: ``(B, L)``, ``(B, H, W)`` / ``(B, F, T)`` or ``(B, T, H, W)``.
        ratio: validated (must be in [0, 1]) and ignored.
        generator: only fixes the device of the mask (no random numbers are drawn).
        eligible: optional bool tensor of ``shape``; False positions are never masked.
        k: period (>= 1). offset: first masked index, ``0 <= offset < k``.
        axis: ``"flat"``, ``"first"`` or ``"last"`` (see above).

    Returns:
        Bool tensor of ``shape`` on ``generator.device``; True = masked.

    Raises:
        ConfigError: ``ratio`` outside [0, 1] (names ``masking.ratio``); a bad ``k`` / ``offset`` /
            ``axis`` (names ``masking.params.<field>`` and the value).
        ValueError: ``shape`` is not a 1-, 2- or 3-D grid, or ``eligible`` does not have ``shape``.

    References: He et al. 2022, MAE, Fig. 6 ("grid" sampling); Xie et al. 2022, SimMIM, sec. 4.1.
    """
    check_ratio(ratio)
    strategy = get_masking("periodic")
    prm = strategy.parse_params({"k": k, "offset": offset, "axis": axis})  # same errors as the config
    shape = strategy.check_shape(shape)
    device = generator.device
    ok = check_eligible(eligible, shape, device, "periodic")
    grid = shape[1:]

    if prm.axis == "flat":
        n = 1
        for s in grid:
            n *= s
        pattern = (torch.arange(n, device=device) % prm.k == prm.offset).reshape(grid)
    else:
        dim = 0 if prm.axis == "first" else len(grid) - 1
        line = torch.arange(grid[dim], device=device) % prm.k == prm.offset  # (n_axis,)
        view = [1] * len(grid)
        view[dim] = grid[dim]
        pattern = line.reshape(view).expand(grid)
    return _finish(pattern, shape, ok)


# --- region -----------------------------------------------------------------------------------------


class RegionParams(StrategyParams):
    """Parameters of ``region``: which side (or the centre) and how much of it."""

    region: Literal["right", "left", "top", "bottom", "center"] = Field(
        "right",
        description="right/left: the end/start of the last grid axis (time of [B, F, T], width of "
                    "[B, H, W], L of [B, L]); top/bottom: the start/end of the second-to-last axis "
                    "(2-D and 3-D grids only); center: a centred box over every grid axis",
    )
    size: float = Field(0.5, gt=0.0, le=1.0,
                        description="fraction of the axis length masked (center: of each axis), "
                                    "rounded half-to-even, at least 1 position")
    frames: int | None = Field(None, ge=1,
                               description="absolute number of positions along the axis; overrides "
                                           "size (region=right, frames=n: the last n frames)")


def _extent(n: int, size: float, frames: int | None) -> int:
    """Number of positions of an axis of length ``n`` the region covers (0 only when ``n == 0``)."""
    if n == 0:
        return 0
    m = frames if frames is not None else max(1, round(size * n))  # round(): half-to-even
    return min(m, n)


@register_masking("region", params=RegionParams, grid_dims=(1, 2, 3), uses_ratio=False, stochastic=False,
                  summary="a fixed region: right/left/top/bottom part or centre box "
                          "(Context Encoders; last n frames = future prediction)")
def region_mask(
    shape: tuple[int, ...],
    ratio: float = 0.0,
    *,
    generator: torch.Generator,
    eligible: torch.Tensor | None = None,
    region: str = "right",
    size: float = 0.5,
    frames: int | None = None,
) -> torch.Tensor:
    """Mask a fixed region of the grid: the same for every sample (inpainting / future prediction).

    The extent along an axis of length ``n`` is ``m = min(frames, n)`` when ``frames`` is set, else
    ``m = max(1, round(size * n))`` with round-half-to-even (``size=0.5`` of ``n=5`` is 2).

    - ``right`` / ``left``: the last / first ``m`` positions of the last grid axis (whole columns of
      ``[B, H, W]``, the last time frames of ``[B, F, T]``, the end of ``[B, L]``; for video
      ``[B, T, H, W]`` the right columns of every frame). ``region="right", frames=n`` is "mask
      the last n frames" (predict the future from the past).
    - ``top`` / ``bottom``: the first / last ``m`` positions of the second-to-last grid axis (rows
      of ``[B, H, W]``, low / high frequency bins of ``[B, F, T]``, rows of every video frame).
    - ``center``: a box of ``m_d`` positions along every grid axis ``d`` (``size`` is the fraction
      of each axis, ``frames`` the side length along each), starting at ``(n_d - m_d) // 2`` (when
      the leftover is odd the box sits one position nearer the start). On ``[B, T, H, W]`` the box
      is centred in time too.

    ``ratio`` is validated but ignored (``uses_ratio=False``); the masked fraction is set by ``size``.
    Edge cases: ``frames`` larger than the axis masks the whole axis; a one-frame spectrogram
    (``T = 1``) with ``right`` masks its single frame (the minimum is 1 position); an empty grid
    gives an empty mask; ``eligible`` only removes positions (an all-ineligible row is all False).

    Args:
        shape: ``(B, *grid)``: ``(B, L)``, ``(B, H, W)`` / ``(B, F, T)`` or ``(B, T, H, W)``.
        ratio: validated (must be in [0, 1]) and ignored.
        generator: only fixes the device of the mask (no random numbers are drawn).
        eligible: optional bool tensor of ``shape``; False positions are never masked.
        region: ``"right"``, ``"left"``, ``"top"``, ``"bottom"`` or ``"center"``.
        size: fraction in (0, 1] of the axis (of each axis for ``center``).
        frames: absolute extent (>= 1) in positions; overrides ``size``.

    Returns:
        Bool tensor of ``shape`` on ``generator.device``; True = masked.

    Raises:
        ConfigError: ``ratio`` outside [0, 1]; a bad ``region`` / ``size`` / ``frames`` (names
            ``masking.params.<field>`` and the value).
        ValueError: ``top`` / ``bottom`` on a 1-D grid ``[B, L]`` (names ``masking.params.region``
            and the shape), a shape that is not a 1-, 2- or 3-D grid, or ``eligible`` of another shape.

    References: Pathak et al. 2016, "Context Encoders: Feature Learning by Inpainting" (central
    region); He et al. 2022, MAE (masking as inpainting); future-frame prediction for the last frames.
    """
    check_ratio(ratio)
    strategy = get_masking("region")
    prm = strategy.parse_params({"region": region, "size": size, "frames": frames})
    shape = strategy.check_shape(shape)
    device = generator.device
    ok = check_eligible(eligible, shape, device, "region")
    grid = shape[1:]
    nd = len(grid)

    def band(dim: int, lo: int, hi: int) -> torch.Tensor:
        idx = torch.arange(grid[dim], device=device)
        view = [1] * nd
        view[dim] = grid[dim]
        return ((idx >= lo) & (idx < hi)).reshape(view)

    if prm.region in ("top", "bottom"):
        if nd < 2:
            raise ValueError(
                f"masking.params.region: {prm.region!r} needs a 2-D or 3-D grid (rows / frequency "
                f"bins); shape {shape} is a 1-D sequence [B, L] (use 'left' or 'right')"
            )
        dim = nd - 2
    else:
        dim = nd - 1

    if prm.region == "center":
        pattern = torch.ones(grid, dtype=torch.bool, device=device)
        for d, n in enumerate(grid):
            m = _extent(n, prm.size, prm.frames)
            lo = (n - m) // 2
            pattern = pattern & band(d, lo, lo + m)
    else:
        n = grid[dim]
        m = _extent(n, prm.size, prm.frames)
        lo, hi = (n - m, n) if prm.region in ("right", "bottom") else (0, m)
        pattern = band(dim, lo, hi).expand(grid)
    return _finish(pattern, shape, ok)
