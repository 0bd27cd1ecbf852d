"""Hierarchical (coarse-to-fine) masking: whole coarse cells first, then finer cells, then patches.

This is masklab's own multi-level scheme. It is inspired by block-wise masking (Bao et al. 2022,
BEiT) and by masking at a granularity coarser than the model's patches: SimMIM (Xie et al. 2022)
masks random 32x32-pixel mask patches, larger than the model's patches, and ConvMAE (Gao et al.
2022) draws its mask on the coarsest stage's grid and upsamples it to the finer stages. Mixing
several cell sizes in one mask, with a share of the budget per level, is not taken from a paper.
"""

from __future__ import annotations

import math
from typing import Annotated

import torch
from pydantic import Field, ValidationInfo, field_validator

from engine.masking.random import mask_lowest, pick_uniform, row_counts, sparse_rows
from engine.masking.registry import StrategyParams, check_eligible, check_ratio, get_masking, register_masking


class HierarchicalParams(StrategyParams):
    """Parameters of :func:`hierarchical_mask`: the cell sizes of the levels and their budget shares."""

    scales: list[Annotated[int, Field(ge=2)]] = Field(
        [4, 2],
        description="cell side of each level in positions, coarse to fine, strictly decreasing, each >= 2 "
                    "(4 = whole 4x4 cells on an image grid)",
    )
    shares: list[Annotated[float, Field(ge=0.0, le=1.0)]] = Field(
        [0.5, 0.25],
        description="share of the mask budget masked as whole cells at each level (one per scale, sum <= 1); "
                    "the rest is single random positions",
    )

    @field_validator("scales")
    @classmethod
    def _decreasing(cls, v: list[int]) -> list[int]:
        if any(a <= b for a, b in zip(v, v[1:])):
            raise ValueError("scales must be strictly decreasing (coarse to fine)")
        return v

    @field_validator("shares")
    @classmethod
    def _shares(cls, v: list[float], info: ValidationInfo) -> list[float]:
        scales = info.data.get("scales")
        if scales is not None and len(v) != len(scales):
            raise ValueError(f"shares needs one value per scale ({len(scales)} scales, {len(v)} shares)")
        if sum(v) > 1.0 + 1e-9:
            raise ValueError(f"shares must sum to at most 1 (sum {sum(v):g})")
        return v


def _cells(x: torch.Tensor, s: int, n: tuple[int, ...]) -> torch.Tensor:
    """``[B, prod(n)]`` bool: True where all ``s**d`` positions of the aligned cell are True in ``x``.

    ``x`` is ``[B, *grid]`` and ``n[j] = grid[j] // s``; the ragged margin beyond ``n[j] * s`` is
    not part of any cell. The reduction runs over the within-cell dims of a view (no permuted copy).
    """
    B, d = x.shape[0], len(n)
    crop = x[(slice(None),) + tuple(slice(0, k * s) for k in n)]
    v = crop.reshape([B] + [q for k in n for q in (k, s)])  # (B, n1, s, n2, s, ...)
    return v.all(dim=tuple(2 + 2 * j for j in range(d))).reshape(B, math.prod(n))


def _upsample(cells: torch.Tensor, s: int, n: tuple[int, ...], grid: tuple[int, ...]) -> torch.Tensor:
    """``[B, prod(n)]`` cell mask -> ``[B, *grid]`` position mask (each cell covers ``s**d`` positions)."""
    B = cells.shape[0]
    v = cells.reshape([B] + [q for k in n for q in (k, 1)])
    v = v.expand([B] + [q for k in n for q in (k, s)]).reshape([B] + [k * s for k in n])
    if all(k * s == D for k, D in zip(n, grid)):  # no ragged margin: the expanded cells are the grid
        return v
    out = torch.zeros((B, *grid), dtype=torch.bool, device=cells.device)
    out[(slice(None),) + tuple(slice(0, k * s) for k in n)] = v
    return out


