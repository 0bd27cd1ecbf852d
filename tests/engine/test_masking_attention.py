"""The ``attention`` masking strategy (AttMask) and its side input: the ranking (most / least
attended), the random share, exact counts, eligibility, ties, and the random scores that previews,
probes and text or audio runs use where no model gives attention."""

from __future__ import annotations

import pytest
import torch

from engine.config import MaskingConfig, RunConfig
from engine.errors import ConfigError
from engine.masking import (
    MASKING_REGISTRY,
    SIDE_INPUTS,
    attention_inputs,
    draw_mask,
    get_masking,
    image_side_inputs,
    preview_masks,
    random_mask,
)
from engine.masking.attention import attention_mask
from engine.tasks import resolve_masking
from engine.tasks.text.common import draw_text_mask


def gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def ranks(B: int, *grid: int, seed: int = 0) -> torch.Tensor:
    """``[B, *grid]`` float: a random permutation of 0..L-1 per row (distinct scores, known order)."""
    L = 1
    for g in grid:
        L *= g
    return torch.argsort(torch.rand(B, L, generator=gen(100 + seed)), dim=1).float().reshape(B, *grid)


def cfg(**params) -> MaskingConfig:
    return resolve_masking(MaskingConfig(strategy="attention", ratio=0.5, params=params))


def test_registered_record():
    s = MASKING_REGISTRY["attention"]
    assert s.needs == ("attention",) and "attention" in SIDE_INPUTS and "higher = more attended" in SIDE_INPUTS["attention"]
    assert s.exact and s.uses_ratio and s.stochastic and s.grid_dims == (1, 2)
    assert s.modalities == ("image", "text", "audio") and s.works_on("patch-2d") and s.works_on("tokens-1d")
    assert "Kakogeorgiou" in s.summary
    assert s.parse_params({}).model_dump() == {"mode": "most", "random_share": 0.0}


@pytest.mark.parametrize("grid", [(4, 4), (7, 5), (40,)])
@pytest.mark.parametrize("ratio", [0.25, 0.5, 0.75])
def test_most_and_least_hide_the_top_and_bottom_of_the_scores(grid, ratio):
    a = ranks(6, *grid)
    L = a[0].numel()
    k = round(ratio * L)
    most = attention_mask((6, *grid), ratio, generator=gen(), attention=a)
    least = attention_mask((6, *grid), ratio, generator=gen(), attention=a, mode="least")
    flat = a.reshape(6, -1)
    assert torch.equal(most.reshape(6, -1), flat >= L - k)  # scores are the ranks 0..L-1
    assert torch.equal(least.reshape(6, -1), flat < k)


def test_a_known_map_hides_its_brightest_patches():
    a = torch.zeros(1, 4, 4)
    a[0, 1:3, 1:3] = torch.tensor([[0.9, 0.8], [0.7, 0.6]])  # a digit's centre, most attended
    m = attention_mask((1, 4, 4), 0.25, generator=gen(), attention=a)
    assert torch.equal(m[0], a[0] > 0)
    only = attention_mask((1, 4, 4), 2 / 16, generator=gen(), attention=a)
    assert only[0].nonzero().tolist() == [[1, 1], [1, 2]]


@pytest.mark.parametrize("mode", ["most", "least"])
@pytest.mark.parametrize("ratio", [0.15, 0.5, 0.75, 1.0])
def test_exact_count_over_the_eligible_positions_and_never_an_ineligible_one(mode, ratio):
    B, h, w = 32, 5, 6
    eligible = torch.rand(B, h, w, generator=gen(4)) < 0.6
    eligible[0] = True
    eligible[1] = False
    # The ineligible positions get the scores this mode hides first: they must still be skipped.
    a = ranks(B, h, w)
    top = float("inf") if mode == "most" else float("-inf")
    a = torch.where(eligible, a, torch.full_like(a, top))
    for share in (0.0, 0.3, 1.0):
        m = attention_mask((B, h, w), ratio, generator=gen(5), attention=a, eligible=eligible, mode=mode,
                           random_share=share)
        expected = torch.round(ratio * eligible.flatten(1).sum(1).double()).long()
        assert torch.equal(m.flatten(1).sum(1), expected), share
        assert not (m & ~eligible).any()
        assert not m[1].any()


