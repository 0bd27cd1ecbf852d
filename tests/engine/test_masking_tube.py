"""engine.masking.tube: VideoMAE tube masking (one spatial mask repeated over all frames)."""

from __future__ import annotations

import pytest
import torch

from engine.masking import get_masking, random_mask
from engine.masking.tube import tube_mask


def gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


@pytest.mark.parametrize("shape", [(16, 8, 14, 14), (8, 3, 5, 7), (4, 1, 4, 4), (4, 16, 1, 3)])
@pytest.mark.parametrize("ratio", [0.0, 0.3, 0.75, 0.9, 1.0])
def test_identical_across_frames_with_an_exact_count_per_frame(shape, ratio):
    mask = tube_mask(shape, ratio, generator=gen(1))
    B, T, H, W = shape
    assert mask.shape == shape and mask.dtype == torch.bool and mask.is_contiguous()
    assert (mask == mask[:, :1]).all()
    assert (mask.reshape(B, T, -1).sum(-1) == round(ratio * H * W)).all()


def test_spatial_eligibility_is_eligible_at_every_frame():
    g = gen(2)
    B, T, H, W = 32, 4, 6, 6
    eligible = torch.rand(B, T, H, W, generator=g) < 0.93  # a few holes at some frames only
    mask = tube_mask((B, T, H, W), 0.5, generator=g, eligible=eligible)
    spatial = eligible.all(dim=1)
    assert not (mask & ~eligible).any()
    assert not (mask[:, 0] & ~spatial).any()  # a cell ineligible at any frame is masked at none
    assert (mask == mask[:, :1]).all()
    expected = torch.round(0.5 * spatial.reshape(B, -1).sum(1).double()).long()
    for t in range(T):
        assert torch.equal(mask[:, t].reshape(B, -1).sum(1), expected)


def test_all_ineligible_rows_and_empty_grids():
    eligible = torch.ones(3, 2, 4, 4, dtype=torch.bool)
    eligible[1, 1] = False  # frame 1 of sample 1 ineligible: no spatial position is eligible at all frames
    mask = tube_mask((3, 2, 4, 4), 0.75, generator=gen(), eligible=eligible)
    assert not mask[1].any() and mask[0].sum() == mask[2].sum() == 2 * 12
    assert tube_mask((2, 0, 4, 4), 0.5, generator=gen()).shape == (2, 0, 4, 4)
    assert tube_mask((2, 3, 0, 4), 0.5, generator=gen()).numel() == 0


def test_one_frame_is_mae_random_masking():
    a = tube_mask((8, 1, 14, 14), 0.75, generator=gen(3))[:, 0]
    b = random_mask((8, 14, 14), 0.75, generator=gen(3))
    assert torch.equal(a, b)


def test_every_spatial_position_is_masked_equally_often():
    mask = tube_mask((4000, 2, 4, 4), 0.5, generator=gen(4))[:, 0]
    freq = mask.float().mean(0)
    assert (freq - 0.5).abs().max() < 0.035  # se = 0.0079 per position


def test_seed_determinism():
    a = tube_mask((8, 4, 6, 6), 0.9, generator=gen(5))
    assert torch.equal(a, tube_mask((8, 4, 6, 6), 0.9, generator=gen(5)))
    assert not torch.equal(a, tube_mask((8, 4, 6, 6), 0.9, generator=gen(6)))


def test_registry_record_and_bad_shapes():
    s = get_masking("tube")
    # exact per frame, not over T*H*W when eligibility varies over time
    assert not s.exact and s.uses_ratio and s.grid_dims == (3,) and s.grids == ("tube-3d",)
    assert s.modalities == ()  # no registered modality forms video tubes (yet)
    with pytest.raises(ValueError, match="tube"):
        tube_mask((2, 4, 4), 0.5, generator=gen())
    with pytest.raises(ValueError, match="tube"):
        tube_mask((2, 2, 4, 4), 0.5, generator=gen(), eligible=torch.ones(2, 4, 4, dtype=torch.bool))
