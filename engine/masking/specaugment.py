"""SpecAugment time and frequency masking on a time-frequency grid ``[B, F, T]``.

The grid is a grid of *cells*: mel bins x frames of a spectrogram, or the patch grid of a
spectrogram cut into patches (frequency first, time last). The paper replaces the masked cells
with the mean value; here only the mask is drawn, and applying it (mean value, mask token,
dropping the cells) is the model's job.

References: Park et al. 2019, "SpecAugment: A Simple Data Augmentation Method for Automatic Speech
Recognition", sec. 2 (frequency masking, time masking) and Table 1 (policies). The defaults are the
Switchboard strong policy, SS: F = 27, mF = 2, T = 40, mT = 2, p = 0.2, whose bound p = 0.2 keeps a
time mask within a fifth of the utterance however short it is. The LibriSpeech double policy (LD: T =
100, p = 1.0), made for utterances of 10 s and more, would let one mask hide a whole spoken digit.
As in the paper, ``tau`` is the utterance's own length: the frames from a row's first to its last
eligible frame (silence padding after a short clip is neither counted nor masked). Time warping
(W) is not a mask and is left out.
"""

from __future__ import annotations

import math

import torch
from pydantic import Field

from engine.masking.registry import StrategyParams, check_eligible, check_ratio, get_masking, register_masking

_F = Field(27, ge=0, description="frequency mask parameter F: each frequency mask is f ~ U{0..F} bins wide "
                                 "(clipped to the number of bins; on a grid of patches, F // bins per patch "
                                 "rows; SS policy: 27)")
_MF = Field(2, ge=0, description="number of frequency masks mF (may overlap; SS policy: 2)")
_T = Field(40, ge=0, description="time mask parameter T: each time mask is t ~ U{0..min(T, p * frames)} "
                                 "frames wide, frames counted over the clip itself (on a grid of patches or "
                                 "tokens, T // frames per position columns; SS policy: 40)")
_MT = Field(2, ge=0, description="number of time masks mT (may overlap; SS policy: 2)")
_P = Field(0.2, ge=0.0, le=1.0, description="upper bound p on a time mask's width as a fraction of the "
                                            "clip's frames (SS policy: 0.2)")


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
    """Parameters of :func:`specaugment_mask` (SpecAugment's F, mF, T, mT, p; default: SS policy)."""

    F: int = _F
    mF: int = _MF
    T: int = _T
    mT: int = _MT
    p: float = _P


def _intervals(B: int, n: int, size: int, max_width, generator: torch.Generator,
               lo: torch.Tensor | None = None, span: torch.Tensor | None = None) -> torch.Tensor:
    """``n`` random intervals per row along an axis of ``size`` cells: ``[B, size]`` bool, their union.

    Width ``w ~ U{0..max_width}`` and start ``s ~ lo + U{0..span - w}`` (integers, inclusive), as in
    SpecAugment. ``lo``/``span``: long ``[B]``, each row's own stretch ``[lo, lo + span)`` (default
    the whole axis); ``max_width``: an int or long ``[B]``, ``<= span``. Draws ``2 * B * n`` float32
    uniforms, the same values for the same seed whatever the stretches.
    """
    device = generator.device
    u = torch.rand(2, B, n, 1, generator=generator, device=device)
    if span is None:
        width = torch.clamp((u[0] * (max_width + 1)).long(), max=max_width)  # (B, n, 1)
        start = torch.minimum((u[1] * (size - width + 1)).long(), size - width)
    else:
        mw, sp = torch.as_tensor(max_width, device=device).view(B, 1, 1), span.view(B, 1, 1)
        width = torch.minimum((u[0] * (mw + 1)).long(), mw)
        start = lo.view(B, 1, 1) + torch.minimum((u[1] * (sp - width + 1)).long(), sp - width)
    pos = torch.arange(size, device=device)  # (size,)
    return ((pos >= start) & (pos < start + width)).any(dim=1)  # (B, size)


def _time_width(T: int, p: float, tau):
    """``min(T, floor(p * tau), tau)``, at least 0, for an int ``tau`` or a long tensor of them."""
    # 1e-9 keeps e.g. 0.29 * 100 = 28.999999999999996 from flooring to 28.
    if isinstance(tau, torch.Tensor):
        bound = torch.floor(p * tau.double() + 1e-9).long()
        return torch.clamp(torch.minimum(torch.minimum(bound, tau), torch.full_like(tau, T)), min=0)
    return max(0, min(T, math.floor(p * tau + 1e-9), tau))


