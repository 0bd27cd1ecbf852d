"""engine.masking: strategies (parametrized over the registry), draw_mask/preview_masks, gather_visible."""

from __future__ import annotations

import pytest
import torch

from engine.config import MaskingConfig, RunConfig
from engine.errors import ConfigError
from engine.masking import (
    MASKING_REGISTRY,
    draw_mask,
    gather_visible,
    get_masking,
    grid_shape,
    preview_masks,
    random_mask,
    restore_order,
)

STRATEGIES = sorted(MASKING_REGISTRY)
SHAPES = [(4, 16), (3, 4, 4), (2, 7, 5), (5, 1), (1, 14, 14)]


def gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# --- every registered strategy ---------------------------------------------------------------------


@pytest.mark.parametrize("name", STRATEGIES)
@pytest.mark.parametrize("shape", SHAPES)
def test_bool_mask_of_requested_shape(name, shape):
    mask = get_masking(name)(shape, 0.5, generator=gen())
    assert mask.dtype == torch.bool
    assert tuple(mask.shape) == shape
    assert mask.device == torch.device("cpu")


@pytest.mark.parametrize("name", STRATEGIES)
def test_same_seed_same_mask_different_seed_different_mask(name):
    fn = get_masking(name)
    a = fn((8, 4, 4), 0.75, generator=gen(1))
    b = fn((8, 4, 4), 0.75, generator=gen(1))
    c = fn((8, 4, 4), 0.75, generator=gen(2))
    assert torch.equal(a, b)
    assert not torch.equal(a, c)


@pytest.mark.parametrize("name", STRATEGIES)
def test_uses_only_the_given_generator(name):
    torch.manual_seed(123)
    before = torch.get_rng_state()
    get_masking(name)((4, 16), 0.5, generator=gen())
    assert torch.equal(torch.get_rng_state(), before)


@pytest.mark.parametrize("name", STRATEGIES)
@pytest.mark.parametrize("ratio", [0.25, 0.5, 0.75, 1.0])
def test_ineligible_positions_are_never_masked(name, ratio):
    g = gen(3)
    eligible = torch.rand(16, 6, 6, generator=g) < 0.6
    mask = get_masking(name)((16, 6, 6), ratio, generator=g, eligible=eligible)
    assert not (mask & ~eligible).any()


@pytest.mark.parametrize("name", STRATEGIES)
def test_ratio_zero_masks_nothing(name):
    assert not get_masking(name)((4, 3, 3), 0.0, generator=gen()).any()


@pytest.mark.parametrize("name", STRATEGIES)
def test_all_ineligible_rows_are_all_false(name):
    eligible = torch.ones(3, 16, dtype=torch.bool)
    eligible[1] = False
    mask = get_masking(name)((3, 16), 0.75, generator=gen(), eligible=eligible)
    assert not mask[1].any()
    assert mask[0].any() and mask[2].any()


@pytest.mark.parametrize("name", STRATEGIES)
def test_masked_fraction_is_close_to_ratio(name):
    mask = get_masking(name)((256, 8, 8), 0.6, generator=gen(5))
    assert abs(mask.float().mean().item() - 0.6) < 0.02


@pytest.mark.parametrize("name", STRATEGIES)
@pytest.mark.parametrize("ratio", [-0.1, 1.5, float("nan")])
def test_bad_ratio_raises_config_error_naming_the_field(name, ratio):
    with pytest.raises(ConfigError, match=r"masking\.ratio") as e:
        get_masking(name)((2, 4), ratio, generator=gen())
    assert str(ratio) in str(e.value)


# --- random: exact count ---------------------------------------------------------------------------


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("ratio", [0.1, 0.5, 0.75, 0.9])
def test_random_masks_an_exact_count_per_sample(shape, ratio):
    mask = random_mask(shape, ratio, generator=gen(7))
    L = mask[0].numel()
    counts = mask.reshape(shape[0], -1).sum(dim=1)
    assert (counts == round(ratio * L)).all()


def test_random_exact_count_over_eligible_positions():
    g = gen(11)
    eligible = torch.rand(32, 5, 5, generator=g) < 0.5
    eligible[0] = True  # one full row
    mask = random_mask((32, 5, 5), 0.75, generator=g, eligible=eligible)
    n_eligible = eligible.flatten(1).sum(1)
    expected = torch.round(0.75 * n_eligible.double()).long()
    assert torch.equal(mask.flatten(1).sum(1), expected)


def test_random_ratio_one_masks_every_eligible_position():
    assert random_mask((3, 4, 4), 1.0, generator=gen()).all()
    eligible = torch.rand(3, 4, 4, generator=gen(1)) < 0.5
    assert torch.equal(random_mask((3, 4, 4), 1.0, generator=gen(), eligible=eligible), eligible)


