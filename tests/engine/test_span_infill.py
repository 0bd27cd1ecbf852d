"""engine.models.span_infill: span_corrupt, SpanInfiller (teacher forcing, greedy generate), span metrics."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from engine.config import RunConfig
from engine.masking.segment import sentence_span_mask
from engine.models import SPAN_PRESETS, SpanInfiller, span_corrupt
from engine.models.layers import CrossAttention, DecoderBlock
from engine.models.span_infill import shift_right, span_exact_match, span_scored_mask, span_token_accuracy
from engine.store.checkpoints import load_weights, save_checkpoint
from engine.tasks import resolve

PAD, CLS, SEP, MASK = 0, 1, 2, 3
V, MAX_LEN = 40, 24
MICRO = dict(embed_dim=32, enc_depth=1, dec_depth=2, num_heads=2)


def gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def micro(**kw) -> SpanInfiller:
    torch.manual_seed(0)
    return SpanInfiller(V, MAX_LEN, **{**MICRO, **kw})


def b(rows):
    return torch.tensor(rows)


# --- span_corrupt ----------------------------------------------------------------------------------


def test_span_corrupt_exact_outputs():
    ids = b([[CLS, 10, 11, 12, 13, 14, SEP, PAD],   # span in the middle (11 12 13)
             [CLS, 20, 21, SEP, PAD, PAD, PAD, PAD],  # span = first word
             [CLS, 30, 31, 32, 33, 34, 35, SEP],      # span = the last two words
             [CLS, 40, 41, SEP, PAD, PAD, PAD, PAD]])  # no span
    att = ids != PAD
    span = torch.zeros_like(att)
    span[0, 2:5] = True
    span[1, 1] = True
    span[2, 5:7] = True
    ex = span_corrupt(ids, att, span, sentinel_id=MASK, eos_id=SEP, pad_id=PAD)
    assert ex.src_ids.tolist() == [[CLS, 10, MASK, 14, SEP, PAD, PAD],
                                   [CLS, MASK, 21, SEP, PAD, PAD, PAD],
                                   [CLS, 30, 31, 32, 33, MASK, SEP],
                                   [CLS, 40, 41, SEP, PAD, PAD, PAD]]
    assert ex.tgt_ids.tolist() == [[11, 12, 13, SEP],
                                   [20, SEP, PAD, PAD],
                                   [34, 35, SEP, PAD],
                                   [SEP, PAD, PAD, PAD]]
    assert ex.tgt_mask.tolist() == [[True] * 4, [True, True, False, False], [True, True, True, False],
                                    [True, False, False, False]]
    assert ex.src_mask.sum(1).tolist() == [5, 4, 7, 4]
    assert ex.src_mask.dtype == ex.tgt_mask.dtype == torch.bool


def test_span_corrupt_refuses_bad_spans():
    ids = b([[CLS, 5, 6, 7, SEP, PAD]])
    att = ids != PAD
    two = torch.tensor([[False, True, False, True, False, False]])
    with pytest.raises(ValueError, match="2 masked runs"):
        span_corrupt(ids, att, two)
    on_pad = torch.tensor([[False, False, False, False, True, True]])
    with pytest.raises(ValueError, match="covers padding"):
        span_corrupt(ids, att, on_pad)
    with pytest.raises(ValueError, match=r"\[B, L\]"):
        span_corrupt(ids, att[:, :3], two)


def test_span_corrupt_with_sentence_span_masks_round_trips():
    """Putting the target back in place of the sentinel gives the original text, for every row."""
    g = gen(4)
    B, L = 64, 30
    n = torch.randint(3, L - 2, (B,), generator=g)
    pos = torch.arange(L)[None, :]
    real = pos <= n[:, None] + 1
    ids = torch.where(real, torch.randint(5, V, (B, L), generator=g), torch.full((B, L), PAD))
    ids[:, 0] = CLS
    ids[torch.arange(B), n + 1] = SEP
    words = real & (pos >= 1) & (pos <= n[:, None])
    sid = torch.where(words, pos // 6, torch.full_like(ids, -1))
    span = sentence_span_mask((B, L), generator=gen(1), sentence_ids=sid)
    ex = span_corrupt(ids, real, span)
    for r in range(B):
        src = ex.src_ids[r, ex.src_mask[r]].tolist()
        tgt = ex.tgt_ids[r, ex.tgt_mask[r]].tolist()
        assert src.count(MASK) == 1 and tgt[-1] == SEP
        k = src.index(MASK)
        assert src[:k] + tgt[:-1] + src[k + 1:] == ids[r, real[r]].tolist()


def test_shift_right():
    assert shift_right(b([[7, 8, SEP], [9, SEP, PAD]]), CLS).tolist() == [[CLS, 7, 8], [CLS, 9, SEP]]


# --- layers ----------------------------------------------------------------------------------------


def test_cross_attention_matches_the_textbook_formula_and_ignores_padding():
    torch.manual_seed(0)
    attn = CrossAttention(dim=16, num_heads=2)
    x, mem = torch.randn(2, 3, 16, generator=gen()), torch.randn(2, 5, 16, generator=gen(1))
    pad = torch.tensor([[False] * 5, [False, False, False, True, True]])
    q = attn.q(x).reshape(2, 3, 2, 8).transpose(1, 2)
    k, v = attn.kv(mem).reshape(2, 5, 2, 2, 8).permute(2, 0, 3, 1, 4)
    scores = (q @ k.transpose(-2, -1)) / 8**0.5
    scores = scores.masked_fill(pad[:, None, None, :], float("-inf"))
    expected = attn.proj((scores.softmax(-1) @ v).transpose(1, 2).reshape(2, 3, 16))
    torch.testing.assert_close(attn(x, mem, pad), expected, atol=1e-5, rtol=1e-4)


def test_decoder_block_is_causal():
    torch.manual_seed(0)
    blk = DecoderBlock(16, 2)
    x, mem = torch.randn(1, 6, 16, generator=gen()), torch.randn(1, 4, 16, generator=gen(1))
    y = blk(x, mem)
    x2 = x.clone()
    x2[:, 4:] += 5.0  # change the future
    y2 = blk(x2, mem)
    torch.testing.assert_close(y2[:, :4], y[:, :4])
    assert not torch.allclose(y2[:, 4:], y[:, 4:])


# --- model -----------------------------------------------------------------------------------------


def example_batch():
    ids = b([[CLS, 10, 11, 12, 13, 14, SEP, PAD], [CLS, 20, 21, 22, SEP, PAD, PAD, PAD]])
    span = torch.zeros(2, 8, dtype=torch.bool)
    span[0, 2:4] = True
    span[1, 3] = True
    return span_corrupt(ids, ids != PAD, span)


def test_forward_shapes_tied_output_and_features():
    model = micro()
    ex = example_batch()
    logits = model(ex.src_ids, ex.src_mask, shift_right(ex.tgt_ids, CLS), ex.tgt_mask)
    assert logits.shape == (2, ex.tgt_ids.shape[1], V)
    assert model.output_weight is model.tok_embed.tok.weight
    assert [k for k, v in model.state_dict().items() if tuple(v.shape) == (V, 32)] == ["tok_embed.tok.weight"]
    assert model.features(ex.src_ids, ex.src_mask).shape == (2, 32)


def test_source_padding_does_not_change_the_logits():
    model = micro()
    ex = example_batch()
    tgt_in = shift_right(ex.tgt_ids, CLS)
    logits = model(ex.src_ids, ex.src_mask, tgt_in, ex.tgt_mask)
    src2 = torch.cat([torch.where(ex.src_mask, ex.src_ids, 9), torch.full((2, 4), 9)], dim=1)  # junk padding
    mask2 = torch.cat([ex.src_mask, torch.zeros(2, 4, dtype=torch.bool)], dim=1)
    torch.testing.assert_close(model(src2, mask2, tgt_in, ex.tgt_mask), logits, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(model.features(src2, mask2), model.features(ex.src_ids, ex.src_mask),
                               atol=1e-5, rtol=1e-5)


def test_teacher_forcing_logits_only_see_the_past():
    model = micro()
    ex = example_batch()
    tgt_in = shift_right(ex.tgt_ids, CLS)
    logits = model(ex.src_ids, ex.src_mask, tgt_in, ex.tgt_mask)
    changed = tgt_in.clone()
    changed[:, 2] = 30
    logits2 = model(ex.src_ids, ex.src_mask, changed, ex.tgt_mask)
    torch.testing.assert_close(logits2[:, :2], logits[:, :2])


def test_errors_name_the_problem():
    model = micro()
    ex = example_batch()
    with pytest.raises(ValueError, match=r"src_ids has 25 tokens, more than the model's max_len = 24"):
        model.encode(torch.ones(1, 25, dtype=torch.long), torch.ones(1, 25, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"max_new_tokens must be in \[1, max_len = 24\]"):
        model.generate(ex.src_ids, ex.src_mask, 25)
    with pytest.raises(ValueError, match="src_mask has shape"):
        model.encode(ex.src_ids, ex.src_mask[:, :2])


def test_checkpoint_round_trip(tmp_path):
    model = micro()
    ex = example_batch()
    ckpt = save_checkpoint(tmp_path, 1, model, torch.optim.AdamW(model.parameters()), resolve(RunConfig.from_dict({})), rng={})
    other = SpanInfiller(V, MAX_LEN, **MICRO)
    other.load_state_dict(load_weights(ckpt), strict=True)
    tgt_in = shift_right(ex.tgt_ids, CLS)
    assert torch.equal(other(ex.src_ids, ex.src_mask, tgt_in, ex.tgt_mask),
                       model(ex.src_ids, ex.src_mask, tgt_in, ex.tgt_mask))


@pytest.mark.parametrize("name", sorted(SPAN_PRESETS))
def test_presets_build_and_run(name):
    torch.manual_seed(0)
    model = SpanInfiller(8000, 64, **SPAN_PRESETS[name])
    ex = example_batch()
    logits = model(ex.src_ids, ex.src_mask, shift_right(ex.tgt_ids, CLS), ex.tgt_mask)
    assert logits.shape == (2, ex.tgt_ids.shape[1], 8000) and torch.isfinite(logits).all()


# --- metrics ---------------------------------------------------------------------------------------


def test_span_metrics_by_hand():
    tgt = b([[11, 12, 13, SEP], [20, SEP, PAD, PAD]])
    tgt_mask = tgt != PAD
    assert span_scored_mask(tgt_mask).tolist() == [[True, True, True, False], [True, False, False, False]]
    pred = b([[11, 9, 13, 7], [20, 5, 5, 5]])  # row 0: 2/3 span tokens right (eos position wrong); row 1: 1/1
    logits = F.one_hot(pred, V).float()
    assert span_token_accuracy(logits, tgt, tgt_mask).item() == pytest.approx(3 / 4)
    assert span_token_accuracy(logits, tgt, tgt_mask, reduction="sum").item() == 3

    generated = b([[11, 12, 13, SEP], [20, 21, SEP, PAD]])  # row 1 did not stop after one token
    assert span_exact_match(generated, tgt, tgt_mask).item() == 0.5
    assert span_exact_match(generated[:, :2], tgt, tgt_mask).item() == 0.0  # cut before the eos
    longer = torch.cat([b([[11, 12, 13, SEP], [20, SEP, PAD, PAD]]), torch.zeros(2, 3, dtype=torch.long)], 1)
    assert span_exact_match(longer, tgt, tgt_mask, reduction="sum").item() == 2


def test_generate_stops_at_eos_and_pads():
    model = micro()
    with torch.no_grad():
        model.out_bias[SEP] = 100.0  # eos at once
    ex = example_batch()
    out = model.generate(ex.src_ids, ex.src_mask, 10)
    assert out.tolist() == [[SEP], [SEP]]


def test_length_constrained_generation_writes_exactly_the_span_length_then_eos():
    model = micro()
    with torch.no_grad():
        model.out_bias[SEP] = 100.0  # free decoding would end at once
        model.out_bias[PAD] = 90.0
        model.out_bias[CLS] = 80.0
    ex = example_batch()
    out = model.generate(ex.src_ids, ex.src_mask, 10, lengths=torch.tensor([3, 1]))
    assert out.shape == (2, 4)
    for row, n in zip(out.tolist(), (3, 1)):
        assert row[n] == SEP and all(t not in (PAD, CLS, SEP) for t in row[:n])  # span tokens, then eos
        assert row[n + 1 :] == [PAD] * (3 - n)
    with pytest.raises(ValueError, match=r"lengths must be \[B = 2\] span lengths in \[0, max_new_tokens = 10\)"):
        model.generate(ex.src_ids, ex.src_mask, 10, lengths=torch.tensor([10, 1]))


def memorise(seed: int, hidden_input: bool):
    """A small encoder-decoder trained 150 steps on 6 texts with fixed spans (teacher forcing, or
    with every decoder input but bos hidden) -> ``(model, ex)``."""
    g = gen(seed)
    rows, spans = [], []
    for i in range(6):
        n = 6 + i % 3
        words = (torch.randperm(V - 5, generator=g)[:n] + 5).tolist()
        rows.append([CLS, *words, SEP] + [PAD] * (10 - n))
        s = torch.zeros(12, dtype=torch.bool)
        start = 1 + i % 3
        s[start : start + 2 + i % 2] = True
        spans.append(s)
    ids = torch.tensor(rows)
    ex = span_corrupt(ids, ids != PAD, torch.stack(spans))
    tgt_in = shift_right(ex.tgt_ids, CLS)
    if hidden_input:
        tgt_in = tgt_in.masked_fill(torch.arange(tgt_in.shape[1]) > 0, MASK)
    torch.manual_seed(0)
    model = SpanInfiller(V, MAX_LEN, embed_dim=64, enc_depth=2, dec_depth=2, num_heads=2)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.0)
    for _ in range(150):
        logits = model(ex.src_ids, ex.src_mask, tgt_in, ex.tgt_mask)
        loss = F.cross_entropy(logits[ex.tgt_mask], ex.tgt_ids[ex.tgt_mask])
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model, ex


def test_span_infiller_memorises_examples_and_generates_the_span_exactly(one_thread):
    """Behaviour: a small encoder-decoder overfits 6 texts with fixed spans; greedy decoding then
    reproduces every span token for token, eos included."""
    model, ex = memorise(0, hidden_input=False)
    out = model.generate(ex.src_ids, ex.src_mask, max_new_tokens=8)
    assert span_exact_match(out, ex.tgt_ids, ex.tgt_mask).item() == 1.0, (out, ex.tgt_ids)
    logits = model(ex.src_ids, ex.src_mask, shift_right(ex.tgt_ids, CLS), ex.tgt_mask)
    assert span_token_accuracy(logits, ex.tgt_ids, ex.tgt_mask).item() == 1.0


def test_per_position_decoding_writes_the_span_length_then_eos_from_an_all_hidden_input():
    """Layout as in length-constrained generation; the decoder reads bos then the unknown token at
    every position (one pass), so position 0 agrees with greedy's first step, and no position reads
    another's guess."""
    model = micro()
    with torch.no_grad():
        model.out_bias[SEP] = 100.0
        model.out_bias[PAD] = 90.0
        model.out_bias[CLS] = 80.0
        model.out_bias[MASK] = 70.0
    ex = example_batch()
    lengths = torch.tensor([3, 1])
    out = model.per_position(ex.src_ids, ex.src_mask, lengths, unknown_id=MASK)
    assert out.shape == (2, 4)
    for row, n in zip(out.tolist(), (3, 1)):
        assert row[n] == SEP and all(t not in (PAD, CLS, SEP, MASK) for t in row[:n])
        assert row[n + 1 :] == [PAD] * (3 - n)
    tgt_in = torch.tensor([[CLS, MASK, MASK, MASK]] * 2)
    logits = model.decode(model.encode(ex.src_ids, ex.src_mask), ex.src_mask, tgt_in)
    logits[..., [PAD, CLS, SEP, MASK]] = float("-inf")
    assert out[0, :3].tolist() == logits[0, :3].argmax(-1).tolist() and out[1, 0] == logits[1, 0].argmax()
    with pytest.raises(ValueError, match=r"lengths must be \[B = 2\]"):
        model.per_position(ex.src_ids, ex.src_mask, torch.tensor([MAX_LEN, 1]), unknown_id=MASK)


def test_decoder_trained_on_hidden_inputs_predicts_each_position_without_its_prefix(one_thread):
    """Behaviour: trained with its decoder input fully hidden (the extreme of decoder_input_mask),
    the model writes memorised spans exactly from the text and the positions alone."""
    model, ex = memorise(1, hidden_input=True)
    lengths = span_scored_mask(ex.tgt_mask).sum(1)
    out = model.per_position(ex.src_ids, ex.src_mask, lengths, unknown_id=MASK)
    assert span_exact_match(out, ex.tgt_ids, ex.tgt_mask).item() == 1.0, (out, ex.tgt_ids)
