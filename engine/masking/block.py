"""Block-wise masking (BEiT): rectangles of patches with a random area and aspect ratio.

References: Bao et al. 2022, "BEiT: BERT Pre-Training of Image Transformers", sec. 2.5 and
Algorithm 1 (the ``MaskingGenerator`` of their code: 75 of 196 patches, at least 16 per block,
aspect ratio in [0.3, 1/0.3], 10 attempts per block).
"""

from __future__ import annotations

import math

import torch
from pydantic import Field, ValidationInfo, field_validator

from engine.masking.random import mask_lowest
from engine.masking.registry import StrategyParams, check_eligible, check_ratio, get_masking, register_masking


class BlockParams(StrategyParams):
    """Parameters of :func:`block_mask` (BEiT's ``MaskingGenerator``)."""

    min_patches: int = Field(
        4, ge=1,
        description="smallest block area in patches (BEiT uses 16 on its 14x14 grid; 4 suits the small "
                    "grids of a dashboard, e.g. 8x8, where a 16-patch block is a quarter of the image)",
    )
    min_aspect: float = Field(
        0.3, gt=0.0, le=1.0,
        description="smallest aspect ratio height/width of a block; the ratio is drawn log-uniformly (BEiT: 0.3)",
    )
    max_aspect: float | None = Field(
        None, gt=0.0,
        description="largest aspect ratio height/width; empty = 1 / min_aspect (BEiT)",
    )
    max_attempts: int = Field(
        10, ge=1,
        description="candidate blocks tried in a row before a sample stops adding blocks (BEiT: 10)",
    )

    @field_validator("max_aspect")
    @classmethod
    def _aspect_order(cls, v: float | None, info: ValidationInfo) -> float | None:
        lo = info.data.get("min_aspect")
        if v is not None and lo is not None and v < lo:
            raise ValueError(f"max_aspect must be >= min_aspect ({lo})")
        return v


# Bits per word of the packed mask: 62 keeps every word (and each partial sum in _popcount) below
# 2**63, so int64 shifts and adds never touch the sign bit.
_WORD = 62


