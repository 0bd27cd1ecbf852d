"""Uniform random masking: an exact count per sample (MAE), and per-token Bernoulli (BERT).

References: He et al. 2022, "Masked Autoencoders Are Scalable Vision Learners", sec. 3 (random
sampling of patches without replacement, following a uniform distribution); Devlin et al. 2019,
"BERT", sec. 3.1 (each token is chosen with probability 15%).
"""

from __future__ import annotations

import torch

from engine.masking.registry import check_eligible, check_ratio, get_masking, register_masking


def row_counts(x: torch.Tensor) -> torch.Tensor:
    """``[B, L]`` bool -> ``[B]`` int64 True count per row.

    Summed as bytes into int32 (rows shorter than 2**31): about 10x faster on CPU than ``x.sum(1)``,
    which first copies the bools to int64.
    """
    return x.view(torch.uint8).sum(dim=1, dtype=torch.int32).long()


def mask_lowest(noise: torch.Tensor, n_mask: torch.Tensor | int) -> torch.Tensor:
    """Mask the ``n_mask`` positions with the lowest ``noise`` in each row.

    A partial selection and a scatter: ``torch.topk`` of the ``max(n_mask)`` lowest noises, or,
    when fewer positions stay visible than are masked (MAE's 0.75), of the ``L - min(n_mask)``
    highest ones, which are then left unmasked; either is several times cheaper than a full sort
    of the row on CPU. The count is exact even when noise values tie: ``topk`` returns exactly
    ``k`` distinct indices, and ties are resolved the same way in every row (by ``topk``).

    Args:
        noise: ``[B, L]`` float; set a position's noise above every other (e.g. 2.0 for uniforms)
            to keep it out unless ``n_mask`` exceeds the number of lower positions.
        n_mask: int or ``[B, 1]`` / ``[B]`` int64 counts (clamped to ``[0, L]``).

    Returns:
        ``[B, L]`` bool, exactly ``n_mask`` True per row.
    """
    B, L = noise.shape
    if isinstance(n_mask, int):
        n = torch.full((B, 1), min(max(n_mask, 0), L), dtype=torch.long, device=noise.device)
    else:
        n = n_mask.reshape(B, 1).clamp(0, L)
    if B == 0 or L == 0:
        return torch.zeros(B, L, dtype=torch.bool, device=noise.device)
    n_min, n_max = (int(v) for v in torch.aminmax(n))
    k_mask, k_keep = n_max, L - n_min
    # Rows with different counts need the selection in order (the first n of it); equal counts take
    # all k selected indices, and topk selects the same set whether or not it sorts (the sort is
    # a separate pass after the selection), so the cheaper unsorted topk gives the same mask.
    ragged = n_max != n_min
    if k_mask <= k_keep:  # select the masked positions: the k lowest noises, lowest first
        mask = torch.zeros(B, L, dtype=torch.bool, device=noise.device)
        if k_mask == 0:
            return mask
        idx = torch.topk(noise, k_mask, dim=1, largest=False, sorted=ragged).indices  # (B, k_mask)
        return mask.scatter_(1, idx, torch.arange(k_mask, device=noise.device)[None, :] < n)
    # High ratios (e.g. 0.75-0.9): select the fewer kept positions, the L - n highest noises.
    mask = torch.ones(B, L, dtype=torch.bool, device=noise.device)
    idx = torch.topk(noise, k_keep, dim=1, largest=True, sorted=ragged).indices  # (B, k_keep), highest first
    keep = torch.arange(k_keep, device=noise.device)[None, :] < (L - n)
    return mask.scatter_(1, idx, ~keep)


# A row draws positions with replacement (below) while it needs at most this share of its free
# positions: each draw then lands on a new free position with probability >= (1 - 1/4) * free / L.
_SPARSE = 0.25
# Draws per sparse row: _MARGIN times the expected number, plus _EXTRA (tiny rows); a row left
# short draws again for the rest.
_MARGIN, _EXTRA = 1.3, 16


def sparse_rows(n: torch.Tensor, n_free: torch.Tensor) -> torch.Tensor:
    """``[B]`` bool: the rows :func:`pick_uniform` serves by drawing positions (``0 < n <= n_free / 4``).

    A caller whose rows are all dense can draw the noise route itself, e.g. fused with its own mask.
    """
    return (n > 0) & (n <= _SPARSE * n_free)


