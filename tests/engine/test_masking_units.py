"""engine.masking.units: unit_mask core, whole_word (real TREC text), superpixel (real digits and
Tux Paint stamps), voiced (real FSDD recordings)."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch
from PIL import Image
from skimage.segmentation import slic
from sklearn.datasets import load_digits
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

from engine.config import MaskingConfig
from engine.data import load_dataset
from engine.errors import ConfigError
from engine.masking import draw_mask, get_masking, image_side_inputs
from engine.masking.units import (
    MAX_PASSES,
    SuperpixelParams,
    VoicedParams,
    superpixel_mask,
    superpixel_segments,
    unit_mask,
    voiced_frames,
    voiced_mask,
    voiced_units,
    whole_word_mask,
    word_ids_tensor,
)


def gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def budget(units: torch.Tensor, ratio: float, eligible: torch.Tensor | None = None) -> torch.Tensor:
    n = units >= 0
    if eligible is not None:
        n &= eligible
    return torch.round(ratio * n.sum(1).double()).long()


def assert_whole_units(mask: torch.Tensor, units: torch.Tensor, eligible: torch.Tensor | None = None):
    """Every unit (restricted to eligible positions) is all masked or all kept; no -1 is masked."""
    mask, units = mask.reshape(mask.shape[0], -1), units.reshape(units.shape[0], -1)
    ok = units >= 0 if eligible is None else (units >= 0) & eligible.reshape(units.shape)
    assert not (mask & ~ok).any()
    for b in range(units.shape[0]):
        for u in units[b][ok[b]].unique():
            sel = mask[b][(units[b] == u) & ok[b]]
            assert sel.all() or not sel.any(), f"row {b}: unit {int(u)} partly masked"


def greedy_reference(units: torch.Tensor, ratio: float, seed: int, complete: bool = False) -> torch.Tensor:
    """Hugging Face's whole-word rule, one row at a time in Python: shuffle (here: the same random
    priorities unit_mask draws, one per unit in increasing id order), take a unit if it fits, else skip;
    then (complete=True) the first untaken unit with probability left / size; plus masklab's
    at-least-one rule."""
    B, L = units.shape
    per_row = [sorted(set(units[b][units[b] >= 0].tolist())) for b in range(B)]
    U = max(len(r) for r in per_row)
    g = gen(seed)
    prio = torch.randint(0, 2**62, (B, U), generator=g)
    coin = torch.rand(B, 1, generator=g)
    mask = torch.zeros(B, L, dtype=torch.bool)
    for b, ids in enumerate(per_row):
        k = round(ratio * int((units[b] >= 0).sum()))  # Python round is half-to-even, like torch.round
        order = sorted(range(len(ids)), key=lambda i: int(prio[b, i]))
        covered, chosen = 0, []
        for i in order:
            size = int((units[b] == ids[i]).sum())
            if covered + size > k:
                continue
            covered += size
            chosen.append(ids[i])
        rest = [i for i in order if ids[i] not in chosen]
        if complete and rest:
            size = int((units[b] == ids[rest[0]]).sum())
            if float(coin[b, 0]) * size < k - covered:
                chosen.append(ids[rest[0]])
        if not chosen and ids and ratio > 0:
            chosen = [ids[order[0]]]
        for u in chosen:
            mask[b] |= units[b] == u
    return mask


def random_units(B: int, L: int, seed: int, max_size: int = 6, p_none: float = 0.15, min_size: int = 1) -> torch.Tensor:
    """Synthetic contiguous units of random sizes with arbitrary (non-contiguous, large) ids."""
    g = gen(seed)
    sizes = torch.randint(min_size, max_size + 1, (B, L), generator=g)
    starts = torch.zeros(B, L, dtype=torch.bool)
    for b in range(B):  # test helper: build runs of the drawn sizes
        t = 0
        for s in sizes[b].tolist():
            if t >= L:
                break
            starts[b, t] = True
            t += s
    ids = starts.long().cumsum(1) - 1
    scramble = torch.randint(0, 10**9, (B, L), generator=g)  # arbitrary id per unit
    units = scramble.gather(1, ids) * 1000 + ids  # distinct per unit, far from 0..U-1
    none = torch.rand(B, L, generator=g) < p_none
    return units.masked_fill(none, -1)


# --- unit_mask core --------------------------------------------------------------------------------


@pytest.mark.parametrize("ratio", [0.05, 0.15, 0.4, 0.75])
def test_unit_mask_equals_the_huggingface_greedy_rule(ratio):
    units = torch.tensor([[0, 0, 0, 1, 2, 2, 3, 3, 3, 3, -1, 4],
                          [7, 7, 7, 7, 7, 7, 2, 2, 9, -1, -1, 11]] * 8)
    for seed in range(5):
        got = unit_mask(units, ratio, generator=gen(seed), complete=False)
        assert torch.equal(got, greedy_reference(units, ratio, seed)), (ratio, seed)
        got = unit_mask(units, ratio, generator=gen(seed))
        assert torch.equal(got, greedy_reference(units, ratio, seed, complete=True)), (ratio, seed)


def test_unit_mask_equals_greedy_on_many_random_rows():
    # Scrambled large ids: unit_mask and the reference both rank units by increasing id.
    units = random_units(64, 80, seed=11, max_size=9)
    for ratio in (0.15, 0.5, 0.9):
        assert torch.equal(unit_mask(units, ratio, generator=gen(5), complete=False), greedy_reference(units, ratio, 5))
        assert torch.equal(unit_mask(units, ratio, generator=gen(5)), greedy_reference(units, ratio, 5, True))


def test_unit_mask_depends_on_the_partition_not_on_the_id_values():
    units = torch.tensor([[0, 0, 1, 1, 1, 2, -1, 3, 3, 3, 3, 3]] * 16)
    huge = torch.where(units >= 0, units * 10**12 + 7, -1)  # takes the sort path
    gapped = torch.where(units >= 0, units * 5, -1)  # takes the table path, with unused ids
    for ratio in (0.2, 0.5):
        a = unit_mask(units, ratio, generator=gen(3))
        assert torch.equal(a, unit_mask(huge, ratio, generator=gen(3)))
        assert torch.equal(a, unit_mask(gapped, ratio, generator=gen(3)))


def masked_unit_sizes(mask: torch.Tensor, units: torch.Tensor) -> list[list[int]]:
    return [[int((units[b] == u).sum()) for u in units[b][mask[b]].unique()] for b in range(units.shape[0])]


@pytest.mark.parametrize("ratio", [0.1, 0.15, 0.3, 0.5, 0.8])
@pytest.mark.parametrize("complete", [False, True])
def test_unit_mask_budget_rule(ratio, complete):
    units = random_units(256, 100, seed=1)
    mask = unit_mask(units, ratio, generator=gen(2), complete=complete)
    assert_whole_units(mask[:16], units[:16])
    k = budget(units, ratio)
    count = mask.sum(1)
    sizes = masked_unit_sizes(mask, units)
    assert all(len(s) >= 1 for s in sizes)  # at least one unit per row
    for b in range(256):
        if len(sizes[b]) == 1:
            continue  # the at-least-one case may exceed k by any amount
        if complete:  # over k by less than one (the completing) unit
            assert count[b] - k[b] < max(sizes[b])
        else:
            assert count[b] <= k[b]
    # The greedy walk leaves less than the smallest unit unused.
    greedy = unit_mask(units, ratio, generator=gen(2), complete=False)
    for b in range(0, 256, 17):
        left = int(k[b] - greedy[b].sum())
        rest = [int((units[b] == u).sum()) for u in units[b][(units[b] >= 0) & ~greedy[b]].unique()]
        if rest and left > 0:
            assert min(rest) > left
    # The masked fraction is close to the ratio (units of 1-6 positions, ~85 positions per row):
    # the completion removes the greedy walk's shortfall.
    frac = float(count.sum() / (units >= 0).sum())
    assert abs(frac - ratio) < (0.01 if complete else 0.03), frac


def test_unit_mask_completion_makes_the_count_unbiased_with_large_units():
    # Units of 8-12 positions, budget 0.3 * 100 = 30: the greedy walk alone leaves ~5 unused.
    units = random_units(512, 100, seed=8, min_size=8, max_size=12, p_none=0.0)
    n = (units >= 0).sum()
    greedy = torch.stack([unit_mask(units, 0.3, generator=gen(s), complete=False).sum() for s in range(4)]).sum() / (4 * n)
    full = torch.stack([unit_mask(units, 0.3, generator=gen(s)).sum() for s in range(4)]).sum() / (4 * n)
    assert abs(float(full) - 0.3) < 0.01
    assert float(greedy) < 0.28


def test_unit_mask_ratio_zero_and_one():
    units = random_units(8, 50, seed=3)
    assert not unit_mask(units, 0.0, generator=gen()).any()
    assert torch.equal(unit_mask(units, 1.0, generator=gen()), units >= 0)


def test_unit_mask_negative_positions_and_empty_rows():
    units = random_units(4, 30, seed=5)
    units[1] = -1  # a row in no unit
    units[2, ::2] = -7  # any negative id = no unit
    mask = unit_mask(units, 0.5, generator=gen())
    assert not mask[1].any()
    assert not (mask & (units < 0)).any()
    assert mask[0].any() and mask[2].any() and mask[3].any()
    assert unit_mask(torch.zeros(3, 0, dtype=torch.long), 0.5, generator=gen()).shape == (3, 0)
    assert not unit_mask(torch.full((2, 5), -1), 1.0, generator=gen()).any()


def test_unit_mask_eligible():
    units = random_units(32, 60, seed=6)
    eligible = torch.rand(32, 60, generator=gen(9)) < 0.7
    eligible[3] = False
    for ratio in (0.3, 1.0):
        mask = unit_mask(units, ratio, generator=gen(1), eligible=eligible)
        assert not (mask & ~eligible).any()
        assert not mask[3].any()
        assert_whole_units(mask, units, eligible)
    assert torch.equal(unit_mask(units, 1.0, generator=gen(), eligible=eligible), (units >= 0) & eligible)


def test_unit_mask_at_least_one_unit_when_the_budget_rounds_to_zero():
    units = torch.tensor([[0, 0, 0, 1, 1, 1, 2, 2, 2, 2]] * 20)  # 10 positions: 0.04 * 10 rounds to 0
    mask = unit_mask(units, 0.04, generator=gen())
    assert (mask.sum(1) >= 3).all()
    assert_whole_units(mask, units)


def test_unit_mask_seeded_and_generator_only():
    units = random_units(16, 40, seed=7)
    torch.manual_seed(0)
    state = torch.get_rng_state()
    a = unit_mask(units, 0.4, generator=gen(1))
    assert torch.equal(torch.get_rng_state(), state)
    assert torch.equal(a, unit_mask(units, 0.4, generator=gen(1)))
    assert not torch.equal(a, unit_mask(units, 0.4, generator=gen(2)))


def test_unit_mask_greedy_converges_within_the_pass_limit_on_long_rows():
    # Many small units of similar size: the case with the most skips.
    units = torch.arange(512).div(2, rounding_mode="floor").expand(64, 512).clone()
    units[:, ::7] = -1
    mask = unit_mask(units, 0.15, generator=gen(), complete=False)
    assert torch.equal(mask, greedy_reference(units, 0.15, 0))
    assert MAX_PASSES >= 4


def test_unit_mask_rejects_bad_input():
    with pytest.raises(ValueError):
        unit_mask(torch.zeros(4, 4), 0.5, generator=gen())
    with pytest.raises(ValueError):
        unit_mask(torch.zeros(4, dtype=torch.long), 0.5, generator=gen())
    with pytest.raises(ValueError):
        unit_mask(torch.zeros(2, 4, dtype=torch.long), 0.5, generator=gen(), eligible=torch.ones(2, 5, dtype=torch.bool))
    with pytest.raises(ConfigError):
        unit_mask(torch.zeros(2, 4, dtype=torch.long), 1.5, generator=gen())


# --- whole_word on real text -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def trec_texts(shared_data) -> list[str]:
    with open(shared_data / "trec" / "train.tsv", encoding="utf-8") as f:
        rows = list(csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
    return [r["text"] for r in rows]


def _wordpiece(texts):
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tok.train_from_iterator(texts, trainers.WordPieceTrainer(vocab_size=600, special_tokens=specials))
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", tok.token_to_id("[CLS]")), ("[SEP]", tok.token_to_id("[SEP]"))])
    tok.enable_padding(pad_id=tok.token_to_id("[PAD]"), pad_token="[PAD]")
    return tok


def _bpe(texts):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
    tok.decoder = decoders.ByteLevel()
    specials = ["<pad>", "<s>", "</s>"]
    tok.train_from_iterator(texts, trainers.BpeTrainer(
        vocab_size=500, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>", special_tokens=[("<s>", tok.token_to_id("<s>")), ("</s>", tok.token_to_id("</s>"))])
    tok.enable_padding(pad_id=tok.token_to_id("<pad>"), pad_token="<pad>")
    return tok


def _metaspace_bpe(texts):
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=400, special_tokens=["<pad>", "<unk>"]))
    tok.enable_padding(pad_id=0, pad_token="<pad>")
    return tok


@pytest.fixture(scope="module", params=["wordpiece", "bytelevel-bpe", "metaspace-bpe"])
def encoded(request, trec_texts):
    build = {"wordpiece": _wordpiece, "bytelevel-bpe": _bpe, "metaspace-bpe": _metaspace_bpe}[request.param]
    tok = build(trec_texts[:3000])
    batch = trec_texts[3000:3512]
    encs = tok.encode_batch(batch)
    ids = torch.tensor([e.ids for e in encs])
    special = torch.tensor([e.special_tokens_mask for e in encs], dtype=torch.bool)
    attention = torch.tensor([e.attention_mask for e in encs], dtype=torch.bool)
    return request.param, encs, ids, special, attention


def test_word_ids_tensor_matches_the_tokenizer(encoded):
    name, encs, ids, special, attention = encoded
    w = word_ids_tensor(encs)
    assert w.dtype == torch.int64 and w.shape == ids.shape
    # -1 exactly on special tokens and padding (Metaspace BPE has no specials, only padding).
    assert torch.equal(w < 0, special | ~attention)
    assert torch.equal(word_ids_tensor([e.word_ids for e in encs]), w)
    longer = word_ids_tensor(encs, length=ids.shape[1] + 3)
    assert torch.equal(longer[:, : ids.shape[1]], w) and (longer[:, ids.shape[1]:] == -1).all()
    with pytest.raises(ValueError):
        word_ids_tensor(encs, length=2)
    # The tokenizer really splits words into several tokens (else the test would prove nothing).
    sizes = torch.stack([torch.bincount(r[r >= 0], minlength=int(w.max()) + 1) for r in w])
    assert (sizes > 1).sum() > 100


def test_whole_word_on_real_text(encoded):
    name, encs, ids, special, attention = encoded
    w = word_ids_tensor(encs)
    B, L = w.shape
    mask = whole_word_mask((B, L), 0.15, generator=gen(0), word_ids=w)
    assert mask.shape == (B, L) and mask.dtype == torch.bool
    assert not (mask & (special | ~attention)).any()  # special tokens and padding never masked
    assert_whole_units(mask, w)
    n_words = torch.tensor([len(r[r >= 0].unique()) for r in w])
    assert (mask.any(1) == (n_words > 0)).all()  # at least one word per row
    k = budget(w, 0.15)
    sizes = masked_unit_sizes(mask, w)
    assert all(len(s) == 1 or int(mask[b].sum() - k[b]) < max(s) for b, s in enumerate(sizes))
    # Short questions (~12 tokens): the fraction is near 0.15; whole words and the at-least-one
    # rule move it a little (measured 0.14-0.18 over the three tokenizers).
    frac = float(mask.sum() / (w >= 0).sum())
    assert 0.12 < frac < 0.20, frac
    # Multi-token words are masked too, whole.
    multi = torch.stack([torch.bincount(r.clamp(min=0), minlength=L)[r.clamp(min=0)] > 1 for r in w]) & (w >= 0)
    assert (mask & multi).any()


def test_whole_word_registered_and_checks_its_side_input(encoded):
    name, encs, ids, special, attention = encoded
    s = get_masking("whole_word")
    assert s.needs == ("word_ids",) and s.grid_dims == (1,) and s.modalities == ("text",) and not s.exact
    w = word_ids_tensor(encs)
    a = s(tuple(w.shape), 0.3, generator=gen(5), word_ids=w)
    assert torch.equal(a, whole_word_mask(tuple(w.shape), 0.3, generator=gen(5), word_ids=w))
    with pytest.raises(ValueError):
        whole_word_mask((w.shape[0], w.shape[1] + 1), 0.3, generator=gen(), word_ids=w)
    with pytest.raises(ValueError):
        whole_word_mask((w.shape[0], 2, 3), 0.3, generator=gen(), word_ids=w)


def test_word_ids_tensor_separates_the_two_sentences_of_a_pair(trec_texts):
    tok = _wordpiece(trec_texts[:1000])
    enc = tok.encode(trec_texts[1000], trec_texts[1001])
    w = word_ids_tensor([enc])[0]
    seq = torch.tensor([-1 if s is None else s for s in enc.sequence_ids])
    first, second = set(w[seq == 0].tolist()), set(w[seq == 1].tolist())
    assert first and second and not first & second


# --- superpixel on real images ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def digits() -> torch.Tensor:
    x = torch.from_numpy(load_digits().images[:64]).float() / 16.0  # (64, 8, 8) in [0, 1]
    return x[:, None]


def test_superpixel_segments_on_digits(digits):
    seg = superpixel_segments(digits, 2, n_segments=6, compactness=10.0)
    assert seg.shape == (64, 4, 4) and seg.dtype == torch.int64
    flat = seg.reshape(64, -1)
    for r in flat:  # labels 0..S-1, all used
        assert torch.equal(r.unique(), torch.arange(int(r.max()) + 1))
    assert (flat.max(1).values >= 1).float().mean() > 0.9  # almost every digit has >= 2 superpixels
    assert torch.equal(seg, superpixel_segments(digits, 2, n_segments=6, compactness=10.0))  # deterministic


def test_superpixel_segments_is_the_patch_majority_of_slic(digits):
    seg = superpixel_segments(digits[:8], 4, n_segments=5, compactness=5.0)
    for i in range(8):
        rgb = np.repeat(digits[i, 0].numpy().astype(np.float64)[..., None], 3, axis=2)
        pix = slic(rgb, n_segments=5, compactness=5.0, channel_axis=-1, convert2lab=True, start_label=0)
        want = np.zeros((2, 2), dtype=np.int64)
        for a in range(2):
            for b in range(2):
                want[a, b] = np.bincount(pix[4 * a: 4 * a + 4, 4 * b: 4 * b + 4].ravel()).argmax()
        want = np.unique(want, return_inverse=True)[1].reshape(2, 2)
        assert np.array_equal(seg[i].numpy(), want)


@pytest.mark.skipif(not Path("/usr/share/datasets/fashion-mnist").is_dir(),
                    reason="Debian package dataset-fashion-mnist missing (scripts/install.sh installs it where apt exists)")
def test_superpixel_segments_follow_the_image_with_default_params():
    """With the default n_segments and compactness, superpixels of real Fashion-MNIST images follow
    the image: every image gets its own segmentation, and pixels inside a superpixel are more alike
    than inside the cells of a regular grid with as many cells (a grid is what SLIC gives when the
    colour term is negligible)."""
    x = load_dataset("fashion-mnist").tensors("val")[0][:32].float()
    seg = superpixel_segments(x, 1)  # (32, 28, 28): one label per pixel
    assert len({s.numpy().tobytes() for s in seg}) == 32

    def within_var(labels: torch.Tensor) -> float:
        v = x[:, 0].reshape(32, -1)
        lab = labels.reshape(32, -1)
        total = 0.0
        for i in range(32):
            for u in lab[i].unique():
                px = v[i][lab[i] == u]
                total += float(((px - px.mean()) ** 2).sum())
        return total / v.numel()

    grid = (torch.arange(28)[:, None] // 7) * 4 + torch.arange(28)[None, :] // 7  # 4x4 = 16 cells
    assert within_var(seg) < 0.6 * within_var(grid.expand(32, 28, 28))


def test_superpixel_segments_on_rgb_stamps(shared_data):
    with open(shared_data / "tuxpaint-stamps" / "captions.csv", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))[:4]
    ims = []
    for r in rows:
        im = Image.open(shared_data / "tuxpaint-stamps" / r["image"]).convert("RGBA")
        bg = Image.new("RGBA", im.size, (255, 255, 255, 255))
        ims.append(np.asarray(Image.alpha_composite(bg, im).convert("RGB").resize((32, 32))))
    x = torch.from_numpy(np.stack(ims)).permute(0, 3, 1, 2).float() / 255.0  # (4, 3, 32, 32)
    seg = superpixel_segments(x, 4, n_segments=12)
    assert seg.shape == (4, 8, 8)
    assert (seg.reshape(4, -1).max(1).values >= 3).all()
    mask = superpixel_mask((4, 8, 8), 0.5, generator=gen(), segments=seg)
    assert_whole_units(mask, seg)
    with pytest.raises(ValueError):
        superpixel_segments(x, 5)


@pytest.mark.parametrize("ratio", [0.25, 0.5, 0.75])
def test_superpixel_mask_is_a_union_of_whole_segments(digits, ratio):
    seg = superpixel_segments(digits, 2, n_segments=8)
    mask = superpixel_mask((64, 4, 4), ratio, generator=gen(1), segments=seg)
    assert mask.shape == (64, 4, 4)
    assert_whole_units(mask, seg)
    assert mask.reshape(64, -1).any(1).all()
    k = budget(seg.reshape(64, -1), ratio)
    sizes = masked_unit_sizes(mask.reshape(64, -1), seg.reshape(64, -1))
    assert all(len(s) == 1 or int(mask[b].sum() - k[b]) < max(s) for b, s in enumerate(sizes))
    assert torch.equal(superpixel_mask((64, 4, 4), 1.0, generator=gen(), segments=seg), torch.ones(64, 4, 4, dtype=torch.bool))


def test_superpixel_mask_eligible_and_params(digits):
    seg = superpixel_segments(digits[:16], 2)
    eligible = torch.rand(16, 4, 4, generator=gen(2)) < 0.6
    mask = superpixel_mask((16, 4, 4), 0.5, generator=gen(), eligible=eligible, segments=seg, n_segments=99, compactness=1.0)
    assert not (mask & ~eligible).any()
    assert_whole_units(mask, seg, eligible)
    s = get_masking("superpixel")
    assert s.needs == ("segments",) and s.grid_dims == (2,) and s.modalities == ("image",)
    assert s.params is SuperpixelParams
    assert SuperpixelParams().n_segments == 16 and SuperpixelParams().compactness == 10.0
    with pytest.raises(ConfigError, match="masking.params.n_segments"):
        s.parse_params({"n_segments": 1})
    with pytest.raises(ConfigError, match="masking.params.compactness"):
        s.parse_params({"compactness": 0})
    with pytest.raises(ValueError):
        superpixel_mask((16, 4, 5), 0.5, generator=gen(), segments=seg)


def test_image_side_inputs_computes_segments(digits):
    cfg = MaskingConfig(strategy="superpixel", ratio=0.5, params={"n_segments": 6})
    side = image_side_inputs(cfg, digits[:8], 2)
    assert torch.equal(side["segments"], superpixel_segments(digits[:8], 2, n_segments=6))
    mask = draw_mask(cfg, (8, 4, 4), gen(), **side)
    assert_whole_units(mask, side["segments"])


# --- voiced on real recordings ---------------------------------------------------------------------

FSDD_FILES = ["6_jackson_0", "6_jackson_1", "4_yweweler_1", "7_yweweler_0", "6_yweweler_0", "5_yweweler_1"]
FRAME, HOP = 200, 80  # 25 ms frames, 10 ms hop at 8 kHz


@pytest.fixture(scope="module")
def fsdd(shared_data):
    clips = []
    for name in FSDD_FILES:
        x, sr = sf.read(shared_data / "fsdd" / "recordings" / f"{name}.wav", dtype="float32")
        assert sr == 8000
        clips.append(torch.from_numpy(x))
    n = max(len(c) for c in clips)
    wave = torch.stack([torch.nn.functional.pad(c, (0, n - len(c))) for c in clips])  # zero-padded batch
    return wave, [len(c) for c in clips]


def test_voiced_frames_finds_silence_on_real_recordings(fsdd):
    wave, lengths = fsdd
    v = voiced_frames(wave, 8000, frame_length=FRAME, hop_length=HOP)
    assert v.shape == (len(FSDD_FILES), 1 + wave.shape[1] // HOP) and v.dtype == torch.bool
    for b, n in enumerate(lengths):
        own = voiced_frames(wave[b, :n], 8000, frame_length=FRAME, hop_length=HOP)[0]
        assert own.any() and (~own).any(), FSDD_FILES[b]  # speech and silence in the clip itself
        assert not own[0] or not own[-1], FSDD_FILES[b]  # a leading or trailing silence frame
        # Frames wholly in the zero padding of the batch are unvoiced.
        first_pad = (n + FRAME // 2 + HOP - 1) // HOP
        assert not v[b, first_pad:].any()
    # Matches an independent numpy computation of the same definition.
    x = np.pad(wave[0, : lengths[0]].numpy().astype(np.float64), FRAME // 2)
    frames = np.stack([x[i: i + FRAME] for i in range(0, len(x) - FRAME + 1, HOP)])
    db = 20 * np.log10(np.maximum(np.sqrt((frames ** 2).mean(1)), 1e-10))
    want = db - db.max() > -35.0
    got = voiced_frames(wave[0, : lengths[0]], 8000, frame_length=FRAME, hop_length=HOP)[0].numpy()
    assert (got != want).sum() <= 1  # float32 vs float64 right at the threshold


def test_voiced_frames_defaults_and_edge_cases():
    assert voiced_frames(torch.zeros(2, 800), 8000).shape == (2, 1 + 800 // 80)  # 25 ms / 10 ms defaults
    assert not voiced_frames(torch.zeros(2, 800), 8000).any()  # digital silence is unvoiced
    assert voiced_frames(torch.ones(10), 8000, frame_length=200, hop_length=80, center=False).shape == (1, 1)
    with pytest.raises(ValueError):
        voiced_frames(torch.zeros(2, 2, 2), 8000)
    with pytest.raises(ValueError):
        voiced_frames(torch.zeros(800), 8000, threshold_db=3.0)


def test_voiced_units_runs_and_pieces():
    v = torch.tensor([[0, 1, 1, 1, 1, 1, 0, 1, 1, 0, 1], [1] * 11], dtype=torch.bool)
    assert voiced_units(v, 2).tolist() == [[-1, 0, 0, 1, 1, 2, -1, 3, 3, -1, 4],
                                           [0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5]]
    assert voiced_units(v, 100)[0].tolist() == [-1, 0, 0, 0, 0, 0, -1, 1, 1, -1, 2]


@pytest.mark.parametrize("max_len", [1, 4, 20])
def test_voiced_mask_on_real_recordings(fsdd, max_len):
    wave, _ = fsdd
    v = voiced_frames(wave, 8000, frame_length=FRAME, hop_length=HOP)
    B, T = v.shape
    units = voiced_units(v, max_len)
    sizes = torch.stack([torch.bincount(r[r >= 0], minlength=T) for r in units])
    assert sizes.max() <= max_len
    mask = voiced_mask((B, T), 0.3, generator=gen(3), voiced=v, max_len=max_len)
    assert not (mask & ~v).any()  # unvoiced frames are never masked
    assert_whole_units(mask, units)
    assert mask.any(1).all()
    # [B, F, T]: whole time columns of the same segments.
    spec = voiced_mask((B, 16, T), 0.3, generator=gen(3), voiced=v, max_len=max_len)
    assert torch.equal(spec, mask[:, None, :].expand(B, 16, T))


def test_voiced_mask_fraction_eligible_and_registry(fsdd):
    wave, _ = fsdd
    v = voiced_frames(wave, 8000, frame_length=FRAME, hop_length=HOP)
    B, T = v.shape
    fr = torch.stack([voiced_mask((B, T), 0.4, generator=gen(s), voiced=v, max_len=4).sum() for s in range(20)])
    assert abs(float(fr.float().mean() / v.sum()) - 0.4) < 0.03
    # Long segments (max_len 20 frames; these clips have 19-36 voiced frames): the greedy walk alone falls
    # well short of the ratio; the completion brings the mean back, a little above because a clip
    # whose smallest segment exceeds the budget still gets one (the at-least-one rule).
    units = voiced_units(v, 20)
    greedy = torch.stack([unit_mask(units, 0.75, generator=gen(s), complete=False).sum() for s in range(40)])
    full = torch.stack([voiced_mask((B, T), 0.75, generator=gen(s), voiced=v, max_len=20).sum() for s in range(40)])
    g_frac, f_frac = float(greedy.float().mean() / v.sum()), float(full.float().mean() / v.sum())
    assert g_frac < 0.7 and 0.73 < f_frac < 0.83, (g_frac, f_frac)
    assert torch.equal(voiced_mask((B, T), 1.0, generator=gen(), voiced=v), v)
    assert not voiced_mask((B, 8, T), 0.0, generator=gen(), voiced=v).any()
    eligible = torch.rand(B, 8, T, generator=gen(4)) < 0.5
    eligible[0] = False
    m = voiced_mask((B, 8, T), 0.5, generator=gen(), eligible=eligible, voiced=v)
    assert not (m & ~eligible).any() and not m[0].any()
    one = voiced_mask((2, 4, 1), 0.5, generator=gen(), voiced=torch.tensor([[True], [False]]))
    assert one[0].all() and not one[1].any()  # T = 1
    s = get_masking("voiced")
    assert s.needs == ("voiced",) and s.grid_dims == (1, 2) and s.modalities == ("audio",)
    assert s.params is VoicedParams and VoicedParams().max_len == 10
    with pytest.raises(ConfigError, match="masking.params.max_len"):
        s.parse_params({"max_len": 0})
    with pytest.raises(ValueError):
        voiced_mask((B, T + 1), 0.5, generator=gen(), voiced=v)
