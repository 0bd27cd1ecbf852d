"""The class token's attention to the patches in an MAE encoder's last block (AttMask's signal).

AttMask ranks the patches of an image by how much the class token of a (teacher) ViT attends to
them in its last block, and hides the most attended ones (or the least): :func:`cls_attention`
computes that map for an :class:`engine.models.mae.MaskedAutoencoderViT`, or for an encoder copy
beside it (an EMA teacher), on the full image; the ``attention`` masking strategy
(:mod:`engine.masking.attention`) ranks by it.

Shapes: B batch, C channels, H/W pixels, h/w patch grid, L = h*w patches (row-major, the order of
``mask.flatten(1)``), D width, nh heads, hs = D / nh head size.

References: Kakogeorgiou et al. 2022, "What to Hide from Your Students: Attention-Guided Masked
Image Modeling", ECCV (AttMask; the last block's class-token attention, averaged over heads).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


@torch.no_grad()
def cls_attention(model: nn.Module, imgs: torch.Tensor, *, encoder: nn.Module | None = None) -> torch.Tensor:
    """The class token's attention to each patch in the last encoder block, on the whole image.

    The image is encoded unmasked as :meth:`MaskedAutoencoderViT._encode_patches` encodes the
    visible patches (``patchify`` of :meth:`normalize_input`, the patch embedding as a Linear on the
    patch pixels, the fixed positions ``pos_embed``, the class token in front), through every block
    but the last; in the last block, after its ``norm1``, the class token's query ``q`` and every
    token's key ``k`` (its ``attn.qkv``) give ``softmax(q k^T / sqrt(hs))`` over the ``1 + L``
    tokens per head. The heads are averaged, the class token's weight on itself dropped and the rest
    renormalised, so each row is a distribution over the patches.

    Args:
        model: a :class:`~engine.models.mae.MaskedAutoencoderViT` (its ``patchify``,
            ``normalize_input`` and ``pos_embed`` are always used).
        imgs: ``[B, C, H, W]`` float in [0, 1] (as the dataset gives them; moved to the model's device).
        encoder: where ``patch_embed``, ``cls_token`` and ``blocks`` come from instead of ``model``,
            e.g. an EMA teacher (``encoder=model.teacher``: any module with those attributes, the
            same widths as ``model``'s); None: ``model`` itself.

    Returns:
        float32 ``[B, L]`` on the model's device, ``L = h*w`` in row-major patch order; each row
        sums to 1.

    Raises:
        ValueError: ``imgs`` is not ``[B, C, H, W]`` of the model's size, or the encoder has no block.

    References: Kakogeorgiou et al. 2022, "What to Hide from Your Students: Attention-Guided Masked
    Image Modeling" (ECCV), sec. 3.2.
    """
    enc = model if encoder is None else encoder
    blocks = list(enc.blocks)
    if not blocks:
        raise ValueError("cls_attention: the encoder has no block to read the attention from")
    if imgs.dim() != 4 or tuple(imgs.shape[2:]) != tuple(model.img_size):
        raise ValueError(f"cls_attention: images must be [B, C, {model.img_size[0]}, {model.img_size[1]}] "
                         f"(got {tuple(imgs.shape)})")
    w = enc.patch_embed.weight  # (D, C, P_h, P_w)
    x = imgs.to(device=w.device, dtype=w.dtype)
    patches = model.patchify(model.normalize_input(x))  # (B, L, P*P*C), rows (p_row, p_col, channel)
    x = F.linear(patches, w.permute(0, 2, 3, 1).reshape(w.shape[0], -1), enc.patch_embed.bias)  # (B, L, D)
    pos = model.pos_embed  # (1, 1 + L, D): the class token's slot first
    x = x + pos[:, 1:, :]
    cls = (enc.cls_token + pos[:, :1, :]).expand(x.shape[0], -1, -1)  # (B, 1, D)
    x = torch.cat([cls, x], dim=1)  # (B, 1 + L, D)
    for blk in blocks[:-1]:
        x = blk(x)
    last = blocks[-1]
    n = last.norm1(x)
    B, T, D = n.shape
    nh = last.attn.num_heads
    hs = D // nh
    qkv_w, qkv_b = last.attn.qkv.weight, last.attn.qkv.bias  # (3D, D), (3D,)
    q = F.linear(n[:, :1], qkv_w[:D], None if qkv_b is None else qkv_b[:D])  # (B, 1, D): the class token's query
    k = F.linear(n, qkv_w[D : 2 * D], None if qkv_b is None else qkv_b[D : 2 * D])  # (B, 1 + L, D)
    q = q.reshape(B, 1, nh, hs).transpose(1, 2)  # (B, nh, 1, hs)
    k = k.reshape(B, T, nh, hs).transpose(1, 2)  # (B, nh, 1 + L, hs)
    attn = torch.softmax((q @ k.transpose(-2, -1)).float() / math.sqrt(hs), dim=-1)  # (B, nh, 1, 1 + L)
    a = attn[:, :, 0, :].mean(dim=1)[:, 1:]  # (B, L): heads averaged, the class token's self-weight dropped
    return a / a.sum(dim=1, keepdim=True).clamp_min(torch.finfo(a.dtype).tiny)
