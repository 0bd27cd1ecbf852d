"""engine.masking.hierarchical: coarse-to-fine masking with a budget share per level."""

from __future__ import annotations

import inspect
import math

import pytest
import torch

import engine.masking.random as random_module
from engine.errors import ConfigError
from engine.masking import get_masking, random_mask
from engine.masking.hierarchical import _cells, _upsample, hierarchical_mask
from engine.masking.random import mask_lowest


def gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def counts(mask: torch.Tensor) -> torch.Tensor:
    return mask.reshape(mask.shape[0], -1).sum(dim=1)


def full_cells(mask: torch.Tensor, s: int) -> torch.Tensor:
    """[B, h//s, w//s] bool: aligned s x s cells that are entirely masked."""
    B, H, W = mask.shape
    c = mask[:, : H // s * s, : W // s * s].reshape(B, H // s, s, W // s, s)
    return c.all(dim=4).all(dim=2)


def is_union_of_cells(mask: torch.Tensor, s: int) -> bool:
    B, H, W = mask.shape
    c = mask.reshape(B, H // s, s, W // s, s)
    return bool((c.all(dim=4).all(dim=2) == c.any(dim=4).any(dim=2)).all())


@pytest.mark.parametrize("shape", [(32, 14, 14), (16, 8, 8), (8, 50), (4, 6, 9, 9), (8, 3, 3), (8, 1, 7), (4, 1)])
@pytest.mark.parametrize("ratio", [0.0, 0.1, 0.4, 0.75, 0.9, 1.0])
def test_exact_count(shape, ratio):
    mask = hierarchical_mask(shape, ratio, generator=gen(1))
    n = 1
    for d in shape[1:]:
        n *= d
    assert mask.shape == shape and (counts(mask) == round(ratio * n)).all()


@pytest.mark.parametrize("ratio", [0.3, 0.75, 1.0])
def test_exact_count_over_eligible_and_never_outside(ratio):
    g = gen(2)
    eligible = torch.rand(64, 14, 14, generator=g) < 0.8
    mask = hierarchical_mask((64, 14, 14), ratio, generator=g, eligible=eligible)
    assert not (mask & ~eligible).any()
    assert torch.equal(counts(mask), torch.round(ratio * eligible.reshape(64, -1).sum(1).double()).long())


def test_coarse_share_is_whole_aligned_cells():
    # 14x14 at 0.75: budget 147 -> floor(0.5 * 147 / 16) = 4 cells of 4x4, then floor(0.25 * 147 / 4) = 9 of 2x2.
    mask = hierarchical_mask((256, 14, 14), 0.75, generator=gen(3))
    assert (full_cells(mask, 4).sum(dim=(1, 2)) >= 4).all()
    assert (full_cells(mask, 2).sum(dim=(1, 2)) >= 4 * 4 + 9).all()


def test_coarse_grid_first_then_finer_level_without_singles():
    # 16x16 at 0.5: budget 128 = 4 cells of 4x4 (64) + 16 cells of 2x2 (64): no single positions.
    mask = hierarchical_mask((128, 16, 16), 0.5, generator=gen(4), scales=[4, 2], shares=[0.5, 0.5])
    assert is_union_of_cells(mask, 2)
    assert (full_cells(mask, 4).sum(dim=(1, 2)) >= 4).all()
    # Finer cells are drawn where the coarse ones are not: typically few extra full 4x4 cells.
    assert full_cells(mask, 4).sum(dim=(1, 2)).float().mean() < 5.0


def test_one_level_share_one_masks_only_whole_cells_uniformly():
    mask = hierarchical_mask((4000, 8, 8), 0.5, generator=gen(5), scales=[2], shares=[1.0])
    assert is_union_of_cells(mask, 2) and (full_cells(mask, 2).sum(dim=(1, 2)) == 8).all()
    freq = full_cells(mask, 2).float().mean(0)  # each of the 16 cells chosen w.p. 8/16
    assert (freq - 0.5).abs().max() < 0.035


def test_cells_only_where_fully_eligible():
    eligible = torch.zeros(64, 16, 16, dtype=torch.bool)
    eligible[:, :, :8] = True  # right half is padding
    mask = hierarchical_mask((64, 16, 16), 0.5, generator=gen(6), eligible=eligible, scales=[4], shares=[1.0])
    assert not (mask & ~eligible).any()
    assert is_union_of_cells(mask, 4) and (full_cells(mask, 4).sum(dim=(1, 2)) == 4).all()


def test_scarce_cells_leave_the_rest_to_single_positions():
    # L = 10, scale 4: only 2 aligned cells fit; ratio 0.8 wants both (8 // 4 = 2), which is no
    # draw, so the level takes none and all 8 positions are singles, still exact; ratio 1 masks all.
    mask = hierarchical_mask((8, 10), 1.0, generator=gen(7), scales=[4], shares=[1.0])
    assert mask.all()
    mask = hierarchical_mask((256, 10), 0.8, generator=gen(7), scales=[4], shares=[1.0])
    assert (counts(mask) == 8).all() and not mask.all(dim=0).any()
    # a grid smaller than every scale is plain random masking, still exact
    assert (counts(hierarchical_mask((8, 3, 3), 0.5, generator=gen(7))) == 4).all()


def test_video_cubes():
    mask = hierarchical_mask((16, 4, 8, 8), 0.5, generator=gen(8), scales=[2], shares=[1.0])
    c = mask.reshape(16, 2, 2, 4, 2, 4, 2).permute(0, 1, 3, 5, 2, 4, 6).reshape(16, 32, 8)
    assert (c.all(-1) == c.any(-1)).all() and (c.all(-1).sum(1) == 16).all()


def test_sequence_runs():
    mask = hierarchical_mask((16, 32), 0.5, generator=gen(9), scales=[4], shares=[1.0])
    c = mask.reshape(16, 8, 4)
    assert (c.all(-1) == c.any(-1)).all() and (c.all(-1).sum(1) == 4).all()


def test_no_levels_is_mae_random_masking():
    g = gen(10)
    eligible = torch.rand(16, 7, 7, generator=g) < 0.7
    a = hierarchical_mask((16, 7, 7), 0.6, generator=gen(11), eligible=eligible, scales=[], shares=[])
    assert torch.equal(a, random_mask((16, 7, 7), 0.6, generator=gen(11), eligible=eligible))


def test_all_ineligible_row_and_empty_grid():
    eligible = torch.ones(3, 8, 8, dtype=torch.bool)
    eligible[1] = False
    mask = hierarchical_mask((3, 8, 8), 0.5, generator=gen(), eligible=eligible)
    assert not mask[1].any() and (counts(mask)[[0, 2]] == 32).all()
    assert hierarchical_mask((2, 0, 5), 0.5, generator=gen()).shape == (2, 0, 5)


@pytest.mark.parametrize("params,field,msg", [
    ({"scales": [2, 4], "shares": [0.5, 0.25]}, "scales", "strictly decreasing"),
    ({"scales": [4, 4], "shares": [0.5, 0.25]}, "scales", "strictly decreasing"),
    ({"scales": [4, 1], "shares": [0.5, 0.25]}, r"scales\.1", "must be at least 2"),
    ({"shares": [0.8, 0.4]}, "shares", "sum to at most 1"),
    ({"shares": [0.5]}, "shares", "one value per scale"),
    ({"shares": [0.5, -0.1]}, r"shares\.1", "must be at least 0"),
])
def test_bad_params_name_the_field(params, field, msg):
    with pytest.raises(ConfigError, match=rf"masking\.params\.{field}: .*{msg}"):
        get_masking("hierarchical").parse_params(params)
    with pytest.raises(ConfigError, match=rf"masking\.params\.{field}"):
        hierarchical_mask((2, 8, 8), 0.5, generator=gen(), **params)


def test_registry_record_defaults_and_seed_determinism():
    s = get_masking("hierarchical")
    assert s.exact and s.uses_ratio and s.grid_dims == (1, 2, 3)
    p = s.parse_params({})
    assert p.scales == [4, 2] and p.shares == [0.5, 0.25]
    sig = inspect.signature(hierarchical_mask).parameters
    assert sig["scales"].default == p.scales and sig["shares"].default == p.shares
    a = hierarchical_mask((8, 14, 14), 0.75, generator=gen(12))
    assert torch.equal(a, hierarchical_mask((8, 14, 14), 0.75, generator=gen(12)))
    assert not torch.equal(a, hierarchical_mask((8, 14, 14), 0.75, generator=gen(13)))


def test_cells_reduce_each_aligned_cell_with_a_ragged_margin():
    x = torch.rand(5, 11, 9, generator=gen(20)) < 0.9
    got = _cells(x, 2, (5, 4))
    expected = torch.stack([x[:, 2 * i:2 * i + 2, 2 * j:2 * j + 2].flatten(1).all(1)
                            for i in range(5) for j in range(4)], dim=1)
    assert torch.equal(got, expected)
    v = torch.rand(3, 4, 6, 6, generator=gen(21)) < 0.95
    exp3 = torch.stack([v[:, 2 * a:2 * a + 2, 2 * b:2 * b + 2, 2 * c:2 * c + 2].flatten(1).all(1)
                        for a in range(2) for b in range(3) for c in range(3)], dim=1)
    assert torch.equal(_cells(v, 2, (2, 3, 3)), exp3)


def test_audio_grid_structure_count_and_determinism():
    # 128x100 at 0.8: budget 10240 -> floor(0.5 * 10240 / 16) = 320 cells of 4x4, floor(0.25 * 10240 / 4) = 640 of 2x2.
    mask = hierarchical_mask((16, 128, 100), 0.8, generator=gen(22))
    assert (counts(mask) == 10240).all()
    assert (full_cells(mask, 4).sum(dim=(1, 2)) >= 320).all()
    assert (full_cells(mask, 2).sum(dim=(1, 2)) >= 320 * 4 + 640).all()
    assert torch.equal(mask, hierarchical_mask((16, 128, 100), 0.8, generator=gen(22)))


def test_all_true_eligible_gives_the_same_masks_as_none():
    # The no-eligibility shortcuts (no all-True tensor, no cell check at the first level) change nothing.
    for shape, kw in [((8, 30, 22), {}), ((8, 40), dict(scales=[5, 3], shares=[0.4, 0.4])), ((4, 4, 8, 8), {})]:
        a = hierarchical_mask(shape, 0.6, generator=gen(23), **kw)
        b = hierarchical_mask(shape, 0.6, generator=gen(23), eligible=torch.ones(shape, dtype=torch.bool), **kw)
        assert torch.equal(a, b)


def reference_hierarchical(shape, ratio, g, eligible, scales, shares):
    """The levels on the position grid (masklab's first implementation): a level's available cells
    are those whose positions are all eligible and unmasked; the singles are the lowest noises."""
    B, grid = shape[0], shape[1:]
    d, L = len(grid), math.prod(grid)
    ok = eligible if eligible is not None else torch.ones(shape, dtype=torch.bool)
    budget = torch.round(ratio * ok.reshape(B, L).sum(1).double()).long()
    mask, used = torch.zeros(shape, dtype=torch.bool), torch.zeros(B, dtype=torch.long)
    for s, share in zip(scales, shares):
        n = tuple(D // s for D in grid)
        if math.prod(n) == 0:
            continue
        avail = _cells(ok & ~mask, s, n)
        want = torch.floor(share * budget.double() / s**d + 1e-9).long()
        want[want >= math.prod(n)] = 0  # taking every cell of the lattice is no draw: none
        take = torch.minimum(torch.minimum(want, avail.sum(1)), (budget - used) // s**d)
        noise = torch.rand(B, math.prod(n), generator=g).masked_fill(~avail, 2.0)
        mask |= _upsample(mask_lowest(noise, take.view(B, 1)), s, n, grid)
        used += take * s**d
    noise = torch.rand(B, L, generator=g).masked_fill(mask.reshape(B, L) | ~ok.reshape(B, L), 2.0)
    return mask | mask_lowest(noise, (budget - used).view(B, 1)).reshape(shape)


@pytest.mark.parametrize("shape,scales,shares", [
    ((8, 128, 100), [4, 2], [0.5, 0.25]),  # the audio grid
    ((16, 30, 22), [4, 2], [0.5, 0.25]),  # ragged margins
    ((16, 30, 22), [5, 3], [0.4, 0.4]),  # a fine cell straddles two coarse cells
    ((16, 31, 29), [6, 4, 2], [0.3, 0.3, 0.2]),  # 6 -> 4 does not divide, 4 -> 2 does
    ((8, 50), [4, 2], [0.5, 0.25]),
    ((4, 6, 9, 9), [3, 2], [0.4, 0.3]),
    ((4, 8, 8, 8), [4, 2], [0.5, 0.25]),
])
@pytest.mark.parametrize("ratio", [0.3, 0.75, 1.0])
@pytest.mark.parametrize("holes", [False, True])
def test_cell_grid_levels_give_the_masks_of_the_position_grid_definition(shape, scales, shares, ratio, holes, monkeypatch):
    # The levels run on their cell grids (_touched, _levels_to_grid); with the singles drawn by
    # noise on every row (pick_uniform's dense route) the masks equal the position-grid reference.

    monkeypatch.setattr(random_module, "_SPARSE", -1.0)
    eligible = torch.rand(shape, generator=gen(30)) < 0.9 if holes else None
    ours = hierarchical_mask(shape, ratio, generator=gen(31), eligible=eligible, scales=scales, shares=shares)
    ref = reference_hierarchical(shape, ratio, gen(31), eligible, scales, shares)
    assert torch.equal(ours, ref)


def test_singles_few_of_many_are_uniform_over_the_free_positions():
    # ratio 0.1 on 8x8 with one 2x2 level at share 0.7: 6 positions, one cell and 2 singles (< 1/4 of
    # the 60 free positions, so pick_uniform's sparse route): each free position equally often.
    B = 20_000
    mask = hierarchical_mask((B, 8, 8), 0.1, generator=gen(32), scales=[2], shares=[0.7])
    assert (counts(mask) == 6).all()
    cells = full_cells(mask, 2)
    singles = mask & ~cells.repeat_interleave(2, 1).repeat_interleave(2, 2)
    assert (cells.flatten(1).sum(1) == 1).all() and (counts(singles) == 2).all()
    free = ~cells.repeat_interleave(2, 1).repeat_interleave(2, 2)
    rate = singles.double().sum(0) / free.double().sum(0)  # per position: 2 / 60 of the rows where it is free
    assert float((rate - 2 / 60).abs().max()) < 0.006  # sd about 0.0013 per position


def test_a_lattice_of_one_cell_is_no_draw_so_the_default_varies_on_7x7():
    # 7x7 at 0.75 (budget 37): the one aligned 4x4 cell would be the top-left one in every sample;
    # the level takes none, the 2x2 level still takes floor(0.25 * 37 / 4) = 2 of its 9 cells.
    mask = hierarchical_mask((512, 7, 7), 0.75, generator=gen(40))
    assert (counts(mask) == 37).all()
    assert not mask.all(dim=0).any()  # no position hidden in every sample
    assert (full_cells(mask, 2).sum(dim=(1, 2)) >= 2).all()
    # on 8x8 the lattice has 4 cells of 4x4: the coarse level draws one of them
    mask = hierarchical_mask((512, 8, 8), 0.75, generator=gen(41))
    assert (full_cells(mask, 4).sum(dim=(1, 2)) >= 1).all() and not mask.all(dim=0).any()
