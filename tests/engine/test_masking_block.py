"""engine.masking.block: BEiT block-wise masking, topped up to an exact count."""

from __future__ import annotations

import inspect
import math

import numpy as np
import pytest
import torch
from scipy import ndimage

from engine.errors import ConfigError
from engine.masking import get_masking
from engine.masking.block import _col_range, _draw_blocks, _pack_cols, _unpack_cols, block_mask
from engine.masking.random import mask_lowest

BEIT = dict(min_patches=16, min_aspect=0.3, max_aspect=None, max_attempts=10)


def gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def counts(mask: torch.Tensor) -> torch.Tensor:
    return mask.reshape(mask.shape[0], -1).sum(dim=1)


def reference_block_mask(H, W, ratio, g, *, min_patches, min_aspect, max_aspect, max_attempts):
    """BEiT's MaskingGenerator written per sample (B = 1), drawing the same uniforms as block_mask.

    Returns the blocks only (the top-up, masklab's addition, is checked separately).
    """
    budget = round(ratio * H * W)
    mask = np.zeros((H, W), dtype=bool)
    hi = max_aspect if max_aspect is not None else 1 / min_aspect
    remaining, fails = budget, 0
    while remaining > 0 and fails < max_attempts:
        u = torch.rand(4, 1, generator=g)[:, 0]
        area = min_patches + u[0] * (torch.tensor(float(remaining)) - min_patches)
        aspect = torch.exp(math.log(min_aspect) + u[1] * (math.log(hi) - math.log(min_aspect)))
        h = min(max(int(torch.round(torch.sqrt(area * aspect))), 1), H)
        w = min(max(int(torch.round(torch.sqrt(area / aspect))), 1), W)
        top = min(int(u[2] * (H - h + 1)), H - h)
        left = min(int(u[3] * (W - w + 1)), W - w)
        new = int((~mask[top:top + h, left:left + w]).sum())
        if 0 < new <= remaining:
            mask[top:top + h, left:left + w] = True
            remaining -= new
            fails = 0
        else:
            fails += 1
    return torch.from_numpy(mask)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("ratio,params", [(0.4, BEIT), (0.75, dict(BEIT, min_patches=4)),
                                          (0.5, dict(min_patches=2, min_aspect=0.5, max_aspect=3.0, max_attempts=3))])
def test_matches_a_per_sample_reference_of_beits_generator(seed, ratio, params):
    ref = reference_block_mask(14, 14, ratio, gen(seed), **params)
    budget = torch.tensor([round(ratio * 196)])
    assert torch.equal(_draw_blocks((1, 14, 14), budget, gen(seed), **params)[0], ref)
    # block_mask: the same blocks, topped up to the exact count with unmasked positions
    ours = block_mask((1, 14, 14), ratio, generator=gen(seed), **params)[0]
    assert (ours | ~ref).all() and int(ours.sum()) == round(ratio * 196)


@pytest.mark.parametrize("shape", [(64, 14, 14), (32, 8, 8), (16, 5, 11), (8, 1, 9), (4, 2, 2)])
@pytest.mark.parametrize("ratio", [0.0, 0.1, 0.4, 0.75, 0.9, 1.0])
def test_exact_count(shape, ratio):
    mask = block_mask(shape, ratio, generator=gen(1))
    H, W = shape[1:]
    assert (counts(mask) == round(ratio * H * W)).all()


@pytest.mark.parametrize("ratio", [0.3, 0.6, 1.0])
def test_exact_count_over_eligible_and_never_outside(ratio):
    g = gen(2)
    eligible = torch.rand(64, 14, 14, generator=g) < 0.7
    mask = block_mask((64, 14, 14), ratio, generator=g, eligible=eligible)
    assert not (mask & ~eligible).any()
    expected = torch.round(ratio * eligible.reshape(64, -1).sum(1).double()).long()
    assert torch.equal(counts(mask), expected)


def test_blocks_lie_entirely_on_eligible_positions():
    # Padding on the right (cols >= 9) and a hole: the drawn blocks never touch either.
    eligible = torch.ones(128, 14, 14, dtype=torch.bool)
    eligible[:, :, 9:] = False
    eligible[:, 5, 4] = False
    budget = torch.round(0.5 * eligible.reshape(128, -1).sum(1).double()).long()
    mask, rec = _draw_blocks(eligible, budget, gen(3), record=True, **dict(BEIT, min_patches=4))
    assert len(rec["row"]) > 128
    for b, t, l_, h, w in zip(*(rec[k].tolist() for k in ("row", "top", "left", "h", "w"))):
        assert eligible[b, t:t + h, l_:l_ + w].all()
        assert mask[b, t:t + h, l_:l_ + w].all()
    assert not (mask & ~eligible).any()
    assert (counts(mask) <= budget).all()


