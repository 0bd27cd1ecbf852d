"""BERT exactly as published (Google's and Hugging Face's ``BertForMaskedLM``): post-LN blocks, an
embedding LayerNorm, token-type embeddings, learned positions, LayerNorm eps and activation from
the checkpoint's config, and the MLM head (dense, activation, LayerNorm, decoder tied to the word
embeddings, output bias).

masklab's own :class:`~engine.models.bert.BertMLM` is a pre-LN variant (final LayerNorm, no
embedding LayerNorm, no token types, eps 1e-6, exact GELU) and cannot hold a published BERT's
weights; this module can, so an imported checkpoint (:mod:`engine.pretrained.importers.hf_bert`)
predicts what ``transformers`` predicts from it. It has BertMLM's interface (``forward`` at the
masked positions, ``forward_encoder``, ``forward_mlm``, ``features``, ``predict_topk``) so that the
text tasks, probes and the fill-in box use either, and adds :meth:`HFBertMLM.logits` (every position).

Shapes: B batch, L tokens, D width, V vocabulary, M = masked positions in the batch
(``mlm_mask.sum()``, row-major order). Layer by layer, with ``LN`` the LayerNorm of eps
``layer_norm_eps`` and ``act`` the config's ``hidden_act``::

    x = LN(tok[ids] + pos[0..L) + type[token_type_ids])            # embeddings (dropout in train mode)
    x = LN(x + proj(attention(q(x), k(x), v(x))))                   # each block: post-LN attention
    x = LN(x + fc2(act(fc1(x))))                                    #             post-LN MLP
    logits = LN(act(dense(x))) @ tok.T + bias                       # MLM head

References: Devlin et al. 2019, "BERT: Pre-training of Deep Bidirectional Transformers for Language
Understanding", NAACL (sec. 3, appendix A.2); Vaswani et al. 2017 (post-LN Transformer); Hendrycks
and Gimpel 2016 (GELU and its tanh approximation).
"""

from __future__ import annotations

from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch import nn

from engine.models.bert import BertMLM
from engine.models.layers import attention_mask, scaled_dot_product
from engine.models.text_common import bert_init, check_ids, padding_keys, trim_padding

__all__ = ["ACTIVATIONS", "BERT_HF_PRESETS", "HFBertMLM"]


def _gelu_tanh(x: torch.Tensor) -> torch.Tensor:
    return F.gelu(x, approximate="tanh")


def _quick_gelu(x: torch.Tensor) -> torch.Tensor:
    return x * torch.sigmoid(1.702 * x)


#: ``hidden_act`` of a Hugging Face config -> the function (``transformers.activations.ACT2FN``'s
#: meaning). ``gelu`` is the exact erf GELU; ``gelu_new``, ``gelu_fast`` and ``gelu_pytorch_tanh``
#: are the tanh approximation (the same formula, written differently).
ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "gelu": F.gelu,
    "gelu_new": _gelu_tanh,
    "gelu_fast": _gelu_tanh,
    "gelu_pytorch_tanh": _gelu_tanh,
    "quick_gelu": _quick_gelu,
    "relu": F.relu,
    "silu": F.silu,
    "swish": F.silu,
    "tanh": torch.tanh,
}

# Sizes for training from scratch as a run (``model.arch: bert_hf``), keyword arguments without
# vocab_size / max_len: Turc et al. 2019's BERT-tiny / mini / small, and BERT-base (Devlin et al. 2019).
BERT_HF_PRESETS: dict[str, dict[str, Any]] = {
    "tiny": dict(embed_dim=128, depth=2, num_heads=2, intermediate_size=512),
    "mini": dict(embed_dim=256, depth=4, num_heads=4, intermediate_size=1024),
    "small": dict(embed_dim=512, depth=4, num_heads=8, intermediate_size=2048),
    "base": dict(embed_dim=768, depth=12, num_heads=12, intermediate_size=3072),
}


