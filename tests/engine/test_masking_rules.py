"""engine.masking.rules: the deterministic ``periodic`` and ``region`` strategies."""

from __future__ import annotations

import pytest
import torch

from engine.errors import ConfigError
from engine.masking import get_masking
from engine.masking.rules import periodic_mask, region_mask


def gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def rows(mask: torch.Tensor) -> list[str]:
    """A 2-D mask as strings ('#' masked, '.' visible), for readable comparisons."""
    return ["".join("#" if v else "." for v in r.tolist()) for r in mask]


# --- periodic ---------------------------------------------------------------------------------------


def test_periodic_flat_is_every_kth_position_in_row_major_order():
    mask = periodic_mask((2, 3, 5), generator=gen(), k=3, offset=1)
    expected = torch.tensor([i % 3 == 1 for i in range(15)]).reshape(3, 5)
    assert torch.equal(mask[0], expected) and torch.equal(mask[1], expected)
    assert rows(mask[0]) == [".#..#", "..#..", "#..#."]


def test_periodic_last_axis_masks_whole_columns_or_time_frames():
    mask = periodic_mask((2, 4, 6), generator=gen(), k=2, offset=1, axis="last")  # [B, F, T]
    assert rows(mask[0]) == [".#.#.#"] * 4
    assert torch.equal(mask[0], mask[1])


def test_periodic_first_axis_masks_whole_rows_or_frequency_bins():
    mask = periodic_mask((1, 5, 3), generator=gen(), k=2, offset=0, axis="first")
    assert rows(mask[0]) == ["###", "...", "###", "...", "###"]


def test_periodic_first_axis_of_video_masks_whole_frames():
    mask = periodic_mask((2, 6, 2, 3), generator=gen(), k=3, offset=2, axis="first")  # [B, T, H, W]
    frames = mask.flatten(2)  # (B, T, H*W)
    assert frames.all(dim=2).tolist() == [[False, False, True, False, False, True]] * 2
    assert (frames.all(dim=2) == frames.any(dim=2)).all()  # each frame all or nothing


@pytest.mark.parametrize("axis", ["flat", "first", "last"])
def test_periodic_on_sequences(axis):
    mask = periodic_mask((3, 10), generator=gen(), k=4, offset=3, axis=axis)
    assert rows(mask) == ["...#...#.."] * 3


def test_periodic_k_one_masks_everything_and_the_pattern_ignores_ratio_and_seed():
    assert periodic_mask((2, 3, 3), 0.0, generator=gen(), k=1).all()
    a = periodic_mask((4, 7, 7), 0.1, generator=gen(1), k=3)
    b = periodic_mask((4, 7, 7), 0.9, generator=gen(2), k=3)
    assert torch.equal(a, b)
    assert a.sum().item() == 4 * len(range(0, 49, 3))


def test_periodic_respects_eligible_and_keeps_the_phase():
    eligible = torch.ones(2, 8, dtype=torch.bool)
    eligible[1, 4:] = False  # padding
    mask = periodic_mask((2, 8), generator=gen(), eligible=eligible, k=2)
    assert rows(mask) == ["#.#.#.#.", "#.#....."]
    assert not periodic_mask((1, 8), generator=gen(), eligible=torch.zeros(1, 8, dtype=torch.bool)).any()


def test_periodic_offset_not_below_k_is_a_config_error_naming_the_field():
    with pytest.raises(ConfigError, match=r"masking\.params\.offset: offset \(5\) must be < k \(3\)"):
        get_masking("periodic").parse_params({"k": 3, "offset": 5})
    with pytest.raises(ConfigError, match=r"masking\.params\.offset"):
        periodic_mask((2, 4), generator=gen(), k=2, offset=2)  # a direct call validates the same way
    with pytest.raises(ConfigError, match=r"masking\.params\.k"):
        get_masking("periodic").parse_params({"k": 0})
    with pytest.raises(ConfigError, match=r"masking\.params\.axis"):
        get_masking("periodic").parse_params({"axis": "diagonal"})