def test_all_ineligible_row_and_empty_grid():
    eligible = torch.ones(3, 6, 6, dtype=torch.bool)
    eligible[1] = False
    mask = block_mask((3, 6, 6), 0.5, generator=gen(), eligible=eligible)
    assert not mask[1].any() and (counts(mask)[[0, 2]] == 18).all()
    assert block_mask((2, 0, 5), 0.5, generator=gen()).shape == (2, 0, 5)


def share_in_large_components(mask: np.ndarray, k: int) -> float:
    """Fraction of masked patches in 4-connected components of >= k patches (scipy.ndimage.label)."""
    big = total = 0
    for m in mask:
        sizes = np.bincount(ndimage.label(m)[0].ravel())[1:]
        big += sizes[sizes >= k].sum()
        total += sizes.sum()
    return big / total


@pytest.mark.parametrize("ratio", [0.4, 0.75])
@pytest.mark.parametrize("min_patches", [4, 16])
def test_masked_patches_form_large_connected_blocks(ratio, min_patches):
    # Uniform random masking at ratio 0.4 leaves most patches in small components; blocks do not.
    mask = block_mask((256, 14, 14), ratio, generator=gen(4), min_patches=min_patches).numpy()
    assert share_in_large_components(mask, min_patches) > 0.93


def test_random_masking_would_fail_the_component_check():
    # Guards the check above: the same measure on MAE's uniform masking is far below it.
    mask = get_masking("random")((256, 14, 14), 0.4, generator=gen(4)).numpy()
    assert share_in_large_components(mask, 16) < 0.5


@pytest.mark.parametrize("ratio", [0.4, 0.75])
def test_blocks_make_almost_all_of_the_mask_at_14x14(ratio):
    budget = torch.full((256,), round(ratio * 196))
    mask = _draw_blocks(torch.ones(256, 14, 14, dtype=torch.bool), budget, gen(5), **BEIT)
    assert mask.sum().item() / budget.sum().item() > 0.98


@pytest.mark.parametrize("lo,hi", [(0.3, None), (0.5, 1.5), (1.0, 1.0)])
def test_aspect_ratio_of_accepted_blocks(lo, hi):
    budget = torch.full((256,), 98)
    _, rec = _draw_blocks(torch.ones(256, 14, 14, dtype=torch.bool), budget, gen(6), record=True,
                          min_patches=4, min_aspect=lo, max_aspect=hi, max_attempts=10)
    hi_ = hi if hi is not None else 1 / lo
    a = rec["aspect"]
    assert (a >= lo * (1 - 1e-6)).all() and (a <= hi_ * (1 + 1e-6)).all()
    if lo < hi_:  # log-uniform: log(aspect) spans the interval, its mean near the middle
        la = a.log()
        assert la.min() < math.log(lo) + 0.1 * math.log(hi_ / lo)
        assert la.max() > math.log(hi_) - 0.1 * math.log(hi_ / lo)
    # h and w are the rounded sqrt(area * aspect), sqrt(area / aspect), clipped to the grid
    h = torch.round(torch.sqrt(rec["area"] * a)).clamp(1, 14)
    w = torch.round(torch.sqrt(rec["area"] / a)).clamp(1, 14)
    assert torch.equal(h.long(), rec["h"]) and torch.equal(w.long(), rec["w"])
    if lo == hi_ == 1.0:
        assert (rec["h"] - rec["w"]).abs().max() <= 1  # square up to rounding


def test_ratio_one_and_zero():
    assert block_mask((4, 7, 7), 1.0, generator=gen()).all()
    assert not block_mask((4, 7, 7), 0.0, generator=gen()).any()


def test_seed_determinism():
    a = block_mask((16, 14, 14), 0.4, generator=gen(7))
    assert torch.equal(a, block_mask((16, 14, 14), 0.4, generator=gen(7)))
    assert not torch.equal(a, block_mask((16, 14, 14), 0.4, generator=gen(8)))


def test_registry_record_and_bad_shapes():
    s = get_masking("block")
    assert s.exact and s.uses_ratio and s.grid_dims == (2,) and set(s.modalities) == {"image", "audio"}
    with pytest.raises(ValueError, match="block"):
        block_mask((4, 16), 0.5, generator=gen())
    with pytest.raises(ValueError, match="block"):
        block_mask((2, 4, 4, 4), 0.5, generator=gen())