class PostLNBlock(nn.Module):
    """BERT's encoder layer: ``x = LN(x + Attn(x))``, ``x = LN(x + MLP(x))``; ``[B, L, D] -> [B, L, D]``.

    Separate query, key and value projections (as the published checkpoints store them).
    """

    def __init__(self, dim: int, num_heads: int, intermediate_size: int, act: Callable, eps: float,
                 dropout: float = 0.0, attn_dropout: float = 0.0):
        super().__init__()
        if dim % num_heads:
            raise ValueError(f"num_heads = {num_heads} does not divide the width {dim}")
        self.num_heads = num_heads
        self.q, self.k, self.v = nn.Linear(dim, dim), nn.Linear(dim, dim), nn.Linear(dim, dim)
        self.proj = nn.Linear(dim, dim)
        self.norm1 = nn.LayerNorm(dim, eps=eps)
        self.fc1 = nn.Linear(dim, intermediate_size)
        self.fc2 = nn.Linear(intermediate_size, dim)
        self.norm2 = nn.LayerNorm(dim, eps=eps)
        self.act = act
        self.drop = nn.Dropout(dropout) if dropout > 0 else nn.Identity()
        self.attn_dropout = attn_dropout

    def forward(self, x: torch.Tensor, key_padding: torch.Tensor | None) -> torch.Tensor:
        B, L, D = x.shape
        nh = self.num_heads

        def heads(t: torch.Tensor) -> torch.Tensor:
            return t.view(B, L, nh, D // nh).transpose(1, 2)  # (B, nh, L, hs)

        mask = attention_mask(key_padding, L, L)
        if self.training and self.attn_dropout > 0:
            a = F.scaled_dot_product_attention(heads(self.q(x)), heads(self.k(x)), heads(self.v(x)), attn_mask=mask,
                                               dropout_p=self.attn_dropout)
        else:
            a = scaled_dot_product(heads(self.q(x)), heads(self.k(x)), heads(self.v(x)), mask)
        a = a.transpose(1, 2).reshape(B, L, D)
        x = self.norm1(x + self.drop(self.proj(a)))
        return self.norm2(x + self.drop(self.fc2(self.act(self.fc1(x)))))


class HFBertMLM(nn.Module):
    """The published BERT masked language model (module docstring), with BertMLM's interface.

    Args:
        vocab_size: ``V`` (Hugging Face ``vocab_size``).
        max_len: longest input ``L`` (``max_position_embeddings``).
        embed_dim, depth, num_heads: ``D`` (``hidden_size``), blocks (``num_hidden_layers``), heads
            (``num_attention_heads``, divides ``D``).
        intermediate_size: MLP hidden width.
        hidden_act: a key of :data:`ACTIVATIONS` (blocks and MLM head).
        layer_norm_eps: every LayerNorm's eps (BERT: 1e-12).
        type_vocab_size: token types (BERT: 2; sentence A / B).
        pad_id: the padding id (kept for callers; padding is taken from ``attention_mask``).
        dropout, attn_dropout: ``hidden_dropout_prob`` and ``attention_probs_dropout_prob``, train
            mode only.
        tie_word_embeddings: the decoder multiplies by the word embeddings (``decoder_weight`` *is*
            ``tok_embed.weight``); False gives the decoder a ``[V, D]`` weight of its own.

    Raises:
        ValueError: an unknown ``hidden_act``, ``num_heads`` not dividing ``embed_dim``, a size < 1.

    References: Devlin et al. 2019, BERT (sec. 3, appendix A.2).
    """

    def __init__(
        self,
        vocab_size: int,
        max_len: int,
        embed_dim: int,
        depth: int,
        num_heads: int,
        intermediate_size: int,
        hidden_act: str = "gelu",
        layer_norm_eps: float = 1e-12,
        type_vocab_size: int = 2,
        pad_id: int = 0,
        dropout: float = 0.0,
        attn_dropout: float = 0.0,
        tie_word_embeddings: bool = True,
    ):
        super().__init__()
        if hidden_act not in ACTIVATIONS:
            raise ValueError(f"hidden_act {hidden_act!r} is not one masklab implements: {', '.join(ACTIVATIONS)}")
        if min(vocab_size, max_len, embed_dim, depth, num_heads, intermediate_size, type_vocab_size) < 1:
            raise ValueError("HFBertMLM: every size must be >= 1")
        self.vocab_size, self.max_len, self.pad_id = vocab_size, max_len, pad_id
        self.hidden_act, self.layer_norm_eps = hidden_act, layer_norm_eps
        act = ACTIVATIONS[hidden_act]
        self.act = act
        self.tok_embed = nn.Embedding(vocab_size, embed_dim)
        self.pos_embed = nn.Embedding(max_len, embed_dim)
        self.type_embed = nn.Embedding(type_vocab_size, embed_dim)
        self.embed_norm = nn.LayerNorm(embed_dim, eps=layer_norm_eps)
        self.embed_drop = nn.Dropout(dropout) if dropout > 0 else nn.Identity()
        self.blocks = nn.ModuleList([PostLNBlock(embed_dim, num_heads, intermediate_size, act, layer_norm_eps,
                                                 dropout, attn_dropout) for _ in range(depth)])
        self.head_dense = nn.Linear(embed_dim, embed_dim)
        self.head_norm = nn.LayerNorm(embed_dim, eps=layer_norm_eps)
        self.head_bias = nn.Parameter(torch.zeros(vocab_size))
        self.head_decoder = None if tie_word_embeddings else nn.Parameter(torch.empty(vocab_size, embed_dim))
        self.apply(bert_init)
        if self.head_decoder is not None:
            nn.init.normal_(self.head_decoder, std=0.02)

    @property
    def decoder_weight(self) -> torch.Tensor:
        """The MLM decoder's weight ``[V, D]``: the word embeddings (tied) or ``head_decoder``."""
        return self.tok_embed.weight if self.head_decoder is None else self.head_decoder

    def _embed(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
               token_type_ids: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Embeddings ``[B, L, D]`` and the blocks' ``key_padding [B, L]`` (None without padding)."""
        check_ids(input_ids, self.max_len)
        L = input_ids.shape[1]
        types = torch.zeros_like(input_ids) if token_type_ids is None else token_type_ids
        if tuple(types.shape) != tuple(input_ids.shape):
            raise ValueError(f"token_type_ids has shape {tuple(types.shape)}, expected {tuple(input_ids.shape)}")
        pos = torch.arange(L, device=input_ids.device)
        x = self.tok_embed(input_ids) + self.type_embed(types) + self.pos_embed(pos)[None]  # (B, L, D)
        x = self.embed_drop(self.embed_norm(x))
        key_padding = padding_keys(attention_mask, tuple(input_ids.shape)).to(x.device)
        if key_padding.device.type == "cpu" and not bool(key_padding.any()):
            key_padding = None  # no padding: attention without a mask is faster (a free check on CPU only)
        return x, key_padding

    def forward_encoder(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                        token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        """``input_ids [B, L]``, ``attention_mask [B, L]`` (True / 1 = real token), optional
        ``token_type_ids [B, L]`` (default all 0) -> final hidden states ``[B, L, D]``
        (``transformers``' ``last_hidden_state``; meaningless at padding positions).

        Raises:
            ValueError: ``input_ids`` is not an integer ``[B, L]`` with ``L <= max_len``, or a mask
                or the token types do not have its shape.
        """
        x, key_padding = self._embed(input_ids, attention_mask, token_type_ids)
        for blk in self.blocks:
            x = blk(x, key_padding)
        return x

    def _head(self, h: torch.Tensor) -> torch.Tensor:
        """The MLM head on final hidden states ``[..., D] -> logits [..., V]``."""
        h = self.head_norm(self.act(self.head_dense(h)))
        return F.linear(h, self.decoder_weight, self.head_bias)

    def forward_mlm(self, hidden: torch.Tensor, mlm_mask: torch.Tensor) -> torch.Tensor:
        """The MLM head at the masked positions only: ``hidden [B, L, D]``, ``mlm_mask [B, L]`` bool
        -> ``logits [M, V]`` (row-major order).

        Raises:
            ValueError: ``mlm_mask`` is not a bool tensor of shape ``hidden.shape[:2]``.
        """
        if mlm_mask.dtype != torch.bool or tuple(mlm_mask.shape) != tuple(hidden.shape[:2]):
            raise ValueError(f"mlm_mask must be a bool [B, L] = {tuple(hidden.shape[:2])} tensor "
                             f"(got {mlm_mask.dtype} {tuple(mlm_mask.shape)})")
        return self._head(hidden[mlm_mask.to(hidden.device)])

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, mlm_mask: torch.Tensor,
                token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        """``input_ids [B, L]`` (already corrupted), ``attention_mask [B, L]``, ``mlm_mask [B, L]``
        bool -> ``logits [M, V]`` at the masked positions, row-major (what BertMLM returns; the loss
        is ``F.cross_entropy(logits, labels[mlm_mask])``). Trailing all-padding columns are cut
        first (the result is the same: padding keys are ignored).

        Raises:
            ValueError: see :meth:`forward_encoder` and :meth:`forward_mlm`.
        """
        if tuple(mlm_mask.shape) != tuple(input_ids.shape):
            raise ValueError(f"mlm_mask must be a bool [B, L] = {tuple(input_ids.shape)} tensor "
                             f"(got {mlm_mask.dtype} {tuple(mlm_mask.shape)})")
        tensors = (input_ids, attention_mask, mlm_mask) + (() if token_type_ids is None else (token_type_ids,))
        tensors = trim_padding(attention_mask, *tensors, keep=mlm_mask)
        input_ids, attention_mask, mlm_mask = tensors[:3]
        hidden = self.forward_encoder(input_ids, attention_mask, tensors[3] if len(tensors) > 3 else None)
        return self.forward_mlm(hidden, mlm_mask)

    def logits(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
               token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        """MLM logits at every position, ``[B, L, V]`` (``transformers``' ``BertForMaskedLM(...).logits``).

        Raises:
            ValueError: see :meth:`forward_encoder`.
        """
        return self._head(self.forward_encoder(input_ids, attention_mask, token_type_ids))

    # One definition of the probe features (mean of the final hidden states over the real tokens,
    # ``[B, D]``) and of the fill-in box's top-k for both BERTs: they only call forward / forward_encoder.
    features = BertMLM.features
    predict_topk = BertMLM.predict_topk
