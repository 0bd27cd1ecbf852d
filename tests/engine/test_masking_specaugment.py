"""engine.masking.specaugment: SpecAugment time and frequency masks on [B, F, T] grids."""

from __future__ import annotations

import inspect

import pytest
import torch

from engine.errors import ConfigError
from engine.masking import get_masking
from engine.masking.specaugment import freq_mask, specaugment_mask, time_mask


def gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def freq_widths(mask: torch.Tensor) -> torch.Tensor:
    """Rows masked over every frame: the frequency band's width (mF = 1, no time mask)."""
    return mask.all(dim=2).sum(dim=1)


def time_widths(mask: torch.Tensor) -> torch.Tensor:
    """Columns masked over every row: the time band's width (mT = 1, no frequency mask)."""
    return mask.all(dim=1).sum(dim=1)


def is_one_band(rows: torch.Tensor) -> torch.Tensor:
    """[B, n] bool -> [B]: the True values form one contiguous run (or none)."""
    starts = rows[:, :1].long() + (rows[:, 1:] & ~rows[:, :-1]).sum(1, keepdim=True)
    return starts.squeeze(1) <= 1


def test_mean_frequency_width_is_about_F_over_2():
    mask = freq_mask((8000, 40, 3), generator=gen(1), F=27, mF=1)
    w = freq_widths(mask).double()
    assert abs(w.mean().item() - 13.5) < 0.4  # U{0..27}: sd 8.08, se 0.09
    assert w.min() == 0 and w.max() == 27
    assert len(w.unique()) == 28  # every width 0..F occurs
    assert is_one_band(mask[:, :, 0]).all()
    assert torch.equal(mask, mask[:, :, :1].expand_as(mask))  # a band spans every frame


@pytest.mark.parametrize("T,p,tau,expected_max", [(100, 1.0, 200, 100), (100, 0.2, 200, 40), (100, 0.29, 100, 29),
                                                  (30, 0.5, 200, 30)])
def test_mean_time_width_is_about_min_T_p_tau_over_2(T, p, tau, expected_max):
    mask = time_mask((8000, 2, tau), generator=gen(2), T=T, mT=1, p=p)
    w = time_widths(mask).double()
    sd = ((expected_max + 1) ** 2 - 1) ** 0.5 / 12**0.5
    assert abs(w.mean().item() - expected_max / 2) < 4.5 * sd / 8000**0.5
    assert w.max() == expected_max  # p limits the width (never above, and reached)
    assert is_one_band(mask[:, 0, :]).all()


def test_start_is_uniform_given_the_width():
    # Coverage of a band with f0 ~ U{0..nu - f} is symmetric about the middle row.
    mask = freq_mask((20000, 16, 1), generator=gen(3), F=10, mF=1)[:, :, 0]
    cover = mask.float().mean(0)
    assert (cover - cover.flip(0)).abs().max() < 0.015
    assert cover[0] > 0.05 and cover[7] > cover[0]  # the middle rows are covered more often


def test_F_larger_than_the_number_of_bins_is_clipped():
    mask = freq_mask((4000, 16, 2), generator=gen(4), F=200, mF=1)
    w = freq_widths(mask).double()
    assert w.max() == 16 and abs(w.mean().item() - 8.0) < 0.35  # U{0..16}: sd 4.9, se 0.08


def test_one_frame_spectrogram():
    # p < 1: floor(p * 1) = 0, so every time band is 0 wide; p = 1: widths U{0, 1}
    assert not time_mask((64, 8, 1), generator=gen(5), p=0.9).any()
    half = time_mask((4000, 8, 1), generator=gen(5), p=1.0, mT=1)
    assert abs(half[:, 0, 0].float().mean().item() - 0.5) < 0.03
    assert torch.equal(half, half[:, :1].expand_as(half))


def test_multiple_masks_overlap_into_their_union():
    # mF = 2 bands of up to F: the masked rows are at most 2 bands, up to 2F wide, sometimes overlapping.
    mask = freq_mask((4000, 80, 1), generator=gen(6), F=27, mF=2)[:, :, 0]
    w = mask.sum(1)
    assert w.max() <= 54
    runs = mask[:, :1].long().squeeze(1) + (mask[:, 1:] & ~mask[:, :-1]).sum(1)
    assert runs.max() == 2 and (runs == 1).any()
    # mean union width is below the sum of the means (27) because bands overlap
    assert 20 < w.float().mean().item() < 27


def test_specaugment_is_freq_then_time_masks():
    shape = (32, 20, 50)
    both = specaugment_mask(shape, generator=gen(7), F=8, mF=2, T=10, mT=2, p=1.0)
    assert torch.equal(specaugment_mask(shape, generator=gen(7), F=8, mF=2, mT=0),
                       freq_mask(shape, generator=gen(7), F=8, mF=2))
    assert torch.equal(specaugment_mask(shape, generator=gen(7), mF=0, T=10, mT=2, p=1.0),
                       time_mask(shape, generator=gen(7), T=10, mT=2, p=1.0))
    # the union is made of full rows and full columns only
    rows, cols = both.all(dim=2), both.all(dim=1)
    assert torch.equal(both, rows[:, :, None] | cols[:, None, :])


def test_time_mask_on_a_1d_frame_sequence():
    m1 = time_mask((16, 30), generator=gen(8), T=10, mT=2)
    m2 = time_mask((16, 1, 30), generator=gen(8), T=10, mT=2)
    assert m1.shape == (16, 30) and torch.equal(m1, m2[:, 0])
    with pytest.raises(ValueError, match="freq_mask"):
        freq_mask((16, 30), generator=gen())
    with pytest.raises(ValueError, match="specaugment"):
        specaugment_mask((16, 30), generator=gen())


