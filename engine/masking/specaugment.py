"""SpecAugment time and frequency masking on a time-frequency grid ``[B, F, T]``.

The grid is a grid of *cells*: mel bins x frames of a spectrogram, or the patch grid of a
spectrogram cut into patches (frequency first, time last). The paper replaces the masked cells
with the mean value; here only the mask is drawn, and applying it (mean value, mask token,
dropping the cells) is the model's job.

References: Park et al. 2019, "SpecAugment: A Simple Data Augmentation Method for Automatic Speech
Recognition", sec. 2 (frequency masking, time masking) and Table 1 (policies; LibriSpeech double,
LD: F = 27, mF = 2, T = 100, mT = 2, p = 1.0). Time warping (W) is not a mask and is left out.
"""

from __future__ import annotations

import math

import torch
from pydantic import Field

from engine.masking.registry import StrategyParams, check_eligible, check_ratio, get_masking, register_masking

_F = Field(27, ge=0, description="frequency mask parameter F: each frequency mask is f ~ U{0..F} bins wide "
                                 "(clipped to the number of bins; LD policy: 27)")
_MF = Field(2, ge=0, description="number of frequency masks mF (may overlap; LD policy: 2)")
_T = Field(100, ge=0, description="time mask parameter T: each time mask is t ~ U{0..min(T, p * frames)} "
                                  "frames wide (LD policy: 100)")
_MT = Field(2, ge=0, description="number of time masks mT (may overlap; LD policy: 2)")
_P = Field(1.0, ge=0.0, le=1.0, description="upper bound p on a time mask's width as a fraction of the "
                                            "frames (LD policy: 1.0)")


class TimeMaskParams(StrategyParams):
    """Parameters of :func:`time_mask` (SpecAugment's T, mT, p)."""

    T: int = _T
    mT: int = _MT
    p: float = _P


class FreqMaskParams(StrategyParams):
    """Parameters of :func:`freq_mask` (SpecAugment's F, mF)."""

    F: int = _F
    mF: int = _MF


class SpecAugmentParams(StrategyParams):
    """Parameters of :func:`specaugment_mask` (SpecAugment's F, mF, T, mT, p; default: LD policy)."""

    F: int = _F
    mF: int = _MF
    T: int = _T
    mT: int = _MT
    p: float = _P


def _intervals(B: int, n: int, size: int, max_width: int, generator: torch.Generator) -> torch.Tensor:
    """``n`` random intervals per row along an axis of ``size`` cells: ``[B, size]`` bool, their union.

    Width ``w ~ U{0..max_width}`` and start ``s ~ U{0..size - w}`` (integers, inclusive), as in
    SpecAugment; ``max_width`` must be ``<= size``. Draws ``2 * B * n`` float32 uniforms.
    """
    device = generator.device
    u = torch.rand(2, B, n, 1, generator=generator, device=device)
    width = torch.clamp((u[0] * (max_width + 1)).long(), max=max_width)  # (B, n, 1)
    start = torch.minimum((u[1] * (size - width + 1)).long(), size - width)
    pos = torch.arange(size, device=device)  # (size,)
    return ((pos >= start) & (pos < start + width)).any(dim=1)  # (B, size)


def _time_width(T: int, p: float, tau: int) -> int:
    # 1e-9 keeps e.g. 0.29 * 100 = 28.999999999999996 from flooring to 28.
    return max(0, min(T, math.floor(p * tau + 1e-9), tau))