def test_infinite_scores_rank_first_and_nan_is_refused():
    a = torch.tensor([[0.1, float("inf"), 0.3, float("-inf")]])
    assert attention_mask((1, 4), 0.25, generator=gen(), attention=a).tolist() == [[False, True, False, False]]
    assert attention_mask((1, 4), 0.25, generator=gen(), attention=a, mode="least").tolist() == [[False, False, False, True]]
    with pytest.raises(ValueError, match="NaN"):
        attention_mask((1, 4), 0.5, generator=gen(), attention=torch.tensor([[0.1, float("nan"), 0.2, 0.3]]))


def test_ties_are_broken_by_the_generator_uniformly():
    B, L = 4000, 10
    flat = torch.zeros(B, L)
    m1 = attention_mask((B, L), 0.3, generator=gen(1), attention=flat)
    m2 = attention_mask((B, L), 0.3, generator=gen(2), attention=flat)
    assert (m1.sum(1) == 3).all() and not torch.equal(m1, m2)
    assert torch.equal(m1, attention_mask((B, L), 0.3, generator=gen(1), attention=flat))
    freq = m1.float().mean(0)
    assert (freq - 0.3).abs().max() < 0.04  # sd per position sqrt(.3 * .7 / 4000) = 0.007: 5 sd
    # Partly tied: the best two are always hidden, the third of four is drawn among the tied rest.
    a = torch.tensor([[5.0, 1.0, 5.0, 1.0, 1.0, 0.0]]).expand(B, 6)
    m = attention_mask((B, 6), 0.5, generator=gen(3), attention=a)
    assert m[:, [0, 2]].all() and not m[:, 5].any()
    assert (m[:, [1, 3, 4]].float().mean(0) - 1 / 3).abs().max() < 0.04


def test_random_share_one_ignores_the_order_of_the_scores():
    B, L, ratio = 4000, 16, 0.25
    a = torch.arange(L, dtype=torch.float32).expand(B, L)  # the same strong ranking in every row
    m = attention_mask((B, L), ratio, generator=gen(7), attention=a, random_share=1.0)
    assert (m.sum(1) == 4).all()
    freq = m.float().mean(0)
    assert (freq - ratio).abs().max() < 0.035  # uniform: sd sqrt(.25 * .75 / 4000) = 0.007 per position
    assert abs(torch.corrcoef(torch.stack([freq, torch.arange(L).float()]))[0, 1]) < 0.5
    # ... and is then a uniform random mask of the same count as random masking's
    assert (m.sum(1) == random_mask((B, L), ratio, generator=gen(7)).sum(1)).all()


def test_random_share_half_keeps_the_top_ranked_half():
    B, L = 2000, 20
    a = torch.arange(L, dtype=torch.float32).expand(B, L)
    m = attention_mask((B, L), 0.4, generator=gen(8), attention=a, random_share=0.5)  # k = 8: 4 by rank, 4 random
    assert (m.sum(1) == 8).all()
    assert m[:, 16:].all()  # the 4 most attended always
    rest = m[:, :16].float().mean(0)
    assert (rest - 4 / 16).abs().max() < 0.05  # the others uniformly among the 16 left
    least = attention_mask((B, L), 0.4, generator=gen(8), attention=a, mode="least", random_share=0.5)
    assert least[:, :4].all() and (least[:, 4:].float().mean(0) - 0.25).abs().max() < 0.05


def test_a_shared_map_gives_one_mask_per_seed_and_different_maps_different_masks():
    a = ranks(1, 7, 7).expand(8, 7, 7)
    m = attention_mask((8, 7, 7), 0.75, generator=gen(), attention=a)
    assert (m == m[:1]).all()
    m2 = attention_mask((8, 7, 7), 0.75, generator=gen(), attention=ranks(8, 7, 7))
    assert len({tuple(r.flatten().tolist()) for r in m2}) == 8


def test_params_are_validated_naming_the_field():
    with pytest.raises(ConfigError, match=r"masking\.params\.mode"):
        cfg(mode="high")
    with pytest.raises(ConfigError, match=r"masking\.params\.random_share"):
        cfg(random_share=1.5)
    assert cfg(mode="least", random_share=0.2).params == {"mode": "least", "random_share": 0.2}


