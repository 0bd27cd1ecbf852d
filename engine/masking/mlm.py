"""BERT's 80/10/10 input corruption for a masked language model, given a mask from any strategy.

A masking strategy only says *which* positions are predicted; :func:`apply_mlm` decides what the
model sees there (the mask token, a random token or the original token) and builds the labels.

References: Devlin et al. 2019, "BERT: Pre-training of Deep Bidirectional Transformers for Language
Understanding", sec. 3.1 ("Task #1: Masked LM") and appendix C.2 (ablation of the 80/10/10 mix);
Hugging Face ``DataCollatorForLanguageModeling.torch_mask_tokens``.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable
from functools import lru_cache

import torch

from engine.errors import ConfigError
from engine.masking.registry import check_ratio

#: Label of positions that are not predicted (PyTorch's ``cross_entropy`` ``ignore_index``).
IGNORE_INDEX = -100


def special_tokens_eligible(
    input_ids: torch.Tensor,
    special_ids: Iterable[int],
    attention_mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """Positions a masking strategy may pick: False at special tokens and padding.

    Args:
        input_ids: ``[B, L]`` int token ids.
        special_ids: ids never to mask (``[CLS]``, ``[SEP]``, ``[PAD]``, ``[MASK]``, ``[UNK]`` if
            wanted, ...). Padding is excluded by putting the pad id here, or with ``attention_mask``.
        attention_mask: optional ``[B, L]`` (0/1 or bool); positions where it is 0 are ineligible.

    Returns:
        ``[B, L]`` bool on ``input_ids.device``; True = may be masked. Pass it as ``eligible``.

    Raises:
        ValueError: ``attention_mask`` does not have the shape of ``input_ids``.
    """
    special = torch.as_tensor(sorted({int(i) for i in special_ids}), dtype=input_ids.dtype,
                              device=input_ids.device)
    ok = ~torch.isin(input_ids, special) if special.numel() else torch.ones_like(input_ids, dtype=torch.bool)
    if attention_mask is not None:
        if attention_mask.shape != input_ids.shape:
            raise ValueError(f"attention_mask has shape {tuple(attention_mask.shape)}, "
                             f"expected {tuple(input_ids.shape)} (the shape of input_ids)")
        ok &= attention_mask.to(device=input_ids.device).bool()
    return ok


@lru_cache(maxsize=16)
def _allowed_ids(vocab_size: int, special_ids: tuple[int, ...], mask_token_id: int) -> torch.Tensor:
    """Sorted int64 ids of ``range(vocab_size)`` that are neither special nor the mask token (CPU)."""
    keep = torch.ones(vocab_size, dtype=torch.bool)
    banned = [i for i in (*special_ids, mask_token_id) if 0 <= i < vocab_size]
    if banned:
        keep[torch.tensor(banned)] = False
    return keep.nonzero().squeeze(1)


def apply_mlm(
    input_ids: torch.Tensor,
    mask: torch.Tensor,
    *,
    generator: torch.Generator,
    mask_token_id: int,
    vocab_size: int,
    special_ids: Iterable[int] = (),
    mask_share: float = 0.8,
    random_share: float = 0.1,
) -> tuple[torch.Tensor, torch.Tensor]:
    """BERT's corruption of the masked positions: 80% ``[MASK]``, 10% a random token, 10% unchanged.

    Each masked position independently gets

    - ``mask_token_id`` with probability ``mask_share``,
    - a random token with probability ``random_share``, drawn uniformly from the *non-special*
      vocabulary ``{0, ..., vocab_size - 1} - special_ids - {mask_token_id}`` (through a lookup
      table of the allowed ids, so a random token is never ``[PAD]``, ``[CLS]``, ``[MASK]``, ...),
    - its original token with probability ``1 - mask_share - random_share``.

    The shares are of *all* masked positions; the random choice is conditional on not having
    chosen the mask token: among the positions that did not get ``[MASK]`` (a fraction
    ``1 - mask_share``), a fraction ``random_share / (1 - mask_share)`` gets a random token, so
    the overall random share is ``(1 - mask_share) * random_share / (1 - mask_share) = random_share``.
    BERT: 0.1 / 0.2 = 0.5, the 0.5 of Hugging Face's collator, which draws twice. Here one uniform
    ``u`` per masked position is cut at ``mask_share`` and ``mask_share + random_share``
    (``u < mask_share``: mask token; ``mask_share <= u < mask_share + random_share``: random; else
    unchanged): ``P(random | not mask token) = random_share / (1 - mask_share)`` exactly, without
    computing the quotient, so ``mask_share = 1`` (then ``random_share`` must be 0; every masked
    position becomes ``[MASK]``) involves no division by zero. ``random_share = 0`` never draws a random token;
    ``mask_share = random_share = 0`` leaves the input unchanged (labels still mark the mask).
    Like BERT and Hugging Face, a random draw may equal the original token (probability about
    ``1 / n_allowed``), so slightly more than ``1 - mask_share - random_share`` of the masked
    positions end up showing their original token.

    Positions where ``mask`` is False are never changed; the caller excludes special tokens and
    padding from the mask (``eligible=special_tokens_eligible(...)`` when drawing it).

    Args:
        input_ids: ``[B, L]`` integer token ids (any shape works if ``mask`` has the same).
        mask: ``[B, L]`` bool, True = predicted, from any masking strategy.
        generator: explicit RNG on the device of ``input_ids``: one float32 uniform per masked
            position (row-major order), then one int64 draw per random-token position.
        mask_token_id: id of ``[MASK]``, in ``[0, vocab_size)``.
        vocab_size: number of token ids.
        special_ids: ids never drawn as random tokens (``mask_token_id`` is excluded anyway).
        mask_share: fraction of masked positions shown as ``[MASK]``, in [0, 1] (BERT: 0.8).
        random_share: fraction shown as a random token, in [0, 1] (BERT: 0.1);
            ``mask_share + random_share <= 1``.

    Returns:
        ``(inputs, labels)``: new ``[B, L]`` tensors of the dtype of ``input_ids`` (any integer
        dtype; ``input_ids`` is not modified).
        ``inputs`` is the corrupted sequence; ``labels`` is ``input_ids`` where ``mask`` is True
        and ``-100`` (ignored by ``cross_entropy``) elsewhere.

    Raises:
        ConfigError: a share outside [0, 1], ``mask_share + random_share > 1``, ``vocab_size`` < 1,
            ``mask_token_id`` outside the vocabulary, or no non-special id left to draw from
            (the message names the argument and its value).
        ValueError: ``mask`` does not have the shape of ``input_ids`` or is not a bool tensor, or
            ``input_ids`` is not an integer tensor.

    References: Devlin et al. 2019, BERT, sec. 3.1 and appendix C.2; Hugging Face
    ``DataCollatorForLanguageModeling`` (``mlm_probability``, the 0.8 / 0.5 draws).
    """
    m_share = check_ratio(mask_share, "mask_share")
    r_share = check_ratio(random_share, "random_share")
    if m_share + r_share > 1.0 + 1e-12:
        raise ConfigError(f"mask_share + random_share: must be <= 1 "
                          f"(got {mask_share!r} + {random_share!r} = {m_share + r_share:g})")
    try:
        if isinstance(vocab_size, bool):
            raise TypeError
        vocab_size = operator.index(vocab_size)  # an int (numpy ints too), not a float
    except TypeError:
        raise ConfigError(f"vocab_size: must be an int >= 1 (got {vocab_size!r})") from None
    if vocab_size < 1:
        raise ConfigError(f"vocab_size: must be an int >= 1 (got {vocab_size!r})")
    try:
        if isinstance(mask_token_id, bool):
            raise TypeError
        mask_token_id = operator.index(mask_token_id)  # an int, not 103.7 or "103"
    except TypeError:
        raise ConfigError(f"mask_token_id: must be an int (got {mask_token_id!r})") from None
    if not 0 <= mask_token_id < vocab_size:
        raise ConfigError(f"mask_token_id: must be in [0, vocab_size = {vocab_size}) (got {mask_token_id!r})")
    if mask.shape != input_ids.shape:
        raise ValueError(f"apply_mlm: mask has shape {tuple(mask.shape)}, expected {tuple(input_ids.shape)} "
                         f"(the shape of input_ids)")
    if input_ids.dtype.is_floating_point or input_ids.dtype == torch.bool:
        raise ValueError(f"apply_mlm: input_ids must be an integer tensor (got {input_ids.dtype})")

    if mask.dtype != torch.bool:
        raise ValueError(f"apply_mlm: mask must be a bool tensor (True = predicted), got {mask.dtype}")
    device = input_ids.device
    mask = mask.to(device=device)
    specials = tuple(sorted({int(i) for i in special_ids}))
    allowed = _allowed_ids(vocab_size, specials, int(mask_token_id))
    if allowed.numel() == 0 and r_share > 0.0:
        raise ConfigError(f"special_ids: every id of the vocabulary (vocab_size = {vocab_size}) is special "
                          f"or the mask token, none is left for random replacement "
                          f"(got special_ids = {list(specials)}, mask_token_id = {mask_token_id})")

    # Contiguous new tensors, so flat (row-major) indices address them directly.
    inputs = input_ids.clone(memory_format=torch.contiguous_format)
    labels = torch.full(input_ids.shape, IGNORE_INDEX, dtype=input_ids.dtype, device=device)
    # Work on the masked positions only (about 15% of them): one uniform each, in row-major order.
    where = mask.reshape(-1).nonzero().squeeze(1)  # (n,) flat indices
    if where.numel() == 0:
        return inputs, labels
    flat = inputs.view(-1)
    orig = flat.index_select(0, where)
    labels.view(-1).index_copy_(0, where, orig)
    u = torch.rand(where.shape, generator=generator, device=device)
    # float32 uniforms against the cut points: the shares are compared at float32 precision.
    new = orig.masked_fill(u < m_share, int(mask_token_id))
    if r_share > 0.0:
        to_random = (u >= m_share) & (u < m_share + r_share)
        n = int(to_random.sum())
        if n:
            table = allowed.to(device)
            pick = torch.randint(0, table.numel(), (n,), generator=generator, device=device)
            new[to_random] = table[pick].to(new.dtype)
    flat.index_copy_(0, where, new)
    return inputs, labels
