"""Semantic-unit masking: whole words, superpixels and voiced segments, taken in random order.

A *unit* is a group of positions that is masked or kept as a whole: the tokens of one word, the
patches of one superpixel, the frames of one voiced stretch of audio. :func:`unit_mask` is the
shared, fully vectorized core; the strategies differ only in where the units come from:

- ``whole_word``: the tokenizer's word ids (``word_ids`` side input, ``[B, L]``), so any
  tokenizer works (WordPiece, BPE, Unigram), not only WordPiece's ``##`` continuation pieces.
  References: Google's BERT repository README, "Whole Word Masking" update (2019-05-31); Cui et al.
  2021, "Pre-Training with Whole Word Masking for Chinese BERT" (IEEE/ACM TASLP 29).
- ``superpixel``: one SLIC superpixel label per patch (``segments`` side input, ``[B, h, w]``, from
  :func:`superpixel_segments`). References: Achanta et al. 2012, "SLIC Superpixels Compared to
  State-of-the-Art Superpixel Methods" (IEEE TPAMI 34(11)).
- ``voiced``: runs of voiced frames (``voiced`` side input, ``[B, T]``, from :func:`voiced_frames`,
  an energy-based voice activity detector), cut into pieces of at most ``max_len`` frames; on a
  ``[B, F, T]`` spectrogram whole time columns are masked. This is masklab's semantic-unit masking
  for audio, not a published recipe.

Selection rule (the same for all three; see :func:`unit_mask`): each row's budget is
``round(ratio * n)`` positions, ``n`` = positions that are in a unit and eligible; units are ranked
by one uniform random key each (one sort) and taken greedily in that order, skipping a unit that
no longer fits in the budget, exactly like Hugging Face's ``DataCollatorForWholeWordMask``
(``transformers`` 4.x: it shuffles the ``##``-grouped words and ``continue``s past a word that would
overshoot), but computed as a few vectorized prefix passes instead of a Python loop per token.
Then the first untaken unit is added with probability (budget left) / (its size), so the expected
masked count is the budget (the greedy walk alone falls short by up to a unit), and a row with a
unit always gets at least one. (``transformers`` 5 replaced that collator by
``DataCollatorForLanguageModeling(whole_word_mask=True)``, which draws each word's first token
with probability ``ratio`` and expands it to the word: a Binomial count, not a budget.)
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import torch
from pydantic import Field

from engine.masking.registry import (
    NoParams,
    StrategyParams,
    check_eligible,
    check_ratio,
    get_masking,
    register_masking,
)

__all__ = [
    "SuperpixelParams",
    "VoicedParams",
    "MAX_PASSES",
    "superpixel_mask",
    "superpixel_segments",
    "unit_mask",
    "voiced_frames",
    "voiced_mask",
    "voiced_units",
    "whole_word_mask",
    "word_ids_tensor",
]

#: Greedy passes of :func:`unit_mask` at most. Each pass takes the longest prefix (in priority
#: order) of the units that still fit; the greedy result is reached after (number of skipped units
#: that were followed by a taken one) + 1 passes: 3-4 for a [256, 512] batch of words at ratio 0.15.
MAX_PASSES = 16

# Ids up to this multiple of L are looked up in a [B, max_id + 2] table (no sort of the positions).
_TABLE_FACTOR = 4
_NO_PRIORITY = torch.iinfo(torch.int64).max  # sort key of an absent unit: after every real one


def unit_table(units: torch.Tensor, ok: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-row unit table: each position's slot, each slot's size and dense rank.

    Slot 0 collects the positions in no unit (negative id, or ineligible); the other slots are the
    units. Small ids (``max < 4 L``, e.g. tokenizer word ids) use slot ``id + 1`` directly, which
    needs no sort of the positions; larger ids are first replaced by their rank among the row's
    distinct ids (one row-wise sort). The dense rank of a slot is the rank of its id among the
    row's present ids (``-1`` for slot 0 and for absent ids), so both paths give the same ranks.

    Returns:
        ``slot [B, L]`` int64, ``counts [B, W]`` int64 (positions per slot), ``rank [B, W]`` int64.
    """
    B, L = units.shape
    slot = (units + 1).clamp_(min=0)
    if ok is not None:
        slot.masked_fill_(~ok, 0)
    max_slot = int(slot.max()) if slot.numel() else 0
    if max_slot > _TABLE_FACTOR * L + 64:
        s, perm = torch.sort(slot, dim=1, stable=True)
        step = torch.zeros_like(s)
        step[:, 1:] = (s[:, 1:] != s[:, :-1]).long()
        step[:, 0] = (s[:, 0] > 0).long()
        dense = step.cumsum_(1).masked_fill_(s == 0, 0)  # 1..U_b for units, 0 outside
        slot = torch.empty_like(slot).scatter_(1, perm, dense)
        max_slot = int(dense.max())
    counts = torch.zeros(B, max_slot + 1, dtype=torch.int64, device=units.device)
    counts.scatter_add_(1, slot, torch.ones_like(slot))
    present = counts > 0
    present[:, 0] = False
    rank = present.cumsum(1).sub_(1).masked_fill_(~present, -1)
    counts[:, 0] = 0
    return slot, counts, rank