def _touched(coarse: torch.Tensor, sc: int, nc: tuple[int, ...], s: int, n: tuple[int, ...]) -> torch.Tensor:
    """``[B, prod(n)]`` bool: cells of side ``s`` (grid ``n``) that share a position with a True cell of ``coarse``.

    ``coarse`` is ``[B, prod(nc)]``, cells of side ``sc`` on the grid ``nc``. Along each dim a fine
    cell spans the coarse cells ``(c * s) // sc`` to ``((c + 1) * s - 1) // sc`` (one or two of
    them, as ``s < sc``); an index past ``nc`` is the ragged margin, never masked by this level.
    Works on the cell grids only (``prod(n) * 2**d`` reads), never on the position grid.
    """
    B, d = coarse.shape[0], len(n)
    if all(sc % s == 0 for _ in n):  # each fine cell lies in one coarse cell (or the margin)
        r = sc // s
        up = _upsample(coarse, r, nc, tuple(min(k, c * r) for k, c in zip(n, nc)))  # no margin past n
        out = torch.zeros((B, *n), dtype=torch.bool, device=coarse.device)
        out[(slice(None),) + tuple(slice(0, m) for m in up.shape[1:])] = up
        return out.reshape(B, math.prod(n))
    pad = torch.zeros([B] + [k + 1 for k in nc], dtype=torch.bool, device=coarse.device)
    pad[(slice(None),) + tuple(slice(0, k) for k in nc)] = coarse.view(B, *nc)
    ends = []
    for j in range(d):
        c = torch.arange(n[j], device=coarse.device)
        lo, hi = ((c * s) // sc).clamp(max=nc[j]), (((c + 1) * s - 1) // sc).clamp(max=nc[j])
        shape = [1] * d
        shape[j] = n[j]
        ends.append((lo.view(shape), hi.view(shape)))
    out = torch.zeros((B, *n), dtype=torch.bool, device=coarse.device)
    for corner in range(1 << d):  # every combination of the first / last coarse cell along each dim
        out |= pad[(slice(None),) + tuple(ends[j][(corner >> j) & 1] for j in range(d))]
    return out.reshape(B, math.prod(n))


def _levels_to_grid(levels, grid: tuple[int, ...], B: int, device) -> torch.Tensor:
    """``[B, *grid]`` bool: the union of the levels' masked cells (``(cells, s, n)`` each, coarse first).

    While a level's scale divides the coarser one, the coarser union is upsampled onto its cell grid
    (``prod(n)`` cells) and merged there; each other level, and the last union, is upsampled to the
    position grid, so the default ``[4, 2]`` touches the position grid once.
    """
    parts = []  # position-grid masks to merge
    acc = None  # (cells, s, n): union of the levels since the last flush, on the grid of the finest
    for cells, s, n in levels:
        if acc is not None and acc[1] % s == 0:
            cells = cells | _upsample(acc[0], acc[1] // s, acc[2], n).reshape(B, math.prod(n))
        elif acc is not None:
            parts.append(_upsample(*acc, grid))
        acc = (cells, s, n)
    if acc is not None:
        parts.append(_upsample(*acc, grid))
    if not parts:
        return torch.zeros((B, *grid), dtype=torch.bool, device=device)
    out = parts[0]
    for part in parts[1:]:
        out |= part
    return out


@register_masking("hierarchical", params=HierarchicalParams, grid_dims=(1, 2, 3), exact=True,
                  summary="coarse-to-fine: shares of the budget as whole coarse cells, then finer, then single "
                          "positions (masklab, after BEiT/SimMIM)")
def hierarchical_mask(
    shape: tuple[int, ...],
    ratio: float,
    *,
    generator: torch.Generator,
    eligible: torch.Tensor | None = None,
    scales: list[int] = [4, 2],  # noqa: B006 (never mutated; equal to the model's default)
    shares: list[float] = [0.5, 0.25],  # noqa: B006
) -> torch.Tensor:
    """Mask ``round(ratio * n)`` positions as a mix of aligned coarse cells, finer cells and single positions.

    With ``d`` grid dims and budget ``n_mask = round(ratio * n_eligible)`` (torch.round,
    half-to-even), level ``i`` (coarse first) masks ``floor(shares[i] * n_mask / scales[i]**d)``
    whole cells of side ``scales[i]``, chosen uniformly among the *available* cells: cells of the
    grid aligned at multiples of ``scales[i]``, lying fully inside the grid, all of whose positions
    are eligible and not yet masked by a coarser level. When fewer cells are available the level
    masks what is available (its shortfall goes to the last step). Finally single positions,
    uniform among the unmasked eligible ones (:func:`~engine.masking.random.pick_uniform`), top up
    the mask to exactly ``n_mask``, so the strategy is exact and an MAE encoder sees a fixed count.
    A level whose count reaches the number of cells of its lattice takes none (its share goes to
    the singles): taking every cell is no draw, and the same cells would be hidden in every sample
    (on a 7x7 grid the one aligned 4x4 cell is the top-left one).
    With the defaults on a 14x14 grid at ratio 0.75 (``n_mask = 147``): 4 cells of 4x4 (64
    positions), 9 cells of 2x2 (36) and 47 single positions.

    Works on sequences ``[B, L]`` (cells are aligned runs of ``s`` tokens), patch grids ``[B, H, W]``
    and videos ``[B, T, H, W]`` (cells are ``s x s x s`` cubes).

    Edge cases: ``ratio = 0`` masks nothing; ``ratio = 1`` masks every eligible position; a grid
    dim shorter than a scale leaves that level without cells, and a lattice of one cell leaves it
    without a draw (all its share goes to single positions); the ragged margin of a grid not divisible by a scale is only reachable by finer
    levels; empty ``scales``/``shares`` give uniform random masking; an all-ineligible row is all
    False; an empty grid gives an empty mask.

    Args:
        shape: ``(B, L)``, ``(B, H, W)`` or ``(B, T, H, W)``.
        ratio: fraction of eligible positions to mask, in [0, 1].
        generator: explicit RNG on ``generator.device``: one float32 uniform per cell of each
            level, then the singles' draws (:func:`~engine.masking.random.pick_uniform`).
        eligible: optional bool tensor of ``shape``; a cell is only masked whole when all of its
            positions are eligible.
        scales: cell sides, coarse to fine, strictly decreasing, each >= 2.
        shares: fraction of ``n_mask`` per level, each in [0, 1], one per scale, sum <= 1.

    Returns:
        Bool tensor of ``shape`` on ``generator.device``; True = masked.

    Raises:
        ConfigError: ``ratio`` outside [0, 1], or bad ``scales``/``shares`` (the message names
            ``masking.params.scales`` / ``masking.params.shares``).
        ValueError: bad ``shape`` or ``eligible`` shape.

    References: masklab's scheme; related: Bao et al. 2022 (BEiT) block-wise masking, Xie et al. 2022
    (SimMIM) large mask patches, Gao et al. 2022 (ConvMAE) a coarse-stage mask upsampled to finer stages.
    """
    ratio = check_ratio(ratio)
    strategy = get_masking("hierarchical")
    strategy.parse_params({"scales": list(scales), "shares": list(shares)})
    shape = strategy.check_shape(shape)
    B, grid = shape[0], shape[1:]
    d, L = len(grid), math.prod(shape[1:])
    device = generator.device
    ok = check_eligible(eligible, shape, device, "hierarchical")  # None: every position eligible
    n_ok = row_counts(ok.reshape(B, L)) if ok is not None else torch.full((B,), L, device=device)
    budget = torch.round(ratio * n_ok.double()).long()  # (B,)
    used = torch.zeros(B, dtype=torch.long, device=device)
    # The levels work on their cell grids: a cell is available when all its positions are eligible
    # and it touches no cell masked by a coarser level (`_touched`), which is the same as "all its
    # positions eligible and unmasked" without a pass over the position grid per level. The union
    # of the levels goes to the position grid once at the end (through the finer grids while each
    # scale divides the coarser one).
    done = []  # (cells, s, n) of the levels drawn so far
    for s, share in zip(scales, shares):
        n = tuple(D // s for D in grid)
        n_cells = math.prod(n)
        if n_cells == 0:
            continue
        avail = _cells(ok, s, n) if ok is not None else torch.ones(B, n_cells, dtype=torch.bool, device=device)
        for cells_c, sc, nc in done:
            avail &= ~_touched(cells_c, sc, nc, s, n)
        # 1e-9: keep e.g. 0.1 * 160 / 16 from flooring to 0.999... -> 0; never exceeds the budget.
        want = torch.floor(share * budget.double() / s**d + 1e-9).long()
        # A level that would take every cell of its lattice draws nothing: its cells would sit at the
        # same place in every sample (a 7x7 grid holds one aligned 4x4 cell). It takes none; its
        # share goes to the single positions.
        want.masked_fill_(want >= n_cells, 0)
        take = torch.minimum(torch.minimum(want, row_counts(avail)), (budget - used) // s**d)
        noise = torch.rand(B, n_cells, generator=generator, device=device).masked_fill(~avail, 2.0)
        done.append((mask_lowest(noise, take.view(B, 1)), s, n))
        used += take * s**d
    mask = _levels_to_grid(done, grid, B, device).reshape(B, L)
    if bool(sparse_rows(budget - used, n_ok - used).any()):  # few singles: drawn as positions
        free = ~mask if ok is None else ok.reshape(B, L) & ~mask
        mask = mask.contiguous()
        return pick_uniform(free, budget - used, generator=generator, n_free=n_ok - used, into=mask).view(shape)
    # Many singles in every row: pick_uniform's noise route, fused with the cells (they sort first,
    # ineligible positions last), so the budget lowest are the cells and the singles.
    noise = torch.rand(B, L, generator=generator, device=device).masked_fill_(mask, -1.0)
    if ok is not None:
        noise.masked_fill_(~ok.reshape(B, L), 2.0)
    return mask_lowest(noise, budget.view(B, 1)).reshape(shape)
