"""One contiguous segment per row: a whole sentence when one fits, else a random stretch (span completion).

``sentence_span`` hides 20-50% of a text as ONE contiguous segment, the unit of T5-style span
infilling (:mod:`engine.models.span_infill`): where the text has several sentences and one of them
has an acceptable length, that whole sentence; otherwise a contiguous stretch of random length and
place. :func:`segment_bounds` reads the segment back (start, length) and checks there is one.

References: Raffel et al. 2020, "Exploring the Limits of Transfer Learning with a Unified
Text-to-Text Transformer" (T5), JMLR 21, sec. 3.1.4 / 3.3.4 (span corruption, one sentinel per
span); Joshi et al. 2020, "SpanBERT", sec. 3.1 (contiguous spans rather than random tokens).
"""

from __future__ import annotations

import torch
from pydantic import Field, model_validator

from engine.masking.registry import (
    StrategyParams,
    check_eligible,
    check_ratio,
    get_masking,
    register_masking,
)
from engine.masking.units import unit_table

__all__ = ["SentenceSpanParams", "segment_bounds", "segment_length_range", "sentence_span_mask"]

# Tolerance of the fraction bounds: 0.3 * 10 is 3.0000000000000004 in floating point, and must count as 3.
_EPS = 1e-9


class SentenceSpanParams(StrategyParams):
    """Parameters of ``sentence_span``: the segment's length as a fraction of the row's eligible length."""

    min_frac: float = Field(0.2, gt=0.0, le=1.0,
                            description="shortest segment, as a fraction of the row's eligible tokens "
                                        "(rounded up, at least 1 token)")
    max_frac: float = Field(0.5, gt=0.0, le=1.0,
                            description="longest segment, as a fraction of the row's eligible tokens "
                                        "(rounded down; never every token of a row of 2 or more)")

    @model_validator(mode="after")
    def _order(self) -> "SentenceSpanParams":
        if self.min_frac > self.max_frac:
            raise ValueError(f"min_frac ({self.min_frac}) must be <= max_frac ({self.max_frac})")
        return self