def test_random_every_position_is_masked_equally_often():
    mask = random_mask((4000, 16), 0.25, generator=gen(9))
    freq = mask.float().mean(dim=0)
    assert (freq - 0.25).abs().max() < 0.03


def test_random_rejects_bad_shapes():
    with pytest.raises(ValueError, match="at least 2 dims"):
        random_mask((16,), 0.5, generator=gen())
    with pytest.raises(ValueError, match="eligible"):
        random_mask((2, 4), 0.5, generator=gen(), eligible=torch.ones(2, 5, dtype=torch.bool))


def test_random_empty_rows():
    assert random_mask((3, 0), 0.5, generator=gen()).shape == (3, 0)


# --- registry, draw_mask, grid, preview ------------------------------------------------------------


def test_unknown_strategy_lists_known_names():
    with pytest.raises(ConfigError, match="known strategies: .*random"):
        get_masking("nope")


def test_draw_mask_dispatches_on_config():
    cfg = MaskingConfig(strategy="random", ratio=0.75)
    a = draw_mask(cfg, (4, 4, 4), gen(0))
    assert torch.equal(a, random_mask((4, 4, 4), 0.75, generator=gen(0)))


def test_grid_shape():
    assert grid_shape((8, 8), 2) == (4, 4)
    assert grid_shape((28, 56), 7) == (4, 8)
    with pytest.raises(ConfigError, match=r"model\.patch_size: 3 does not divide the image size 8x8"):
        grid_shape((8, 8), 3)


def test_preview_masks_is_the_runs_fixed_draw():
    cfg = RunConfig.from_dict({"masking": {"ratio": 0.5}, "model": {"patch_size": 2}, "train": {"seed": 4}})
    a = preview_masks(cfg, (1, 8, 8), 6)
    assert a.shape == (6, 4, 4) and a.dtype == torch.bool
    assert (a.flatten(1).sum(1) == 8).all()
    assert torch.equal(a, preview_masks(cfg, (1, 8, 8), 6))
    assert torch.equal(a, draw_mask(cfg.masking, (6, 4, 4), torch.Generator().manual_seed(4)))
    other = cfg.model_copy(update={"train": cfg.train.model_copy(update={"seed": 5})})
    assert not torch.equal(a, preview_masks(other, (1, 8, 8), 6))


def test_preview_masks_are_the_first_rows_of_a_batch_from_the_same_seed():
    # torch's CPU generator fills a contiguous uniform tensor in order, so a batch of B masks drawn
    # from a fresh generator seeded s starts with the n preview masks of seed s.
    cfg = RunConfig.from_dict({"train": {"seed": 17}})
    preview = preview_masks(cfg, (1, 8, 8), 8)
    batch = draw_mask(cfg.masking, (128, 4, 4), torch.Generator().manual_seed(17))
    assert torch.equal(batch[:8], preview)


def test_preview_masks_bad_patch_size():
    cfg = RunConfig.from_dict({"model": {"patch_size": 3}})
    with pytest.raises(ConfigError, match=r"model\.patch_size"):
        preview_masks(cfg, (1, 8, 8), 4)


# --- applying a mask -------------------------------------------------------------------------------


def test_gather_visible_keeps_order_and_count():
    B, L, D = 5, 16, 3
    x = torch.arange(B * L * D, dtype=torch.float32).reshape(B, L, D)
    mask = random_mask((B, L), 0.75, generator=gen(2))
    x_vis, ids_keep, ids_restore = gather_visible(x, mask)
    assert x_vis.shape == (B, 4, D) and ids_keep.shape == (B, 4) and ids_restore.shape == (B, L)
    for b in range(B):
        visible = (~mask[b]).nonzero().squeeze(1)
        assert torch.equal(ids_keep[b], visible)  # increasing: original order
        assert torch.equal(x_vis[b], x[b, visible])


def test_restore_order_inverts_the_visible_first_layout():
    B, L, D = 3, 10, 2
    x = torch.randn(B, L, D, generator=gen())
    mask = random_mask((B, L), 0.6, generator=gen(1))
    x_vis, _, ids_restore = gather_visible(x, mask)
    x_masked = torch.stack([x[b, mask[b]] for b in range(B)])
    assert torch.equal(restore_order(torch.cat([x_vis, x_masked], dim=1), ids_restore), x)


def test_gather_visible_rejects_ragged_masks():
    mask = torch.zeros(2, 4, dtype=torch.bool)
    mask[0, 0] = True
    with pytest.raises(ValueError, match="same number of visible positions"):
        gather_visible(torch.zeros(2, 4, 3), mask)
    with pytest.raises(ValueError, match=r"\[B, L\]"):
        gather_visible(torch.zeros(2, 4, 3), torch.zeros(2, 5, dtype=torch.bool))
