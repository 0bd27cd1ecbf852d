"""Masking defaults that vary (issue 41, point 4): every registered strategy, with its default
parameters, on every grid it is offered on, draws masks that differ from sample to sample.

Parametrized over :data:`engine.masking.MASKING_REGISTRY` and the grid kinds each strategy works on
(:meth:`~engine.masking.MaskingStrategy.works_on`), with the shapes the built-in modalities
produce: 7x7 / 8x8 / 14x14 image patch grids (28, 32 and 224 px images), token sequences,
audio frames, spectrogram patch grids and video tubes. Every sample of a batch gets the *same*
side inputs (words, superpixels, voicing), so any difference between masks comes from the
generator alone. A stochastic strategy must then show no fixed part: no position hidden in every
sample of the batch (Mask lab's ``hierarchical`` default once hid the top-left 4x4 cell of a 7x7
grid in every sample). Rule-based strategies (``stochastic=False``: ``periodic``, ``region``) are
exempt: their mask is a pure function of the grid and parameters, the same for every sample by
design, which :func:`engine.masking.identical_masks_warning` says on screen; so is ``attention``,
whose mask ranks each sample's own attention map (the same map, the same mask, by AttMask's design).
"""

from __future__ import annotations

import math

import pytest
import torch

from engine.masking import GRID_KINDS, MASKING_REGISTRY, identical_masks_warning, superpixel_segments
from engine.modalities.grids import lineage

#: Realistic grids (after the batch) of each grid kind.
GRIDS = {
    "seq-1d": [(64,)],  # a plug-in sequence (the timeseries example)
    "tokens-1d": [(128,)],  # a tokenised document
    "frames-1d": [(100,)],  # 1 s of audio at a 10 ms hop
    "patch-2d": [(7, 7), (8, 8), (14, 14)],  # 28 px / 4, 32 px / 4, 224 px / 16
    "spec-2d": [(8, 12), (16, 64)],  # [F, T]: 64 mels x 1 s / 8x8 patches, 128 mels x ~10 s / 8x16
    "tube-3d": [(8, 14, 14)],  # VideoMAE: 16 frames / 2, 224 px / 16
}
#: Mask ratios: the config default (MAE's 0.75) and BERT's 0.15.
RATIOS = (0.75, 0.15)
#: Samples per batch: enough that a position masked with probability 0.97 (BEiT blocks' centre on a
#: 7x7 grid at 0.75) is still free in some sample (0.97 ** 512 < 2e-7), so a position hidden in
#: every sample is a fixed part of the strategy, not chance.
B = 512


def shapes_of(kind: str) -> list[tuple[int, ...]]:
    """The realistic grids of ``kind``, or of a kind it is (a plug-in's ``steps-1d`` is a ``seq-1d``)."""
    return GRIDS.get(kind) or next((GRIDS[k] for k in sorted(lineage(kind)) if k in GRIDS), [])


REGISTERED = set(MASKING_REGISTRY)
CASES = [
    pytest.param(name, grid, id=f"{name}-{kind}-{'x'.join(map(str, grid))}")
    for name, s in sorted(MASKING_REGISTRY.items())
    for kind in GRID_KINDS
    if s.works_on(kind)
    for grid in shapes_of(kind)
]