def segment_length_range(n: torch.Tensor, min_frac: float, max_frac: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Allowed segment lengths ``[lo, hi]`` for rows of ``n`` eligible positions (int64 tensors, ``n``'s shape).

    ``lo = max(1, ceil(min_frac * n))``, ``hi = floor(max_frac * n)``, then ``hi`` is capped at
    ``n - 1`` when ``n >= 2`` (never the whole row) and raised to ``lo`` when below it, and ``lo`` is
    lowered to ``hi`` when above it. So ``1 <= lo <= hi <= max(n - 1, 1)`` for every ``n >= 1``; a
    row of 1 position gets ``lo = hi = 1``; ``n = 0`` gives ``lo = hi = 0``. Products are compared
    with a 1e-9 tolerance, so ``0.3 * 10`` counts as 3.
    """
    nf = n.double()
    lo = torch.ceil(min_frac * nf - _EPS).long().clamp_(min=1)
    hi = torch.floor(max_frac * nf + _EPS).long()
    cap = torch.where(n >= 2, n - 1, n)
    hi = torch.minimum(torch.maximum(hi, lo), cap)
    lo = torch.minimum(lo, hi)
    return lo, hi


@register_masking(
    "sentence_span", params=SentenceSpanParams, grid_dims=(1,), grids=("tokens-1d",), uses_ratio=False,
    exact=False, needs=("sentence_ids",),
    summary="one contiguous segment of 20-50% per row: a whole sentence where one fits "
            "(span completion, T5-style infilling, Raffel et al. 2020)",
)
def sentence_span_mask(
    shape: tuple[int, ...],
    ratio: float = 0.0,
    *,
    generator: torch.Generator,
    eligible: torch.Tensor | None = None,
    sentence_ids: torch.Tensor | None = None,
    min_frac: float = 0.2,
    max_frac: float = 0.5,
) -> torch.Tensor:
    """Mask ONE contiguous segment per row: a whole sentence when one fits, else a random stretch.

    Per row (all rows at once, no Python loop over rows or tokens):

    1. The row's positions are those that are eligible and inside a sentence (``sentence_ids >= 0``;
       ``-1`` marks ``[CLS]``, ``[SEP]`` and padding, which are never masked). ``n`` = their number.
       Positions are counted in this compressed order: a segment is contiguous over them, so it may
       bridge an ineligible position in the middle of a row (which stays unmasked).
    2. Allowed lengths ``[lo, hi]`` from :func:`segment_length_range` (``ceil(min_frac * n)`` to
       ``floor(max_frac * n)``, at least 1, never all ``n`` when ``n >= 2``).
    3. **Sentence**: if the row has at least 2 sentences (distinct ids among its positions) and at
       least one sentence whose size (its positions in the row) is in ``[lo, hi]``, one of those
       fitting sentences is chosen uniformly (``floor(u0 * k)``-th in increasing id order, ``k``
       fitting ones) and all its positions are masked. (A tokenizer's sentences are contiguous runs
       of tokens; ids that are not contiguous would give a non-contiguous mask.)
    4. **Otherwise** (one sentence, none fits, or no ``sentence_ids``): a length
       ``l = lo + floor(u1 * (hi - lo + 1))`` (uniform on ``[lo, hi]``) and a start
       ``s = floor(u2 * (n - l + 1))`` (uniform on ``0..n-l``); positions ``s..s+l-1`` (compressed
       order) are masked.

    A row with ``n = 0`` is all False; ``n = 1`` masks its single position (at least one token).
    The random numbers are one ``[B, 3]`` float64 uniform draw ``(u0, u1, u2)`` from ``generator``,
    so row ``b``'s mask depends only on row ``b`` and the seed. ``ratio`` is validated and ignored
    (``uses_ratio=False``): the budget is ``min_frac`` / ``max_frac``. Without ``sentence_ids`` (a
    direct call) every position is in one sentence, so the rule is step 4 alone; that is the
    behaviour intended for audio frames, which the registry will offer once an audio task passes
    ``sentence_ids`` (e.g. all 0, or voiced stretches) through ``draw_mask``.

    Args:
        shape: ``(B, L)`` tokens (or frames).
        ratio: validated (must be in [0, 1]) and ignored.
        generator: explicit RNG (the mask lives on ``generator.device``).
        eligible: optional ``[B, L]`` bool; False positions are never masked and do not count in ``n``.
        sentence_ids: ``[B, L]`` int sentence index of each token, ``-1`` outside any sentence (the
            tokenizer's), or None (one sentence per row).
        min_frac, max_frac: length bounds as fractions of ``n``, ``0 < min_frac <= max_frac <= 1``.

    Returns:
        ``[B, L]`` bool on ``generator.device``; True = masked. Each row's masked positions are one
        contiguous run in compressed order (:func:`segment_bounds` reads it back).

    Raises:
        ConfigError: ``ratio`` outside [0, 1]; bad ``min_frac`` / ``max_frac`` (names
            ``masking.params.<field>`` and the value).
        ValueError: ``shape`` is not ``(B, L)``, or ``eligible`` / ``sentence_ids`` do not have ``shape``.

    References: Raffel et al. 2020, T5, sec. 3.1.4 (span corruption); Joshi et al. 2020, SpanBERT.
    """
    check_ratio(ratio)
    strategy = get_masking("sentence_span")
    prm = strategy.parse_params({"min_frac": min_frac, "max_frac": max_frac})
    B, L = strategy.check_shape(shape)
    device = generator.device
    ok = check_eligible(eligible, (B, L), device, "sentence_span")
    if sentence_ids is not None:
        if tuple(sentence_ids.shape) != (B, L):
            raise ValueError(f"masking strategy 'sentence_span': sentence_ids has shape "
                             f"{tuple(sentence_ids.shape)}, expected {(B, L)}")
        units = sentence_ids.to(device=device, dtype=torch.int64)
    else:
        units = torch.zeros(B, L, dtype=torch.int64, device=device)
    ok = (units >= 0) if ok is None else ok & (units >= 0)
    if B == 0 or L == 0:
        return torch.zeros(B, L, dtype=torch.bool, device=device)

    u = torch.rand(B, 3, generator=generator, device=device, dtype=torch.float64)
    n = ok.sum(dim=1)  # (B,)
    lo, hi = segment_length_range(n, prm.min_frac, prm.max_frac)

    # Sentences: slot of each position, size and presence of each slot (slot 0 = outside).
    slot, sizes, rank = unit_table(units, ok)  # (B, L), (B, W), (B, W)
    present = rank >= 0
    fits = present & (sizes >= lo[:, None]) & (sizes <= hi[:, None]) & (present.sum(1, keepdim=True) >= 2)
    k = fits.sum(dim=1)  # (B,) fitting sentences
    pick = (u[:, 0] * k).long().clamp_(max=(k - 1).clamp(min=0))  # index among the fitting ones
    chosen = fits & (fits.cumsum(dim=1) - 1 == pick[:, None])  # (B, W): one True where k > 0
    by_sentence = chosen.gather(1, slot) & ok

    # Fallback: a random stretch of the compressed row.
    length = lo + (u[:, 1] * (hi - lo + 1)).long().clamp_(max=(hi - lo).clamp(min=0))
    start = (u[:, 2] * (n - length + 1)).long().clamp_(max=(n - length).clamp(min=0))
    pos = ok.cumsum(dim=1) - 1  # compressed index of each eligible position
    by_stretch = ok & (pos >= start[:, None]) & (pos < (start + length)[:, None])
    return torch.where((k > 0)[:, None], by_sentence, by_stretch)


def segment_bounds(mask: torch.Tensor, name: str = "span_mask") -> tuple[torch.Tensor, torch.Tensor]:
    """Start and length of the single contiguous masked run of each row of ``mask [B, L]``.

    Returns:
        ``(start [B], length [B])`` int64; a row with nothing masked has ``start = 0, length = 0``.

    Raises:
        ValueError: ``mask`` is not a bool ``[B, L]`` tensor, or a row has more than one run
            (the message names ``name`` and the first such row).
    """
    if mask.dim() != 2 or mask.dtype != torch.bool:
        raise ValueError(f"{name} must be a bool [B, L] tensor (got {mask.dtype} {tuple(mask.shape)})")
    starts = mask.clone()
    starts[:, 1:] &= ~mask[:, :-1]  # (B, L): first position of each run
    runs = starts.sum(dim=1)
    if bool((runs > 1).any()):
        row = int((runs > 1).nonzero()[0, 0])
        raise ValueError(f"{name}: row {row} has {int(runs[row])} masked runs; exactly one contiguous "
                         f"segment per row is expected (e.g. from the 'sentence_span' strategy)")
    length = mask.sum(dim=1)
    if mask.shape[1] == 0:
        return torch.zeros_like(length), length
    start = torch.where(length > 0, starts.long().argmax(dim=1), torch.zeros_like(length))
    return start, length