def _dense_labels(units: torch.Tensor) -> torch.Tensor:
    """``units [B, L]`` relabelled ``0..U_b-1`` per row in increasing id order (negative: ``-1``)."""
    slot, _, rank = unit_table(units, None)
    return rank.gather(1, slot)


def unit_mask(
    units: torch.Tensor,
    ratio: float,
    *,
    generator: torch.Generator,
    eligible: torch.Tensor | None = None,
    complete: bool = True,
) -> torch.Tensor:
    """Mask whole units in a uniformly random order until the budget is spent.

    **Selection rule.** Per row, ``n`` = positions that are in a unit (``units >= 0``) and eligible,
    and the budget is ``k = round(ratio * n)`` (``torch.round``, half to even). Each unit gets one
    uniform random 62-bit key and the units are sorted by it (one sort, a uniformly random order).
    They are then taken *greedily* in that order: a unit is taken when its size fits in what is left
    of the budget, otherwise it is skipped and the next unit is tried. This is the rule of Hugging
    Face's ``DataCollatorForWholeWordMask._whole_word_mask`` (``transformers`` 4.x: shuffle the words;
    ``continue`` past a word with ``covered + len(word) > budget``), computed without a per-token
    loop: each pass takes, among the not-yet-taken units that fit in the remaining budget, the
    longest prefix (in the random order) whose cumulative size stays ``<= remaining``; the first
    candidate that did not fit is one the greedy walk skips too, and the next pass goes on after it.
    The passes stop when one takes every candidate (the result then equals the greedy walk) or after
    :data:`MAX_PASSES` passes (any budget left is then unused; on TREC word ids at ratio 0.15 the
    walk completed in 3-4 passes for a whole [256, 512] batch). Differences from Hugging Face: its
    budget is ``max(1, round(ratio * len(tokens)))`` over all tokens including ``[CLS]``/``[SEP]``
    and padding, ours counts only the in-unit eligible positions; and see the at-least-one rule.

    **Stochastic completion** (``complete=True``, the default, used by the strategies): the greedy
    walk leaves ``left = k - covered`` positions unused, fewer than any untaken unit has, so it
    masks ``left`` too few on average, a lot when units are large compared to the budget (voiced
    segments of 20 frames, superpixels of 10 patches). So the first untaken unit in the random order
    is then added with probability ``left / size``: the expected masked count is exactly ``k`` and
    a row exceeds ``k`` by less than that one unit's size. ``complete=False`` is the pure greedy
    walk (at most ``k``, Hugging Face's rule).

    **At least one unit**: with ratio > 0, a row with at least one unit always gets one, even if it
    alone exceeds the budget (or ``k = 0``): the first unit in the random order (Hugging Face masks
    nothing then, but a row with nothing masked has an undefined loss). This is the one case where
    the expected count is above ``k`` (rows whose smallest unit is larger than ``k``).

    Other consequences: ``ratio = 0`` masks nothing; ``ratio = 1`` masks every eligible position of
    every unit. The mask depends only on the partition of the positions and the order of the ids,
    not on their values: ids may be any non-negative integers per row (they are relabelled
    ``0..U_b-1`` in increasing order). The count is not exact (``exact=False``).

    Args:
        units: ``[B, L]`` integer unit id of each position; any negative value (conventionally
            ``-1``) = the position is in no unit and is never masked. Ids need not be contiguous;
            positions of one unit need not be adjacent.
        ratio: fraction of the in-unit eligible positions to mask, in [0, 1].
        generator: explicit RNG: ``B * U`` random int64 sort keys on ``generator.device`` (``U`` =
            the largest number of units in a row), then ``B`` uniforms for the completion; nothing
            is drawn when ``ratio`` is 0 or there is no unit.
        eligible: optional ``[B, L]`` bool; an ineligible position is never masked and is removed
            from its unit (the unit's eligible positions are masked together and its size is their
            count; a unit with no eligible position does not exist).
        complete: add the stochastic completion (unbiased count); False = the pure greedy walk.

    Returns:
        ``[B, L]`` bool on ``generator.device``; True = masked. A row without units (all ``-1`` or
        all ineligible) is all False; ``L = 0`` gives an empty ``[B, 0]`` mask.

    Raises:
        ConfigError: ``ratio`` outside [0, 1].
        ValueError: ``units`` is not a 2-dim integer tensor, or ``eligible`` does not have its shape.

    References: Hugging Face ``transformers`` 4.x ``DataCollatorForWholeWordMask._whole_word_mask``
    (the greedy rule); Google's BERT README, "Whole Word Masking" (2019).
    """
    ratio = check_ratio(ratio)
    if units.dim() != 2 or units.dtype.is_floating_point or units.dtype == torch.bool or units.is_complex():
        raise ValueError(f"unit_mask: units must be a [B, L] integer tensor (got {units.dtype} {tuple(units.shape)})")
    device = generator.device
    units = units.to(device=device, dtype=torch.int64)
    B, L = units.shape
    ok = check_eligible(eligible, (B, L), device, "unit_mask")
    if ratio == 0.0 or L == 0 or B == 0:
        return torch.zeros(B, L, dtype=torch.bool, device=device)
    slot, counts, rank = unit_table(units, ok)
    present = rank >= 0
    n_units = present.sum(1)  # (B,)
    U = int(n_units.max())
    if U == 0:
        return torch.zeros(B, L, dtype=torch.bool, device=device)

    # Unit sizes in dense order (column U collects the absent slots and is dropped).
    sizes = torch.zeros(B, U + 1, dtype=torch.int64, device=device)
    sizes.scatter_(1, rank.masked_fill(~present, U), counts)
    sizes = sizes[:, :U]
    budget = torch.round(ratio * counts.sum(1, keepdim=True).double()).long()  # (B, 1)

    # A uniformly random order of each row's units: sort 62-bit random keys (ties have probability
    # ~U^2 / 2^63; integer keys sort faster than floats on CPU). Absent units sort last.
    keys = torch.randint(0, 2**62, (B, U), generator=generator, device=device)
    valid = torch.arange(U, device=device)[None, :] < n_units[:, None]  # dense ranks 0..U_b-1
    keys.masked_fill_(~valid, _NO_PRIORITY)
    order = torch.sort(keys, dim=1, stable=True).indices  # (B, U): units in random order
    ssize = sizes.gather(1, order)  # (B, U): their sizes, 0 = absent

    # Greedy walk as prefix passes (see the docstring).
    taken = torch.zeros(B, U, dtype=torch.bool, device=device)
    left = budget
    for _ in range(MAX_PASSES):
        cand = (ssize <= left) & (ssize > 0) & ~taken
        csum = (ssize * cand).cumsum(1)
        new = cand & (csum <= left)
        taken |= new
        left = left - (ssize * new).sum(1, keepdim=True)
        if torch.equal(new, cand):  # every candidate fitted: the greedy walk is complete
            break
    if complete:
        # The first untaken unit, with probability left / size: E[count] = k (see the docstring).
        untaken = (ssize > 0) & ~taken
        first = untaken.int().argmax(1, keepdim=True)  # (B, 1); any column if none is untaken
        size = ssize.gather(1, first).clamp(min=1)
        u = torch.rand(B, 1, generator=generator, device=device)
        add = untaken.gather(1, first) & (u * size < left)
        taken.scatter_(1, first, add | taken.gather(1, first))
    # At least one unit per row that has one (ratio > 0 here): the first in the random order.
    taken[:, 0] |= ~taken.any(1) & (n_units > 0)

    taken_dense = torch.zeros(B, U, dtype=torch.bool, device=device).scatter_(1, order, taken)
    taken_slot = taken_dense.gather(1, rank.clamp(min=0)) & present  # (B, W); slot 0 never
    return taken_slot.gather(1, slot)