def _first_draws(key: torch.Tensor, size: int) -> torch.Tensor:
    """``[M]`` bool: whether draw ``i`` is the first (lowest ``i``) of the draws of its position
    ``key[i]`` (int64 in ``[0, size)``). Few draws over many positions: a stable sort of the keys
    (``M log M``); many: a ``[size]`` scratch of the first draw per position (no sort); the same result."""
    M = key.numel()
    if M * 16 < size:
        order = torch.argsort(key, stable=True)  # equal keys keep their draw order
        sk = key[order]
        lead = torch.ones(M, dtype=torch.bool, device=key.device)
        lead[1:] = sk[1:] != sk[:-1]
        return torch.empty_like(lead).index_put_((order,), lead)
    draw = torch.arange(M, dtype=torch.int32, device=key.device)
    first = torch.full((size,), M, dtype=torch.int32, device=key.device)
    first.scatter_reduce_(0, key, draw, "amin")  # any order of the scatter gives the same minimum
    return first[key] == draw


def pick_uniform(
    free: torch.Tensor, n: torch.Tensor, *, generator: torch.Generator, n_free: torch.Tensor | None = None,
    into: torch.Tensor | None = None,
) -> torch.Tensor:
    """Choose ``n[b]`` of the True positions of each row of ``free``, uniformly without replacement.

    Every ``n[b]``-subset of row ``b``'s free positions is equally likely (the same distribution as
    :func:`mask_lowest` on uniform noise with the non-free positions at 2.0), but a row that needs
    few of its free positions (``n <= free / 4``, e.g. the top-up of block masking) does not pay
    for ``L`` uniforms and a selection over the whole row: it draws about ``1.3 n L / (free - n)``
    positions uniformly with replacement (``torch.randint``) and keeps, in draw order, the first
    ``n`` distinct free ones; a row left short draws again for the rest (rare). By symmetry the kept
    set is a uniform subset, and the repeat draws a uniform subset of what is still free. The other
    rows take the noise route of :func:`mask_lowest` on those rows only.

    Args:
        free: ``[B, L]`` bool, the positions that may be chosen.
        n: ``[B]`` int64 counts, ``0 <= n[b] <= free[b].sum()``.
        generator: explicit RNG on ``free.device``; it draws ``randint`` positions for the sparse
            rows, then ``rand(R, L)`` for the ``R`` other rows.
        n_free: ``[B]`` int64, ``free.sum(1)`` when the caller knows it (saves a pass over ``free``).
        into: ``[B, L]`` bool, contiguous, with no True at a free position (e.g. the mask a top-up
            completes): the chosen positions are set True in it, in place, and it is returned
            (saves a new mask and a pass to merge it). The choice is the same as without it.

    Returns:
        ``[B, L]`` bool, exactly ``n[b]`` True per row, all on free positions (with ``into``: ``into``
        with those set).

    Raises:
        ValueError: ``n`` negative or above a row's free count.

    References: rejection sampling of a uniform subset (Knuth, TAOCP vol. 2, sec. 3.4.2); the dense
    rows as MAE's random masking (He et al. 2022).
    """
    B, L = free.shape
    device = free.device
    n = n.reshape(B).long()
    n_free = row_counts(free) if n_free is None else n_free.reshape(B)
    if bool(((n < 0) | (n > n_free)).any()):
        raise ValueError("pick_uniform: n must lie in [0, free count] in every row")
    out = torch.zeros(B, L, dtype=torch.bool, device=device) if into is None else into
    if B == 0 or L == 0 or not bool((n > 0).any()):
        return out
    sparse = sparse_rows(n, n_free)
    dense = ((n > 0) & ~sparse).nonzero().flatten()
    rows = sparse.nonzero().flatten()
    flat_free, flat_out = free.reshape(-1), out.view(-1)
    need, avail = n[rows], n_free[rows]
    while rows.numel():
        # Draws per row: enough for `need` hits with a margin, as each hits a new free one with
        # probability >= (avail - need) / L.
        m = (_MARGIN * need * L / (avail - need).clamp(min=1)).long().clamp(min=1) + _EXTRA
        row = rows.repeat_interleave(m)  # (M,) row of each draw, rows in turn
        key = row * L + torch.randint(0, L, (row.numel(),), generator=generator, device=device)
        hit = _first_draws(key, B * L) & flat_free[key] & ~flat_out[key]
        # Rank of each hit among its row's hits, in draw order.
        csum = hit.long().cumsum(0)
        start = torch.cumsum(m, 0) - m
        before = torch.where(start > 0, csum[(start - 1).clamp(min=0)], 0)  # (R,) hits of earlier rows
        rank = csum - before.repeat_interleave(m)  # 1-based among the row's hits
        take = hit & (rank <= need.repeat_interleave(m))
        flat_out[key[take]] = True
        got = torch.zeros_like(need).index_add_(0, torch.arange(rows.numel(), device=device).repeat_interleave(m),
                                                take.long())
        need, avail = need - got, avail - got
        short = need > 0
        rows, need, avail = rows[short], need[short], avail[short]
    if dense.numel() == B:  # every row: no gather and scatter of rows
        noise = torch.rand(B, L, generator=generator, device=device)
        picked = mask_lowest(noise.masked_fill_(~free, 2.0), n)  # non-free positions sort last
        return picked if into is None else out.logical_or_(picked)
    if dense.numel():
        noise = torch.rand(dense.numel(), L, generator=generator, device=device)
        picked = mask_lowest(noise.masked_fill_(~free[dense], 2.0), n[dense])
        out[dense] = picked if into is None else out[dense] | picked
    return out


