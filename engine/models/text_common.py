"""Pieces shared by the token models (:mod:`engine.models.bert`, :mod:`engine.models.span_infill`):
token + learned position embedding, BERT's weight init, the padding convention and mean pooling.

Shapes: B batch, L tokens, D width, V vocabulary. An ``attention_mask [B, L]`` (bool or 0/1 ints,
the tokenizer's) is True / 1 at real tokens (``[CLS]``, words, ``[SEP]``) and False / 0 at padding.

References: Devlin et al. 2019, "BERT: Pre-training of Deep Bidirectional Transformers for Language
Understanding" (learned position embeddings; init N(0, 0.02), ``initializer_range``).
"""

from __future__ import annotations

import torch
from torch import nn

#: Standard deviation of BERT's truncated-normal-free init (``initializer_range``).
INIT_STD = 0.02


class TokenEmbedding(nn.Module):
    """Token embedding plus a learned absolute position embedding: ``ids [B, L] -> [B, L, D]``.

    ``weight`` (``[V, D]``, the token table) is the one the models tie their output layer to.

    Args:
        vocab_size: ``V``.
        max_len: longest sequence ``L`` the position table covers.
        embed_dim: ``D``.

    Raises (in forward):
        ValueError: ``ids`` is not ``[B, L]`` or ``L > max_len``.
        IndexError: an id outside ``[0, V)`` (from ``nn.Embedding``, on CPU).

    References: Devlin et al. 2019, BERT, sec. 3 (input representation, learned positions).
    """

    def __init__(self, vocab_size: int, max_len: int, embed_dim: int):
        super().__init__()
        if vocab_size < 1 or max_len < 1 or embed_dim < 1:
            raise ValueError(f"TokenEmbedding: vocab_size, max_len and embed_dim must be >= 1 "
                             f"(got {vocab_size}, {max_len}, {embed_dim})")
        self.tok = nn.Embedding(vocab_size, embed_dim)
        self.pos = nn.Parameter(torch.zeros(1, max_len, embed_dim))
        self.max_len = max_len

    @property
    def weight(self) -> torch.Tensor:
        """The token table ``[V, D]`` (the tied output projection)."""
        return self.tok.weight

    def forward(self, ids: torch.Tensor, name: str = "input_ids") -> torch.Tensor:
        check_ids(ids, self.max_len, name)
        return self.tok(ids) + self.pos[:, : ids.shape[1]]  # (B, L, D)


def check_ids(ids: torch.Tensor, max_len: int, name: str = "input_ids") -> None:
    """Check that ``ids`` is an integer ``[B, L]`` tensor with ``L <= max_len``.

    Raises:
        ValueError: wrong rank or dtype, or too long (the message names ``name`` and ``max_len``).
    """
    if ids.dim() != 2 or ids.dtype.is_floating_point or ids.dtype == torch.bool:
        raise ValueError(f"{name} must be an integer [B, L] tensor (got {ids.dtype} {tuple(ids.shape)})")
    if ids.shape[1] > max_len:
        raise ValueError(f"{name} has {ids.shape[1]} tokens, more than the model's max_len = {max_len}; "
                         f"truncate the sequences or build the model with a larger max_len")


def padding_keys(attention_mask: torch.Tensor, shape: tuple[int, ...], name: str = "attention_mask") -> torch.Tensor:
    """``[B, L]`` bool, True = padding key to ignore, from a tokenizer's attention mask (True / 1 = real token).

    A row that is all padding (nothing real) gets no padding keys at all, so that its queries
    attend to the padding instead of producing NaN; its outputs are never used.

    Raises:
        ValueError: ``attention_mask`` does not have ``shape``.
    """
    if tuple(attention_mask.shape) != tuple(shape):
        raise ValueError(f"{name} has shape {tuple(attention_mask.shape)}, expected {tuple(shape)}")
    pad = ~attention_mask.bool()
    return pad & ~pad.all(dim=1, keepdim=True)


def trim_padding(
    attention_mask: torch.Tensor, *tensors: torch.Tensor, keep: torch.Tensor | None = None
) -> tuple[torch.Tensor, ...]:
    """Cut the trailing columns that are padding in every row: each of ``tensors`` ``[B, L, ...]`` -> ``[B, L', ...]``.

    ``L'`` = one past the last column where ``attention_mask`` (or ``keep``, e.g. a prediction mask)
    is True in some row; at least 1 column is kept. Right-padded batches (the tokenizer's layout)
    lose only padding, which attention ignores anyway, so a model's outputs at the kept positions
    do not change. One device-to-host sync (the length).

    Raises:
        ValueError: ``attention_mask`` is not 2-D.
    """
    if attention_mask.dim() != 2:
        raise ValueError(f"attention_mask must be [B, L] (got {tuple(attention_mask.shape)})")
    used = attention_mask.bool().any(dim=0)
    if keep is not None:
        used = used | keep.to(used.device).bool().any(dim=0)
    idx = used.nonzero()
    n = max(int(idx[-1, 0]) + 1 if idx.numel() else 0, 1)
    if n >= attention_mask.shape[1]:
        return tensors
    return tuple(t[:, :n] for t in tensors)


def masked_mean(hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """Mean of ``hidden [B, L, D]`` over the real tokens of each row (``attention_mask [B, L]``) -> ``[B, D]``.

    A row with no real token gives zeros.
    """
    m = attention_mask.to(hidden.dtype).unsqueeze(-1)  # (B, L, 1)
    return (hidden * m).sum(dim=1) / m.sum(dim=1).clamp_min(1.0)


def bert_init(module: nn.Module) -> None:
    """BERT's init, for ``module.apply``: Linear and Embedding weights N(0, 0.02), biases 0,
    LayerNorm (1, 0). Uses the global torch RNG.

    References: Devlin et al. 2019, BERT (``BertPreTrainedModel._init_weights``, ``initializer_range``).
    """
    if isinstance(module, (nn.Linear, nn.Embedding)):
        nn.init.normal_(module.weight, std=INIT_STD)
        if getattr(module, "bias", None) is not None:
            nn.init.zeros_(module.bias)
    elif isinstance(module, nn.LayerNorm):
        nn.init.ones_(module.weight)
        nn.init.zeros_(module.bias)
    elif isinstance(module, TokenEmbedding):
        nn.init.normal_(module.pos, std=INIT_STD)
