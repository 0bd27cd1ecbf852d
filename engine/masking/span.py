"""Span masking (SpanBERT): contiguous spans with random lengths until an exact budget is spent.

The sampler is fully vectorised and does no sort: for every row it draws a fixed block of span
lengths, keeps the prefix that fills the budget (cutting the last span), splits the unmasked
positions into gaps with one Dirichlet(1, ..., 1) draw, and paints the spans with a difference
array and one cumulative sum. The cost is ``O(B * L)``; the random numbers of a row come from one
``[B, n_draws]`` uniform tensor whose width depends only on ``L``, the ratio and the parameters, so
row ``b``'s mask does not depend on the other rows of the batch (barring a vanishingly rare redraw).

References: Joshi et al. 2020, "SpanBERT: Improving Pre-training by Representing and Predicting
Spans", TACL, sec. 3.1 (span lengths from Geo(p = 0.2) restricted to l_max = 10, mean 3.8; 15%
budget); Baevski et al. 2020, "wav2vec 2.0", sec. 3.1 / 4.2 (fixed span length M = 10 over latent
frames; ``transformers``' ``_compute_mask_indices``).
"""

from __future__ import annotations

import math
from typing import Literal

import torch
from pydantic import Field

from engine.masking.random import mask_lowest
from engine.masking.registry import (
    StrategyParams,
    check_eligible,
    check_ratio,
    get_masking,
    register_masking,
)


class SpanParams(StrategyParams):
    """Parameters of ``span``: the span length distribution."""

    p: float = Field(0.2, gt=0.0, le=1.0,
                     description="geometric parameter: P(length = l) is proportional to p(1-p)^(l-1) "
                                 "on 1..max_len (SpanBERT: 0.2, mean length 3.8); ignored when "
                                 "lengths=fixed")
    max_len: int = Field(10, ge=1, description="longest span, in positions (SpanBERT l_max = 10; "
                                               "the fixed span length for lengths=fixed, wav2vec 2.0: 10)")
    lengths: Literal["geometric", "fixed"] = Field(
        "geometric",
        description="geometric: SpanBERT's length distribution; fixed: every span has max_len "
                    "positions (wav2vec 2.0's mask_length), except the one cut to fit the budget",
    )


def span_length_pmf(p: float, max_len: int) -> list[float]:
    """Probabilities of span lengths ``1..max_len`` (index 0 is length 1) for ``lengths="geometric"``.

    The geometric distribution restricted to ``1..max_len`` and renormalised, as in SpanBERT's code
    (``PairWithSpanMaskingScheme.len_distrib``): ``P(l) = p (1-p)^(l-1) / (1 - (1-p)^max_len)``.
    With ``p = 0.2, max_len = 10`` the mean is 3.797, the paper's "3.8" (clipping the excess to
    ``max_len`` instead would give a mean of 4.46).
    """
    q = 1.0 - p
    w = [p * q ** (i - 1) for i in range(1, max_len + 1)]
    s = sum(w)
    return [x / s for x in w]


def _draw_lengths(u: torch.Tensor, p: float, max_len: int) -> torch.Tensor:
    """Inverse-CDF draw of restricted-geometric lengths in ``1..max_len`` from uniforms ``u`` in [0, 1).

    ``F(l) = (1 - q^l) / (1 - q^M)`` with ``q = 1 - p``, so ``l = floor(log(1 - u (1 - q^M)) / log q) + 1``;
    the argument of the log lies in ``(q^M, 1]``, which keeps ``l`` in ``1..M`` (clamped against rounding).
    """
    if p >= 1.0 or max_len == 1:
        return torch.ones(u.shape, dtype=torch.int64, device=u.device)
    q = 1.0 - p
    x = 1.0 - u * (1.0 - q ** max_len)
    return (torch.log(x) * (1.0 / math.log(q))).long().add_(1).clamp_(1, max_len)


