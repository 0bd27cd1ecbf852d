"""engine.masking.segment: sentence_span (one contiguous segment per row) and segment_bounds."""

from __future__ import annotations

import math

import pytest
import torch

from engine.config import MaskingConfig, RunConfig
from engine.errors import ConfigError
from engine.masking import draw_mask, get_masking
from engine.masking.segment import segment_bounds, segment_length_range, sentence_span_mask
from engine.tasks import resolve, resolve_masking


def gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def sentences(*lengths: int, pad: int = 0) -> torch.Tensor:
    """One row ``[CLS] s0 s1 ... [SEP] [PAD]*pad`` of sentence ids (``-1`` at specials and padding)."""
    ids = [-1] + [i for i, n in enumerate(lengths) for _ in range(n)] + [-1] + [-1] * pad
    return torch.tensor([ids])


def draws(sid: torch.Tensor, n: int = 400, **kw) -> torch.Tensor:
    """``n`` masks of the same row (one batch, so each row gets its own random numbers)."""
    return sentence_span_mask((n, sid.shape[1]), generator=gen(7), sentence_ids=sid.expand(n, -1), **kw)


def is_one_run(mask: torch.Tensor) -> torch.Tensor:
    starts = mask.clone()
    starts[:, 1:] &= ~mask[:, :-1]
    return starts.sum(1) == 1


@pytest.mark.parametrize(("n", "lo", "hi"), [(0, 0, 0), (1, 1, 1), (2, 1, 1), (3, 1, 1), (4, 1, 2), (5, 1, 2),
                                             (10, 2, 5), (11, 3, 5), (40, 8, 20)])
def test_length_range_defaults(n, lo, hi):
    got = segment_length_range(torch.tensor([n]), 0.2, 0.5)
    assert (int(got[0]), int(got[1])) == (lo, hi)


def test_length_range_tolerates_float_products_and_never_takes_all():
    # 0.3 * 10 = 3.0000000000000004 must give ceil = 3, and 0.7 * 10 = 7.000000000000001 floor = 7.
    assert [int(x) for x in segment_length_range(torch.tensor([10]), 0.3, 0.7)] == [3, 7]
    # max_frac = 1 still leaves one token out; min_frac above the cap is lowered to it.
    assert [int(x) for x in segment_length_range(torch.tensor([4]), 1.0, 1.0)] == [3, 3]
    assert [int(x) for x in segment_length_range(torch.tensor([1]), 1.0, 1.0)] == [1, 1]


def test_a_whole_fitting_sentence_is_masked_uniformly():
    sid = sentences(3, 3, 4)  # n = 10: lengths 2..5 fit, every sentence fits
    masks = draws(sid)
    choices = []
    for row in masks:
        hit = [s for s in range(3) if torch.equal(row, sid[0] == s)]
        assert len(hit) == 1, row
        choices.append(hit[0])
    counts = torch.bincount(torch.tensor(choices), minlength=3).float() / len(choices)
    assert (counts - 1 / 3).abs().max() < 0.08, counts


def test_only_the_sentences_that_fit_are_chosen():
    sid = sentences(6, 2, 2)  # n = 10: allowed 2..5; the 6-token sentence is too long
    masks = draws(sid)
    assert all(torch.equal(r, sid[0] == 1) or torch.equal(r, sid[0] == 2) for r in masks)
    assert not masks[:, sid[0] == 0].any()


def test_no_fitting_sentence_falls_back_to_a_random_stretch():
    sid = sentences(9, 1)  # n = 10: 9 too long, 1 too short -> stretch of 2..5 tokens
    masks = draws(sid, n=2000)
    assert is_one_run(masks).all()
    lengths = masks.sum(1)
    assert set(lengths.tolist()) == {2, 3, 4, 5}
    assert (torch.bincount(lengths, minlength=6)[2:].float() / 2000 - 0.25).abs().max() < 0.04
    assert not masks[:, sid[0] < 0].any()
    start, _ = segment_bounds(masks)
    assert start.min() == 1 and (start + lengths).max() == 11  # both ends of the text are reachable


def test_one_sentence_is_a_random_stretch_of_the_allowed_length():
    sid = sentences(20, pad=5)
    masks = draws(sid, n=2000)
    lengths = masks.sum(1)
    assert lengths.min() == 4 and lengths.max() == 10 and is_one_run(masks).all()
    # Every start 0..n-l is reachable for the shortest length.
    start, _ = segment_bounds(masks)
    assert set(start[lengths == 4].tolist()) == set(range(1, 1 + 20 - 4 + 1))


def test_without_sentence_ids_every_position_is_one_sentence():
    mask = sentence_span_mask((500, 12), generator=gen())
    assert is_one_run(mask).all()
    assert set(mask.sum(1).tolist()) == {3, 4, 5, 6}  # ceil(2.4) .. floor(6)


@pytest.mark.parametrize("n", [1, 2, 3])
def test_short_rows_mask_at_least_one_and_never_all(n):
    masks = draws(sentences(n), n=100)
    expected = 1  # n=1: its only token; n=2, 3: one of them (hi = n - 1 = 1 with max_frac 0.5)
    assert (masks.sum(1) == expected).all()