@pytest.mark.parametrize("params,field", [({"min_patches": 0}, "min_patches"), ({"min_aspect": 0.0}, "min_aspect"),
                                          ({"min_aspect": 1.5}, "min_aspect"), ({"max_attempts": 0}, "max_attempts"),
                                          ({"min_aspect": 0.5, "max_aspect": 0.4}, "max_aspect"),
                                          ({"size": 3}, "size")])
def test_bad_params_name_the_field(params, field):
    with pytest.raises(ConfigError, match=rf"masking\.params\.{field}"):
        get_masking("block").parse_params(params)


def test_direct_call_validates_params_and_defaults_match_the_model():
    with pytest.raises(ConfigError, match=r"masking\.params\.min_patches"):
        block_mask((2, 4, 4), 0.5, generator=gen(), min_patches=0)

    sig = inspect.signature(block_mask).parameters
    for name, field in get_masking("block").params.model_fields.items():
        assert sig[name].default == field.default


# ------------------------------------------------------------------ the packed, stepped implementation


def dense_block_loop(ok, budget, g, *, min_patches, min_aspect, max_aspect, max_attempts):
    """BEiT's loop over the whole batch on a dense [B, H, W] mask, one candidate per row per iteration.

    The straightforward batched form (one ``rand(4, B)`` per iteration, every row's candidate tested
    against the dense mask): ``_draw_blocks`` packs the mask into bits and evaluates several
    candidates per step, and must give the same blocks and leave the generator at the same place.
    """
    B, H, W = ok.shape
    mask = torch.zeros(B, H, W, dtype=torch.bool)
    lo = math.log(min_aspect)
    hi = math.log(max_aspect if max_aspect is not None else 1 / min_aspect)
    remaining, fails = budget.clone(), torch.zeros(B, dtype=torch.long)
    active = remaining > 0
    rows, cols = torch.arange(H)[None], torch.arange(W)[None]
    while active.any():
        u = torch.rand(4, B, generator=g)
        area = min_patches + u[0] * (remaining.float() - min_patches)
        aspect = torch.exp(lo + u[1] * (hi - lo))
        h = torch.round(torch.sqrt(area * aspect)).long().clamp(1, H)
        w = torch.round(torch.sqrt(area / aspect)).long().clamp(1, W)
        top = torch.minimum((u[2] * (H - h + 1)).long(), H - h)
        left = torch.minimum((u[3] * (W - w + 1)).long(), W - w)
        box = (((rows >= top[:, None]) & (rows < (top + h)[:, None]))[:, :, None]
               & ((cols >= left[:, None]) & (cols < (left + w)[:, None]))[:, None, :])
        new = (box & ~mask).flatten(1).sum(1)
        accept = active & (new > 0) & (new <= remaining) & ~(box & ~ok).flatten(1).any(1)
        mask |= box & accept[:, None, None]
        remaining -= new * accept
        fails = torch.where(accept, 0, fails + active.long())
        active = (remaining > 0) & (fails < max_attempts)
    return mask