def _span_bound(b_max: int, p: float, max_len: int) -> int:
    """How many geometric spans to draw per row so that their total reaches ``b_max`` almost surely.

    ``b_max`` spans always suffice (every length is >= 1), but with mean length ``mu`` about
    ``b_max / mu`` are needed. The bound solves ``K mu - z sigma sqrt(K) >= b_max`` with ``z = 6``
    (normal approximation of the sum) plus 4 spans of headroom. The exact shortfall probability
    (by convolution of the length distribution) is below 1e-12 per row for budgets up to 333 and
    p in [0.01, 0.5]; the caller checks and redraws with ``K = b_max`` if it ever happens.
    """
    pmf = span_length_pmf(p, max_len)
    mu = sum((i + 1) * w for i, w in enumerate(pmf))
    sigma = math.sqrt(max(sum((i + 1) ** 2 * w for i, w in enumerate(pmf)) - mu * mu, 0.0))
    z = 6.0
    s = (z * sigma + math.sqrt((z * sigma) ** 2 + 4.0 * mu * b_max)) / (2.0 * mu)
    return min(b_max, math.ceil(s * s) + 4)


@register_masking("span", params=SpanParams, grid_dims=(1,), grids=("seq-1d",), exact=True,
                  summary="contiguous spans, geometric or fixed length, exact budget "
                          "(SpanBERT, Joshi et al. 2020; wav2vec 2.0)")