# --- whole words -----------------------------------------------------------------------------------


def word_ids_tensor(encodings: Sequence[Any], length: int | None = None) -> torch.Tensor:
    """Word ids of a batch of tokenizer outputs as a ``[B, L]`` int64 tensor (``-1`` = no word).

    Args:
        encodings: a list of Hugging Face ``tokenizers.Encoding`` (e.g. from
            ``Tokenizer.encode_batch``) or of lists of ``Optional[int]`` (e.g.
            ``BatchEncoding.word_ids(i)`` of a ``transformers`` fast tokenizer). ``None`` (special
            tokens, padding) becomes ``-1``. For an ``Encoding`` of a sentence *pair*, whose word
            ids restart at 0 in the second sequence, the second sequence's ids are shifted past the
            first's, so that a word of each sequence never merges into one unit.
        length: ``L``; shorter rows are padded with ``-1``. Default: the longest row.

    Returns:
        ``[B, L]`` int64 (CPU).

    Raises:
        ValueError: a row is longer than ``length``.
    """
    rows: list[np.ndarray] = []
    for enc in encodings:
        if hasattr(enc, "word_ids"):
            # np.array(..., float) turns None into NaN without a Python loop per token.
            w = np.array(enc.word_ids, dtype=np.float64)
            seq = np.array(enc.sequence_ids, dtype=np.float64)
            second = seq == 1
            if second.any():
                first_max = np.nanmax(np.where(seq == 0, w, np.nan), initial=-1.0)
                w = np.where(second, w + first_max + 1.0, w)
        else:
            w = np.array(list(enc), dtype=np.float64)
        rows.append(np.nan_to_num(w, nan=-1.0).astype(np.int64))
    longest = max((len(r) for r in rows), default=0)
    L = longest if length is None else int(length)
    if longest > L:
        raise ValueError(f"word_ids_tensor: a row has {longest} tokens, more than length={L}")
    out = np.full((len(rows), L), -1, dtype=np.int64)
    for i, r in enumerate(rows):
        out[i, : len(r)] = r
    return torch.from_numpy(out)


