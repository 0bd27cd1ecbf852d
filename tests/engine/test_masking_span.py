"""engine.masking.span: SpanBERT span masking with an exact budget, vectorised."""

from __future__ import annotations

import pytest
import torch

import engine.masking.span as span_module
from engine.errors import ConfigError
from engine.masking import get_masking
from engine.masking.span import span_length_pmf, span_mask


def gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def runs(mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Maximal runs of True in each row of a ``[B, L]`` mask.

    Returns ``(row, length, rank)`` per run, in row-major order; ``rank`` is the run's index
    within its row (0 = leftmost).
    """
    B, L = mask.shape
    pad = torch.zeros(B, 1, dtype=torch.bool)
    m = torch.cat([pad, mask, pad], dim=1)
    starts = (m[:, 1:] & ~m[:, :-1]).nonzero()  # (n_runs, 2): row, start (ordered)
    ends = (~m[:, 1:] & m[:, :-1]).nonzero()
    assert torch.equal(starts[:, 0], ends[:, 0])
    row = starts[:, 0]
    first = torch.searchsorted(row, torch.arange(B))  # index of each row's first run
    rank = torch.arange(len(row)) - first[row]
    return row, ends[:, 1] - starts[:, 1], rank


def budget(n: torch.Tensor, ratio: float) -> torch.Tensor:
    return torch.round(ratio * n.double()).long()


# --- counts and edge cases --------------------------------------------------------------------------


@pytest.mark.parametrize("lengths", ["geometric", "fixed"])
@pytest.mark.parametrize("ratio", [0.05, 0.15, 0.5, 0.65, 0.9, 1.0])
@pytest.mark.parametrize("L", [1, 7, 64, 500])
def test_exact_count_per_row(lengths, ratio, L):
    mask = span_mask((32, L), ratio, generator=gen(1), lengths=lengths)
    assert mask.shape == (32, L) and mask.dtype == torch.bool
    assert (mask.sum(dim=1) == round(ratio * L)).all()


@pytest.mark.parametrize("lengths", ["geometric", "fixed"])
@pytest.mark.parametrize("ratio", [0.15, 0.4, 0.8, 1.0])
def test_exact_count_over_eligible_positions_and_never_ineligible(lengths, ratio):
    g = gen(2)
    eligible = torch.rand(64, 128, generator=g) < torch.rand(64, 1, generator=g)  # varied density
    eligible[0] = False
    eligible[1] = True
    mask = span_mask((64, 128), ratio, generator=g, eligible=eligible, lengths=lengths, max_len=6)
    assert not (mask & ~eligible).any()
    assert torch.equal(mask.sum(dim=1), budget(eligible.sum(dim=1), ratio))
    assert not mask[0].any()
    if ratio == 1.0:
        assert torch.equal(mask, eligible)


def test_spans_are_laid_over_eligible_positions_and_may_bridge_ineligible_ones():
    # Every other position ineligible: in compressed coordinates a span of length 3 covers 3
    # eligible positions, which in the output are 3 isolated positions spread over 5.
    eligible = torch.zeros(8, 40, dtype=torch.bool)
    eligible[:, ::2] = True
    mask = span_mask((8, 40), 0.3, generator=gen(3), eligible=eligible, lengths="fixed", max_len=3)
    assert (mask.sum(dim=1) == 6).all()  # round(0.3 * 20)
    compressed = mask[:, ::2]
    _, length, _ = runs(compressed)
    assert (length == 3).all()  # the spans are contiguous among the eligible positions


def test_ratio_zero_empty_grid_and_all_ineligible():
    assert not span_mask((4, 50), 0.0, generator=gen()).any()
    assert span_mask((4, 0), 0.5, generator=gen()).shape == (4, 0)
    assert span_mask((0, 10), 0.5, generator=gen()).shape == (0, 10)
    none = torch.zeros(3, 20, dtype=torch.bool)
    assert not span_mask((3, 20), 0.7, generator=gen(), eligible=none).any()


def test_ratio_one_masks_everything():
    assert span_mask((5, 33), 1.0, generator=gen()).all()
    assert span_mask((5, 33), 1.0, generator=gen(), lengths="fixed", max_len=4).all()


def test_sequence_shorter_than_a_span_gets_one_span_cut_to_the_budget():
    mask = span_mask((50, 6), 0.5, generator=gen(4), lengths="fixed", max_len=10)
    row, length, _ = runs(mask)
    assert len(row) == 50 and (length == 3).all()  # one contiguous run of round(0.5 * 6) per row
    assert span_mask((4, 3), 1.0, generator=gen(), lengths="fixed", max_len=10).all()


def test_high_ratio_without_room_for_separators_still_exact():
    # p = 1: every span has length 1; 19 spans in 20 positions cannot be separated, they touch.
    mask = span_mask((16, 20), 0.95, generator=gen(5), p=1.0)
    assert (mask.sum(dim=1) == 19).all()


# --- geometry: separation and lengths ---------------------------------------------------------------


def test_fixed_lengths_are_max_len_except_the_cut_span_at_one_end():
    # 256 x 500 at 0.65: budget 325 = 32 spans of 10 + one cut to 5; room for separators (U = 175).
    mask = span_mask((256, 500), 0.65, generator=gen(6), lengths="fixed", max_len=10)
    row, length, rank = runs(mask)
    per_row = torch.bincount(row, minlength=256)
    assert (per_row == 33).all()  # separated: every span is its own run
    assert (length == 10).sum().item() == 32 * 256
    cut = length == 5
    assert cut.sum().item() == 256
    assert ((rank[cut] == 0) | (rank[cut] == 32)).all()  # the cut span is the first or last run
    left = (rank[cut] == 0).double().mean().item()
    assert 0.35 < left < 0.65  # rows are mirrored with probability 1/2


def test_geometric_spans_are_separated_when_there_is_room():
    mask = span_mask((256, 256), 0.3, generator=gen(7), p=0.2, max_len=10)
    _, length, _ = runs(mask)
    assert length.max().item() <= 10  # touching spans would form longer runs
    # every row's runs add up to the budget (with the cut span)
    assert (mask.sum(dim=1) == round(0.3 * 256)).all()


def renewal(pmf: list[float], b: int) -> tuple[float, float]:
    """Exact ``(E[J], E[S_{J-1}])`` for i.i.d. lengths with ``pmf`` (index 0 = length 1) and budget ``b``.

    ``J`` is the number of spans drawn until their total reaches ``b`` and ``S_{J-1}`` the total of
    the ``J - 1`` spans before the crossing one. With ``u(t)`` the probability that some partial
    sum equals ``t``: ``E[J] = sum_{t<b} u(t)`` and ``P(S_{J-1} = t) = u(t) P(X >= b - t)``.
    """
    M = len(pmf)
    u = [1.0] + [0.0] * (b - 1)
    for t in range(1, b):
        u[t] = sum(pmf[l - 1] * u[t - l] for l in range(1, min(M, t) + 1))
    tail = [sum(pmf[l - 1] for l in range(d, M + 1)) if d <= M else 0.0 for d in range(b + 1)]
    return sum(u), sum(t * u[t] * tail[b - t] for t in range(b))


def test_span_length_distribution_matches_spanbert():
    p, max_len, b = 0.2, 10, 77  # budget round(0.15 * 512) = 77
    pmf = span_length_pmf(p, max_len)
    assert abs(sum(pmf) - 1.0) < 1e-12
    # Analytic mean of Geo(0.2) restricted to 1..10 and renormalised (SpanBERT's len_distrib).
    q = 1 - p
    mean = sum(l * p * q ** (l - 1) for l in range(1, 11)) / (1 - q ** 10)
    assert abs(mean - 3.8) < 0.01  # the paper's "mean span length 3.8"
    assert abs(mean - sum((i + 1) * w for i, w in enumerate(pmf))) < 1e-12

    mask = span_mask((1024, 512), 0.15, generator=gen(8), p=p, max_len=max_len)
    row, length, rank = runs(mask)  # spans are separated at this ratio: one run per span
    per_row = torch.bincount(row, minlength=1024)
    e_spans, e_before_last = renewal(pmf, b)
    assert abs(per_row.double().mean().item() - e_spans) < 0.4  # 20.87; SE 0.096 (clipping: 17.9)

    # Drop each row's first and last run: one of them is the cut span (rows may be mirrored), the
    # other the first span drawn. The rest are the draws 2..J-1, whose pooled mean is slightly
    # below the distribution's (they come before the stopping time): exactly
    # (E[S_{J-1}] - mean) / (E[J] - 2), which the test computes instead of assuming 3.8.
    inner = (rank > 0) & (rank < per_row[row] - 1)
    lengths = length[inner].double()
    expected = (e_before_last - mean) / (e_spans - 2)
    assert abs(expected - mean) < 0.1
    assert abs(lengths.mean().item() - expected) < 0.08  # SE ~0.02; clipping instead: ~4.4
    assert abs(lengths.mean().item() - 3.8) < 0.15
    freq = torch.bincount(lengths.long(), minlength=max_len + 1)[1:] / len(lengths)
    assert (freq - torch.tensor(pmf, dtype=torch.float64)).abs().max().item() < 0.02
    assert length.max().item() <= max_len


# --- determinism, registry, params ------------------------------------------------------------------


def test_same_seed_same_mask_and_rows_do_not_depend_on_the_batch():
    a = span_mask((64, 100), 0.3, generator=gen(9))
    assert torch.equal(a, span_mask((64, 100), 0.3, generator=gen(9)))
    assert not torch.equal(a, span_mask((64, 100), 0.3, generator=gen(10)))
    assert torch.equal(a[:8], span_mask((8, 100), 0.3, generator=gen(9)))


def test_mask_follows_the_generator_device():
    mask = span_mask((2, 10), 0.5, generator=torch.Generator(device="cpu").manual_seed(0))
    assert mask.device.type == "cpu"


def test_registry_entry():
    s = get_masking("span")
    assert s.exact and s.uses_ratio and s.grid_dims == (1,) and set(s.modalities) == {"text", "audio"}
    with pytest.raises(ValueError, match="span"):
        s((2, 4, 4), 0.5, generator=gen())


@pytest.mark.parametrize(
    ("params", "field"),
    [({"p": 0.0}, "p"), ({"p": 1.5}, "p"), ({"max_len": 0}, "max_len"), ({"lengths": "poisson"}, "lengths")],
)
def test_bad_params_are_config_errors_naming_the_field(params, field):
    with pytest.raises(ConfigError, match=rf"masking\.params\.{field}"):
        get_masking("span").parse_params(params)
    with pytest.raises(ConfigError, match=rf"masking\.params\.{field}"):
        span_mask((2, 10), 0.5, generator=gen(), **params)


def test_redraw_when_the_span_count_bound_is_too_small(monkeypatch):
    # Force the (astronomically rare) fallback: a bound of 1 span cannot fill a budget of 30.

    monkeypatch.setattr(span_module, "_span_bound", lambda b_max, p, max_len: 1)
    mask = span_mask((16, 100), 0.3, generator=gen(12))
    assert (mask.sum(dim=1) == 30).all()
    _, length, _ = runs(mask)
    assert length.max().item() <= 10
    assert torch.equal(mask, span_mask((16, 100), 0.3, generator=gen(12)))


@pytest.mark.parametrize("lengths", ["geometric", "fixed"])
def test_placement_is_symmetric_and_reaches_both_ends(lengths):
    # The gap boundaries floor((slack + 1) x) make a reversed row as likely as the row itself;
    # floor(slack * x) would always leave the last position unmasked.
    mask = span_mask((8192, 40), 0.3, generator=gen(14), lengths=lengths, max_len=4)
    freq = mask.double().mean(dim=0)
    assert (freq - freq.flip(0)).abs().max().item() < 0.035  # SE of a difference ~0.007
    assert freq[0].item() > 0.03 and freq[-1].item() > 0.03
    assert abs(freq[15:25].mean().item() - 0.3) < 0.05  # the middle is masked at about the ratio
