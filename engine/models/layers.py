"""Transformer building blocks (timm-style small modules): multi-head self- and cross-attention, MLP,
pre-norm encoder block and pre-norm decoder block.

The attention itself is one pure function, :func:`scaled_dot_product`, around PyTorch's
``scaled_dot_product_attention``; the modules only hold the projections. Masks follow one convention:
``key_padding [B, Lk]`` bool, True = a padding key nobody attends to; ``causal=True`` lets query ``i``
see keys ``<= i`` only.

References: Vaswani et al. 2017, "Attention Is All You Need" (encoder-decoder, cross-attention,
causal decoder); Dosovitskiy et al. 2021, "An Image Is Worth 16x16 Words" (ViT); He et al. 2022,
"Masked Autoencoders Are Scalable Vision Learners" (uses the timm ViT block).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def attention_mask(
    key_padding: torch.Tensor | None, q_len: int, k_len: int, causal: bool = False,
    device: torch.device | None = None,
) -> torch.Tensor | None:
    """Boolean SDPA mask, True = attend: ``(B, 1, Lq, Lk)``, ``(1, 1, Lq, Lk)`` or None (attend everywhere).

    Args:
        key_padding: ``[B, Lk]`` bool, True = padding key (never attended to), or None.
        q_len, k_len: ``Lq``, ``Lk``.
        causal: query ``i`` attends to keys ``j <= i`` only (a decoder's self-attention; ``Lq == Lk``).
        device: where the causal mask is built (default: that of ``key_padding``, else CPU).

    A query whose every key is hidden gets NaN from the softmax: callers keep at least one key per
    query (a real first token, or no padding in rows that are all padding).
    """
    mask = None
    if key_padding is not None:
        mask = ~key_padding[:, None, None, :]  # (B, 1, 1, Lk)
    if causal:
        if device is None and key_padding is not None:
            device = key_padding.device
        tri = torch.ones(q_len, k_len, dtype=torch.bool, device=device).tril_()[None, None]  # (1, 1, Lq, Lk)
        mask = tri if mask is None else mask & tri
    return mask


def scaled_dot_product(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, attn_mask: torch.Tensor | None = None
) -> torch.Tensor:
    """``softmax(q k^T / sqrt(hs) + mask) v`` with PyTorch's SDPA: ``(B, nh, Lq, hs)`` from keys ``(B, nh, Lk, hs)``.

    PyTorch picks the kernel (the fused flash kernel on CPU and GPU where it applies). On the 2-core
    development CPU, one thread, forward + backward, the fused kernel beat the math kernel at every
    shape of masklab's presets (issue 15; e.g. ``(128, 4, 5, 24)``: 10 ms against 42 ms,
    ``(128, 4, 50, 32)``: 159 ms against 350 ms), so nothing is forced any more.

    Args:
        q: ``(B, nh, Lq, hs)``; k, v: ``(B, nh, Lk, hs)``.
        attn_mask: bool, broadcastable to ``(B, nh, Lq, Lk)``, True = attend (see :func:`attention_mask`);
            None attends everywhere (cheaper than an all-True mask).
    """
    return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)


class Attention(nn.Module):
    """Multi-head self-attention, ``[B, L, D] -> [B, L, D]``.

    Every token attends to every token, except keys marked in ``key_padding`` (``[B, L]`` bool,
    True = padding slot of a ragged batch, see :func:`engine.masking.apply.gather_visible`), and,
    with ``causal=True``, keys after the query (a decoder).

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

    def forward(
        self, x: torch.Tensor, key_padding: torch.Tensor | None = None, causal: bool = False
    ) -> torch.Tensor:
        B, L, D = x.shape
        qkv = self.qkv(x).reshape(B, L, 3, self.num_heads, D // self.num_heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)  # each (B, nh, L, hs)
        x = scaled_dot_product(q, k, v, attention_mask(key_padding, L, L, causal, x.device))  # (B, nh, L, hs)
        x = x.transpose(1, 2).reshape(B, L, D)  # (B, L, D)
        return self.proj(x)

    def forward_queries(
        self, xq: torch.Tensor, x: torch.Tensor, key_padding: torch.Tensor | None = None
    ) -> torch.Tensor:
        """The same attention for a subset of the queries: ``xq [B, Lq, D]`` (rows of ``x``, already
        normalised like it) attend to every key of ``x [B, L, D]`` -> ``[B, Lq, D]``.

        Keys and values come from all of ``x`` with the same weights as :meth:`forward`; only the
        query projection, the attention rows and the output projection shrink to ``Lq``. For a
        query row taken from ``x`` the result equals that row of ``forward(x)`` (to float rounding).
        """
        B, L, D = x.shape
        Lq, nh = xq.shape[1], self.num_heads
        w, b = self.qkv.weight, self.qkv.bias
        q = F.linear(xq, w[:D], None if b is None else b[:D]).reshape(B, Lq, nh, D // nh).transpose(1, 2)
        kv = F.linear(x, w[D:], None if b is None else b[D:]).reshape(B, L, 2, nh, D // nh)
        k, v = kv.permute(2, 0, 3, 1, 4).unbind(0)  # each (B, nh, L, hs)
        out = scaled_dot_product(q, k, v, attention_mask(key_padding, Lq, L, device=x.device))  # (B, nh, Lq, hs)
        return self.proj(out.transpose(1, 2).reshape(B, Lq, D))


class CrossAttention(nn.Module):
    """Multi-head cross-attention: queries from ``x [B, Lq, D]``, keys and values from ``memory [B, Lk, D]``.

    Returns ``[B, Lq, D]``. Keys marked in ``memory_padding`` (``[B, Lk]`` bool, True = padding) are
    never attended to; every query must keep at least one real key.

    Raises:
        ValueError: ``num_heads`` does not divide ``dim``.

    References: Vaswani et al. 2017, "Attention Is All You Need", sec. 3.2.3 (encoder-decoder attention).
    """

    def __init__(self, dim: int, num_heads: int, qkv_bias: bool = True):
        super().__init__()
        if dim % num_heads:
            raise ValueError(f"CrossAttention: num_heads ({num_heads}) must divide dim ({dim})")
        self.num_heads = num_heads
        self.q = nn.Linear(dim, dim, bias=qkv_bias)
        self.kv = nn.Linear(dim, 2 * dim, bias=qkv_bias)
        self.proj = nn.Linear(dim, dim)

    def forward(
        self, x: torch.Tensor, memory: torch.Tensor, memory_padding: torch.Tensor | None = None
    ) -> torch.Tensor:
        B, Lq, D = x.shape
        Lk = memory.shape[1]
        hs = D // self.num_heads
        q = self.q(x).reshape(B, Lq, self.num_heads, hs).transpose(1, 2)  # (B, nh, Lq, hs)
        k, v = self.kv(memory).reshape(B, Lk, 2, self.num_heads, hs).permute(2, 0, 3, 1, 4).unbind(0)  # (B, nh, Lk, hs)
        x = scaled_dot_product(q, k, v, attention_mask(memory_padding, Lq, Lk))  # (B, nh, Lq, hs)
        return self.proj(x.transpose(1, 2).reshape(B, Lq, D))


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
    ``drop`` is the residual dropout of BERT / GPT-2 (on each branch's output before the sum;
    active in train mode only); 0, the default (MAE has none), adds no weights and no work.
    ``mlp_hidden`` sets the MLP's hidden width directly (an imported checkpoint's
    ``intermediate_size``; default ``int(dim * mlp_ratio)``); ``eps`` is the LayerNorms' epsilon
    (MAE's 1e-6 by default).
    """

    def __init__(self, dim: int, num_heads: int, mlp_ratio: float = 4.0, drop: float = 0.0,
                 mlp_hidden: int | None = None, eps: float = 1e-6):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=eps)
        self.attn = Attention(dim, num_heads)
        self.norm2 = nn.LayerNorm(dim, eps=eps)
        self.mlp = Mlp(dim, int(dim * mlp_ratio) if mlp_hidden is None else mlp_hidden)
        self.drop = nn.Dropout(drop) if drop > 0 else nn.Identity()

    def forward(self, x: torch.Tensor, key_padding: torch.Tensor | None = None) -> torch.Tensor:
        # Out-of-place residual sums: a Linear's output on [B, L, D] is a view of its 2-D result, and
        # an in-place ``+=`` on a view makes autograd rebuild the base in backward (CopySlices and
        # AsStrided: two extra [B, L, D] copies per sum); ``x + branch`` passes the gradient through.
        h = x + self.drop(self.attn(self.norm1(x), key_padding))
        return h + self.drop(self.mlp(self.norm2(h)))

    def forward_rows(self, x: torch.Tensor, rows: torch.Tensor, key_padding: torch.Tensor | None = None) -> torch.Tensor:
        """This block's output at the positions ``rows`` only: ``x [B, L, D]``, ``rows [B, L]`` bool
        -> ``[M, D]`` in the row-major order of ``x[rows]`` (``M = rows.sum()``).

        Every position still serves as a key and value; the queries, the attention's output
        projection and the MLP run on the selected rows alone (padded per row to the longest row's
        count for the attention, then gathered). The result equals ``self(x, key_padding)[rows]``
        to float rounding. A model whose loss reads only some positions of its last block (an MLM
        loss reads about 15%) skips most of that block's work this way.

        Raises:
            ValueError: ``rows`` is not a bool tensor of shape ``x.shape[:2]``.
        """
        if rows.dtype != torch.bool or tuple(rows.shape) != tuple(x.shape[:2]):
            raise ValueError(f"rows must be a bool [B, L] = {tuple(x.shape[:2])} tensor "
                             f"(got {rows.dtype} {tuple(rows.shape)})")
        rows = rows.to(x.device)
        counts = rows.sum(dim=1)  # (B,)
        m = int(counts.max()) if rows.numel() else 0
        if m == 0:
            return x.new_zeros(0, x.shape[2])
        D = x.shape[2]
        # Positions of each row's selected tokens, ascending, then the unselected ones (stable sort).
        pos = torch.sort(rows.to(torch.uint8), dim=1, descending=True, stable=True).indices[:, :m]  # (B, m)
        valid = torch.arange(m, device=x.device)[None, :] < counts[:, None]  # (B, m)
        idx = pos[..., None].expand(-1, -1, D)
        n = self.norm1(x)
        h = self.drop(self.attn.forward_queries(n.gather(1, idx), n, key_padding))  # (B, m, D)
        h = (h + x.gather(1, idx))[valid]  # (M, D), row-major
        return h + self.drop(self.mlp(self.norm2(h)))


class DecoderBlock(nn.Module):
    """Pre-norm Transformer decoder block, ``[B, T, D]`` in and out:
    ``x + self_attn(norm(x))`` (causal), ``x + cross_attn(norm(x), memory)``, ``x + mlp(norm(x))``.

    ``tgt_padding`` (``[B, T]`` bool, True = padding) hides padding keys of the target (with the
    causal mask a left-aligned row never needs it for its real tokens); ``memory_padding``
    (``[B, Lk]`` bool) hides the encoder's padding. ``drop``: residual dropout as in :class:`Block`.

    References: Vaswani et al. 2017, "Attention Is All You Need", sec. 3.1 (decoder); pre-norm as in
    Raffel et al. 2020 (T5) and the ViT blocks of this module.
    """

    def __init__(self, dim: int, num_heads: int, mlp_ratio: float = 4.0, drop: float = 0.0):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=1e-6)
        self.self_attn = Attention(dim, num_heads)
        self.norm2 = nn.LayerNorm(dim, eps=1e-6)
        self.cross_attn = CrossAttention(dim, num_heads)
        self.norm3 = nn.LayerNorm(dim, eps=1e-6)
        self.mlp = Mlp(dim, int(dim * mlp_ratio))
        self.drop = nn.Dropout(drop) if drop > 0 else nn.Identity()

    def forward(
        self,
        x: torch.Tensor,
        memory: torch.Tensor,
        tgt_padding: torch.Tensor | None = None,
        memory_padding: torch.Tensor | None = None,
    ) -> torch.Tensor:
        x = x + self.drop(self.self_attn(self.norm1(x), tgt_padding, causal=True))
        x = x + self.drop(self.cross_attn(self.norm2(x), memory, memory_padding))
        x = x + self.drop(self.mlp(self.norm3(x)))
        return x
