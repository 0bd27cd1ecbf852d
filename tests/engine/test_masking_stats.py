"""engine.masking.stats: exact statistics of small hand-made masks, and the throughput timer."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from engine.config import MaskingConfig
from engine.masking import draw_mask
from engine.masking.stats import MaskStats, mask_stats, masks_per_second


def grid(*rows: str) -> np.ndarray:
    """A 2-D bool grid from strings: '#' masked, '.' visible."""
    return np.array([[c == "#" for c in r] for r in rows], dtype=bool)


def test_2d_regions_are_4_connected_and_never_join_across_samples():
    a = grid("##..",
             "#...",
             "...#",
             "..#.")  # an L of 3, and two diagonal singles (not 4-connected)  # fmt: skip
    b = grid("....",
             "....",
             "....",
             "####")  # one run of 4 directly "below" a's last row in the batch axis  # fmt: skip
    c = np.zeros((4, 4), bool)
    st = mask_stats(np.stack([a, b, c]))
    assert isinstance(st, MaskStats) and st.grid == (4, 4) and st.batch_size == 3
    np.testing.assert_allclose(st.ratio, [5 / 16, 4 / 16, 0.0])
    assert sorted(st.region_sizes.tolist()) == [1, 1, 3, 4]
    assert st.region_sizes.sum() == 9
    assert st.regions_per_sample.tolist() == [3, 1, 0]
    expected = (a.astype(float) + b + c) / 3
    np.testing.assert_allclose(st.frequency, expected)
    assert st.frequency.shape == (4, 4)


def test_a_region_touching_the_same_cell_of_the_next_sample_stays_separate():
    full = np.ones((2, 3, 3), bool)  # identical full masks stacked: 2 regions of 9, not 1 of 18
    st = mask_stats(full)
    assert st.region_sizes.tolist() == [9, 9] and st.regions_per_sample.tolist() == [1, 1]
    np.testing.assert_allclose(st.frequency, np.ones((3, 3)))


def test_1d_run_lengths():
    m = np.array([[1, 1, 0, 1, 1, 1, 0, 1],
                  [0, 0, 0, 0, 0, 0, 0, 0],
                  [1, 0, 1, 0, 1, 0, 1, 0]], dtype=bool)  # fmt: skip
    st = mask_stats(torch.from_numpy(m))  # torch input works too
    assert st.region_sizes.tolist() == [2, 3, 1, 1, 1, 1, 1]
    assert st.regions_per_sample.tolist() == [3, 0, 4]
    np.testing.assert_allclose(st.ratio, [6 / 8, 0.0, 4 / 8])
    np.testing.assert_allclose(st.frequency, [2 / 3, 1 / 3, 1 / 3, 1 / 3, 2 / 3, 1 / 3, 1 / 3, 1 / 3])


def test_3d_video_tubes_connect_through_time():
    m = np.zeros((1, 3, 2, 2), bool)
    m[0, :, 0, 0] = True  # a tube through all 3 frames
    m[0, 1, 1, 1] = True  # a lone cell
    st = mask_stats(m)
    assert sorted(st.region_sizes.tolist()) == [1, 3] and st.regions_per_sample.tolist() == [2]


def test_ratio_over_eligible_positions():
    m = grid("##..", "....")[None]
    e = grid("###.", "....")[None]
    st = mask_stats(m, eligible=e)
    np.testing.assert_allclose(st.ratio, [2 / 3])
    none_eligible = mask_stats(np.zeros((1, 2, 2), bool), eligible=np.zeros((1, 2, 2), bool))
    assert none_eligible.ratio.tolist() == [0.0]
    with pytest.raises(ValueError, match="eligible has shape"):
        mask_stats(m, eligible=e[:, :1])


def test_edge_cases():
    empty_batch = mask_stats(np.zeros((0, 3, 3), bool))
    assert empty_batch.ratio.shape == (0,) and empty_batch.region_sizes.shape == (0,)
    np.testing.assert_array_equal(empty_batch.frequency, np.zeros((3, 3)))
    empty_grid = mask_stats(np.zeros((2, 0), bool))
    assert empty_grid.ratio.tolist() == [0.0, 0.0] and empty_grid.regions_per_sample.tolist() == [0, 0]
    with pytest.raises(ValueError, match="at least 2 dims"):
        mask_stats(np.zeros(5, bool))


def test_stats_of_a_real_random_mask_match_its_contract():
    cfg = MaskingConfig(strategy="random", ratio=0.75)
    m = draw_mask(cfg, (512, 7, 7), torch.Generator().manual_seed(0))
    st = mask_stats(m)
    np.testing.assert_allclose(st.ratio, round(0.75 * 49) / 49)  # exact count per sample
    assert st.region_sizes.sum() == m.sum().item()
    assert st.regions_per_sample.sum() == len(st.region_sizes)
    # uniform over positions: each frequency ~ Binomial(512, 37/49)/512, sd ~ 0.019; 5 sd tolerance
    assert np.abs(st.frequency - 37 / 49).max() < 0.095


def test_masks_per_second_counts_rows_over_at_least_min_time():
    calls = []

    def fn():
        calls.append(1)
        return torch.zeros(16, 4, 4, dtype=torch.bool)

    rate = masks_per_second(fn, min_time=0.05)
    assert rate > 0 and len(calls) >= 2  # warm-up + at least one timed call
    timed = len(calls) - 1
    assert rate <= 16 * timed / 0.05  # rows / elapsed with elapsed >= min_time
    calls.clear()
    masks_per_second(fn, min_time=0.01, warmup=False)
    assert len(calls) >= 1
    assert masks_per_second(lambda: np.zeros((0, 3)), min_time=0.01) == 0.0
    with pytest.raises(ValueError, match="min_time"):
        masks_per_second(fn, min_time=0)