@register_masking(
    "whole_word", params=NoParams, grid_dims=(1,), grids=("tokens-1d",), uses_ratio=True, exact=False,
    needs=("word_ids",),
    summary="whole words in random order: all tokens of a word or none (BERT whole word masking, 2019)",
)
def whole_word_mask(
    shape: tuple[int, ...],
    ratio: float,
    *,
    generator: torch.Generator,
    eligible: torch.Tensor | None = None,
    word_ids: torch.Tensor,
) -> torch.Tensor:
    """Mask whole words: every token of a chosen word, in a uniformly random word order.

    The units of :func:`unit_mask` are the tokenizer's words, so it works for any subword
    tokenizer (WordPiece, byte-level BPE, Unigram/Metaspace), not only WordPiece's ``##`` pieces.
    The budget is ``round(ratio * n)`` tokens, ``n`` = eligible tokens that belong to a word
    (special tokens and padding, word id ``-1``, are never masked and do not count); words are
    taken greedily in random order, skipping one that would overshoot (Hugging Face's whole-word
    collator rule), then one more word is added with probability (budget left) / (its size), so
    the expected count is the budget (see :func:`unit_mask`); a row with a word always gets at
    least one (whole) word even if it exceeds the budget. ``ratio = 0``: nothing; ``ratio = 1``:
    every token of every word. A row without words (or ``L = 0``) is all False.

    Args:
        shape: ``(B, L)``.
        ratio: fraction of the word tokens to mask, in [0, 1] (BERT: 0.15).
        generator: explicit RNG (one uniform per word).
        eligible: optional ``[B, L]`` bool; ineligible tokens are never masked (a word then loses
            those tokens).
        word_ids: ``[B, L]`` int64 word index per token, ``-1`` outside any word: the tokenizer's
            ``Encoding.word_ids`` via :func:`word_ids_tensor`.

    Returns:
        ``[B, L]`` bool on ``generator.device``; True = masked.

    Raises:
        ConfigError: ``ratio`` outside [0, 1].
        ValueError: ``shape`` is not ``(B, L)``, or ``word_ids`` / ``eligible`` do not have ``shape``.

    References: Google's BERT repository README, "Whole Word Masking" (2019-05-31); Cui et al. 2021,
    "Pre-Training with Whole Word Masking for Chinese BERT", IEEE/ACM TASLP 29.
    """
    shape = get_masking("whole_word").check_shape(shape)
    if word_ids is None or tuple(word_ids.shape) != shape:
        got = None if word_ids is None else tuple(word_ids.shape)
        raise ValueError(f"masking strategy 'whole_word': word_ids has shape {got}, expected {shape}")
    return unit_mask(word_ids, ratio, generator=generator, eligible=eligible)


