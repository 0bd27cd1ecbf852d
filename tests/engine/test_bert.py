"""engine.models.bert: BertMLM shapes, head only at masked positions, tied weights, padding, overfitting."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from engine.config import RunConfig
from engine.masking import random_mask
from engine.masking.mlm import apply_mlm
from engine.models import TEXT_PRESETS, BertMLM, count_parameters
from engine.store.checkpoints import load_weights, save_checkpoint
from engine.tasks import resolve

V, MAX_LEN = 40, 16
MICRO = dict(embed_dim=32, depth=2, num_heads=2)
PAD, CLS, SEP, MASK = 0, 1, 2, 3
SPECIALS = (0, 1, 2, 3, 4)


def gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def micro(**kw) -> BertMLM:
    torch.manual_seed(0)
    return BertMLM(V, MAX_LEN, **{**MICRO, **kw})


def batch(lengths=(6, 8, 4), L=10, seed=0):
    """``[CLS] words [SEP] [PAD]...`` rows with ``lengths`` words each; returns ids, attention, words mask."""
    g = gen(seed)
    B = len(lengths)
    ids = torch.full((B, L), PAD, dtype=torch.long)
    words = torch.zeros(B, L, dtype=torch.bool)
    for b, n in enumerate(lengths):
        ids[b, 0] = CLS
        ids[b, 1 : n + 1] = torch.randint(5, V, (n,), generator=g)
        ids[b, n + 1] = SEP
        words[b, 1 : n + 1] = True
    return ids, ids != PAD, words


def test_shapes_of_every_output():
    model = micro()
    ids, att, words = batch()
    mask = random_mask(ids.shape, 0.5, generator=gen(1), eligible=words)
    hidden = model.forward_encoder(ids, att)
    assert hidden.shape == (3, 10, 32)
    logits = model(ids, att, mask)
    assert logits.shape == (int(mask.sum()), V)
    assert model.features(ids, att).shape == (3, 32)
    top, probs = model.predict_topk(ids, att, mask, k=5)
    assert top.shape == probs.shape == (int(mask.sum()), 5)
    assert (probs[:, :-1] >= probs[:, 1:]).all()  # most probable first
    torch.testing.assert_close(probs[:, 0], logits.softmax(-1).max(-1).values)


def test_head_runs_only_on_the_masked_rows():
    model = micro()
    ids, att, words = batch()
    mask = random_mask(ids.shape, 0.3, generator=gen(2), eligible=words)
    seen = []
    model.head_dense.register_forward_hook(lambda m, inp, out: seen.append(inp[0].shape))
    model(ids, att, mask)
    assert seen == [torch.Size([int(mask.sum()), 32])]

    hidden = model.forward_encoder(ids, att)
    logits = model.forward_mlm(hidden, mask)
    scribbled = torch.where(mask[..., None], hidden, torch.randn_like(hidden) * 100)
    assert torch.equal(model.forward_mlm(scribbled, mask), logits)  # unmasked rows never reach the head
    # ... and the rows come in row-major order of the mask
    b, l = mask.nonzero()[0].tolist()
    changed = hidden.clone()
    changed[b, l] += 1.0
    assert not torch.equal(model.forward_mlm(changed, mask)[0], logits[0])


def test_decoder_is_tied_to_the_input_embedding_and_stored_once(tmp_path):
    model = micro()
    assert model.decoder_weight is model.tok_embed.tok.weight
    vd = [k for k, v in model.state_dict().items() if tuple(v.shape) == (V, 32)]
    assert vd == ["tok_embed.tok.weight"]
    # A token that is in no input still gets a gradient: through the tied decoder only.
    ids, att, words = batch()
    unused = next(t for t in range(5, V) if t not in ids)
    mask = words.clone()
    loss = F.cross_entropy(model(ids, att, mask), ids[mask])
    loss.backward()
    assert model.tok_embed.tok.weight.grad[unused].abs().sum() > 0
    # The real checkpoint writer (safetensors refuses tensors stored under two names) round-trips it.
    opt = torch.optim.AdamW(model.parameters())
    ckpt = save_checkpoint(tmp_path, 1, model, opt, resolve(RunConfig.from_dict({})), rng={})
    other = BertMLM(V, MAX_LEN, **MICRO)
    other.load_state_dict(load_weights(ckpt), strict=True)
    assert torch.equal(other(ids, att, mask), model(ids, att, mask))


def test_bert_init():
    torch.manual_seed(0)
    model = BertMLM(1000, 64, embed_dim=128, depth=2, num_heads=2)
    assert model.tok_embed.tok.weight.std().item() == pytest.approx(0.02, rel=0.05)
    assert model.tok_embed.pos.std().item() == pytest.approx(0.02, rel=0.1)
    assert model.blocks[0].attn.qkv.weight.std().item() == pytest.approx(0.02, rel=0.05)
    assert model.head_dense.weight.std().item() == pytest.approx(0.02, rel=0.05)
    for name, p in model.named_parameters():
        if name.endswith("bias") and "norm" not in name or name == "head_bias":
            assert torch.equal(p, torch.zeros_like(p)), name
        if "norm" in name:
            expected = torch.ones_like(p) if name.endswith("weight") else torch.zeros_like(p)
            assert torch.equal(p, expected), name


def test_padding_does_not_change_real_tokens():
    model = micro()
    ids, att, words = batch(L=10)
    mask = random_mask(ids.shape, 0.5, generator=gen(3), eligible=words)
    logits = model(ids, att, mask)
    feats = model.features(ids, att)
    # Append 5 padding columns, and write junk ids into the padding.
    pad = torch.randint(5, V, (3, 5), generator=gen(4))
    ids2 = torch.cat([torch.where(att, ids, torch.randint(5, V, ids.shape, generator=gen(5))), pad], dim=1)
    att2 = torch.cat([att, torch.zeros(3, 5, dtype=torch.bool)], dim=1)
    mask2 = torch.cat([mask, torch.zeros(3, 5, dtype=torch.bool)], dim=1)
    torch.testing.assert_close(model(ids2, att2, mask2), logits, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(model.features(ids2, att2), feats, atol=1e-5, rtol=1e-5)
    # forward cuts the all-padding columns before the encoder: the same logits as the full width.
    torch.testing.assert_close(model.forward_mlm(model.forward_encoder(ids2, att2), mask2), logits,
                               atol=1e-5, rtol=1e-5)
    # 0/1 integer attention masks (the tokenizer's) work like bool ones.
    torch.testing.assert_close(model(ids, att.long(), mask), logits)


def test_a_row_that_is_all_padding_stays_finite():
    model = micro()
    ids, att, words = batch()
    att[2] = False
    hidden = model.forward_encoder(ids, att)
    assert torch.isfinite(hidden).all()


def test_batch_of_one_with_one_masked_token_trains():
    model = micro()
    ids = torch.tensor([[CLS, 7, 8, 9, 10, SEP]])  # a one-line, four-word corpus
    att = torch.ones_like(ids, dtype=torch.bool)
    mask = torch.zeros_like(att)
    mask[0, 2] = True
    inputs, labels = apply_mlm(ids, mask, generator=gen(), mask_token_id=MASK, vocab_size=V, special_ids=SPECIALS)
    logits = model(inputs, att, mask)
    assert logits.shape == (1, V)
    loss = F.cross_entropy(logits, labels[mask])
    assert torch.isfinite(loss)
    loss.backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())


def test_errors_name_the_problem():
    model = micro()
    ids, att, words = batch(L=MAX_LEN + 1, lengths=(3,))
    with pytest.raises(ValueError, match=r"input_ids has 17 tokens, more than the model's max_len = 16"):
        model.forward_encoder(ids, att)
    ids, att, words = batch()
    with pytest.raises(ValueError, match="attention_mask has shape"):
        model.forward_encoder(ids, att[:, :4])
    hidden = model.forward_encoder(ids, att)
    with pytest.raises(ValueError, match="mlm_mask must be a bool"):
        model.forward_mlm(hidden, words.long())
    with pytest.raises(ValueError, match="num_heads"):
        BertMLM(V, MAX_LEN, embed_dim=30, depth=1, num_heads=4)


def test_predict_topk_never_proposes_excluded_ids():
    model = micro()
    ids, att, words = batch()
    with torch.no_grad():  # make the special tokens the model's favourites
        model.head_bias[list(SPECIALS)] = 50.0
    mask = words.clone()
    top, probs = model.predict_topk(ids, att, mask, k=3, exclude_ids=SPECIALS)
    assert not torch.isin(top, torch.tensor(SPECIALS)).any()
    assert (probs < 0.01).all()  # the probabilities stay the model's, not renormalised
    top_all, _ = model.predict_topk(ids, att, mask, k=3)
    assert torch.isin(top_all, torch.tensor(SPECIALS)).all()


@pytest.mark.parametrize("name", sorted(TEXT_PRESETS))
def test_presets_build_and_run(name):
    torch.manual_seed(0)
    model = BertMLM(8000, 64, **TEXT_PRESETS[name])
    ids, att, words = batch(L=32, lengths=(20, 30))
    mask = random_mask(ids.shape, 0.15, generator=gen(), eligible=words)
    assert model(ids, att, mask).shape == (int(mask.sum()), 8000)
    assert count_parameters(model) > 8000 * TEXT_PRESETS[name]["embed_dim"]


def test_tiny_bert_memorises_a_handful_of_sentences(one_thread):
    """Behaviour: a small model overfits 6 sentences until (almost) every masked token is right,
    on masks it has not seen, within a few hundred steps."""
    g = gen(0)
    sentences = [torch.randperm(V - 5, generator=g)[:8] + 5 for _ in range(6)]
    ids = torch.stack([torch.cat([torch.tensor([CLS]), s, torch.tensor([SEP])]) for s in sentences])  # (6, 10)
    att = torch.ones_like(ids, dtype=torch.bool)
    words = torch.zeros_like(att)
    words[:, 1:-1] = True
    torch.manual_seed(0)
    model = BertMLM(V, MAX_LEN, embed_dim=64, depth=2, num_heads=2)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.0)
    mg = gen(1)
    for _ in range(300):
        mask = random_mask((24, 10), 0.25, generator=mg, eligible=words.repeat(4, 1))
        x = ids.repeat(4, 1)
        inputs, labels = apply_mlm(x, mask, generator=mg, mask_token_id=MASK, vocab_size=V, special_ids=SPECIALS)
        loss = F.cross_entropy(model(inputs, att.repeat(4, 1), mask), labels[mask])
        opt.zero_grad()
        loss.backward()
        opt.step()
    mask = random_mask((60, 10), 0.25, generator=gen(99), eligible=words.repeat(10, 1))
    x = ids.repeat(10, 1)
    inputs = x.masked_fill(mask, MASK)
    with torch.no_grad():
        acc = (model(inputs, att.repeat(10, 1), mask).argmax(-1) == x[mask]).float().mean().item()
    assert acc >= 0.97, acc


def test_dropout_acts_in_train_mode_only_and_adds_no_weights():
    model = micro(dropout=0.5)
    ids, att, words = batch()
    a, b = model(ids, att, words), model(ids, att, words)
    assert not torch.equal(a, b)
    model.eval()
    assert torch.equal(model(ids, att, words), model(ids, att, words))
    assert model.state_dict().keys() == micro().state_dict().keys()
