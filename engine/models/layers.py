"""Transformer building blocks (timm-style small modules): multi-head self-attention, MLP, pre-norm block.

References: Dosovitskiy et al. 2021, "An Image Is Worth 16x16 Words" (ViT); He et al. 2022,
"Masked Autoencoders Are Scalable Vision Learners" (uses the timm ViT block).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel

# On CPU the fused (flash) attention kernel costs more than it saves for short sequences: for the
# tiny preset on 8x8 digits (P=2: 5 encoder and 17 decoder tokens) the math kernel makes a training
# step ~25% faster; from ~100 tokens on (28x28 with P=2) flash is faster. GPUs keep the default choice.
CPU_MATH_ATTENTION_MAX_TOKENS = 64


class Attention(nn.Module):
    """Multi-head self-attention, ``[B, L, D] -> [B, L, D]``.

    Every token attends to every token, except keys marked in ``key_padding`` (``[B, L]`` bool,
    True = padding slot of a ragged batch, see :func:`engine.masking.apply.gather_visible`).

    Raises:
        ValueError: ``num_heads`` does not divide ``dim``.
    """

    def __init__(self, dim: int, num_heads: int, qkv_bias: bool = True):
        super().__init__()
        if dim % num_heads:
            raise ValueError(f"Attention: num_heads ({num_heads}) must divide dim ({dim})")
        self.num_heads = num_heads
        self.qkv = nn.Linear(dim, 3 * dim, bias=qkv_bias)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor, key_padding: torch.Tensor | None = None) -> torch.Tensor:
        B, L, D = x.shape
        attn_mask = None if key_padding is None else ~key_padding[:, None, None, :]  # (B, 1, 1, L): True = attend
        qkv = self.qkv(x).reshape(B, L, 3, self.num_heads, D // self.num_heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)  # each (B, nh, L, hs)
        if x.device.type == "cpu" and L <= CPU_MATH_ATTENTION_MAX_TOKENS:
            with sdpa_kernel(SDPBackend.MATH):
                x = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)  # (B, nh, L, hs)
        else:
            x = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)  # (B, nh, L, hs); fused kernel where available
        x = x.transpose(1, 2).reshape(B, L, D)  # (B, L, D)
        return self.proj(x)


class Mlp(nn.Module):
    """Position-wise feed-forward: Linear -> GELU -> Linear, ``[..., D] -> [..., D]``."""

    def __init__(self, dim: int, hidden_dim: int):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden_dim)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden_dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(x)))


class Block(nn.Module):
    """Pre-norm Transformer block: ``x + attn(norm(x))``, then ``x + mlp(norm(x))``; ``[B, L, D]`` in and out.

    ``key_padding`` (``[B, L]`` bool, True = ignore as a key) is passed to the attention.
    """

    def __init__(self, dim: int, num_heads: int, mlp_ratio: float = 4.0):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=1e-6)
        self.attn = Attention(dim, num_heads)
        self.norm2 = nn.LayerNorm(dim, eps=1e-6)
        self.mlp = Mlp(dim, int(dim * mlp_ratio))

    def forward(self, x: torch.Tensor, key_padding: torch.Tensor | None = None) -> torch.Tensor:
        x = x + self.attn(self.norm1(x), key_padding)
        x = x + self.mlp(self.norm2(x))
        return x
