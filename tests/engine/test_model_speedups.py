"""The faster model code (issue 15) computes what the straightforward implementation computed.

Each reference below is the textbook computation written out with the model's own weights: MAE's
``Conv2d`` patch embedding over every patch, the ``[visible, mask tokens]`` concatenation
unshuffled by ``ids_restore`` (He et al. 2022, models_mae.py), and attention as
``softmax(q k^T / sqrt(hs)) v`` with ``-inf`` at padding keys. The models' outputs and the
gradients of a loss must match it to float32 rounding, for even masks, ragged masks (padding
slots), a fully masked batch, and padded / unpadded text.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from engine.masking.apply import gather_visible, restore_order
from engine.models import BertMLM, MaskedAutoencoderViT
from engine.models.layers import Block
from engine.objectives import masked_mse


def ref_attention(attn, x, key_padding=None):
    B, L, D = x.shape
    nh = attn.num_heads
    hs = D // nh
    qkv = F.linear(x, attn.qkv.weight, attn.qkv.bias).reshape(B, L, 3, nh, hs).permute(2, 0, 3, 1, 4)
    q, k, v = qkv[0], qkv[1], qkv[2]  # (B, nh, L, hs)
    s = q @ k.transpose(-2, -1) / math.sqrt(hs)
    if key_padding is not None:
        s = s.masked_fill(key_padding[:, None, None, :], float("-inf"))
    o = (s.softmax(dim=-1) @ v).transpose(1, 2).reshape(B, L, D)
    return F.linear(o, attn.proj.weight, attn.proj.bias)


def ref_block(blk, x, key_padding=None):
    def ln(norm, t):
        return F.layer_norm(t, norm.normalized_shape, norm.weight, norm.bias, norm.eps)

    x = x + ref_attention(blk.attn, ln(blk.norm1, x), key_padding)
    h = ln(blk.norm2, x)
    return x + F.linear(F.gelu(F.linear(h, blk.mlp.fc1.weight, blk.mlp.fc1.bias)), blk.mlp.fc2.weight, blk.mlp.fc2.bias)


def ref_mae_pred(m: MaskedAutoencoderViT, imgs, mask):
    x = F.conv2d(imgs, m.patch_embed.weight, m.patch_embed.bias, stride=m.patch_embed.stride)
    x = x.flatten(2).transpose(1, 2) + m.pos_embed[:, 1:, :]
    x, _, ids_restore, pad = gather_visible(x, mask)
    x = torch.cat([(m.cls_token + m.pos_embed[:, :1, :]).expand(x.shape[0], -1, -1), x], dim=1)
    kp = None if pad is None else torch.cat([pad.new_zeros(pad.shape[0], 1), pad], dim=1)
    for blk in m.blocks:
        x = ref_block(blk, x, kp)
    x = m.decoder_embed(m.norm(x))
    B, L = ids_restore.shape
    x_vis = x[:, 1:, :]
    if pad is not None:
        x_vis = torch.where(pad.unsqueeze(-1), m.mask_token, x_vis)
    x_ = restore_order(torch.cat([x_vis, m.mask_token.expand(B, L - x_vis.shape[1], -1)], dim=1), ids_restore)
    x = torch.cat([x[:, :1, :], x_], dim=1) + m.decoder_pos_embed
    for blk in m.decoder_blocks:
        x = ref_block(blk, x)
    return m.decoder_pred(m.decoder_norm(x))[:, 1:, :]


def _grads(model, loss):
    model.zero_grad(set_to_none=True)
    loss.backward()
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def _assert_close_grads(a, b):
    assert a.keys() == b.keys()
    for n in a:
        torch.testing.assert_close(a[n], b[n], rtol=1e-4, atol=1e-5, msg=lambda s, n=n: f"{n}: {s}")


def _mae(norm_pix=False, C=3, P=4):
    torch.manual_seed(0)
    return MaskedAutoencoderViT((16, 12), C, P, 32, 2, 4, 24, 2, 3, norm_pix_loss=norm_pix)


MASKS = {
    "even": lambda g, B, L: torch.rand(B, L, generator=g).argsort(1).argsort(1) < round(0.75 * L),
    "ragged": lambda g, B, L: torch.rand(B, L, generator=g) < torch.tensor([[0.2], [0.5], [0.9], [0.7]]),
    "all_masked": lambda g, B, L: torch.ones(B, L, dtype=torch.bool),
}


@pytest.mark.parametrize("kind", sorted(MASKS))
@pytest.mark.parametrize("norm_pix", [False, True])
@pytest.mark.parametrize("patch", [4, (2, 4)], ids=["square", "rectangular"])
def test_mae_matches_the_reference_computation(kind, norm_pix, patch):
    m = _mae(norm_pix, P=patch)
    g = torch.Generator().manual_seed(1)
    imgs = torch.rand(4, 3, 16, 12, generator=g)
    mask = MASKS[kind](g, 4, m.num_patches)
    if kind == "ragged":
        assert len(set((~mask).sum(1).tolist())) > 1  # rows really differ: padding slots exist
    out = m(imgs, mask)  # training (autograd records): only the masked patches are decoded
    ref = ref_mae_pred(m, imgs, mask)
    torch.testing.assert_close(out["pred"][mask], ref[mask], rtol=1e-5, atol=1e-5)
    assert torch.equal(out["pred"][~mask], torch.zeros_like(ref[~mask]))
    torch.testing.assert_close(m(imgs, mask, every_patch=True)["pred"], ref, rtol=1e-5, atol=1e-5)
    with torch.no_grad():
        torch.testing.assert_close(m(imgs, mask)["pred"], ref, rtol=1e-5, atol=1e-5)  # every patch
    target = m.patchify(imgs)
    if norm_pix:
        target = (target - target.mean(-1, keepdim=True)) / (target.var(-1, keepdim=True) + 1e-6).sqrt()
    torch.testing.assert_close(out["target"], target)
    assert torch.equal(out["mask"], mask)
    _assert_close_grads(_grads(m, masked_mse(out["pred"], out["target"], mask)),
                        _grads(m, masked_mse(ref_mae_pred(m, imgs, mask), target, mask)))


def test_mae_reconstruct_and_features_match_the_reference():
    m = _mae(C=1, P=2)
    g = torch.Generator().manual_seed(2)
    imgs = torch.rand(4, 1, 16, 12, generator=g)
    mask = MASKS["even"](g, 4, m.num_patches)
    pred = ref_mae_pred(m, imgs, mask).detach()
    rec = m.reconstruct(imgs, mask)
    torch.testing.assert_close(rec["pred_img"], m.unpatchify(pred).clamp(0, 1), rtol=1e-5, atol=1e-5)
    x = F.conv2d(imgs, m.patch_embed.weight, m.patch_embed.bias, stride=2).flatten(2).transpose(1, 2)
    x = torch.cat([(m.cls_token + m.pos_embed[:, :1]).expand(4, -1, -1), x + m.pos_embed[:, 1:]], dim=1)
    for blk in m.blocks:
        x = ref_block(blk, x)
    torch.testing.assert_close(m.features(imgs), m.norm(x)[:, 1:].mean(1).detach(), rtol=1e-5, atol=1e-5)
    assert m.features(imgs).shape == (4, 32)


def ref_bert_logits(m: BertMLM, ids, attn, mlm_mask):
    x = m.tok_embed(ids)
    pad = ~attn.bool()
    pad = pad & ~pad.all(dim=1, keepdim=True)
    for blk in m.blocks:
        x = ref_block(blk, x, pad)
    h = m.norm(x)[mlm_mask]
    h = m.head_norm(F.gelu(m.head_dense(h)))
    return h @ m.tok_embed.weight.T + m.head_bias


@pytest.mark.parametrize("padded", [False, True])
@pytest.mark.parametrize("ragged", [False, True])
def test_bert_matches_the_reference_computation(padded, ragged):
    torch.manual_seed(0)
    m = BertMLM(vocab_size=50, max_len=12, embed_dim=32, depth=2, num_heads=4)
    g = torch.Generator().manual_seed(3)
    ids = torch.randint(5, 50, (3, 12), generator=g)
    attn = torch.ones(3, 12, dtype=torch.long)
    if padded:
        attn[0, 7:] = 0
        attn[2, 10:] = 0
    mlm = (torch.rand(3, 12, generator=g) < 0.3) & attn.bool()
    mlm[:, 1] = True
    if ragged:  # the last block's query rows: none in row 1, every real token in row 2
        mlm[1] = False
        mlm[2] = attn[2].bool()
    logits = m(ids, attn, mlm)
    ref = ref_bert_logits(m, ids, attn, mlm)
    torch.testing.assert_close(logits, ref, rtol=1e-5, atol=1e-5)
    labels = ids[mlm]
    _assert_close_grads(_grads(m, F.cross_entropy(m(ids, attn, mlm), labels)),
                        _grads(m, F.cross_entropy(ref_bert_logits(m, ids, attn, mlm), labels)))


def test_block_forward_rows_is_the_full_block_at_those_rows():
    """Block.forward_rows (BertMLM's last block at the masked positions) equals the full block's rows,
    in row-major order, with gradients, padding keys, empty rows and an empty selection."""
    torch.manual_seed(0)
    blk = Block(32, 4)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(4, 9, 32, generator=g, requires_grad=True)
    pad = torch.zeros(4, 9, dtype=torch.bool)
    pad[3, 5:] = True
    rows = torch.rand(4, 9, generator=g) < 0.4
    rows[0] = False
    rows[1] = True
    rows[3, 5:] = False
    full = blk(x, pad)[rows]
    part = blk.forward_rows(x, rows, pad)
    torch.testing.assert_close(part, full, rtol=1e-5, atol=1e-6)
    w = torch.randn_like(full)
    g_full = torch.autograd.grad((full * w).sum(), [x, *blk.parameters()])
    g_part = torch.autograd.grad((blk.forward_rows(x, rows, pad) * w).sum(), [x, *blk.parameters()])
    for a, b in zip(g_part, g_full):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    assert blk.forward_rows(x, torch.zeros(4, 9, dtype=torch.bool), pad).shape == (0, 32)
    with pytest.raises(ValueError, match="rows must be a bool"):
        blk.forward_rows(x, rows.long(), pad)


@pytest.mark.parametrize("decoder_depth", [0, 1])
def test_mae_masked_only_decoding_with_a_shallow_decoder(decoder_depth):
    """With one decoder block (it is the last) or none (norm and pixel head only), decoding the masked
    patches alone gives the full decoder's prediction there, and the same gradients."""
    torch.manual_seed(0)
    m = MaskedAutoencoderViT((16, 12), 1, 4, 32, 1, 4, 24, decoder_depth, 3)
    g = torch.Generator().manual_seed(4)
    imgs = torch.rand(4, 1, 16, 12, generator=g)
    mask = MASKS["ragged"](g, 4, m.num_patches)
    full = m(imgs, mask, every_patch=True)
    part = m(imgs, mask)
    torch.testing.assert_close(part["pred"][mask], full["pred"][mask], rtol=1e-5, atol=1e-6)
    _assert_close_grads(_grads(m, masked_mse(part["pred"], part["target"], mask)),
                        _grads(m, masked_mse(m(imgs, mask, every_patch=True)["pred"], full["target"], mask)))
