"""Block-wise masking (BEiT): rectangles of patches with a random area and aspect ratio.

References: Bao et al. 2022, "BEiT: BERT Pre-Training of Image Transformers", sec. 2.5 and
Algorithm 1 (the ``MaskingGenerator`` of their code: 75 of 196 patches, at least 16 per block,
aspect ratio in [0.3, 1/0.3], 10 attempts per block).
"""

from __future__ import annotations

import functools
import math
import sys

import numpy as np
import torch
from pydantic import Field, ValidationInfo, field_validator

from engine.masking.random import pick_uniform, row_counts
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


# Bits per word of the packed mask: 62 keeps every word below 2**62, so the int64 shifts of
# _pack_cols and _col_range never touch the sign bit.
_WORD = 62


def _pack_cols(x: torch.Tensor) -> torch.Tensor:
    """``[..., W]`` bool -> ``[..., ceil(W / 62)]`` int64: bit ``k`` of word ``j`` is column ``62 j + k``."""
    W = x.shape[-1]
    nw = -(-W // _WORD)
    pad = torch.zeros(*x.shape[:-1], nw * _WORD - W, dtype=torch.bool, device=x.device)
    bits = torch.cat([x, pad], dim=-1).reshape(*x.shape[:-1], nw, _WORD).long()
    return (bits << torch.arange(_WORD, device=x.device)).sum(dim=-1)


def _unpack_cols(words: torch.Tensor, W: int) -> torch.Tensor:
    """Inverse of :func:`_pack_cols`: ``[..., nw]`` int64 -> ``[..., W]`` bool (contiguous).

    One int64 table read per byte of the words (the table's 8 bytes are that byte's 8 bits as
    bools, ``[256]`` int64), viewed as bools, then one copy of each word's 62 columns into place:
    about 3x faster than a ``[256, 8]`` bool lookup per byte, and 15x faster than 62 shifts per word,
    on a 256x128x100 mask.
    """
    b = words.contiguous().view(torch.uint8)  # (..., nw * 8), bytes in memory order
    if sys.byteorder == "big":  # least significant byte first, as on little-endian machines
        b = b.reshape(*words.shape, 8).flip(-1).reshape(b.shape)
    bits = _BYTE_BITS.to(words.device)[b.int()].view(torch.bool).reshape(*words.shape, 64)  # (..., nw, 64)
    out = torch.empty(*words.shape[:-1], W, dtype=torch.bool, device=words.device)
    for j in range(words.shape[-1]):
        lo, hi = j * _WORD, min(W, (j + 1) * _WORD)
        out[..., lo:hi] = bits[..., j, : hi - lo]
    return out


# The 8 bits of byte value v as 8 bytes (0 or 1, bit 0 first), read as one int64: [256] int64.
_BYTE_BITS = ((torch.arange(256)[:, None] >> torch.arange(8)) & 1).to(torch.uint8).view(torch.int64).reshape(256)


def _col_range(left: torch.Tensor, w: torch.Tensor, nw: int) -> torch.Tensor:
    """``[N, nw]`` int64 words with the bits of columns ``left .. left + w - 1`` set (``left``, ``w``: ``[N]``)."""
    base = torch.arange(nw, device=left.device) * _WORD  # (nw,)
    lo = (left[:, None] - base).clamp_(0, _WORD)
    hi = (left + w)[:, None].sub(base).clamp_(0, _WORD)
    one = torch.ones((), dtype=torch.long, device=left.device)
    return (one << hi) - (one << lo)


def _block_rows(base: np.ndarray, h: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The packed-mask rows of blocks, flattened: one entry per grid row of each block.

    Args:
        base: ``[N]`` int64, index into the ``[B * H, nw]`` word rows of each block's top row
            (``b * H + top``); h: ``[N]`` int64 heights (>= 1).

    Returns:
        ``seg`` (``[sum(h)]``, the block of each entry), ``rows`` (``[sum(h)]``, its word row) and
        ``start`` (``[N]``, each block's first entry). Blocks of different heights take no padding
        (a padded ``[N, max(h)]`` layout did 3-4x the work on the audio grid, where heights range
        from 1 to 128).
    """
    seg = np.repeat(np.arange(h.size), h)
    start = np.cumsum(h) - h
    return seg, (base - start)[seg] + np.arange(seg.size), start


def _overlaps(words: np.ndarray, bad: np.ndarray | None, seg: np.ndarray, rows: np.ndarray, start: np.ndarray,
              cols: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """Masked patches under each candidate block, and whether it touches an ineligible one.

    Args:
        words: ``[B * H, nw]`` int64, the packed mask; bad: the same for ineligible positions, or None.
        seg, rows, start: from :func:`_block_rows` (``[M]``, ``[M]``, ``[n]``); cols: ``[n, nw]``
            column bits of each block.

    Returns:
        ``covered`` (``[n]`` int64: set bits of ``words & cols`` over the block's rows) and
        ``on_bad`` (``[n]`` bool, or None without ``bad``).
    """
    c = cols[seg]  # (M, nw)
    per_row = np.bitwise_count(words[rows] & c).sum(axis=1, dtype=np.int64)  # (M,)
    covered = np.add.reduceat(per_row, start)  # heights >= 1: no empty segment
    if bad is None:
        return covered, None
    return covered, np.logical_or.reduceat((bad[rows] & c).any(axis=1), start)


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
    with_remaining: bool = False,
):
    """The block phase of :func:`block_mask`: BEiT's loop, one candidate block per row per iteration.

    Every iteration draws ``4 * B`` float32 uniforms (one candidate for every row, used or not, so
    a row's candidates do not depend on when the other rows stop) and evaluates the candidates of
    the rows still active. The mask is kept as bits, ``[B * H, ceil(W / 62)]`` int64 words (one row
    of words per grid row), so a candidate of height ``h`` costs ``h * ceil(W / 62)`` word
    operations: the patches it would newly mask are ``h * w`` minus the set bits of
    ``words & column_range`` over its own rows, the rows of all candidates of a step flattened into
    one list (no padding to the tallest); with ineligible positions, any set bit of the ineligible
    words there rejects it. Column ranges come from a ``[W, W + 1]`` table.

    The uniforms and aspect ratios are drawn with torch (on the generator's device); the loop's
    state (about 50 dependent steps of about 100 operations on arrays of at most a few thousand
    entries) is NumPy on the CPU, whose per-operation cost on such small arrays is a fraction of a
    torch operation's. The float32 arithmetic (area, ``sqrt``, round half to even, corners) is the
    same IEEE operations in the same order, so the blocks are bit for bit those of the torch loop
    (``tests/engine/test_masking_block.py`` compares with a dense torch loop and a per-sample one).

    Args:
        ok: ``[B, H, W]`` bool, eligible positions, or the shape ``(B, H, W)`` when all are eligible.
        budget: ``[B]`` int64, patches to mask per row (``<=`` eligible count).
        generator: explicit RNG; each iteration draws ``4 * B`` float32 uniforms.
        min_patches, min_aspect, max_aspect, max_attempts: see :class:`BlockParams`.
        record: also return the accepted blocks.
        with_remaining: also return the patches left to mask (without ``record`` only).

    Returns:
        ``mask`` (``[B, H, W]`` bool on the generator's device, at most ``budget`` True per row, only
        on eligible positions), and with ``record`` a dict of 1-D tensors ``row, top, left, h, w,
        aspect, area`` (one entry per accepted block, in the order accepted; ``aspect`` and ``area``
        are the drawn values before rounding), or with ``with_remaining`` ``[B]`` int64
        ``budget - mask.sum(1)``.
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
        return (mask, budget.clone()) if with_remaining else mask
    nw = -(-W // _WORD)
    # The mask, packed per grid row: word row b * H + r holds grid row r of sample b.
    words = np.zeros((B * H, nw), dtype=np.int64)
    bad = None
    if ok is not None and not bool(ok.all()):
        bad = _pack_cols(~ok).view(B * H, nw).cpu().numpy()
    log_lo = math.log(min_aspect)
    log_hi = math.log(max_aspect if max_aspect is not None else 1.0 / min_aspect)
    col_table = _col_table(W)  # (W, W + 1, nw): column bits of every (left, w)
    remaining = budget.to("cpu", torch.int64).numpy().copy()
    fails = np.zeros(B, dtype=np.int64)
    seen = np.zeros(B, dtype=np.int64)  # candidates evaluated per row
    # The uniforms of BEiT's iteration t are u[t] = rand(4, B) (row b uses column b): drawn ahead in
    # chunks from a saved state, and at the end the generator is set to exactly where drawing them
    # one iteration at a time would have left it (max(seen) iterations), so the top-up noise follows.
    state = generator.get_state()
    u_all = np.empty((0, 5, B), dtype=np.float32)  # the 4 uniforms of each iteration, then its aspect ratio
    # Every accepted block adds >= 1 patch and a row stops after max_attempts failures in a row, so
    # a row is done within budget * max_attempts candidates; the bound only guards against a bug
    # (any shortfall is topped up anyway).
    max_iters = int(remaining.max()) * max_attempts if B else 0
    k = 1  # candidates evaluated per row per step
    while True:
        idx = np.flatnonzero((remaining > 0) & (fails < max_attempts) & (seen < max_iters))
        A = idx.size
        if A == 0:
            break
        # Row idx[a] evaluates its candidates seen .. seen + k - 1 against its current mask, each
        # as if the ones before it were rejected; the first accepted one is the one BEiT's loop takes.
        j = seen[idx, None] + np.arange(k)  # (A, k)
        need = int(j.max()) + 1
        if need > u_all.shape[0]:
            more = max(need - u_all.shape[0], u_all.shape[0], 16)
            u_new = torch.rand(more, 4, B, generator=generator, device=device)
            aspect_new = torch.exp(log_lo + u_new[:, 1:2] * (log_hi - log_lo))  # log-uniform
            u_all = np.concatenate([u_all, torch.cat([u_new, aspect_new], dim=1).cpu().numpy()])
        u = u_all[j, :, idx[:, None]].reshape(A * k, 5).T  # (5, A * k) float32
        rem = np.repeat(remaining[idx], k)
        # BEiT's random.uniform(min_patches, remaining): when fewer than min_patches patches remain
        # the area lies in [remaining, min_patches], and such a block is only accepted where it
        # overlaps earlier blocks enough to add <= remaining new patches (else the top-up finishes).
        # float32 throughout (NumPy keeps a Python int operand at the array's dtype).
        area = min_patches + u[0] * (rem.astype(np.float32) - min_patches)
        aspect = u[4]
        # Clipped to the grid, where BEiT would reject an over-large block and retry.
        h = np.rint(np.sqrt(area * aspect)).astype(np.int64).clip(1, H)
        w = np.rint(np.sqrt(area / aspect)).astype(np.int64).clip(1, W)
        top = np.minimum((u[2] * (H - h + 1).astype(np.float32)).astype(np.int64), H - h)
        left = np.minimum((u[3] * (W - w + 1).astype(np.float32)).astype(np.int64), W - w)
        # The candidate's own rows only, flattened (no padding to the tallest candidate).
        cols = col_table[left, w]  # (A * k, nw)
        seg, rows, start = _block_rows(np.repeat(idx, k) * H + top, h)
        covered, on_bad = _overlaps(words, bad, seg, rows, start, cols)
        new = h * w - covered
        accept = (new > 0) & (new <= rem)
        if on_bad is not None:  # a block lies entirely on eligible positions
            accept &= ~on_bad
        # First accepted candidate of each row (k if none), and where the failures would stop it.
        acc = accept.reshape(A, k)
        first = np.where(acc.any(axis=1), acc.argmax(axis=1), k)  # (A,)
        # The row ends at its first acceptance, at the offset `stop` where a rejection is its
        # max_attempts-th in a row, or after its k candidates, whichever comes first.
        end = np.minimum(max_attempts - 1 - fails[idx], k - 1)
        took = first <= end  # first < k: first = k means none accepted
        used = np.minimum(first, end) + 1
        seen[idx] += used
        fails[idx] = np.where(took, 0, fails[idx] + used)
        pick = (np.arange(A) * k + np.minimum(first, k - 1))[took]  # flat candidate ids
        rows_acc = idx[took]
        remaining[rows_acc] -= new[pick]
        # OR the accepted blocks (their column bits on their rows) into the packed mask. At most one
        # block per sample per step, so no two writes of this step hit the same word row.
        seg_p, rows_p, _ = _block_rows(rows_acc * H + top[pick], h[pick])
        words[rows_p] |= cols[pick][seg_p]
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
    mask = _unpack_cols(torch.from_numpy(words).to(device).view(B, H, nw), W)
    if record:
        dtypes = {"aspect": torch.float32, "area": torch.float32}
        return mask, {k: torch.from_numpy(np.concatenate(v)).to(device) if v
                      else torch.zeros(0, dtype=dtypes.get(k, torch.long), device=device) for k, v in log.items()}
    return (mask, torch.from_numpy(remaining).to(device)) if with_remaining else mask


@functools.lru_cache(maxsize=16)
def _col_table(W: int) -> np.ndarray:
    """``[W, W + 1, ceil(W / 62)]`` int64 (read-only): the column bits of every ``(left, w)``."""
    nw = -(-W // _WORD)
    lefts, widths = torch.arange(W), torch.arange(W + 1)
    table = _col_range(lefts.repeat_interleave(W + 1), widths.repeat(W), nw).view(W, W + 1, nw).numpy()
    table.setflags(write=False)
    return table


@register_masking("block", params=BlockParams, grid_dims=(2,), grids=("patch-2d", "spec-2d"), exact=True,
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
    the still unmasked eligible positions (:func:`~engine.masking.random.pick_uniform`: a few
    positions drawn directly, many by noise), so every sample has exactly ``round(ratio * n_eligible)``
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
    n_ok = row_counts(ok.flatten(1)) if ok is not None else torch.full((B,), H * W, device=device)
    budget = torch.round(ratio * n_ok.double()).long()  # (B,)
    mask, remaining = _draw_blocks(ok if ok is not None else shape, budget, generator, min_patches=min_patches,
                                   min_aspect=min_aspect, max_aspect=max_aspect, max_attempts=max_attempts,
                                   with_remaining=True)
    # Top-up: the budget - (block patches) positions, uniform among the unmasked eligible ones.
    flat = mask.view(B, H * W)
    free = ~flat if ok is None else ok.flatten(1) & ~flat
    n_blocks = budget - remaining  # patches the blocks masked
    return pick_uniform(free, remaining, generator=generator, n_free=n_ok - n_blocks, into=flat).view(shape)