def _utterance(ok: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row's utterance on the time axis: ``(first eligible frame, frames from it to the last
    eligible one)``, long ``[B]`` each (``(0, 0)`` for a row with none). ``ok``: ``[B, (F,) T]`` bool."""
    cols = ok.any(dim=1) if ok.dim() == 3 else ok  # (B, tau)
    tau = cols.shape[1]
    has = cols.any(dim=1)
    first = cols.long().argmax(dim=1)
    last = tau - 1 - cols.flip(1).long().argmax(dim=1)
    return torch.where(has, first, 0), torch.where(has, last - first + 1, 0)


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
    if mT and ok is None:
        tm = _intervals(B, mT, tau, _time_width(T, p, tau), generator).unsqueeze(1)  # (B, 1, tau)
    elif mT:  # the paper's tau is the utterance's length: each row's own eligible frames
        lo, span = _utterance(ok.reshape(B, nu, tau))
        tm = _intervals(B, mT, tau, _time_width(T, p, span), generator, lo, span).unsqueeze(1)
    if fm is not None and tm is not None:
        # Through uint8 views: torch's broadcasting bool OR is not vectorized on CPU (~50x slower).
        mask = (fm.view(torch.uint8) | tm.view(torch.uint8)).view(torch.bool)
    elif fm is not None or tm is not None:
        mask = (fm if fm is not None else tm).expand(B, nu, tau).contiguous()
    else:
        mask = torch.zeros(B, nu, tau, dtype=torch.bool, device=device)
    mask = mask.reshape(shape)
    return mask if ok is None else mask & ok


@register_masking("time_mask", params=TimeMaskParams, grid_dims=(1, 2), grids=("frames-1d", "spec-2d"),
                  uses_ratio=False, exact=False,
                  summary="SpecAugment time masking: mT bands of up to T frames (Park et al. 2019)")
def time_mask(
    shape: tuple[int, ...],
    ratio: float = 0.0,
    *,
    generator: torch.Generator,
    eligible: torch.Tensor | None = None,
    T: int = 40,
    mT: int = 2,
    p: float = 0.2,
) -> torch.Tensor:
    """Mask ``mT`` bands of consecutive frames across all frequencies (SpecAugment time masking).

    Each band is ``t ~ U{0..min(T, floor(p * tau))}`` frames wide and starts at ``t0 ~ first +
    U{0..tau - t}``, where ``tau`` is the utterance's length: the frames from the row's ``first`` to
    its last eligible frame (the whole axis without ``eligible``), so silence padding after a short
    clip neither widens nor swallows a band. Bands may overlap (the union is masked), and a band of
    width 0 masks nothing. The budget is set by ``T, mT, p``; ``ratio`` is validated but ignored.

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
        T: time mask parameter, ``>= 0`` (SS policy: 40).
        mT: number of time masks, ``>= 0`` (SS policy: 2).
        p: upper bound of a band's width as a fraction of the utterance's frames, in [0, 1] (SS policy: 0.2).

    Returns:
        Bool tensor of ``shape`` on ``generator.device``; True = masked.

    Raises:
        ConfigError: ``ratio`` outside [0, 1], or a bad parameter (named ``masking.params.<field>``).
        ValueError: ``shape`` is not ``(B, F, T)`` / ``(B, T)``, or ``eligible`` does not have ``shape``.

    References: Park et al. 2019, "SpecAugment", sec. 2, Table 1.
    """
    return _spec("time_mask", shape, ratio, generator, eligible, {"T": T, "mT": mT, "p": p},
                 F=0, mF=0, T=T, mT=mT, p=p)


@register_masking("freq_mask", params=FreqMaskParams, grid_dims=(2,), grids=("spec-2d",),
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
        F: frequency mask parameter, ``>= 0`` (SS policy: 27 of 80 mel bins).
        mF: number of frequency masks, ``>= 0`` (SS policy: 2).

    Returns:
        Bool ``[B, F, T]`` on ``generator.device``; True = masked.

    Raises:
        ConfigError: ``ratio`` outside [0, 1], or a bad parameter (named ``masking.params.<field>``).
        ValueError: ``shape`` is not ``(B, F, T)``, or ``eligible`` does not have ``shape``.

    References: Park et al. 2019, "SpecAugment", sec. 2, Table 1.
    """
    return _spec("freq_mask", shape, ratio, generator, eligible, {"F": F, "mF": mF},
                 F=F, mF=mF, T=0, mT=0, p=1.0)


@register_masking("specaugment", params=SpecAugmentParams, grid_dims=(2,), grids=("spec-2d",),
                  uses_ratio=False, exact=False,
                  summary="SpecAugment: mF frequency bands and mT time bands, SS policy (Park et al. 2019)")
def specaugment_mask(
    shape: tuple[int, ...],
    ratio: float = 0.0,
    *,
    generator: torch.Generator,
    eligible: torch.Tensor | None = None,
    F: int = 27,
    mF: int = 2,
    T: int = 40,
    mT: int = 2,
    p: float = 0.2,
) -> torch.Tensor:
    """SpecAugment's masks: ``mF`` frequency bands, then ``mT`` time bands (their union).

    The frequency bands are drawn as in :func:`freq_mask` and the time bands as in
    :func:`time_mask`, from the same generator in that order, so
    ``specaugment_mask(..., mT=0)`` equals ``freq_mask(...)`` for the same seed. The defaults are
    the Switchboard strong policy (SS). ``ratio`` is validated but ignored.

    Edge cases: see :func:`freq_mask` and :func:`time_mask` (``F > nu`` is clipped; a one-frame
    spectrogram with ``p < 1`` gets no time mask; ineligible cells are never masked).

    Args:
        shape: ``(B, F, T)`` time-frequency cells (frequency first, time last).
        ratio: ignored (must still be in [0, 1]).
        generator: explicit RNG (``2 * B * (mF + mT)`` float32 uniforms on ``generator.device``).
        eligible: optional bool tensor of ``shape``.
        F, mF, T, mT, p: see :func:`freq_mask` and :func:`time_mask` (SS: 27, 2, 40, 2, 0.2).

    Returns:
        Bool ``[B, F, T]`` on ``generator.device``; True = masked.

    Raises:
        ConfigError: ``ratio`` outside [0, 1], or a bad parameter (named ``masking.params.<field>``).
        ValueError: ``shape`` is not ``(B, F, T)``, or ``eligible`` does not have ``shape``.

    References: Park et al. 2019, "SpecAugment", sec. 2, Table 1.
    """
    return _spec("specaugment", shape, ratio, generator, eligible,
                 {"F": F, "mF": mF, "T": T, "mT": mT, "p": p}, F=F, mF=mF, T=T, mT=mT, p=p)