def _spec(name, shape, ratio, generator, eligible, params, *, F, mF, T, mT, p):
    check_ratio(ratio)  # validated for a uniform API, but the widths set the budget
    strategy = get_masking(name)
    strategy.parse_params(params)
    shape = strategy.check_shape(shape)
    device = generator.device
    ok = check_eligible(eligible, shape, device, name)
    B, tau = shape[0], shape[-1]
    nu = shape[1] if len(shape) == 3 else 1
    # Frequency masks first, then time masks (the paper's order), each a fixed number of draws;
    # the union is built in one broadcast of a [B, nu, 1] and a [B, 1, tau] band mask.
    fm = tm = None
    if mF and len(shape) == 3:
        fm = _intervals(B, mF, nu, min(F, nu), generator).unsqueeze(2)  # (B, nu, 1)
    if mT:
        tm = _intervals(B, mT, tau, _time_width(T, p, tau), generator).unsqueeze(1)  # (B, 1, tau)
    if fm is not None and tm is not None:
        # Through uint8 views: torch's broadcasting bool OR is not vectorized on CPU (~50x slower).
        mask = (fm.view(torch.uint8) | tm.view(torch.uint8)).view(torch.bool)
    elif fm is not None or tm is not None:
        mask = (fm if fm is not None else tm).expand(B, nu, tau).contiguous()
    else:
        mask = torch.zeros(B, nu, tau, dtype=torch.bool, device=device)
    mask = mask.reshape(shape)
    return mask if ok is None else mask & ok


@register_masking("time_mask", params=TimeMaskParams, grid_dims=(1, 2), modalities=("audio",),
                  uses_ratio=False, exact=False,
                  summary="SpecAugment time masking: mT bands of up to T frames (Park et al. 2019)")
def time_mask(
    shape: tuple[int, ...],
    ratio: float = 0.0,
    *,
    generator: torch.Generator,
    eligible: torch.Tensor | None = None,
    T: int = 100,
    mT: int = 2,
    p: float = 1.0,
) -> torch.Tensor:
    """Mask ``mT`` bands of consecutive frames across all frequencies (SpecAugment time masking).

    Each band is ``t ~ U{0..min(T, floor(p * tau))}`` frames wide (``tau`` = number of frames) and
    starts at ``t0 ~ U{0..tau - t}``; bands may overlap (the union is masked), and a band of width
    0 masks nothing. The budget is set by ``T, mT, p``; ``ratio`` is validated but ignored.

    Edge cases: a one-frame spectrogram (``tau = 1``) with ``p < 1`` has ``floor(p * 1) = 0``, so
    every band is 0 wide and nothing is masked (with ``p = 1`` a band is 0 or 1 frame); ``T`` larger
    than ``tau`` is clipped to ``tau``; ``mT = 0`` or ``T = 0`` masks nothing; ``tau = 0`` gives an
    empty mask; ineligible cells are never masked (the mask is ANDed with ``eligible``), so an
    all-ineligible row is all False.

    Args:
        shape: ``(B, F, T)`` time-frequency cells (frequency first, time last), or ``(B, T)`` frames.
        ratio: ignored (must still be in [0, 1]).
        generator: explicit RNG (``2 * B * mT`` float32 uniforms on ``generator.device``).
        eligible: optional bool tensor of ``shape``.
        T: time mask parameter, ``>= 0`` (LD policy: 100).
        mT: number of time masks, ``>= 0`` (LD policy: 2).
        p: upper bound of a band's width as a fraction of the frames, in [0, 1] (LD policy: 1.0).

    Returns:
        Bool tensor of ``shape`` on ``generator.device``; True = masked.

    Raises:
        ConfigError: ``ratio`` outside [0, 1], or a bad parameter (named ``masking.params.<field>``).
        ValueError: ``shape`` is not ``(B, F, T)`` / ``(B, T)``, or ``eligible`` does not have ``shape``.

    References: Park et al. 2019, "SpecAugment", sec. 2, Table 1.
    """
    return _spec("time_mask", shape, ratio, generator, eligible, {"T": T, "mT": mT, "p": p},
                 F=0, mF=0, T=T, mT=mT, p=p)


@register_masking("freq_mask", params=FreqMaskParams, grid_dims=(2,), modalities=("audio",),
                  uses_ratio=False, exact=False,
                  summary="SpecAugment frequency masking: mF bands of up to F bins (Park et al. 2019)")