@register_masking("random", grid_dims=(1, 2, 3), exact=True,
                  summary="uniform random, an exact count per sample (MAE, He et al. 2022)")
def random_mask(
    shape: tuple[int, ...],
    ratio: float,
    *,
    generator: torch.Generator,
    eligible: torch.Tensor | None = None,
) -> torch.Tensor:
    """Mask ``round(ratio * n_eligible)`` positions of each sample, uniformly without replacement.

    Like MAE, each sample gets one uniform noise value per position and the positions with the
    smallest noise are masked (a sort of the noise, no Python loop over samples). The count is over
    the flattened grid: with ``shape = (B, h, w)`` each row of ``mask.flatten(1)`` has exactly
    ``n_mask`` True values. ``round`` is round-half-to-even (Python's and torch's). Without
    ``eligible`` every row has the same count, ``round(ratio * L)`` with ``L = prod(shape[1:])``,
    which :func:`engine.masking.apply.gather_visible` turns into an unpadded batch.

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
    shape = get_masking("random").check_shape(shape)
    B, L = shape[0], 1
    for s in shape[1:]:
        L *= s
    device = generator.device
    ok = check_eligible(eligible, shape, device, "random")

    noise = torch.rand(B, L, generator=generator, device=device)  # (B, L) in [0, 1)
    if ok is None:
        return mask_lowest(noise, round(ratio * L)).reshape(shape)
    ok = ok.reshape(B, L)
    # Ineligible positions sort after every eligible one (noise < 1 < 2), so they are never among
    # the first n_mask <= n_eligible positions. The RNG stream is the same with or without eligible.
    noise = noise.masked_fill(~ok, 2.0)
    n_mask = torch.round(ratio * ok.sum(dim=1, keepdim=True).double()).long()  # (B, 1)
    return mask_lowest(noise, n_mask).reshape(shape)


@register_masking("bernoulli", grid_dims=(1, 2, 3), grids=("seq-1d", "patch-2d", "spec-2d"),
                  summary="each position independently with probability = ratio, at least one (BERT)")
def bernoulli_mask(
    shape: tuple[int, ...],
    ratio: float,
    *,
    generator: torch.Generator,
    eligible: torch.Tensor | None = None,
) -> torch.Tensor:
    """Mask each eligible position independently with probability ``ratio`` (BERT's selection).

    The count per sample is Binomial(n_eligible, ratio), so it varies between rows. Unlike plain
    Bernoulli sampling, a row with at least one eligible position and ``ratio > 0`` always gets at
    least one masked position: when the draw masks none, the eligible position with the lowest
    noise is masked (the loss of a row with nothing masked would be undefined). ``ratio = 0`` masks
    nothing; ``ratio = 1`` masks every eligible position.

    Args:
        shape: ``(B, *grid)``, at least 2 dims.
        ratio: masking probability per eligible position, in [0, 1] (BERT: 0.15).
        generator: explicit RNG (``B * L`` float32 uniforms on ``generator.device``).
        eligible: optional bool tensor of ``shape``; False positions are never masked.

    Returns:
        Bool tensor of ``shape`` on ``generator.device``; True = masked.

    Raises:
        ConfigError: ``ratio`` outside [0, 1]. ValueError: bad ``shape`` or ``eligible`` shape.

    References: Devlin et al. 2019, "BERT: Pre-training of Deep Bidirectional Transformers", sec. 3.1.
    """
    ratio = check_ratio(ratio)
    shape = get_masking("bernoulli").check_shape(shape)
    device = generator.device
    ok = check_eligible(eligible, shape, device, "bernoulli")
    noise = torch.rand(shape, generator=generator, device=device).flatten(1)  # (B, L)
    if ok is not None:
        noise = noise.masked_fill(~ok.flatten(1), 2.0)  # ineligible: never below any ratio <= 1
    mask = noise < ratio
    if ratio > 0.0 and noise.shape[1] > 0:
        low, arg = noise.min(dim=1)  # (B,): the row's best candidate
        empty = ~mask.any(dim=1) & (low < 2.0)  # rows with nothing masked but something eligible
        mask |= torch.zeros_like(mask).scatter_(1, arg[:, None], empty[:, None])  # no boolean indexing: no sync
    return mask.reshape(shape)