def span_mask(
    shape: tuple[int, ...],
    ratio: float,
    *,
    generator: torch.Generator,
    eligible: torch.Tensor | None = None,
    p: float = 0.2,
    max_len: int = 10,
    lengths: str = "geometric",
) -> torch.Tensor:
    """Mask contiguous spans until exactly ``round(ratio * n_eligible)`` positions of each row are masked.

    Algorithm (per row, all rows at once):

    1. Budget ``b = round(ratio * n)`` (half-to-even) with ``n`` the row's eligible count.
    2. Span lengths: ``lengths="geometric"`` draws i.i.d. lengths from SpanBERT's geometric
       distribution restricted to ``1..max_len`` (see :func:`span_length_pmf`; inverse CDF);
       ``lengths="fixed"`` uses ``max_len`` for every span (wav2vec 2.0). Spans are taken in order
       until their total reaches ``b``; the last one is **cut** so the total is exactly ``b`` (so
       one span per row can be shorter than drawn, or than ``max_len`` with fixed lengths).
    3. Placement: the ``k`` spans keep their drawn order (left to right, or right to left in a
       random half of the rows, so the cut span is at either end); the ``U = n - b`` unmasked positions are
       split into ``k + 1`` gaps (before, between, after). When ``U >= k - 1`` every interior gap
       gets 1 position first, so spans never touch and each maximal run of masked positions is
       exactly one span (a histogram of run lengths recovers the drawn lengths). The remaining
       ``slack`` positions are spread by a Dirichlet(1, ..., 1) draw (normalised cumulative
       exponentials, i.e. ``k`` sorted continuous uniforms ``x_j``) discretised as
       ``floor((slack + 1) * x_j)``: ``k`` sorted discrete uniforms on ``0..slack``. So the gap
       vector is the uniform distribution over the simplex, discretised: symmetric (the first and
       last gaps have the same law, the mask of a reversed row has the same law) but not exactly
       uniform over integer compositions (it weighs them like sorted i.i.d. draws do). The
       masking frequency is not flat within a span length of either end of the row: lower for
       long spans (an end position is covered only by a span starting near it), higher for very
       short spans (separators sit only between spans). When ``U < k - 1`` (a high ratio with short spans) there is no room for
       separators and spans may touch. Spans never overlap, so the count is exact (``exact=True``).

    This is not SpanBERT's sampler, which picks uniform random anchors and retries on collisions
    (rejection sampling, spans may merge, a Python loop per sequence); the marginal span lengths
    are the same, the placement is a uniform spread with no overlap. SpanBERT also measures spans
    in whole words; here a span is counted in positions (use whole-word strategies for words).

    ``eligible``: spans are laid over the row's eligible positions only (the row is compressed to
    its ``n`` eligible positions, spans are placed there and scattered back), so a span can
    **bridge** an ineligible position (e.g. a special token inside the sequence): it is then split
    into two runs in the output and its masked positions are still exactly its length.

    Edge cases: ``ratio = 0`` or ``L = 0`` masks nothing; ``ratio = 1`` masks every eligible position;
    a row shorter than a span gets one span cut to the budget; an all-ineligible row is all False.

    Args:
        shape: ``(B, L)``: tokens or frames.
        ratio: fraction of eligible positions to mask, in [0, 1] (SpanBERT: 0.15; wav2vec 2.0's
            start probability 0.065 with M = 10 covers about 49% of the frames).
        generator: explicit RNG; one ``torch.rand`` of ``[B, 2K + 2]`` (geometric) or ``[B, K + 2]``
            (fixed) float32 uniforms on ``generator.device``, ``K`` a bound on the span count that
            depends only on ``L``, ``ratio`` and the parameters (geometric: a high-probability bound;
            in the < 1e-12-per-row event that it is too small, the batch is redrawn with ``K`` =
            the largest budget, from the same generator, so the mask is still a function of the seed).
        eligible: optional ``[B, L]`` bool; False positions are never masked and do not count in ``n``.
        p: geometric parameter in (0, 1] (SpanBERT 0.2); ignored for fixed lengths.
        max_len: longest span (>= 1), the fixed length for ``lengths="fixed"``.
        lengths: ``"geometric"`` or ``"fixed"``.

    Returns:
        ``[B, L]`` bool on ``generator.device``; True = masked.

    Raises:
        ConfigError: ``ratio`` outside [0, 1] (names ``masking.ratio``); a bad ``p`` / ``max_len`` /
            ``lengths`` (names ``masking.params.<field>`` and the value).
        ValueError: ``shape`` is not ``(B, L)``, or ``eligible`` does not have ``shape``.

    References: Joshi et al. 2020, SpanBERT, sec. 3.1; Baevski et al. 2020, wav2vec 2.0, sec. 3.1.
    """
    ratio = check_ratio(ratio)
    strategy = get_masking("span")
    prm = strategy.parse_params({"p": p, "max_len": max_len, "lengths": lengths})
    B, L = strategy.check_shape(shape)
    device = generator.device
    ok = check_eligible(eligible, (B, L), device, "span")
    M = prm.max_len

    # The largest budget any row can have (n <= L and round is monotone): it fixes the number of
    # random draws per row independently of `eligible` and of the other rows.
    b_max = round(ratio * L)
    if b_max == 0 or B == 0:
        return torch.zeros(B, L, dtype=torch.bool, device=device)
    fixed = prm.lengths == "fixed"
    K = -(-b_max // M) if fixed else _span_bound(b_max, prm.p, M)

    if ok is None:
        n = torch.full((B, 1), L, dtype=torch.int64, device=device)
        budget = torch.full((B, 1), b_max, dtype=torch.int64, device=device)
    else:
        n = ok.sum(dim=1, keepdim=True)  # (B, 1)
        budget = torch.round(ratio * n.double()).long()

    j = torch.arange(K, device=device)
    # Columns of u: K + 1 gap exponentials, then K span lengths (geometric), then the mirror bit.
    u = torch.rand(B, (K + 1) + (0 if fixed else K) + 1, generator=generator, device=device)
    if fixed:
        before = j * M  # (K,): masked positions of the previous spans
        cut = (budget - before).clamp_(0, M)  # (B, K): M, then the cut span, then 0 (dropped)
        k = (budget + (M - 1)) // M  # (B, 1) spans per row
    else:
        lens = _draw_lengths(u[:, K + 1:-1], prm.p, M)  # (B, K)
        if K < b_max and bool((lens.sum(dim=1, keepdim=True) < budget).any()):
            # The bound failed for some row (probability < 1e-12 per row): redraw the whole batch
            # with K = b_max, which always suffices. Still a pure function of the seed.
            K = b_max
            j = torch.arange(K, device=device)
            u = torch.rand(B, 2 * K + 2, generator=generator, device=device)
            lens = _draw_lengths(u[:, K + 1:-1], prm.p, M)
        # Keep spans while the budget is not spent; cut the one that crosses it.
        before = lens.cumsum(dim=1) - lens  # (B, K)
        cut = torch.minimum(lens, budget - before).clamp_(min=0)  # 0 for dropped spans
        k = (before < budget).sum(dim=1, keepdim=True)  # (B, 1) spans per row

    # Gaps: U unmasked positions around k spans; a 1-position separator between spans if possible.
    free = n - budget  # (B, 1)
    sep = (free >= k - 1).long()  # 1: spans separated, 0: no room, spans may touch
    slack = free - sep * (k - 1).clamp(min=0)  # positions spread at random over the k + 1 gaps
    # Dirichlet(1,...,1) over the k + 1 gaps of the row: normalised cumulative exponentials
    # x_j = C_j / C_k (j < k) are distributed as k sorted uniforms; -log(1 - u) is finite for u in
    # [0, 1). The boundaries floor((slack + 1) x_j) are k sorted discrete uniforms on 0..slack, which
    # is symmetric under reversal (floor(slack * x_j) would leave the last gap >= 1 always and never
    # mask the last position). Non-decreasing, since cumsum, division and floor are monotone.
    fdt = torch.float32 if L < 2 ** 24 else torch.float64
    csum = torch.log1p(-u[:, : K + 1].to(fdt)).neg_().cumsum(dim=1)  # (B, K + 1)
    total = csum.gather(1, k).clamp_(min=torch.finfo(fdt).tiny)
    extra = csum[:, :K].div_(total).mul_((slack + 1).to(fdt)).long()  # floor: values are >= 0
    extra = torch.minimum(extra, slack)  # x_j == 1 only if the later exponentials are all 0

    start = extra.add_(sep * j).add_(before)  # (B, K)
    end = start + cut
    bounds = torch.cat([start, end], dim=1)  # (B, 2K): +1 at starts, -1 at ends
    # Mirror half of the rows (x -> n - x), so that the cut span, the last one drawn, is at either
    # end with equal probability and the mask's law is symmetric under reversal of the row.
    flip = u[:, -1:] < 0.5  # (B, 1)
    bounds = torch.where(flip, n - torch.cat([end, start], dim=1), bounds).clamp_(0, L)
    # Difference array: +1 at each kept span's start, -1 at its end (dropped spans have cut = 0
    # and add +1 - 1 at the same index). Spans never overlap, so the running sum is 0 or 1.
    # int8 on CPU (a quarter of int32's memory traffic); int32 elsewhere, where atomics need it.
    idt = torch.int8 if device.type == "cpu" else torch.int32
    w = (cut > 0).to(idt)
    diff = torch.zeros(B, L + 1, dtype=idt, device=device)
    diff.scatter_add_(1, bounds, torch.cat([w, -w], dim=1))
    masked = diff.cumsum(dim=1, dtype=idt)[:, :L].bool()  # (B, L) in compressed coordinates

    if ok is None:
        return masked
    # Compressed index of each eligible position = (number of eligible positions before it).
    rank = (ok.cumsum(dim=1) - 1).clamp_(min=0)
    return ok & masked.gather(1, rank)


# --- span starts (wav2vec 2.0) ------------------------------------------------------------------------


class SpanStartsParams(StrategyParams):
    """Parameters of ``span_starts``: the start probability and the span length (wav2vec 2.0's p and M)."""

    p: float = Field(0.065, gt=0.0, le=1.0,
                     description="probability that a position starts a span (wav2vec 2.0: p = 0.065, which "
                                 "with M = 10 masks about 49% of the frames)")
    length: int = Field(10, ge=1, description="span length M in positions (wav2vec 2.0: 10 frames of 20 ms)")
    min_spans: int = Field(1, ge=0, description="at least this many spans in a row with an eligible position "
                                                "(Hugging Face's mask_time_min_masks: 2), so every row has a target")


@register_masking("span_starts", params=SpanStartsParams, grid_dims=(1,), grids=("seq-1d",),
                  uses_ratio=False, exact=False,
                  summary="each position starts a span of M with probability p; spans may overlap "
                          "(wav2vec 2.0, Baevski et al. 2020)")
def span_starts_mask(
    shape: tuple[int, ...],
    ratio: float = 0.0,
    *,
    generator: torch.Generator,
    eligible: torch.Tensor | None = None,
    p: float = 0.065,
    length: int = 10,
    min_spans: int = 1,
) -> torch.Tensor:
    """Mask the ``length`` positions from every span start; each eligible position is a start with
    probability ``p`` (wav2vec 2.0's temporal masking: "we sample p = 0.065 of all time-steps to be
    starting indices and mask the subsequent M = 10 time-steps"). Spans may overlap.

    Algorithm (all rows at once): one uniform ``u [B, L]``; a position is a start when it is
    eligible and ``u < p``. A row with fewer than ``min_spans`` starts (and an eligible position)
    gets the eligible non-start positions with the smallest ``u`` as starts until it has
    ``min(min_spans, n_eligible)`` (the extra starts are uniform among them). A position is masked
    when a start lies in the ``length`` positions ending at it (a running count of starts,
    ``cumsum[t] - cumsum[t - length] > 0``), then ANDed with ``eligible``.

    The masked fraction is not a budget: far from the row's start it is ``1 - (1 - p)^length`` per
    position (49.1% for wav2vec 2.0's 0.065 and 10); ``ratio`` is validated but ignored
    (``uses_ratio=False``); overlapping spans merge, as in wav2vec 2.0 and Hugging Face's
    ``_compute_mask_indices``.

    Edge cases: a span running past the end of the row (or into ineligible positions, e.g. the
    padding of a short clip) is cut there; a row of ``L <= length`` eligible positions with a start
    at its first position is masked entirely (a one-frame clip with ``min_spans >= 1`` always is;
    the pre-flight check refuses a config that fully masks more than a quarter of the rows);
    ``min_spans = 0`` and small ``p`` may mask nothing; ``L = 0`` or an empty batch give an empty
    mask; an all-ineligible row is all False.

    Args:
        shape: ``(B, L)``: frames (or tokens).
        ratio: validated (must be in [0, 1]) and ignored.
        generator: explicit RNG: ``B * L`` float32 uniforms on ``generator.device``.
        eligible: optional ``[B, L]`` bool; starts are drawn only there and only there is masked.
        p: start probability in (0, 1]; length: ``M >= 1``; min_spans: ``>= 0``.

    Returns:
        ``[B, L]`` bool on ``generator.device``; True = masked.

    Raises:
        ConfigError: ``ratio`` outside [0, 1]; a bad ``p`` / ``length`` / ``min_spans`` (names
            ``masking.params.<field>``).
        ValueError: ``shape`` is not ``(B, L)``, or ``eligible`` does not have ``shape``.

    References: Baevski et al. 2020, "wav2vec 2.0: A Framework for Self-Supervised Learning of
    Speech Representations", sec. 3.1 and 4.2 (p = 0.065, M = 10); Hugging Face ``transformers``
    ``_compute_mask_indices`` (``mask_time_min_masks``).
    """
    check_ratio(ratio)
    strategy = get_masking("span_starts")
    prm = strategy.parse_params({"p": p, "length": length, "min_spans": min_spans})
    B, L = strategy.check_shape(shape)
    device = generator.device
    ok = check_eligible(eligible, (B, L), device, "span_starts")
    if B == 0 or L == 0:
        return torch.zeros(B, L, dtype=torch.bool, device=device)
    u = torch.rand(B, L, generator=generator, device=device)
    ok_ = torch.ones(B, L, dtype=torch.bool, device=device) if ok is None else ok
    starts = (u < prm.p) & ok_
    if prm.min_spans:
        want = torch.minimum(ok_.sum(dim=1, keepdim=True), torch.tensor(prm.min_spans, device=device))
        short = (want - starts.sum(dim=1, keepdim=True)).clamp_min(0)  # (B, 1) starts still needed
        if bool(short.any()):
            noise = u.masked_fill(starts | ~ok_, 2.0)  # only eligible non-starts, smallest u first
            starts |= mask_lowest(noise, short) & ok_
    c = torch.nn.functional.pad(starts.to(torch.int32).cumsum(dim=1), (prm.length, 0))  # (B, L + M)
    masked = (c[:, prm.length:] - c[:, :L]) > 0  # a start in (t - M, t]
    return masked & ok_