def freq_mask(
    shape: tuple[int, ...],
    ratio: float = 0.0,
    *,
    generator: torch.Generator,
    eligible: torch.Tensor | None = None,
    F: int = 27,
    mF: int = 2,
) -> torch.Tensor:
    """Mask ``mF`` bands of consecutive frequency rows over all frames (SpecAugment frequency masking).

    Each band is ``f ~ U{0..min(F, nu)}`` rows wide (``nu`` = number of frequency rows) and starts
    at ``f0 ~ U{0..nu - f}``; bands may overlap, and a band of width 0 masks nothing. The budget is
    set by ``F, mF``; ``ratio`` is validated but ignored.

    Edge cases: ``F`` larger than ``nu`` is clipped to ``nu`` (a band may then cover every row);
    ``mF = 0`` or ``F = 0`` masks nothing; ``nu = 0`` or no frames gives an empty mask; ineligible
    cells are never masked (AND with ``eligible``).

    Args:
        shape: ``(B, F, T)`` time-frequency cells (frequency first, time last).
        ratio: ignored (must still be in [0, 1]).
        generator: explicit RNG (``2 * B * mF`` float32 uniforms on ``generator.device``).
        eligible: optional bool tensor of ``shape``.
        F: frequency mask parameter, ``>= 0`` (LD policy: 27 of 80 mel bins).
        mF: number of frequency masks, ``>= 0`` (LD policy: 2).

    Returns:
        Bool ``[B, F, T]`` on ``generator.device``; True = masked.

    Raises:
        ConfigError: ``ratio`` outside [0, 1], or a bad parameter (named ``masking.params.<field>``).
        ValueError: ``shape`` is not ``(B, F, T)``, or ``eligible`` does not have ``shape``.

    References: Park et al. 2019, "SpecAugment", sec. 2, Table 1.
    """
    return _spec("freq_mask", shape, ratio, generator, eligible, {"F": F, "mF": mF},
                 F=F, mF=mF, T=0, mT=0, p=1.0)


@register_masking("specaugment", params=SpecAugmentParams, grid_dims=(2,), modalities=("audio",),
                  uses_ratio=False, exact=False,
                  summary="SpecAugment: mF frequency bands and mT time bands, LD policy (Park et al. 2019)")
def specaugment_mask(
    shape: tuple[int, ...],
    ratio: float = 0.0,
    *,
    generator: torch.Generator,
    eligible: torch.Tensor | None = None,
    F: int = 27,
    mF: int = 2,
    T: int = 100,
    mT: int = 2,
    p: float = 1.0,
) -> torch.Tensor:
    """SpecAugment's masks: ``mF`` frequency bands, then ``mT`` time bands (their union).

    The frequency bands are drawn as in :func:`freq_mask` and the time bands as in
    :func:`time_mask`, from the same generator in that order, so
    ``specaugment_mask(..., mT=0)`` equals ``freq_mask(...)`` for the same seed. The defaults are
    the LibriSpeech double policy (LD). ``ratio`` is validated but ignored.

    Edge cases: see :func:`freq_mask` and :func:`time_mask` (``F > nu`` is clipped; a one-frame
    spectrogram with ``p < 1`` gets no time mask; ineligible cells are never masked).

    Args:
        shape: ``(B, F, T)`` time-frequency cells (frequency first, time last).
        ratio: ignored (must still be in [0, 1]).
        generator: explicit RNG (``2 * B * (mF + mT)`` float32 uniforms on ``generator.device``).
        eligible: optional bool tensor of ``shape``.
        F, mF, T, mT, p: see :func:`freq_mask` and :func:`time_mask` (LD: 27, 2, 100, 2, 1.0).

    Returns:
        Bool ``[B, F, T]`` on ``generator.device``; True = masked.

    Raises:
        ConfigError: ``ratio`` outside [0, 1], or a bad parameter (named ``masking.params.<field>``).
        ValueError: ``shape`` is not ``(B, F, T)``, or ``eligible`` does not have ``shape``.

    References: Park et al. 2019, "SpecAugment", sec. 2, Table 1.
    """
    return _spec("specaugment", shape, ratio, generator, eligible,
                 {"F": F, "mF": mF, "T": T, "mT": mT, "p": p}, F=F, mF=mF, T=T, mT=mT, p=p)