def test_sentence_choice_needs_several_sentences():
    # n = 10 with one sentence of 10: not "several sentences", so a stretch (never all 10).
    masks = draws(sentences(10), n=300, max_frac=1.0)
    assert (masks.sum(1) <= 9).all() and is_one_run(masks).all()


def test_ineligible_positions_are_skipped_and_the_segment_bridges_them():
    sid = sentences(12)
    eligible = torch.ones_like(sid, dtype=torch.bool)
    eligible[0, 5] = False  # a hole in the middle of the text
    masks = sentence_span_mask((1000, 14), generator=gen(3), sentence_ids=sid.expand(1000, -1),
                               eligible=eligible.expand(1000, -1))
    assert not masks[:, 5].any() and not masks[:, 0].any() and not masks[:, 13].any()
    # n = 11 eligible: lengths 3..5 counted over eligible positions only.
    assert set(masks.sum(1).tolist()) == {3, 4, 5}
    compressed = masks[:, eligible[0]]
    assert is_one_run(compressed).all()


def test_rows_do_not_depend_on_the_rest_of_the_batch():
    sid = torch.cat([sentences(3, 4, 5), sentences(7, 2, 3), sentences(12)])
    full = sentence_span_mask(tuple(sid.shape), generator=gen(5), sentence_ids=sid)
    first_two = sentence_span_mask((2, sid.shape[1]), generator=gen(5), sentence_ids=sid[:2])
    assert torch.equal(full[:2], first_two)


def test_params_are_validated_by_resolve():
    cfg = resolve_masking(MaskingConfig(strategy="sentence_span"))
    assert cfg.params == {"min_frac": 0.2, "max_frac": 0.5}
    with pytest.raises(ConfigError, match=r"masking\.params: min_frac \(0\.6\) must be <= max_frac \(0\.5\)"):
        resolve(RunConfig.from_dict({"masking": {"strategy": "sentence_span", "params": {"min_frac": 0.6}}}))
    with pytest.raises(ConfigError, match=r"masking\.params\.max_frac"):
        resolve(RunConfig.from_dict({"masking": {"strategy": "sentence_span", "params": {"max_frac": 1.5}}}))
    with pytest.raises(ConfigError, match=r"masking\.schedule"):
        resolve(RunConfig.from_dict({"masking": {"strategy": "sentence_span", "schedule": "linear", "final_ratio": 0.9}}))
    s = get_masking("sentence_span")
    assert not s.uses_ratio and s.needs == ("sentence_ids",) and "text" in s.modalities


def test_draw_mask_passes_sentence_ids_and_the_params():
    sid = sentences(3, 3, 4).expand(50, -1)
    cfg = MaskingConfig(strategy="sentence_span", params={"min_frac": 0.4, "max_frac": 0.4})
    mask = draw_mask(cfg, tuple(sid.shape), gen(1), sentence_ids=sid)
    assert (mask.sum(1) == 4).all()  # only the 4-token sentence fits [4, 4]
    assert torch.equal(mask, sentence_span_mask(tuple(sid.shape), generator=gen(1), sentence_ids=sid,
                                                min_frac=0.4, max_frac=0.4))
    with pytest.raises(ValueError, match="sentence_ids has shape"):
        sentence_span_mask((2, 5), generator=gen(), sentence_ids=torch.zeros(2, 6, dtype=torch.long))


def test_segment_bounds():
    mask = torch.tensor([[0, 1, 1, 1, 0], [0, 0, 0, 0, 0], [1, 0, 0, 0, 0], [0, 0, 0, 1, 1]], dtype=torch.bool)
    start, length = segment_bounds(mask)
    assert start.tolist() == [1, 0, 0, 3] and length.tolist() == [3, 0, 1, 2]
    with pytest.raises(ValueError, match="span_mask: row 1 has 2 masked runs"):
        segment_bounds(torch.tensor([[0, 1, 0], [1, 0, 1]], dtype=torch.bool))
    with pytest.raises(ValueError, match="bool"):
        segment_bounds(mask.long())
    s, n = segment_bounds(torch.zeros(3, 0, dtype=torch.bool))
    assert s.tolist() == n.tolist() == [0, 0, 0]


def test_the_expected_fraction_is_in_the_range():
    """On a mix of real-looking rows the masked share stays within [min_frac, max_frac] of n
    (rounding aside), which is what makes the task "20-50% of a text"."""
    g = gen(11)
    B, L = 300, 40
    starts = torch.rand(B, L, generator=g) < 0.12
    starts[:, 1] = True
    sid = torch.cumsum(starts.long(), 1) - 1
    n_real = torch.randint(6, L - 1, (B, 1), generator=g)
    pos = torch.arange(L)[None, :]
    sid = torch.where((pos >= 1) & (pos <= n_real), sid, torch.full_like(sid, -1))
    mask = sentence_span_mask((B, L), generator=gen(2), sentence_ids=sid)
    n = (sid >= 0).sum(1)
    share = mask.sum(1) / n
    assert (mask.sum(1) >= torch.ceil(0.2 * n - 1e-9)).all()
    assert (share <= 0.5 + 1e-9).all() and is_one_run(mask).all()
    assert math.isclose(float(share.mean()), 0.35, abs_tol=0.07)