def test_periodic_short_axis_and_empty_grid():
    assert not periodic_mask((2, 4, 1), generator=gen(), k=2, offset=1, axis="last").any()  # T = 1
    assert periodic_mask((2, 4, 1), generator=gen(), k=2, offset=0, axis="last").all()
    assert periodic_mask((3, 0), generator=gen()).shape == (3, 0)


# --- region -----------------------------------------------------------------------------------------


def test_region_right_half_masks_the_right_columns():
    mask = region_mask((2, 4, 6), generator=gen())  # defaults: right, size 0.5
    assert rows(mask[0]) == ["...###"] * 4
    assert torch.equal(mask[0], mask[1])
    assert mask[:, :, 3:].all() and not mask[:, :, :3].any()


def test_region_last_n_frames_of_a_spectrogram():
    mask = region_mask((3, 8, 10), generator=gen(), region="right", frames=3)  # [B, F, T]
    assert mask[:, :, 7:].all() and not mask[:, :, :7].any()
    # frames overrides size; more frames than T masks everything
    assert region_mask((1, 2, 2), generator=gen(), frames=5).all()


@pytest.mark.parametrize(
    ("region", "expected"),
    [
        ("left", ["###..."] * 4),
        ("top", ["######", "######", "......", "......"]),
        ("bottom", ["......", "......", "######", "######"]),
    ],
)
def test_region_sides(region, expected):
    assert rows(region_mask((1, 4, 6), generator=gen(), region=region)[0]) == expected


def test_region_center_box():
    mask = region_mask((1, 6, 6), generator=gen(), region="center")
    # size 0.5 of 6 = 3 positions per axis, starting at (6 - 3) // 2 = 1
    assert rows(mask[0]) == ["......", ".###..", ".###..", ".###..", "......", "......"]
    box = region_mask((1, 8, 8), generator=gen(), region="center", size=0.25)[0]
    assert rows(box)[3:5] == ["...##..."] * 2 and box.sum().item() == 4
    video = region_mask((1, 4, 4, 4), generator=gen(), region="center", frames=2)[0]
    assert video[1:3, 1:3, 1:3].all() and video.sum().item() == 8


def test_region_rounding_is_half_to_even_with_a_minimum_of_one():
    assert region_mask((1, 5), generator=gen(), size=0.5).sum().item() == 2  # round(2.5) = 2
    assert region_mask((1, 7), generator=gen(), size=0.5).sum().item() == 4  # round(3.5) = 4
    assert rows(region_mask((1, 10), generator=gen(), size=0.01)) == [".........#"]  # at least 1
    assert region_mask((1, 3, 1), generator=gen(), region="right").all()  # one-frame spectrogram


def test_region_top_on_a_sequence_is_rejected_with_the_field_and_shape():
    with pytest.raises(ValueError, match=r"masking\.params\.region.*\(2, 9\)"):
        region_mask((2, 9), generator=gen(), region="top")
    with pytest.raises(ValueError, match=r"masking\.params\.region"):
        get_masking("region")((2, 9), generator=gen(), region="bottom")


def test_region_bad_params_are_config_errors():
    strategy = get_masking("region")
    for bad, field in [({"size": 0.0}, "size"), ({"size": 1.5}, "size"), ({"frames": 0}, "frames"),
                       ({"region": "middle"}, "region")]:
        with pytest.raises(ConfigError, match=rf"masking\.params\.{field}"):
            strategy.parse_params(bad)


def test_region_respects_eligible_and_ignores_ratio():
    eligible = torch.rand(4, 5, 5, generator=gen(3)) < 0.5
    mask = region_mask((4, 5, 5), 1.0, generator=gen(), eligible=eligible, region="center", size=0.6)
    plain = region_mask((4, 5, 5), 0.0, generator=gen(), region="center", size=0.6)
    assert torch.equal(mask, plain & eligible)


def test_rule_strategies_are_registered_as_ratio_free():
    for name in ("periodic", "region"):
        s = get_masking(name)
        assert not s.uses_ratio and not s.exact and not s.stochastic and s.grid_dims == (1, 2, 3)