# --- superpixels -----------------------------------------------------------------------------------


class SuperpixelParams(StrategyParams):
    """Parameters of the SLIC superpixels behind :func:`superpixel_mask` (used by :func:`superpixel_segments`)."""

    n_segments: int = Field(
        16, ge=2, le=1024,
        description="approximate number of SLIC superpixels per image (skimage's n_segments); 16 suits "
                    "the small patch grids of a dashboard (e.g. 14x14)",
    )
    compactness: float = Field(
        10.0, gt=0.0, le=1000.0,
        description="SLIC's colour-versus-space balance: higher gives more square superpixels "
                    "(skimage's compactness; 10 is its default, for Lab colour, range 0-100)",
    )


def superpixel_segments(
    images: torch.Tensor, patch_size: int, n_segments: int = 16, compactness: float = 10.0
) -> torch.Tensor:
    """SLIC superpixels of each image, as one label per ``P x P`` patch: ``[B, h, w]`` int64.

    Each image is segmented with ``skimage.segmentation.slic`` (a loop over the images: this is
    feature extraction, computed once per batch, not the mask function). Three-channel images are
    taken as RGB and converted to CIELAB by SLIC (L in 0-100); grayscale images are repeated into
    three equal channels first, so they go through the same conversion and ``compactness`` means
    the same for gray and colour images (SLIC on a single float channel rescales it to [0, 1],
    where the default compactness would give a plain grid that ignores the image). Other channel
    counts are scaled from [0, 1] to [0, 100] without a colour conversion.
    SLIC is deterministic (grid initialisation, no RNG). Each patch then gets the superpixel that
    covers most of its pixels (ties: the smallest label), and labels are renumbered ``0..S_b-1`` in
    each image (superpixels that win no patch disappear; ``S_b <= min(h * w, ~n_segments)``).

    Args:
        images: ``[B, C, H, W]`` float in [0, 1] (any device; computed on CPU).
        patch_size: ``P``; must divide ``H`` and ``W``.
        n_segments: approximate number of superpixels per image (>= 2).
        compactness: SLIC compactness (> 0); higher = more regular, square superpixels.

    Returns:
        ``[B, H // P, W // P]`` int64 on ``images.device``.

    Raises:
        ValueError: ``images`` is not 4-dim, or ``P`` does not divide ``H`` and ``W``.

    References: Achanta et al. 2012, "SLIC Superpixels Compared to State-of-the-Art Superpixel
    Methods", IEEE TPAMI 34(11); scikit-image ``segmentation.slic``.
    """
    if images.dim() != 4:
        raise ValueError(f"superpixel_segments: images must be [B, C, H, W] (got {tuple(images.shape)})")
    B, C, H, W = images.shape
    P = int(patch_size)
    if P < 1 or H % P or W % P:
        raise ValueError(f"superpixel_segments: patch size {patch_size} does not divide the image size {H}x{W}")
    h, w = H // P, W // P
    arr = images.detach().to("cpu", torch.float64).clamp(0.0, 1.0).permute(0, 2, 3, 1).numpy()  # (B, H, W, C)
    if C == 1:
        arr = np.repeat(arr, 3, axis=-1)  # gray -> RGB with equal channels -> CIELAB L (a = b = 0)
    elif C != 3:
        arr = arr * 100.0
    rgb = arr.shape[-1] == 3
    from skimage.segmentation import slic  # noqa: PLC0415 (scipy.cluster, 0.5 s, in every worker otherwise)

    pix = np.empty((B, H, W), dtype=np.int64)
    for i in range(B):
        pix[i] = slic(arr[i], n_segments=int(n_segments), compactness=float(compactness),
                      channel_axis=-1, convert2lab=rgb, start_label=0)
    lab = torch.from_numpy(pix)
    if B == 0 or h * w == 0:
        return torch.zeros(B, h, w, dtype=torch.int64, device=images.device)
    S = int(lab.max()) + 1
    # Majority vote per patch: count the labels of its P*P pixels (one scatter_add), take the argmax.
    per_patch = lab.reshape(B, h, P, w, P).permute(0, 1, 3, 2, 4).reshape(B, h * w, P * P)
    counts = torch.zeros(B, h * w, S, dtype=torch.int32).scatter_add_(
        2, per_patch, torch.ones_like(per_patch, dtype=torch.int32))
    major = counts.argmax(2)  # (B, h*w); torch.argmax returns the first maximum (smallest label)
    dense = _dense_labels(major)
    return dense.reshape(B, h, w).to(images.device)