def test_bad_shapes_raise_naming_the_strategy():
    with pytest.raises(ValueError, match="attention has shape"):
        attention_mask((2, 4, 4), 0.5, generator=gen(), attention=torch.rand(2, 16))
    with pytest.raises(ValueError, match="'attention'"):
        attention_mask((2, 2, 2, 2), 0.5, generator=gen(), attention=torch.rand(2, 2, 2, 2))
    with pytest.raises(ValueError, match="needs attention"):
        draw_mask(cfg(), (2, 4, 4), gen())


# --- the side input where no model gives it -----------------------------------------------------


def test_attention_inputs_pass_scores_through_or_draw_random_ones_from_the_generator():
    c = cfg()
    a = torch.rand(3, 16)
    assert torch.equal(attention_inputs(c, (3, 4, 4), gen(), a)["attention"], a.reshape(3, 4, 4))
    r1, r2 = attention_inputs(c, (3, 4, 4), gen(1))["attention"], attention_inputs(c, (3, 4, 4), gen(1))["attention"]
    assert r1.shape == (3, 4, 4) and torch.equal(r1, r2) and 0 <= float(r1.min()) and float(r1.max()) < 1
    assert attention_inputs(MaskingConfig(strategy="random"), (3, 4, 4), gen()) == {}
    with pytest.raises(ValueError, match=r"expected \(3, 4, 4\)"):
        attention_inputs(c, (3, 4, 4), gen(), torch.rand(3, 15))


def test_image_side_inputs_and_preview_masks_take_a_models_scores_or_random_ones():
    images = torch.rand(5, 1, 8, 8, generator=gen(9))
    c = cfg()
    side = image_side_inputs(c, images, 2)
    assert side["attention"].shape == (5, 4, 4)
    assert torch.equal(side["attention"], image_side_inputs(c, images, 2)["attention"])  # seed 0 without a generator
    att = ranks(5, 4, 4)
    assert torch.equal(image_side_inputs(c, images, 2, att)["attention"], att)
    assert torch.equal(image_side_inputs(c, None, 2, att)["attention"], att)  # the scores alone give the grid
    assert torch.equal(image_side_inputs(c, images, 2, att.reshape(5, 16))["attention"], att)
    with pytest.raises(ValueError, match="needs the images"):
        image_side_inputs(c, None, 2)

    run = RunConfig.from_dict({"masking": {"strategy": "attention", "ratio": 0.25}, "model": {"patch_size": 2}})
    given = preview_masks(run, (1, 8, 8), 5, images=images, attention=att)
    assert torch.equal(given.flatten(1), att.flatten(1) >= 12)  # the 4 most attended of 16
    random1 = preview_masks(run, (1, 8, 8), 5, images=images)
    assert torch.equal(random1, preview_masks(run, (1, 8, 8), 5, images=images))  # the seed fixes the random scores
    assert (random1.flatten(1).sum(1) == 4).all()
    g = gen(run.train.seed)
    expect = draw_mask(run.masking, (5, 4, 4), g, attention=torch.rand(5, 4, 4, generator=g))
    assert torch.equal(random1, expect)


def test_a_text_run_ranks_random_scores():
    """A text run's masks (:func:`engine.tasks.text.common.draw_text_mask`) get random scores from
    the generator: exact counts over the maskable tokens, special tokens never hidden."""
    B, L = 6, 12
    eligible = torch.ones(B, L, dtype=torch.bool)
    eligible[:, 0] = eligible[:, -1] = False
    b = {"ids": torch.zeros(B, L, dtype=torch.long), "eligible": eligible,
         "word_ids": torch.arange(L).expand(B, L), "sentence_ids": torch.zeros(B, L, dtype=torch.long)}
    m = draw_text_mask(cfg(), b, gen(3), 0.5)
    assert (m.sum(1) == 5).all() and not (m & ~eligible).any()
    assert torch.equal(m, draw_text_mask(cfg(), b, gen(3), 0.5))
    assert get_masking("attention").works_on("frames-1d") and get_masking("attention").works_on("spec-2d")