def same_side_inputs(needs: tuple[str, ...], grid: tuple[int, ...]) -> dict[str, torch.Tensor]:
    """One sample's side inputs, repeated over the batch (``[B, *grid]`` / ``[B, T]``): words of 1-3
    tokens and sentences of 6-20 tokens between [CLS] and [SEP], SLIC superpixels of a smooth image,
    about five voiced runs between silences, one attention map (distinct scores)."""
    out = {}
    if "word_ids" in needs or "sentence_ids" in needs:
        L = grid[0]
        for key, lengths in (("word_ids", (1, 2, 3, 1, 2)), ("sentence_ids", (6, 14, 9, 20, 11))):
            ids = torch.full((L,), -1, dtype=torch.long)
            pos, unit = 1, 0
            while pos < L - 1:
                n = lengths[unit % len(lengths)]
                ids[pos:min(pos + n, L - 1)] = unit
                pos, unit = pos + n, unit + 1
            if key in needs:
                out[key] = ids.expand(B, L).clone()
    if "segments" in needs:  # SLIC on a smooth two-colour image, patches of 4 px, as the image task does
        H, W = (4 * n for n in grid)
        y, x = torch.meshgrid(torch.linspace(0, 1, H), torch.linspace(0, 1, W), indexing="ij")
        image = torch.stack([x, y, (x * y + 0.5 * torch.sin(6 * x) ** 2).clamp(0, 1)])[None]  # [1, 3, H, W]
        out["segments"] = superpixel_segments(image, 4).expand(B, *grid).clone()
    if "voiced" in needs:
        T = grid[-1]
        run = max(2, T // 10)  # about five voiced runs between silences, whatever the length
        out["voiced"] = ((torch.arange(T) // run) % 2 == 1).expand(B, T).clone()
    if "attention" in needs:
        out["attention"] = torch.rand(grid, generator=torch.Generator().manual_seed(0)).expand(B, *grid).clone()
    return out


@pytest.mark.parametrize("ratio", RATIOS)
@pytest.mark.parametrize("name,grid", CASES)
def test_default_masks_differ_between_samples(name, grid, ratio):
    s = MASKING_REGISTRY[name]
    params = s.parse_params({}).model_dump()
    side = same_side_inputs(s.needs, grid)
    mask = s.fn((B, *grid), ratio, generator=torch.Generator().manual_seed(0), **params, **side)
    flat = mask.reshape(B, math.prod(grid))
    assert flat.any(), f"{name} on {grid} at ratio {ratio}: nothing masked in {B} samples"
    if not s.stochastic:  # exempt: a rule-based mask is the same for every sample, and says so
        assert (flat == flat[:1]).all(), f"{name} declares stochastic=False but its masks differ"
        return
    if "attention" in s.needs:  # exempt too: the mask ranks the sample's own attention map (AttMask
        # hides each image's most attended patches), so one map gives one mask; masks differ between
        # samples as their maps do, and random_share mixes in random positions (test_masking_attention.py)
        assert (flat == flat[:1]).all(), f"{name}: one attention map must give one mask (the generator only breaks ties)"
        return
    assert not (flat == flat[:1]).all(), f"{name} on {grid} at ratio {ratio}: the same mask in all {B} samples"
    always = flat.all(dim=0)  # positions hidden in every sample: a fixed part of the mask
    fixed = [tuple(divmod_all(p, grid)) for p in always.nonzero().flatten()[:8]]
    assert not always.any(), (f"{name} with its defaults {params} on a {'x'.join(map(str, grid))} grid at ratio "
                              f"{ratio}: {int(always.sum())} positions are masked in all {B} samples, e.g. {fixed}")


def divmod_all(flat_index: torch.Tensor, grid: tuple[int, ...]) -> list[int]:
    """The grid coordinates of a flat position index."""
    out, p = [], int(flat_index)
    for n in reversed(grid):
        p, r = divmod(p, n)
        out.append(r)
    return out[::-1]


def test_every_grid_kind_has_a_realistic_shape():
    assert all(shapes_of(kind) for kind in GRID_KINDS), [k for k in GRID_KINDS if not shapes_of(k)]


def test_every_registered_strategy_is_checked_on_some_grid():
    checked = {p.values[0] for p in CASES}
    assert checked == REGISTERED  # the strategies registered when the cases were collected


@pytest.mark.parametrize("name,grid", [("hierarchical", (7, 7)), ("block", (7, 7)), ("span", (128,)), ("tube", (8, 14, 14))])
def test_no_warning_for_the_defaults(name, grid):
    assert identical_masks_warning(name, None, grid, 0.75) is None


@pytest.mark.parametrize("name,params,grid,ratio,hides", [
    ("random", None, (7, 7), 1.0, "every position"),
    ("bernoulli", None, (128,), 0.0, "nothing"),
    ("hierarchical", {"scales": [7], "shares": [1.0]}, (7, 7), 1.0, "every position"),
    ("span", None, (16,), 1.0, "every position"),
])
def test_identical_masks_warning_names_the_strategy_grid_and_what_is_hidden(name, params, grid, ratio, hides):
    msg = identical_masks_warning(name, params, grid, ratio)
    assert msg is not None and name in msg and "x".join(map(str, grid)) in msg and hides in msg


def test_identical_masks_warning_counts_a_fixed_partial_mask():
    # One voiced run in a 12-frame clip: voiced masking always takes it (at least one unit), the
    # same 6 frames in every sample.
    voiced = (torch.arange(12) >= 6)[None]
    msg = identical_masks_warning("voiced", None, (12,), 0.5, side_inputs={"voiced": voiced})
    assert msg is not None and "the same 6 of 12 positions" in msg


def test_identical_masks_warning_names_a_fixed_part():
    # Square BEiT blocks of at least 40 patches on a 7x7 grid: 6x6 or 7x7 only, so the centre 5x5 is
    # in every block.
    msg = identical_masks_warning("block", {"min_patches": 40, "min_aspect": 1.0}, (7, 7), 0.75)
    assert msg is not None and msg.startswith("A fixed part") and "25 of 49 positions" in msg and "(1, 1)" in msg


def test_identical_masks_warning_exempts_rule_based_and_needs_side_inputs():
    assert identical_masks_warning("periodic", None, (7, 7), 0.5) is None  # the same by design
    assert identical_masks_warning("whole_word", None, (32,), 1.0) is None  # no word_ids: cannot judge
    words = torch.arange(32)[None] // 2
    assert "every position" in identical_masks_warning("whole_word", None, (32,), 1.0, side_inputs={"word_ids": words})