@register_masking(
    "superpixel", params=SuperpixelParams, grid_dims=(2,), grids=("patch-2d",), uses_ratio=True,
    exact=False, needs=("segments",),
    summary="whole SLIC superpixels of the image in random order (semantic-part masking; Achanta et al. 2012)",
)
def superpixel_mask(
    shape: tuple[int, ...],
    ratio: float,
    *,
    generator: torch.Generator,
    eligible: torch.Tensor | None = None,
    segments: torch.Tensor,
    n_segments: int = 16,
    compactness: float = 10.0,
) -> torch.Tensor:
    """Mask whole superpixels of a patch grid in a uniformly random order.

    The units of :func:`unit_mask` are the superpixel labels of the patches (``segments``, from
    :func:`superpixel_segments`); the budget is ``round(ratio * n)`` patches, ``n`` = eligible
    patches with a label ``>= 0``. Superpixels are taken greedily in random order, skipping one that
    would overshoot, plus one more with probability (budget left) / (its size) (see
    :func:`unit_mask`), so the mask is a union of whole superpixels (restricted to eligible patches)
    whose expected size is the budget, and a grid with a superpixel always gets at least one.
    ``ratio = 0``: nothing; ``ratio = 1``: every labelled eligible patch. Patches labelled ``-1``
    are never masked.

    Args:
        shape: ``(B, h, w)`` patch grid.
        ratio: fraction of the labelled eligible patches to mask, in [0, 1].
        generator: explicit RNG (one uniform per superpixel).
        eligible: optional ``[B, h, w]`` bool; ineligible patches are never masked.
        segments: ``[B, h, w]`` integer superpixel label per patch (any non-negative ids).
        n_segments: SLIC parameter; only used to compute ``segments`` (accepted and ignored here).
        compactness: SLIC parameter; only used to compute ``segments`` (accepted and ignored here).

    Returns:
        ``[B, h, w]`` bool on ``generator.device``; True = masked.

    Raises:
        ConfigError: ``ratio`` outside [0, 1].
        ValueError: ``shape`` is not ``(B, h, w)``, or ``segments`` / ``eligible`` do not have ``shape``.

    References: Achanta et al. 2012, "SLIC Superpixels Compared to State-of-the-Art Superpixel
    Methods", IEEE TPAMI 34(11).
    """
    shape = get_masking("superpixel").check_shape(shape)
    if segments is None or tuple(segments.shape) != shape:
        got = None if segments is None else tuple(segments.shape)
        raise ValueError(f"masking strategy 'superpixel': segments has shape {got}, expected {shape}")
    ok = check_eligible(eligible, shape, generator.device, "superpixel")
    mask = unit_mask(segments.flatten(1), ratio, generator=generator,
                     eligible=None if ok is None else ok.flatten(1))
    return mask.reshape(shape)


# --- voiced segments -------------------------------------------------------------------------------


class VoicedParams(StrategyParams):
    """Parameters of :func:`voiced_mask`."""

    max_len: int = Field(
        10, ge=1, le=10000,
        description="longest unit in frames: a voiced run longer than this is cut into pieces of at most "
                    "max_len frames, so the budget can be met at a useful granularity",
    )


