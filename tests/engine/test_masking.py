"""engine.masking: strategies (parametrized over the registry), draw_mask/preview_masks, gather_visible."""

from __future__ import annotations

import inspect

import pytest
import torch

import engine.masking.random as random_module
from engine.config import MaskingConfig, RunConfig
from engine.errors import ConfigError
from engine.masking import (
    GRID_KINDS,
    MASKING_REGISTRY,
    draw_mask,
    gather_visible,
    get_masking,
    grid_shape,
    preview_masks,
    random_mask,
    ratio_at,
    restore_order,
)
from engine.masking.random import _first_draws, mask_lowest, pick_uniform
from engine.tasks import resolve, resolve_masking

STRATEGIES = sorted(MASKING_REGISTRY)
SHAPES = [(4, 16), (3, 4, 4), (2, 7, 5), (5, 1), (1, 14, 14)]
#: One grid per number of grid dims: [B, L], [B, H, W] (or [B, F, T]), [B, T, H, W].
GRIDS = {1: (8, 40), 2: (8, 12, 10), 3: (4, 3, 6, 6)}
CASES = [(n, d) for n in STRATEGIES for d in MASKING_REGISTRY[n].grid_dims]


def gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def side_inputs(name: str, shape: tuple[int, ...], seed: int = 0) -> dict[str, torch.Tensor]:
    """Synthetic side inputs with the structure of the real ones (the unit tests of each semantic
    strategy use real text, images and audio): words of 1-3 tokens with special tokens at both ends,
    sentences of about 7 tokens between the same special tokens, 3x3 tiles as superpixels, voiced
    runs of 1-3 frames, attention scores in quarters (random per position: ties, which the
    generator breaks, so two seeds draw two masks from the same scores; a real map rarely ties, and
    tests/engine/test_masking_attention.py checks the ranking itself)."""
    g = gen(1000 + seed)
    B, rest = shape[0], shape[1:]
    out = {}
    # Word / sentence ids: runs starting with probability 0.5 / 0.15 at each token (1-3 / about
    # 7 tokens), -1 at [CLS] and [SEP].
    for key, p_start in (("word_ids", 0.5), ("sentence_ids", 0.15)):
        if key in MASKING_REGISTRY[name].needs:
            L = rest[0]
            starts = torch.rand(B, L, generator=g) < p_start  # a new unit starts here
            starts[:, 1] = True
            ids = torch.cumsum(starts.long(), dim=1) - 1
            ids[:, 0] = -1  # [CLS]
            ids[:, -1] = -1  # [SEP]
            out[key] = ids
    if "segments" in MASKING_REGISTRY[name].needs:
        idx = torch.meshgrid(*[torch.arange(n) // 3 for n in rest], indexing="ij")
        tile = idx[0] * 100 + idx[-1]
        shift = torch.randint(0, 3, (B, *[1] * len(rest)), generator=g)
        out["segments"] = (tile[None] + shift).expand(B, *rest).clone()
    if "voiced" in MASKING_REGISTRY[name].needs:
        T = rest[-1]
        run = torch.randint(1, 4, (B, 1), generator=g)  # voiced and silent runs of 1-3 frames
        out["voiced"] = ((torch.arange(T)[None] // run) % 2 == 0)
    if "attention" in MASKING_REGISTRY[name].needs:
        out["attention"] = torch.randint(0, 4, shape, generator=g).float() / 4
    return out


def in_units(name: str, shape: tuple[int, ...], side: dict[str, torch.Tensor]) -> torch.Tensor:
    """Positions a semantic strategy can mask at all (inside a word / a voiced frame)."""
    ok = torch.ones(shape, dtype=torch.bool)
    for ids in ("word_ids", "sentence_ids"):
        if ids in side:
            ok &= side[ids] >= 0
    if "voiced" in side:
        v = side["voiced"]
        ok &= v.reshape(v.shape[0], *([1] * (len(shape) - 2)), v.shape[-1]).expand(shape)
    return ok


def draw(name, shape, ratio, seed=0, eligible=None):
    return get_masking(name)(shape, ratio, generator=gen(seed), eligible=eligible, **side_inputs(name, shape))


# --- every registered strategy ---------------------------------------------------------------------


def test_registry_has_the_strategies_of_the_field():
    expected = {"random", "bernoulli", "periodic", "region", "span", "block", "tube", "time_mask", "freq_mask",
                "specaugment", "whole_word", "superpixel", "voiced", "hierarchical", "attention"}
    assert expected <= set(MASKING_REGISTRY), sorted(expected - set(MASKING_REGISTRY))


@pytest.mark.parametrize("name", STRATEGIES)
def test_strategy_record_is_complete(name):
    s = MASKING_REGISTRY[name]
    assert s.summary and s.grid_dims
    # The grid kinds it works on are known, of dims it accepts (None: any grid of its dims).
    assert s.grids is None or (s.grids and all(GRID_KINDS[k].dims in s.grid_dims for k in s.grids)), s.grids
    assert "References" in (s.fn.__doc__ or ""), f"{name}: docstring must cite its source"
    # The function's keyword defaults are the params model's defaults, so a direct call and a config agree.
    sig = inspect.signature(s.fn)
    for field, info in s.params.model_fields.items():
        assert field in sig.parameters, f"{name}: param {field} is not a keyword of {s.fn.__name__}"
        assert sig.parameters[field].default == info.default, f"{name}.{field}"
    for need in s.needs:
        assert need in sig.parameters


@pytest.mark.parametrize("name,dims", CASES)
def test_bool_mask_of_requested_shape_on_the_generator_device(name, dims):
    shape = GRIDS[dims]
    mask = draw(name, shape, 0.5)
    assert mask.dtype == torch.bool and tuple(mask.shape) == shape
    assert mask.device == torch.device("cpu")
    assert mask.any()


@pytest.mark.parametrize("name,dims", CASES)
def test_same_seed_same_mask(name, dims):
    shape = GRIDS[dims]
    a, b, c = draw(name, shape, 0.5, seed=1), draw(name, shape, 0.5, seed=1), draw(name, shape, 0.5, seed=2)
    assert torch.equal(a, b)
    if MASKING_REGISTRY[name].stochastic:
        assert not torch.equal(a, c)
    else:
        assert torch.equal(a, c)


@pytest.mark.parametrize("name,dims", CASES)
def test_uses_only_the_given_generator(name, dims):
    torch.manual_seed(123)
    before = torch.get_rng_state()
    draw(name, GRIDS[dims], 0.5)
    assert torch.equal(torch.get_rng_state(), before)


@pytest.mark.parametrize("name,dims", CASES)
@pytest.mark.parametrize("ratio", [0.25, 0.5, 1.0])
def test_ineligible_positions_are_never_masked(name, dims, ratio):
    shape = GRIDS[dims]
    eligible = torch.rand(shape, generator=gen(3)) < 0.6
    mask = draw(name, shape, ratio, eligible=eligible)
    assert not (mask & ~eligible).any()


@pytest.mark.parametrize("name,dims", CASES)
def test_all_ineligible_rows_are_all_false(name, dims):
    shape = GRIDS[dims]
    eligible = torch.ones(shape, dtype=torch.bool)
    eligible[1] = False
    mask = draw(name, shape, 0.75, eligible=eligible)
    assert not mask[1].any()
    assert mask[0].any()


@pytest.mark.parametrize("name,dims", CASES)
def test_bad_eligible_shape_and_bad_grid_raise_value_error(name, dims):
    shape = GRIDS[dims]
    with pytest.raises(ValueError, match="eligible"):
        draw(name, shape, 0.5, eligible=torch.ones(shape[0], 99, dtype=torch.bool))
    bad = next(d for d in (1, 2, 3, 4) if d not in MASKING_REGISTRY[name].grid_dims)
    bad_shape = (2,) + (5,) * bad
    with pytest.raises(ValueError, match=name):
        get_masking(name)(bad_shape, 0.5, generator=gen(), **side_inputs(name, bad_shape))


@pytest.mark.parametrize("name,dims", CASES)
def test_empty_batch_gives_an_empty_mask(name, dims):
    shape = (0, *GRIDS[dims][1:])
    mask = draw(name, shape, 0.5)
    assert mask.dtype == torch.bool and tuple(mask.shape) == shape


RATIO_CASES = [(n, d) for n, d in CASES if MASKING_REGISTRY[n].uses_ratio]


@pytest.mark.parametrize("name,dims", RATIO_CASES)
def test_ratio_zero_masks_nothing_and_one_masks_every_maskable_position(name, dims):
    shape = GRIDS[dims]
    assert not draw(name, shape, 0.0).any()
    full = draw(name, shape, 1.0)
    assert torch.equal(full, in_units(name, shape, side_inputs(name, shape)))


@pytest.mark.parametrize("name,dims", RATIO_CASES)
@pytest.mark.parametrize("ratio", [-0.1, 1.5, float("nan")])
def test_bad_ratio_raises_config_error_naming_the_field(name, dims, ratio):
    with pytest.raises(ConfigError, match=r"masking\.ratio") as e:
        draw(name, GRIDS[dims], ratio)
    assert str(ratio) in str(e.value)


@pytest.mark.parametrize("name,dims", [(n, d) for n, d in CASES if MASKING_REGISTRY[n].exact])
@pytest.mark.parametrize("ratio", [0.15, 0.5, 0.75])
def test_exact_strategies_mask_round_ratio_times_eligible(name, dims, ratio):
    shape = GRIDS[dims]
    eligible = torch.rand(shape, generator=gen(4)) < 0.7
    eligible[0] = True
    mask = draw(name, shape, ratio, eligible=eligible)
    expected = torch.round(ratio * eligible.flatten(1).sum(1).double()).long()
    assert torch.equal(mask.flatten(1).sum(1), expected)


@pytest.mark.parametrize("name,dims", RATIO_CASES)
def test_masked_fraction_is_close_to_the_ratio_on_average(name, dims):
    """Over a big batch the masked share of the maskable positions is the ratio: exactly for exact
    strategies, within a few points for Bernoulli and for whole units (a unit is not split)."""
    shape = (256, *GRIDS[dims][1:])
    mask = draw(name, shape, 0.4, seed=5)
    maskable = in_units(name, shape, side_inputs(name, shape))
    frac = (mask.sum() / maskable.sum()).item()
    assert abs(frac - 0.4) < (0.005 if MASKING_REGISTRY[name].exact else 0.06), frac


@pytest.mark.parametrize("name,dims", CASES)
def test_draw_mask_from_config_with_default_params(name, dims):
    shape = GRIDS[dims]
    cfg = resolve_masking(MaskingConfig(strategy=name, ratio=0.5))
    assert set(cfg.params) == set(MASKING_REGISTRY[name].params.model_fields)  # resolved with defaults
    mask = draw_mask(cfg, shape, gen(2), **side_inputs(name, shape))
    assert torch.equal(mask, draw(name, shape, 0.5, seed=2))


@pytest.mark.parametrize("name", [n for n in STRATEGIES if MASKING_REGISTRY[n].needs])
def test_missing_side_input_is_a_clear_error(name):
    s = MASKING_REGISTRY[name]
    with pytest.raises(ValueError, match=s.needs[0]):
        draw_mask(MaskingConfig(strategy=name), GRIDS[s.grid_dims[0]], gen())


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
    with pytest.raises(ValueError, match="not a .* grid"):
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
    cfg = resolve(RunConfig.from_dict({"masking": {"ratio": 0.5}, "model": {"patch_size": 2}, "train": {"seed": 4}}))
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
    cfg = resolve(RunConfig.from_dict({"train": {"seed": 17}}))
    preview = preview_masks(cfg, (1, 8, 8), 8)
    batch = draw_mask(cfg.masking, (128, 4, 4), torch.Generator().manual_seed(17))
    assert torch.equal(batch[:8], preview)


def test_preview_masks_bad_patch_size():
    cfg = resolve(RunConfig.from_dict({"model": {"patch_size": 3}}))
    with pytest.raises(ConfigError, match=r"model\.patch_size"):
        preview_masks(cfg, (1, 8, 8), 4)


# --- applying a mask -------------------------------------------------------------------------------


def test_gather_visible_keeps_order_and_count():
    B, L, D = 5, 16, 3
    x = torch.arange(B * L * D, dtype=torch.float32).reshape(B, L, D)
    mask = random_mask((B, L), 0.75, generator=gen(2))
    x_vis, ids_keep, ids_restore, pad = gather_visible(x, mask)
    assert pad is None
    assert x_vis.shape == (B, 4, D) and ids_keep.shape == (B, 4) and ids_restore.shape == (B, L)
    for b in range(B):
        visible = (~mask[b]).nonzero().squeeze(1)
        assert torch.equal(ids_keep[b], visible)  # increasing: original order
        assert torch.equal(x_vis[b], x[b, visible])


def test_restore_order_inverts_the_visible_first_layout():
    B, L, D = 3, 10, 2
    x = torch.randn(B, L, D, generator=gen())
    mask = random_mask((B, L), 0.6, generator=gen(1))
    x_vis, _, ids_restore, _ = gather_visible(x, mask)
    x_masked = torch.stack([x[b, mask[b]] for b in range(B)])
    assert torch.equal(restore_order(torch.cat([x_vis, x_masked], dim=1), ids_restore), x)


def test_gather_visible_pads_ragged_masks():
    x = torch.arange(2 * 4 * 3, dtype=torch.float32).reshape(2, 4, 3)
    mask = torch.zeros(2, 4, dtype=torch.bool)
    mask[0, 0] = True  # row 0: 3 visible; row 1: 4 visible
    x_vis, ids_keep, ids_restore, pad = gather_visible(x, mask)
    assert x_vis.shape == (2, 4, 3)
    assert pad.tolist() == [[False, False, False, True], [False] * 4]
    assert ids_keep[0, :3].tolist() == [1, 2, 3] and ids_keep[1].tolist() == [0, 1, 2, 3]
    assert torch.equal(x_vis[0, :3], x[0, 1:])
    assert torch.equal(restore_order(x_vis, ids_restore), x)  # V == L here: the shuffle is a permutation


def test_gather_visible_rejects_bad_shapes():
    with pytest.raises(ValueError, match=r"\[B, L\]"):
        gather_visible(torch.zeros(2, 4, 3), torch.zeros(2, 5, dtype=torch.bool))


# --- config: params, schedule ----------------------------------------------------------------------


def test_config_resolves_params_and_names_bad_ones():
    cfg = resolve(RunConfig.from_dict({"masking": {"strategy": "random"}}))
    assert cfg.masking.params == {} and cfg.to_dict()["masking"]["schedule"] == "constant"
    with pytest.raises(ConfigError, match=r"masking\.params\.nope: unknown parameter of strategy 'random'"):
        resolve(RunConfig.from_dict({"masking": {"strategy": "random", "params": {"nope": 1}}}))
    with pytest.raises(ConfigError, match=r"masking\.strategy: unknown strategy 'spam'; known strategies: .*random"):
        resolve(RunConfig.from_dict({"masking": {"strategy": "spam"}}))
    with pytest.raises(ConfigError, match=r"masking\.ratio: .*1\.5"):
        resolve(RunConfig.from_dict({"masking": {"ratio": 1.5}}))


@pytest.mark.parametrize("name", [n for n in STRATEGIES if MASKING_REGISTRY[n].params.model_fields])
def test_every_param_error_names_its_field_and_value(name):
    s = MASKING_REGISTRY[name]
    field, info = next(iter(s.params.model_fields.items()))
    with pytest.raises(ConfigError, match=rf"masking\.params\.{field}") as e:
        resolve(RunConfig.from_dict({"masking": {"strategy": name, "params": {field: "not-a-value"}}}))
    assert "not-a-value" in str(e.value)


def test_schedule_needs_a_strategy_that_uses_the_ratio():
    with pytest.raises(ConfigError, match=r"masking\.schedule: strategy 'region' sets its own budget"):
        resolve(RunConfig.from_dict({"masking": {"strategy": "region", "schedule": "cosine", "final_ratio": 0.9}}))


def test_schedule_needs_final_ratio_and_constant_refuses_one():
    with pytest.raises(ConfigError, match=r"masking\.final_ratio: schedule 'cosine' needs final_ratio"):
        resolve(RunConfig.from_dict({"masking": {"schedule": "cosine"}}))
    with pytest.raises(ConfigError, match=r"masking\.final_ratio"):
        resolve(RunConfig.from_dict({"masking": {"final_ratio": 0.5}}))


@pytest.mark.parametrize("kind", ["constant", "linear", "cosine"])
def test_ratio_schedules(kind):
    final = None if kind == "constant" else 0.9
    cfg = MaskingConfig(ratio=0.5, schedule=kind, final_ratio=final)
    values = [ratio_at(cfg, s, 101) for s in range(101)]
    assert values[0] == 0.5
    assert values[-1] == pytest.approx(0.5 if kind == "constant" else 0.9)
    assert ratio_at(cfg, 500, 101) == values[-1]  # past the end: the final ratio
    assert all(a <= b + 1e-12 for a, b in zip(values, values[1:]))  # monotone ramp
    if kind == "linear":
        assert values[50] == pytest.approx(0.7)
    if kind == "cosine":
        assert values[50] == pytest.approx(0.7)  # half-way of a half cosine
        assert values[10] - values[0] < values[50] - values[40]  # slow start, fast middle
    one_step = ratio_at(cfg, 0, 1)
    assert one_step == 0.5


@pytest.mark.parametrize("L,n", [(50, 10), (50, 40), (200, 0), (200, 200), (1000, 750)])
def test_mask_lowest_equal_counts_as_a_tensor_match_the_int_path(L, n):
    noise = torch.rand(16, L, generator=torch.Generator().manual_seed(L + n))
    by_int = mask_lowest(noise, n)
    assert torch.equal(mask_lowest(noise, torch.full((16, 1), n)), by_int)
    assert (by_int.sum(1) == n).all()
    # the n lowest noises of each row
    kth = noise.sort(dim=1).values[:, max(n - 1, 0)]
    if n:
        assert torch.equal(by_int, noise <= kth[:, None])


def test_mask_lowest_ragged_counts_take_the_lowest_of_each_row():
    noise = torch.rand(32, 300, generator=torch.Generator().manual_seed(3))
    n = torch.arange(32) * 9  # 0 .. 279, both selection directions
    for m in (mask_lowest(noise, n), mask_lowest(noise, n.view(32, 1))):
        assert torch.equal(m.sum(1), n)
        order = noise.argsort(dim=1)
        assert all(m[b, order[b, : n[b]]].all() for b in range(32))


# ------------------------------------------------------------------ pick_uniform (top-up / singles)


def subset_frequencies(picked: torch.Tensor) -> torch.Tensor:
    """Counts of each distinct row of a [B, L] bool tensor (rows read as binary numbers)."""
    codes = (picked.long() << torch.arange(picked.shape[1])).sum(1)
    return torch.unique(codes, return_counts=True)[1]


@pytest.mark.parametrize("route,patch", [
    ("sparse", {}),  # n <= free / 4: positions drawn with replacement, first distinct free ones kept
    ("sparse, short draws", {"_MARGIN": 0.1, "_EXTRA": 0}),  # rows left short draw again, often
    ("dense", {"_SPARSE": -1.0}),  # noise and mask_lowest on every row
])
def test_pick_uniform_gives_every_subset_of_the_free_positions_equally_often(route, patch, monkeypatch):
    for name, value in patch.items():
        monkeypatch.setattr(random_module, name, value)
    B, L = 28_000, 12
    free = torch.ones(B, L, dtype=torch.bool)
    free[:, [1, 4, 7, 10]] = False  # 8 free positions, 2 picked: 28 subsets
    picked = pick_uniform(free, torch.full((B,), 2), generator=gen(40))
    assert (picked.sum(1) == 2).all() and not (picked & ~free).any()
    freq = subset_frequencies(picked)
    assert freq.numel() == 28
    # Each subset 1/28 of the rows: 1,000 expected, standard deviation about 31; chi-square with
    # 27 degrees of freedom, whose 99.9% quantile is 55.5.
    chi2 = float(((freq.double() - B / 28) ** 2 / (B / 28)).sum())
    assert chi2 < 55.5, (route, chi2)
    assert torch.equal(picked, pick_uniform(free, torch.full((B,), 2), generator=gen(40)))


def test_pick_uniform_mixed_rows_exact_counts_and_bad_counts():
    g = gen(41)
    free = torch.rand(64, 500, generator=g) < torch.linspace(0.05, 1.0, 64)[:, None]
    n_free = free.sum(1)
    n = (torch.rand(64, generator=g) * (n_free + 1)).long().clamp(max=n_free)  # sparse and dense rows, some 0
    n[0], n[1] = 0, n_free[1]
    picked = pick_uniform(free, n, generator=g)
    assert torch.equal(picked.sum(1), n) and not (picked & ~free).any()
    with pytest.raises(ValueError, match="free count"):
        pick_uniform(free, n_free + 1, generator=g)
    with pytest.raises(ValueError, match="free count"):
        pick_uniform(free, -torch.ones(64, dtype=torch.long), generator=g)
    assert pick_uniform(torch.zeros(3, 0, dtype=torch.bool), torch.zeros(3, dtype=torch.long), generator=g).shape == (3, 0)


def test_pick_uniform_sparse_marginals_on_a_large_row():
    # The block top-up's case: a few positions among thousands of free ones, every free position
    # equally likely (each of 2,000 free positions picked 20 / 2,000 of the time).

    B, L = 4000, 2500
    free = torch.ones(B, L, dtype=torch.bool)
    free[:, :500] = False
    picked = pick_uniform(free, torch.full((B,), 20), generator=gen(42))
    assert not picked[:, :500].any() and (picked.sum(1) == 20).all()
    rate = picked[:, 500:].double().mean(0)  # expected 0.01, sd about 0.0016 per position
    assert abs(float(rate.mean()) - 0.01) < 1e-12
    assert float(rate.std()) < 0.0016 * 1.15 and float((rate - 0.01).abs().max()) < 0.0016 * 5


def test_first_draws_sort_and_scratch_routes_agree():
    # Few draws over many positions take a stable sort of the keys, many take a [size] scratch:
    # the first draw of each position is the same either way (ties resolved by draw order).

    g = gen(43)
    for M, size in [(1, 10), (50, 10_000), (3000, 100), (0, 5), (700, 700)]:
        key = torch.randint(0, size, (M,), generator=g)
        want = torch.tensor([key[:i].ne(k).all().item() for i, k in enumerate(key.tolist())], dtype=torch.bool)
        assert torch.equal(_first_draws(key, size), want), (M, size)
        assert torch.equal(_first_draws(key, M * 16 + 1), want) and torch.equal(_first_draws(key, max(size, 1)), want)


@pytest.mark.parametrize("sparse_share", [0.25, -1.0])  # draws positions / noise on every row
def test_pick_uniform_into_sets_the_same_choice_in_place(sparse_share, monkeypatch):
    monkeypatch.setattr(random_module, "_SPARSE", sparse_share)
    g = gen(44)
    taken = torch.rand(16, 300, generator=g) < 0.6  # e.g. a block mask being topped up
    free = ~taken & (torch.rand(16, 300, generator=g) < 0.9)
    n = (free.sum(1) * torch.rand(16, generator=g)).long()
    alone = pick_uniform(free, n, generator=gen(45))
    into = taken.clone()
    out = pick_uniform(free, n, generator=gen(45), into=into)
    assert out is into and torch.equal(out, taken | alone)