def _pack_cols(x: torch.Tensor) -> torch.Tensor:
    """``[..., W]`` bool -> ``[..., ceil(W / 62)]`` int64: bit ``k`` of word ``j`` is column ``62 j + k``."""
    W = x.shape[-1]
    nw = -(-W // _WORD)
    pad = torch.zeros(*x.shape[:-1], nw * _WORD - W, dtype=torch.bool, device=x.device)
    bits = torch.cat([x, pad], dim=-1).reshape(*x.shape[:-1], nw, _WORD).long()
    return (bits << torch.arange(_WORD, device=x.device)).sum(dim=-1)


def _unpack_cols(words: torch.Tensor, W: int) -> torch.Tensor:
    """Inverse of :func:`_pack_cols`: ``[..., nw]`` int64 -> ``[..., W]`` bool."""
    bits = (words.unsqueeze(-1) >> torch.arange(_WORD, device=words.device)) & 1
    return bits.flatten(-2)[..., :W].bool()


def _col_range(left: torch.Tensor, w: torch.Tensor, nw: int) -> torch.Tensor:
    """``[N, nw]`` int64 words with the bits of columns ``left .. left + w - 1`` set (``left``, ``w``: ``[N]``)."""
    base = torch.arange(nw, device=left.device) * _WORD  # (nw,)
    lo = (left[:, None] - base).clamp_(0, _WORD)
    hi = (left + w)[:, None].sub(base).clamp_(0, _WORD)
    one = torch.ones((), dtype=torch.long, device=left.device)
    return (one << hi) - (one << lo)


def _popcount(x: torch.Tensor) -> torch.Tensor:
    """Set bits of each int64 in ``[0, 2**62)`` (SWAR bit counting, no multiplication)."""
    x = x - ((x >> 1) & 0x5555555555555555)
    x = (x & 0x3333333333333333) + ((x >> 2) & 0x3333333333333333)
    x = (x + (x >> 4)) & 0x0F0F0F0F0F0F0F0F
    x = x + (x >> 8)
    x = x + (x >> 16)
    x = x + (x >> 32)
    return x & 0x7F


# ATen's grain size: an elementwise op on more elements runs on several threads, and on a loaded
# machine each such op waits for every thread to be scheduled; the per-step work stays below it.
_SERIAL = 32768


def _overlaps(words, bad, row_of, grid_rows, cols):
    """Masked patches under each candidate block, and whether it touches an ineligible one.

    Args:
        words: ``[B, H + 1, nw]`` int64, the packed mask (row ``H`` scratch, never read as set).
        bad: ``[B, H + 1, nw]`` int64 packed ineligible positions, or None.
        row_of: ``[N, 1]`` batch row of each candidate; grid_rows: ``[N, hmax]`` its grid rows
            (``H`` past its height); cols: ``[N, 1, nw]`` its column bits.

    Returns:
        ``covered`` (``[N]`` int64) and ``on_bad`` (``[N]`` bool, or None without ``bad``), computed
        in chunks of at most ``_SERIAL`` words.
    """
    n, per = grid_rows.shape[0], grid_rows.shape[1] * cols.shape[2]
    step = max(1, _SERIAL // max(per, 1))
    covered, on_bad = [], []
    for i in range(0, n, step):
        sl = slice(i, i + step)
        # The scratch row of `words` may hold bits (blocks write their unused rows there): zero it out.
        hit = words[row_of[sl], grid_rows[sl]] & cols[sl]
        hit.masked_fill_((grid_rows[sl] == words.shape[1] - 1).unsqueeze(2), 0)
        covered.append(_popcount(hit).sum(dim=(1, 2)))
        if bad is not None:
            on_bad.append(((bad[row_of[sl], grid_rows[sl]] & cols[sl]) != 0).flatten(1).any(dim=1))
    cat = (lambda parts, dt: torch.cat(parts) if parts else torch.zeros(0, dtype=dt, device=words.device))
    return cat(covered, torch.long), (cat(on_bad, torch.bool) if bad is not None else None)


def _draw_blocks(
    ok: torch.Tensor | tuple[int, int, int],
    budget: torch.Tensor,
    generator: torch.Generator,
    *,
    min_patches: int,
    min_aspect: float,
    max_aspect: float | None,
    max_attempts: int,
    record: bool = False,
):
    """The block phase of :func:`block_mask`: BEiT's loop, one candidate block per row per iteration.

    Every iteration draws ``4 * B`` float32 uniforms (one candidate for every row, used or not, so
    a row's candidates do not depend on when the other rows stop) and evaluates the candidates of
    the rows still active. The mask is kept as bits, ``[B, H, ceil(W / 62)]`` int64 words per grid
    row, so a candidate costs ``O(H * W / 62)`` word operations: the patches it would newly mask
    are ``h * w`` minus the set bits of ``words & column_range`` over its rows (and, with
    ineligible positions, any set bit of the ineligible words there rejects it).

    Args:
        ok: ``[B, H, W]`` bool, eligible positions, or the shape ``(B, H, W)`` when all are eligible.
        budget: ``[B]`` int64, patches to mask per row (``<=`` eligible count).
        generator: explicit RNG; each iteration draws ``4 * B`` float32 uniforms.
        min_patches, min_aspect, max_aspect, max_attempts: see :class:`BlockParams`.
        record: also return the accepted blocks.

    Returns:
        ``mask`` (``[B, H, W]`` bool, at most ``budget`` True per row, only on eligible positions),
        and with ``record`` a dict of 1-D tensors ``row, top, left, h, w, aspect, area`` (one entry
        per accepted block, in the order accepted; ``aspect`` and ``area`` are the drawn values
        before rounding).
    """
    if isinstance(ok, torch.Tensor):
        (B, H, W), device = ok.shape, ok.device
    else:
        (B, H, W), device, ok = ok, budget.device, None
    keys = ("row", "top", "left", "h", "w", "aspect", "area")
    log = {k: [] for k in keys} if record else None
    if H * W == 0:
        mask = torch.zeros(B, H, W, dtype=torch.bool, device=device)
        if record:
            return mask, {k: torch.zeros(0, dtype=torch.float32 if k in ("aspect", "area") else torch.long,
                                         device=device) for k in keys}
        return mask
    nw = -(-W // _WORD)
    # The mask, packed per grid row, plus a scratch row H that the rows past a block's height read and write.
    words = torch.zeros(B, H + 1, nw, dtype=torch.long, device=device)
    bad = None
    if ok is not None and not bool(ok.all()):
        bad = _pack_cols(torch.cat([~ok, torch.zeros(B, 1, W, dtype=torch.bool, device=device)], dim=1))
    log_lo = math.log(min_aspect)
    log_hi = math.log(max_aspect if max_aspect is not None else 1.0 / min_aspect)
    remaining = budget.clone()
    fails = torch.zeros(B, dtype=torch.long, device=device)
    seen = torch.zeros(B, dtype=torch.long, device=device)  # candidates evaluated per row
    # The uniforms of BEiT's iteration t are u[t] = rand(4, B) (row b uses column b): drawn ahead in
    # chunks from a saved state, and at the end the generator is set to exactly where drawing them
    # one iteration at a time would have left it (max(seen) iterations), so the top-up noise follows.
    state = generator.get_state()
    u_all = torch.empty(0, 4, B, device=device)
    # Every accepted block adds >= 1 patch and a row stops after max_attempts failures in a row, so
    # a row is done within budget * max_attempts candidates; the bound only guards against a bug
    # (any shortfall is topped up anyway).
    max_iters = int(budget.max().item()) * max_attempts if B else 0
    k = 1  # candidates evaluated per row per step
    while True:
        idx = ((remaining > 0) & (fails < max_attempts) & (seen < max_iters)).nonzero().flatten()
        A = idx.numel()
        if A == 0:
            break
        # Row idx[a] evaluates its candidates seen .. seen + k - 1 against its current mask, each
        # as if the ones before it were rejected; the first accepted one is the one BEiT's loop takes.
        j = seen[idx, None] + torch.arange(k, device=device)  # (A, k)
        need = int(j.max()) + 1
        if need > u_all.shape[0]:
            more = max(need - u_all.shape[0], u_all.shape[0], 16)
            u_all = torch.cat([u_all, torch.rand(more, 4, B, generator=generator, device=device)])
        u = u_all[j, :, idx[:, None]].flatten(0, 1).T  # (4, A * k)
        rem = remaining[idx].repeat_interleave(k)
        # BEiT's random.uniform(min_patches, remaining): when fewer than min_patches patches remain
        # the area lies in [remaining, min_patches], and such a block is only accepted where it
        # overlaps earlier blocks enough to add <= remaining new patches (else the top-up finishes).
        area = min_patches + u[0] * (rem.to(torch.float32) - min_patches)
        aspect = torch.exp(log_lo + u[1] * (log_hi - log_lo))
        # Clipped to the grid, where BEiT would reject an over-large block and retry.
        h = torch.round(torch.sqrt(area * aspect)).long().clamp_(1, H)
        w = torch.round(torch.sqrt(area / aspect)).long().clamp_(1, W)
        top = torch.minimum((u[2] * (H - h + 1)).long(), H - h)
        left = torch.minimum((u[3] * (W - w + 1)).long(), W - w)
        # The candidate's own rows only: (A * k, hmax) grid rows, those past its height left out.
        hmax = int(h.max())
        offs = torch.arange(hmax, device=device)
        on = offs < h[:, None]
        grid_rows = torch.where(on, top[:, None] + offs, H)  # (A * k, hmax), H = the scratch row
        row_of = idx.repeat_interleave(k)[:, None]
        cols = _col_range(left, w, nw).unsqueeze(1)  # (A * k, 1, nw)
        covered, on_bad = _overlaps(words, bad, row_of, grid_rows, cols)
        new = h * w - covered
        accept = (new > 0) & (new <= rem)
        if on_bad is not None:  # a block lies entirely on eligible positions
            accept &= ~on_bad
        # First accepted candidate of each row (k if none), and where the failures would stop it.
        acc = accept.view(A, k)
        first = torch.where(acc.any(dim=1), acc.int().argmax(dim=1), k)  # (A,)
        stop = max_attempts - 1 - fails[idx]  # the rejection at this offset ends the row
        took = (first < k) & (first <= stop)
        used = torch.where(took, first + 1, torch.minimum(stop + 1, torch.full_like(stop, k)))
        seen[idx] += used
        fails[idx] = torch.where(took, 0, fails[idx] + used)
        pick = (torch.arange(A, device=device) * k + first.clamp(max=k - 1))[took]  # flat candidate ids
        rows_acc = idx[took]
        remaining[rows_acc] -= new[pick]
        # OR the accepted blocks (their column bits on their rows) into the packed mask.
        # The block's rows only (the scratch row takes the rest): rows differ within a block, so
        # no two writes of this step hit the same real grid row.
        r_acc, g_acc = rows_acc[:, None], grid_rows[pick]
        words[r_acc, g_acc] = words[r_acc, g_acc] | cols[pick]
        if record:
            for key, v in (("row", rows_acc), ("top", top[pick]), ("left", left[pick]), ("h", h[pick]),
                           ("w", w[pick]), ("aspect", aspect[pick]), ("area", area[pick])):
                log[key].append(v)
        # Next step: about as many candidates as a row needed per accepted block in this one.
        k = max(1, min(max_attempts, -(-int(used.sum()) // max(1, int(took.sum())))))
    generator.set_state(state)
    n_iters = int(seen.max()) if B else 0
    if n_iters:
        torch.rand(n_iters, 4, B, generator=generator, device=device)
    mask = _unpack_cols(words[:, :H], W)
    if record:
        empty = {"aspect": torch.float32, "area": torch.float32}
        return mask, {k: torch.cat(v) if v else torch.zeros(0, dtype=empty.get(k, torch.long), device=device)
                      for k, v in log.items()}
    return mask


@register_masking("block", params=BlockParams, grid_dims=(2,), modalities=("image", "audio"), exact=True,
                  summary="BEiT block-wise masking: random rectangles, topped up to an exact count (Bao et al. 2022)")
def block_mask(
    shape: tuple[int, ...],
    ratio: float,
    *,
    generator: torch.Generator,
    eligible: torch.Tensor | None = None,
    min_patches: int = 4,
    min_aspect: float = 0.3,
    max_aspect: float | None = None,
    max_attempts: int = 10,
) -> torch.Tensor:
    """Mask random rectangular blocks of a 2-D grid (BEiT), then top up to exactly ``round(ratio * n)``.

    Block phase (BEiT, Algorithm 1): a sample with ``r`` patches still to mask draws a block area
    ``s`` uniform between ``min_patches`` and ``r`` (continuous; in ``[r, min_patches]`` when
    ``r < min_patches``, exactly as BEiT's ``random.uniform``), an aspect ratio ``a`` log-uniform in
    ``[min_aspect, max_aspect]``, height ``h = round(sqrt(s * a))`` and width ``w = round(sqrt(s / a))``
    (clipped to ``[1, H]`` and ``[1, W]``; BEiT instead rejects blocks that do not fit), and a uniform
    top-left corner with the block inside the grid. The block is accepted when it lies entirely on
    eligible positions and adds between 1 and ``r`` new masked patches (blocks may overlap earlier
    ones). A sample stops when its budget is met or after ``max_attempts`` rejected candidates in a
    row. All samples advance together: each iteration draws one candidate per sample and builds the
    blocks by broadcasting row/column ranges (the Python loop is over iterations, never samples).

    Top-up (masklab, not in BEiT): BEiT's generator may stop short of its budget (e.g. when no block
    of ``>= min_patches`` fits any more). Here the remaining patches are then drawn uniformly among
    the still unmasked eligible positions, so every sample has exactly ``round(ratio * n_eligible)``
    masked patches (torch.round, half-to-even) and an MAE encoder sees a fixed count. On a fully
    eligible 14x14 grid the top-up is under 1% of the masked patches (ratio 0.4 and 0.75, with
    ``min_patches`` 4 or 16); with scattered eligibility, where no block fits, the mask is mostly
    top-up, i.e. uniform random.

    Edge cases: ``ratio = 0`` masks nothing; ``ratio = 1`` masks every eligible position (blocks,
    then top-up); a block larger than the grid is clipped to it (so a grid smaller than
    ``min_patches`` is covered by blocks as large as the grid, accepted while they fit the
    budget); an all-ineligible row is all False; an empty grid (``H = 0`` or ``W = 0``) gives an
    empty mask.

    Args:
        shape: ``(B, H, W)``: a patch grid, or ``(B, F, T)`` patches of a spectrogram.
        ratio: fraction of eligible patches to mask, in [0, 1] (BEiT: 0.4, i.e. 75 of 196).
        generator: explicit RNG; the mask lives on ``generator.device``.
        eligible: optional bool ``[B, H, W]``; blocks only cover eligible positions and the top-up
            only picks eligible ones.
        min_patches: smallest block area (BEiT: 16 on 14x14; default 4, see :class:`BlockParams`).
        min_aspect: smallest height/width ratio, in (0, 1] (BEiT: 0.3).
        max_aspect: largest height/width ratio (None: ``1 / min_aspect``, BEiT).
        max_attempts: rejected candidates in a row before a sample stops adding blocks (BEiT: 10).

    Returns:
        Bool ``[B, H, W]`` on ``generator.device``; True = masked.

    Raises:
        ConfigError: ``ratio`` outside [0, 1], or a bad parameter (named ``masking.params.<field>``).
        ValueError: ``shape`` is not ``(B, H, W)``, or ``eligible`` does not have ``shape``.

    References: Bao et al. 2022, "BEiT: BERT Pre-Training of Image Transformers", sec. 2.5, Algorithm 1.
    """
    ratio = check_ratio(ratio)
    strategy = get_masking("block")
    strategy.parse_params({"min_patches": min_patches, "min_aspect": min_aspect, "max_aspect": max_aspect,
                           "max_attempts": max_attempts})
    shape = strategy.check_shape(shape)
    B, H, W = shape
    device = generator.device
    ok = check_eligible(eligible, shape, device, "block")  # None: every position eligible
    n_ok = ok.flatten(1).sum(dim=1) if ok is not None else torch.full((B,), H * W, device=device)
    budget = torch.round(ratio * n_ok.double()).long()  # (B,)
    mask = _draw_blocks(ok if ok is not None else shape, budget, generator, min_patches=min_patches, min_aspect=min_aspect,
                        max_aspect=max_aspect, max_attempts=max_attempts)
    # Top-up: the budget - (block patches) unmasked eligible positions with the lowest noise (block
    # patches and ineligible positions sort last, at 2). The same positions as taking the `budget`
    # lowest with block patches at -1, but a selection of the few top-up positions only.
    flat = mask.flatten(1)
    noise = torch.rand(B, H * W, generator=generator, device=device)
    noise = noise.masked_fill(flat if ok is None else flat | ~ok.flatten(1), 2.0)
    return (flat | mask_lowest(noise, budget - flat.sum(dim=1))).reshape(shape)