def voiced_frames(
    waveform: torch.Tensor,
    sample_rate: int,
    *,
    frame_length: int | None = None,
    hop_length: int | None = None,
    threshold_db: float = -35.0,
    center: bool = True,
) -> torch.Tensor:
    """Energy-based voice activity detection: which frames of each clip are voiced (loud enough).

    Each frame's RMS energy ``sqrt(mean(x**2))`` is converted to dB (``20 log10``) relative to the
    loudest frame of the same clip; a frame is voiced when it is above ``threshold_db``. "Voiced"
    here means *speech activity*, not phonetic voicing (a loud fricative counts as voiced). A frame
    with RMS below 1e-10 (digital silence, zero padding) is always unvoiced, so an all-zero clip is
    all unvoiced.

    Args:
        waveform: ``[B, N]`` or ``[N]`` float samples (any scale; the threshold is relative). Zero
            padding to a common length only adds unvoiced frames.
        sample_rate: Hz; sets the default frame sizes.
        frame_length: frame size in samples (default: 25 ms, ``round(0.025 * sample_rate)``).
        hop_length: hop between frames in samples (default: 10 ms, ``round(0.010 * sample_rate)``).
        threshold_db: dB relative to the clip's loudest frame (<= 0; default -35 dB).
        center: frame ``t`` is centred on sample ``t * hop_length`` (the waveform is zero-padded by
            ``frame_length // 2`` on both sides), so ``T = 1 + (N + 2 * (frame_length // 2) -
            frame_length) // hop_length`` (``1 + N // hop_length`` for an even frame length): the
            frame count of ``torch.stft(center=True)`` with ``n_fft = frame_length``. With
            ``center=False``, frame ``t`` starts at ``t * hop_length`` and
            ``T = 1 + (N - frame_length) // hop_length``. A clip shorter than a frame is
            zero-padded to one frame.

    Returns:
        ``[B, T]`` bool (``[1, T]`` for a ``[N]`` waveform), on ``waveform.device``.

    Raises:
        ValueError: bad ``waveform`` dims, non-positive ``sample_rate`` / frame sizes, or
            ``threshold_db > 0``.

    References: energy-based voice activity detection (frame energy against a threshold relative to
    the clip maximum, as in ``librosa.effects.split``'s ``top_db``, here without librosa).
    """
    if waveform.dim() == 1:
        waveform = waveform[None]
    if waveform.dim() != 2:
        raise ValueError(f"voiced_frames: waveform must be [B, N] or [N] (got {tuple(waveform.shape)})")
    if sample_rate <= 0:
        raise ValueError(f"voiced_frames: sample_rate must be > 0 Hz (got {sample_rate})")
    fl = int(round(0.025 * sample_rate)) if frame_length is None else int(frame_length)
    hop = int(round(0.010 * sample_rate)) if hop_length is None else int(hop_length)
    if fl < 1 or hop < 1:
        raise ValueError(f"voiced_frames: frame_length and hop_length must be >= 1 sample (got {fl}, {hop})")
    if threshold_db > 0:
        raise ValueError(f"voiced_frames: threshold_db must be <= 0 dB (got {threshold_db})")
    x = waveform.float()
    if center:
        x = torch.nn.functional.pad(x, (fl // 2, fl // 2))
    if x.shape[1] < fl:
        x = torch.nn.functional.pad(x, (0, fl - x.shape[1]))
    frames = x.unfold(1, fl, hop)  # (B, T, frame_length)
    rms = frames.pow(2).mean(-1).sqrt()
    db = 20.0 * torch.log10(rms.clamp_min(1e-10))
    rel = db - db.max(dim=1, keepdim=True).values
    return (rel > threshold_db) & (rms > 1e-10)


def voiced_units(voiced: torch.Tensor, max_len: int = 10) -> torch.Tensor:
    """Unit id of each frame: runs of voiced frames, cut every ``max_len`` frames; ``-1`` if unvoiced.

    Vectorized: run starts are where voiced follows unvoiced (a shifted comparison), each frame's
    run start comes from a ``cummax`` of the start indices, a new unit starts at a run start and
    every ``max_len`` frames into a run, and a ``cumsum`` of the unit starts numbers the units
    ``0, 1, ...`` from left to right.

    Args:
        voiced: ``[B, T]`` bool.
        max_len: longest unit, in frames (>= 1).

    Returns:
        ``[B, T]`` int64.
    """
    if max_len < 1:
        raise ValueError(f"voiced_units: max_len must be >= 1 (got {max_len})")
    v = voiced.bool()
    B, T = v.shape
    idx = torch.arange(T, device=v.device).expand(B, T)
    prev = torch.zeros_like(v)
    prev[:, 1:] = v[:, :-1]
    start = v & ~prev
    run_start = torch.where(start, idx, torch.zeros_like(idx)).cummax(1).values
    piece_start = v & ((idx - run_start) % max_len == 0)
    return (piece_start.long().cumsum(1) - 1).masked_fill_(~v, -1)


@register_masking(
    "voiced", params=VoicedParams, grid_dims=(1, 2), grids=("frames-1d", "spec-2d"), uses_ratio=True, exact=False,
    needs=("voiced",),
    summary="whole voiced segments (energy VAD) in random order, whole time columns (masklab semantic units)",
)
def voiced_mask(
    shape: tuple[int, ...],
    ratio: float,
    *,
    generator: torch.Generator,
    eligible: torch.Tensor | None = None,
    voiced: torch.Tensor,
    max_len: int = 10,
) -> torch.Tensor:
    """Mask whole voiced segments of audio (runs of voiced frames, at most ``max_len`` frames each).

    The units of :func:`unit_mask` are :func:`voiced_units` of ``voiced``; unvoiced frames are in
    no unit and are never masked. For ``(B, T)`` the budget is ``round(ratio * n)`` frames,
    ``n`` = eligible voiced frames. For a ``(B, F, T)`` spectrogram the chosen segments' whole time
    columns are masked: the selection runs on frames (a frame counts as eligible when at least one
    of its cells is, and the budget is ``round(ratio * n)`` such voiced frames), then the columns are
    intersected with ``eligible``. Segments are taken greedily in random order, skipping one that
    would overshoot, plus one more with probability (budget left) / (its size), so the expected
    count is the budget (see :func:`unit_mask`); a row with a voiced frame always gets at least
    one segment. ``ratio = 0``: nothing; ``ratio = 1``: every voiced (eligible) frame. ``T = 1`` is
    one frame (masked at any ratio > 0 if voiced); a clip without voiced frames is all False.

    Args:
        shape: ``(B, T)`` frames or ``(B, F, T)`` time-frequency cells (time last).
        ratio: fraction of the voiced frames to mask, in [0, 1].
        generator: explicit RNG (one uniform per segment).
        eligible: optional bool of ``shape``; ineligible positions are never masked.
        voiced: ``[B, T]`` bool, True for voiced frames (:func:`voiced_frames`).
        max_len: longest segment in frames; longer voiced runs are cut into pieces of ``max_len``
            frames (the last piece shorter).

    Returns:
        Bool tensor of ``shape`` on ``generator.device``; True = masked.

    Raises:
        ConfigError: ``ratio`` outside [0, 1].
        ValueError: bad ``shape``, ``voiced`` is not ``[B, T]``, ``eligible`` does not have ``shape``,
            or ``max_len < 1``.

    References: masklab's semantic-unit masking for audio; the segments come from energy-based voice
    activity detection (:func:`voiced_frames`).
    """
    shape = get_masking("voiced").check_shape(shape)
    B, T = shape[0], shape[-1]
    if voiced is None or tuple(voiced.shape) != (B, T):
        got = None if voiced is None else tuple(voiced.shape)
        raise ValueError(f"masking strategy 'voiced': voiced has shape {got}, expected {(B, T)}")
    device = generator.device
    ok = check_eligible(eligible, shape, device, "voiced")
    units = voiced_units(voiced.to(device), int(max_len))
    if len(shape) == 2:
        return unit_mask(units, ratio, generator=generator, eligible=ok)
    frame_ok = None if ok is None else ok.any(dim=1)
    cols = unit_mask(units, ratio, generator=generator, eligible=frame_ok)  # (B, T)
    mask = cols[:, None, :].expand(shape)
    return mask & ok if ok is not None else mask.contiguous()