@pytest.mark.parametrize("shape,ratio,params,holes", [
    ((64, 14, 14), 0.4, BEIT, False),
    ((32, 40, 33), 0.75, dict(BEIT, min_patches=4), False),
    ((16, 128, 100), 0.8, dict(BEIT, min_patches=4), False),  # the audio grid (rows span 2 packed words)
    ((32, 20, 70), 0.5, dict(min_patches=2, min_aspect=0.5, max_aspect=3.0, max_attempts=3), True),
    ((24, 9, 130), 0.6, dict(BEIT, min_patches=4), True),  # 3 words per grid row
    ((16, 3, 1), 0.9, dict(BEIT, min_patches=1), False),
])
def test_same_blocks_and_generator_position_as_the_dense_batched_loop(shape, ratio, params, holes):
    g = gen(11)
    ok = torch.ones(shape, dtype=torch.bool)
    if holes:
        ok = torch.rand(shape, generator=g) < 0.9
        ok[:, :, : shape[2] // 2] = True
    budget = torch.round(ratio * ok.flatten(1).sum(1).double()).long()
    g1, g2 = gen(12), gen(12)
    ours = _draw_blocks(ok, budget, g1, **params)
    ref = dense_block_loop(ok, budget, g2, **params)
    assert torch.equal(ours, ref)
    assert torch.equal(torch.rand(8, generator=g1), torch.rand(8, generator=g2))  # same stream position
    # and without an eligibility tensor (the shape alone): the same as all-True
    if not holes:
        assert torch.equal(_draw_blocks(shape, budget, gen(12), **params), ref)


@pytest.mark.parametrize("W", [1, 5, 61, 62, 63, 100, 124, 130])
def test_bit_packing_round_trip_and_column_ranges(W):
    x = torch.rand(6, 7, W, generator=gen(W)) < 0.5
    words = _pack_cols(x)
    assert words.shape == (6, 7, -(-W // 62)) and (words >= 0).all() and (words < 2**62).all()
    assert torch.equal(_unpack_cols(words, W), x)
    left = torch.randint(0, W, (50,), generator=gen(1))
    w = (torch.rand(50, generator=gen(2)) * (W - left)).long() + 1
    expected = (torch.arange(W)[None] >= left[:, None]) & (torch.arange(W)[None] < (left + w)[:, None])
    assert torch.equal(_unpack_cols(_col_range(left, w, -(-W // 62)), W), expected)


def test_audio_grid_exact_count_block_bounds_and_determinism():
    B, H, W = 16, 128, 100
    budget = torch.full((B,), round(0.8 * H * W))
    mask, rec = _draw_blocks((B, H, W), budget, gen(15), record=True, **dict(BEIT, min_patches=4))
    assert (counts(mask) <= budget).all() and counts(mask).sum() > 0.95 * budget.sum()
    assert ((rec["h"] >= 1) & (rec["h"] <= H) & (rec["w"] >= 1) & (rec["w"] <= W)).all()
    assert ((rec["top"] >= 0) & (rec["top"] + rec["h"] <= H) & (rec["left"] >= 0) & (rec["left"] + rec["w"] <= W)).all()
    for b, t, l_, h, w in zip(*(rec[k].tolist() for k in ("row", "top", "left", "h", "w"))):
        assert mask[b, t:t + h, l_:l_ + w].all()
    a = rec["aspect"]
    assert (a >= 0.3 * (1 - 1e-6)).all() and (a <= (1 / 0.3) * (1 + 1e-6)).all()
    full = block_mask((B, H, W), 0.8, generator=gen(16))
    assert (counts(full) == round(0.8 * H * W)).all()
    assert torch.equal(full, block_mask((B, H, W), 0.8, generator=gen(16)))


def test_top_up_has_the_distribution_of_the_former_noise_top_up():
    # The top-up went from "lowest noise over the whole grid" to engine.masking.random.pick_uniform.
    # With the same blocks (same seed) and scattered eligibility, where much of each mask is top-up,
    # both give the same per-position rates and the same clustering, over 4,096 masks.

    B, H, W = 4096, 20, 16
    ok = (torch.rand(1, H, W, generator=gen(17)) < 0.8).expand(B, H, W)
    budget = torch.round(0.5 * ok.flatten(1).sum(1).double()).long()
    params = dict(BEIT, min_patches=4)
    new = block_mask((B, H, W), 0.5, generator=gen(18), eligible=ok, **params)
    g = gen(18)
    blocks = _draw_blocks(ok, budget, g, **params)
    flat = blocks.flatten(1)
    noise = torch.rand(B, H * W, generator=g).masked_fill(flat | ~ok.flatten(1), 2.0)
    old = (flat | mask_lowest(noise, budget - flat.sum(1))).view(B, H, W)
    assert torch.equal(new & blocks, blocks) and torch.equal(counts(new), counts(old))
    top_new, top_old = new & ~blocks, old & ~blocks
    assert counts(top_new).sum() > 0.2 * budget.sum()  # the top-up is a large share here
    rate_new, rate_old = top_new.double().mean(0), top_old.double().mean(0)
    sd = ((rate_old * (1 - rate_old) * 2 / B).sqrt()).clamp(min=1e-3)  # of the difference
    assert float(((rate_new - rate_old).abs() / sd).max()) < 5
    # Masked horizontal and vertical neighbour pairs (blocks and top-up together), per mask.
    pairs = (lambda m: ((m[:, 1:] & m[:, :-1]).flatten(1).sum(1) + (m[:, :, 1:] & m[:, :, :-1]).flatten(1).sum(1)).double())
    p_new, p_old = pairs(new), pairs(old)
    se = ((p_new.var() + p_old.var()) / B).sqrt()
    assert abs(float(p_new.mean() - p_old.mean())) < 4 * float(se)