@pytest.mark.parametrize("name", ["time_mask", "specaugment"])
@pytest.mark.parametrize("lead", [0, 5])
def test_time_bands_fall_in_each_rows_own_utterance_as_if_it_were_the_whole_spectrogram(name, lead):
    """tau is the utterance's length (the paper's): a row whose eligible frames are frames
    [lead, lead + k) of the window gets, there, exactly the masks of a k-frame spectrogram drawn
    from the same seed, and nothing in the silence around it; the frequency bands are unchanged."""
    B, nu, tau = 6, 10, 60
    lengths = torch.tensor([55, 30, 12, 1, 0, 40])
    eligible = torch.zeros(B, nu, tau, dtype=torch.bool)
    for b, k in enumerate(lengths.tolist()):
        eligible[b, :, lead:lead + k] = True
    fn = get_masking(name)
    kw = {"T": 20, "mT": 2, "p": 0.5} | ({"F": 4, "mF": 1} if name == "specaugment" else {})
    got = fn((B, nu, tau), generator=gen(11), eligible=eligible, **kw)
    for b, k in enumerate(lengths.tolist()):
        assert not got[b, :, :lead].any() and not got[b, :, lead + k:].any()
        if k:
            alone = fn((B, nu, k), generator=gen(11), **kw)[b]
            assert torch.equal(got[b, :, lead:lead + k], alone), (b, k)
    # a band is at most floor(p * k) frames wide, not floor(p * tau): 6 in a 12-frame utterance
    twelve = eligible[2:3].expand(4000, nu, tau).contiguous()
    assert time_widths(time_mask((4000, nu, tau), generator=gen(12), eligible=twelve, T=20, mT=1, p=0.5)).max() == 6


@pytest.mark.parametrize("name", ["time_mask", "freq_mask", "specaugment"])
def test_eligible_is_anded_and_all_ineligible_rows_are_empty(name):
    """With every frame of a row holding an eligible cell (its utterance is the whole window), the
    masks are those drawn without ``eligible``, ANDed with it."""
    g = gen(9)
    eligible = torch.rand(8, 12, 20, generator=g) < 0.7
    eligible[3] = False
    fn = get_masking(name)
    kw = {"F": 12} if name == "freq_mask" else {"T": 20} if name == "time_mask" else {"F": 12, "T": 20}
    plain = fn((8, 12, 20), generator=gen(10), **kw)
    masked = fn((8, 12, 20), generator=gen(10), eligible=eligible, **kw)
    assert torch.equal(masked, plain & eligible)
    assert not masked[3].any() and plain.any()


@pytest.mark.parametrize("name", ["time_mask", "freq_mask", "specaugment"])
def test_ratio_is_ignored_but_validated(name):
    fn = get_masking(name)
    assert not fn.uses_ratio and not fn.exact and fn.modalities == ("audio",)
    assert torch.equal(fn((4, 10, 30), 0.0, generator=gen(11)), fn((4, 10, 30), 0.9, generator=gen(11)))
    with pytest.raises(ConfigError, match=r"masking\.ratio"):
        fn((4, 10, 30), 1.5, generator=gen())


def test_zero_counts_and_widths_mask_nothing_and_empty_axes():
    assert not specaugment_mask((4, 10, 30), generator=gen(), mF=0, mT=0).any()
    assert not specaugment_mask((4, 10, 30), generator=gen(), F=0, T=0).any()
    assert specaugment_mask((4, 0, 30), generator=gen()).shape == (4, 0, 30)
    assert time_mask((4, 0), generator=gen()).shape == (4, 0)


def test_ss_policy_defaults_and_signatures_match_the_models():
    p = get_masking("specaugment").parse_params({})
    assert (p.F, p.mF, p.T, p.mT, p.p) == (27, 2, 40, 2, 0.2)  # Park et al. 2019, Table 1: SS
    for fn, name in [(time_mask, "time_mask"), (freq_mask, "freq_mask"), (specaugment_mask, "specaugment")]:
        sig = inspect.signature(fn).parameters
        for field, info in get_masking(name).params.model_fields.items():
            assert sig[field].default == info.default


@pytest.mark.parametrize("name,params,field", [("time_mask", {"T": -1}, "T"), ("time_mask", {"p": 1.5}, "p"),
                                               ("time_mask", {"mT": -2}, "mT"), ("freq_mask", {"F": -1}, "F"),
                                               ("freq_mask", {"T": 5}, "T"), ("specaugment", {"mF": -1}, "mF")])
def test_bad_params_name_the_field(name, params, field):
    with pytest.raises(ConfigError, match=rf"masking\.params\.{field}"):
        get_masking(name).parse_params(params)
    if field in get_masking(name).params.model_fields:  # a direct call validates its params too
        with pytest.raises(ConfigError, match=rf"masking\.params\.{field}"):
            get_masking(name)((2, 8, 8), generator=gen(), **params)


def test_seed_determinism():
    a = specaugment_mask((16, 40, 60), generator=gen(12), F=10, T=20)
    assert torch.equal(a, specaugment_mask((16, 40, 60), generator=gen(12), F=10, T=20))
    assert not torch.equal(a, specaugment_mask((16, 40, 60), generator=gen(13), F=10, T=20))
