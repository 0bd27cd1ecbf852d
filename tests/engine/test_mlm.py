"""engine.masking.mlm: BERT's 80/10/10 replacement and the special-token eligibility helper."""

from __future__ import annotations

import csv

import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers, processors, trainers

from engine.errors import ConfigError
from engine.masking import get_masking
from engine.masking.mlm import IGNORE_INDEX, apply_mlm, special_tokens_eligible

VOCAB = 1000
PAD, CLS, SEP, MASK = 0, 1, 2, 3
SPECIAL = (PAD, CLS, SEP, MASK)


def gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def batch(B: int = 512, L: int = 256, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Random non-special ids with [CLS] ... [SEP] and some padding; a Bernoulli-0.15 mask over the rest."""
    g = gen(seed)
    ids = torch.randint(len(SPECIAL), VOCAB, (B, L), generator=g)
    ids[:, 0] = CLS
    lengths = torch.randint(L // 2, L + 1, (B, 1), generator=g)
    pos = torch.arange(L)
    ids[pos.expand(B, L) == lengths - 1] = SEP
    ids[pos >= lengths] = PAD
    eligible = special_tokens_eligible(ids, SPECIAL)
    mask = get_masking("bernoulli")((B, L), 0.15, generator=g, eligible=eligible)
    return ids, mask


def test_shares_80_10_10_on_a_large_batch():
    ids, mask = batch()
    inputs, labels = apply_mlm(ids, mask, generator=gen(1), mask_token_id=MASK, vocab_size=VOCAB,
                               special_ids=SPECIAL)
    n = mask.sum().item()
    assert n > 10_000
    as_mask = (inputs == MASK) & mask
    changed = (inputs != ids) & mask & ~as_mask  # random tokens that differ from the original
    same = (inputs == ids) & mask  # kept, or a random draw equal to the original
    assert as_mask.sum() + changed.sum() + same.sum() == n
    n_allowed = VOCAB - len(SPECIAL)
    # A random draw equals the original with probability 1 / n_allowed (the original is non-special).
    p_changed = 0.1 * (1 - 1 / n_allowed)
    p_same = 0.1 + 0.1 / n_allowed
    sd = (0.25 / n) ** 0.5  # upper bound of a share's standard error
    assert abs(as_mask.sum().item() / n - 0.8) < 5 * sd
    assert abs(changed.sum().item() / n - p_changed) < 5 * sd
    assert abs(same.sum().item() / n - p_same) < 5 * sd


def test_random_tokens_are_never_special_and_cover_the_vocabulary():
    ids, mask = batch(seed=2)
    inputs, _ = apply_mlm(ids, mask, generator=gen(3), mask_token_id=MASK, vocab_size=VOCAB,
                          special_ids=SPECIAL, mask_share=0.0, random_share=1.0)
    drawn = inputs[mask]
    assert not torch.isin(drawn, torch.tensor(SPECIAL)).any()
    assert drawn.min() >= len(SPECIAL) and drawn.max() < VOCAB
    # uniform over the 996 allowed ids: ~14 draws each, so (almost) every id appears
    assert len(torch.unique(drawn)) > 0.99 * (VOCAB - len(SPECIAL))


def test_labels_are_the_input_exactly_where_masked_and_unmasked_positions_are_untouched():
    ids, mask = batch(B=64, seed=4)
    original = ids.clone()
    inputs, labels = apply_mlm(ids, mask, generator=gen(5), mask_token_id=MASK, vocab_size=VOCAB,
                               special_ids=SPECIAL)
    assert torch.equal(ids, original)  # not modified in place
    assert inputs.dtype == torch.int64 and labels.dtype == torch.int64
    assert torch.equal(labels == IGNORE_INDEX, ~mask)
    assert torch.equal(labels[mask], ids[mask])
    assert torch.equal(inputs[~mask], ids[~mask])


def test_mask_share_one_masks_everything_and_random_share_zero_draws_nothing():
    ids, mask = batch(B=64, seed=6)
    inputs, _ = apply_mlm(ids, mask, generator=gen(), mask_token_id=MASK, vocab_size=VOCAB,
                          mask_share=1.0, random_share=0.0)
    assert (inputs[mask] == MASK).all()
    inputs, _ = apply_mlm(ids, mask, generator=gen(), mask_token_id=MASK, vocab_size=VOCAB,
                          special_ids=SPECIAL, mask_share=0.7, random_share=0.0)
    masked = inputs[mask]
    assert torch.equal(masked == MASK, masked != ids[mask])  # only [MASK] or the original
    share = (masked == MASK).double().mean().item()
    assert abs(share - 0.7) < 0.05
    inputs, labels = apply_mlm(ids, mask, generator=gen(), mask_token_id=MASK, vocab_size=VOCAB,
                               mask_share=0.0, random_share=0.0)
    assert torch.equal(inputs, ids) and torch.equal(labels != IGNORE_INDEX, mask)


def test_same_seed_same_result():
    ids, mask = batch(B=32, seed=7)
    kw = dict(mask_token_id=MASK, vocab_size=VOCAB, special_ids=SPECIAL)
    a = apply_mlm(ids, mask, generator=gen(8), **kw)
    b = apply_mlm(ids, mask, generator=gen(8), **kw)
    c = apply_mlm(ids, mask, generator=gen(9), **kw)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert not torch.equal(a[0], c[0])


@pytest.mark.parametrize(
    ("kwargs", "pattern"),
    [
        (dict(mask_share=1.2), r"mask_share: must be in \[0, 1\] \(got 1\.2\)"),
        (dict(random_share=-0.1), r"random_share: .*\(got -0\.1\)"),
        (dict(mask_share=float("nan")), r"mask_share"),
        (dict(mask_share=0.8, random_share=0.3), r"mask_share \+ random_share: must be <= 1 \(got 0\.8 \+ 0\.3"),
        (dict(vocab_size=4, special_ids=(0, 1, 2)), r"special_ids: .*vocab_size = 4"),
        (dict(vocab_size=0), r"vocab_size: .*\(got 0\)"),
        (dict(mask_token_id=VOCAB), rf"mask_token_id: .*\(got {VOCAB}\)"),
    ],
)
def test_config_errors_name_the_argument_and_value(kwargs, pattern):
    ids, mask = batch(B=2, L=8)
    args = dict(mask_token_id=MASK, vocab_size=VOCAB, special_ids=SPECIAL) | kwargs
    with pytest.raises(ConfigError, match=pattern):
        apply_mlm(ids, mask, generator=gen(), **args)


def test_shape_mismatch_is_a_value_error():
    ids, mask = batch(B=2, L=8)
    with pytest.raises(ValueError, match=r"mask has shape \(2, 7\)"):
        apply_mlm(ids, mask[:, :7], generator=gen(), mask_token_id=MASK, vocab_size=VOCAB)


def test_special_tokens_eligible():
    ids = torch.tensor([[CLS, 10, 11, SEP, PAD], [CLS, 12, SEP, PAD, PAD]])
    expected = torch.tensor([[False, True, True, False, False], [False, True, False, False, False]])
    assert torch.equal(special_tokens_eligible(ids, SPECIAL), expected)
    assert special_tokens_eligible(ids, ()).all()
    attn = torch.tensor([[1, 1, 0, 1, 1], [1, 1, 1, 1, 1]])
    assert torch.equal(special_tokens_eligible(ids, [CLS], attention_mask=attn),
                       torch.tensor([[False, True, False, True, True], [False, True, True, True, True]]))


def test_on_real_text_with_a_wordpiece_tokenizer(shared_data):
    with open(shared_data / "trec" / "train.tsv", encoding="utf-8") as f:
        texts = [r["text"] for r in csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE)][:2000]
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(texts, trainers.WordPieceTrainer(vocab_size=2000, special_tokens=specials,
                                                             show_progress=False))
    sid = {s: tok.token_to_id(s) for s in specials}
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", sid["[CLS]"]), ("[SEP]", sid["[SEP]"])])
    tok.enable_padding(pad_id=sid["[PAD]"], pad_token="[PAD]")
    enc = tok.encode_batch(texts[:256])
    ids = torch.tensor([e.ids for e in enc])
    attn = torch.tensor([e.attention_mask for e in enc])
    vocab = tok.get_vocab_size()
    assert ids.shape[0] == 256 and (attn == 0).any()  # padded batch

    special_ids = list(sid.values())
    eligible = special_tokens_eligible(ids, special_ids)
    assert torch.equal(eligible, (attn == 1) & ~torch.isin(ids, torch.tensor(special_ids)))
    g = gen(11)
    mask = get_masking("bernoulli")(tuple(ids.shape), 0.15, generator=g, eligible=eligible)
    inputs, labels = apply_mlm(ids, mask, generator=g, mask_token_id=sid["[MASK]"], vocab_size=vocab,
                               special_ids=special_ids)
    assert not (mask & ~eligible).any()
    assert torch.equal(labels != IGNORE_INDEX, mask)
    assert torch.equal(labels[mask], ids[mask])
    assert torch.equal(inputs[~mask], ids[~mask])  # [CLS], [SEP], padding untouched
    assert (inputs[~eligible] == ids[~eligible]).all()
    replaced = mask & (inputs != ids) & (inputs != sid["[MASK]"])
    assert not torch.isin(inputs[replaced], torch.tensor(special_ids)).any()
    assert ((inputs >= 0) & (inputs < vocab)).all()
    share = (inputs[mask] == sid["[MASK]"]).double().mean().item()
    assert abs(share - 0.8) < 0.06  # ~1000 masked tokens: SE 0.013
    # the masked words decode to real text
    assert all(tok.id_to_token(int(i)) is not None for i in labels[mask][:50])


def test_non_contiguous_input_and_empty_mask():
    ids, mask = batch(B=16, L=32, seed=12)
    kw = dict(mask_token_id=MASK, vocab_size=VOCAB, special_ids=SPECIAL)
    a_inputs, a_labels = apply_mlm(ids, mask, generator=gen(13), **kw)
    t_inputs, t_labels = apply_mlm(ids.t().contiguous().t(), mask, generator=gen(13), **kw)  # column-major
    assert torch.equal(a_inputs, t_inputs) and torch.equal(a_labels, t_labels)
    inputs, labels = apply_mlm(ids, torch.zeros_like(mask), generator=gen(), **kw)
    assert torch.equal(inputs, ids) and (labels == IGNORE_INDEX).all()


@pytest.mark.parametrize("dtype", [torch.int32, torch.int16, torch.uint8])
def test_apply_mlm_keeps_any_integer_dtype(dtype):
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, 200, (8, 32), generator=g).to(dtype)
    mask = torch.rand(8, 32, generator=g) < 0.5
    inputs, labels = apply_mlm(ids, mask, generator=g, mask_token_id=4, vocab_size=200, special_ids=range(5))
    assert inputs.dtype == dtype and torch.equal(inputs[~mask], ids[~mask])
    assert torch.equal(labels[mask].long(), ids[mask].long())


def test_apply_mlm_rejects_loose_arguments():
    ids, mask = torch.zeros(2, 4, dtype=torch.long), torch.ones(2, 4, dtype=torch.bool)
    g = torch.Generator()
    for bad in (103.7, "103", None):
        with pytest.raises(ConfigError, match="mask_token_id"):
            apply_mlm(ids, mask, generator=g, mask_token_id=bad, vocab_size=200)
    with pytest.raises(ValueError, match="bool"):
        apply_mlm(ids, mask.float(), generator=g, mask_token_id=1, vocab_size=200)
    # a one-token vocabulary is fine when nothing random is drawn
    inputs, _ = apply_mlm(ids, mask, generator=g, mask_token_id=0, vocab_size=1, mask_share=1.0, random_share=0.0)
    assert (inputs == 0).all()
