"""BERT-style masked language model: a pre-LN Transformer encoder with learned positions and an MLM
head tied to the input embedding, evaluated only at the masked positions.

The mask is an argument (``mlm_mask [B, L]`` bool, True = predicted), drawn by any strategy of
:mod:`engine.masking` and applied by :func:`engine.masking.mlm.apply_mlm` (80/10/10); the model
never draws masks. Shapes: B batch, L tokens, D width, V vocabulary, M = number of masked
positions in the batch (``mlm_mask.sum()``), in row-major order (the order of ``x[mlm_mask]``).

Differences from the paper's BERT, on purpose: pre-LN blocks with a final LayerNorm (as GPT-2 and
most recent encoders; stable without warmup tricks at these small sizes) instead of post-LN, no
token-type embedding and no next-sentence head (RoBERTa drops NSP), dropout off by default (BERT's
0.1 is available as ``dropout``; in a CPU budget of minutes the small presets underfit, and on
TREC dropout 0.1 lowered val masked accuracy after 5 minutes from 32.2% to 28.1%).

References: Devlin et al. 2019, "BERT: Pre-training of Deep Bidirectional Transformers for Language
Understanding", NAACL (sec. 3.1 masked LM, appendix A.2 head, ``BertLMPredictionHead``: transform
Dense -> GELU -> LayerNorm, decoder tied to the word embeddings, output bias); Turc et al. 2019,
"Well-Read Students Learn Better" (BERT-mini / BERT-small sizes).
"""

from __future__ import annotations

from typing import Any, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from engine.models.layers import Block
from engine.models.text_common import TokenEmbedding, bert_init, masked_mean, padding_keys, trim_padding

__all__ = ["BertMLM", "TEXT_PRESETS"]

# Widths/depths of BertMLM (keyword arguments without vocab_size / max_len). One AdamW step at batch
# 64 x 32 tokens, vocab 8000, 15% masked, on the 2-core development CPU (bench/text_step_time.py,
# torch 2.11, load average about 1): tiny 66 ms (2 threads) / 134 ms (1 thread), mini 282 / 514 ms,
# small 773 / 1502 ms. With other processes on the cores, 2 threads can be several times slower
# than 1 (threads wait on each other).
TEXT_PRESETS: dict[str, dict[str, Any]] = {
    "tiny": dict(embed_dim=128, depth=2, num_heads=2, mlp_ratio=4.0),  # BERT-tiny (Turc et al. 2019), 1.45M params at V=8000
    "mini": dict(embed_dim=256, depth=4, num_heads=4, mlp_ratio=4.0),  # BERT-mini: 4 x 256, 4 heads, MLP 1024; 5.3M
    "small": dict(embed_dim=384, depth=6, num_heads=6, mlp_ratio=4.0),  # 13.9M
}


class BertMLM(nn.Module):
    """Masked language model: encoder + BERT's MLM head, run only at the masked positions.

    Args:
        vocab_size: ``V`` (token ids are in ``[0, V)``).
        max_len: longest input ``L`` (the learned position table).
        embed_dim, depth, num_heads: ``D``, encoder blocks, heads (``num_heads`` divides ``D``).
        mlp_ratio: MLP hidden width / ``D``.
        pad_id: the padding id (kept for callers; padding is taken from ``attention_mask``).
        dropout: dropout on the embeddings and on each residual branch, train mode only (BERT: 0.1).

    The decoder of the head has no weight of its own: it multiplies by the token embedding table
    (:attr:`decoder_weight` *is* ``tok_embed.weight``), so the state dict holds the tied tensor
    once (safetensors refuses two names for one tensor) and gradients from both uses add up.

    Raises:
        ValueError: ``num_heads`` does not divide ``embed_dim``, or a size is < 1.

    References: Devlin et al. 2019, BERT (sec. 3.1, appendix A.2).
    """

    def __init__(
        self,
        vocab_size: int,
        max_len: int,
        embed_dim: int,
        depth: int,
        num_heads: int,
        mlp_ratio: float = 4.0,
        pad_id: int = 0,
        dropout: float = 0.0,
    ):
        super().__init__()
        self.vocab_size = vocab_size
        self.max_len = max_len
        self.pad_id = pad_id
        self.tok_embed = TokenEmbedding(vocab_size, max_len, embed_dim)
        self.embed_drop = nn.Dropout(dropout) if dropout > 0 else nn.Identity()
        self.blocks = nn.ModuleList([Block(embed_dim, num_heads, mlp_ratio, dropout) for _ in range(depth)])
        self.norm = nn.LayerNorm(embed_dim, eps=1e-6)
        # MLM head (BertLMPredictionHead): transform, then the tied decoder plus an output bias.
        self.head_dense = nn.Linear(embed_dim, embed_dim)
        self.head_norm = nn.LayerNorm(embed_dim, eps=1e-6)
        self.head_bias = nn.Parameter(torch.zeros(vocab_size))
        self.apply(bert_init)

    @property
    def decoder_weight(self) -> torch.Tensor:
        """The MLM decoder's weight ``[V, D]``: the input token embedding itself (tied)."""
        return self.tok_embed.weight

    def forward_encoder(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Encode a batch: ``input_ids [B, L]``, ``attention_mask [B, L]`` (True / 1 = real token) -> ``hidden [B, L, D]``.

        Padding keys are ignored by every attention (``key_padding``), so appending padding does not
        change the hidden states of the real tokens. The hidden states at padding positions are
        computed but meaningless.

        Raises:
            ValueError: ``input_ids`` is not ``[B, L]`` with ``L <= max_len``, or ``attention_mask``
                does not have its shape.
        """
        x, key_padding = self._embed(input_ids, attention_mask)
        for blk in self.blocks:
            x = blk(x, key_padding)
        return self.norm(x)

    def _embed(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Token + position embeddings ``[B, L, D]`` and the blocks' ``key_padding`` ``[B, L]`` (or None)."""
        x = self.embed_drop(self.tok_embed(input_ids))  # (B, L, D)
        key_padding = padding_keys(attention_mask, tuple(input_ids.shape)).to(x.device)
        if not bool(key_padding.any()):  # no padding: attention without a mask takes the fastest kernel (flash
            key_padding = None  # on CUDA, as Hugging Face does); on CUDA a host read, as the loop's per-step loss read
        return x, key_padding

    def forward_mlm(self, hidden: torch.Tensor, mlm_mask: torch.Tensor) -> torch.Tensor:
        """The MLM head on the masked positions only: ``hidden [B, L, D]``, ``mlm_mask [B, L]`` bool -> ``logits [M, V]``.

        The masked rows are gathered (``hidden[mlm_mask]``, row-major order) *before* the dense
        transform and the ``D x V`` decoder, so the head costs ``O(M D V)`` instead of ``O(B L D V)``.

        Raises:
            ValueError: ``mlm_mask`` is not a bool tensor of shape ``hidden.shape[:2]``.
        """
        if mlm_mask.dtype != torch.bool or tuple(mlm_mask.shape) != tuple(hidden.shape[:2]):
            raise ValueError(f"mlm_mask must be a bool [B, L] = {tuple(hidden.shape[:2])} tensor "
                             f"(got {mlm_mask.dtype} {tuple(mlm_mask.shape)})")
        return self._head(hidden[mlm_mask.to(hidden.device)])

    def _head(self, h: torch.Tensor) -> torch.Tensor:
        """BERT's MLM head on gathered final hidden states: ``[M, D] -> logits [M, V]``."""
        h = self.head_norm(F.gelu(self.head_dense(h)))  # (M, D)
        return F.linear(h, self.decoder_weight, self.head_bias)  # (M, V)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, mlm_mask: torch.Tensor) -> torch.Tensor:
        """``input_ids [B, L]`` (already corrupted, e.g. by ``apply_mlm``), ``attention_mask [B, L]``,
        ``mlm_mask [B, L]`` bool -> ``logits [M, V]`` at the masked positions (row-major order).

        Trailing columns that are padding in every row (and masked nowhere) are cut before the
        encoder (:func:`~engine.models.text_common.trim_padding`): the result is the same (padding
        keys are ignored) and a batch of short texts padded to a long ``L`` costs what its longest
        text costs. The last block runs its queries and MLP at the masked positions only
        (:meth:`~engine.models.layers.Block.forward_rows`): the loss reads nothing else, so the
        logits equal ``forward_mlm(forward_encoder(...))`` to float rounding at about 3/4 of that
        block's cost at 15% masking. The loss is ``F.cross_entropy(logits, labels[mlm_mask])`` with
        the original ids as labels.

        Raises:
            ValueError: see :meth:`forward_encoder` and :meth:`forward_mlm`.
        """
        if tuple(mlm_mask.shape) != tuple(input_ids.shape):
            raise ValueError(f"mlm_mask must be a bool [B, L] = {tuple(input_ids.shape)} tensor "
                             f"(got {mlm_mask.dtype} {tuple(mlm_mask.shape)})")
        input_ids, attention_mask, mlm_mask = trim_padding(attention_mask, input_ids, attention_mask, mlm_mask,
                                                           keep=mlm_mask)
        x, key_padding = self._embed(input_ids, attention_mask)
        for blk in self.blocks[:-1]:
            x = blk(x, key_padding)
        h = self.norm(self.blocks[-1].forward_rows(x, mlm_mask, key_padding))  # (M, D)
        return self._head(h)

    @torch.no_grad()
    def features(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Frozen sentence features for linear probes: the mean of the final hidden states over the
        real tokens (``[CLS]`` and ``[SEP]`` included, padding excluded) -> ``[B, D]``."""
        input_ids, attention_mask = trim_padding(attention_mask, input_ids, attention_mask)
        hidden = self.forward_encoder(input_ids, attention_mask)
        return masked_mean(hidden, attention_mask.to(hidden.device))

    @torch.no_grad()
    def predict_topk(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        positions_mask: torch.Tensor,
        k: int = 3,
        exclude_ids: Sequence[int] = (),
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The ``k`` most probable tokens at each position of ``positions_mask`` (the fill-in box).

        Args:
            input_ids: ``[B, L]``, usually with ``[MASK]`` at the positions asked for.
            attention_mask: ``[B, L]``.
            positions_mask: ``[B, L]`` bool, the positions to predict (``M`` of them).
            k: how many candidates (clamped to ``V``).
            exclude_ids: ids never proposed (e.g. the special tokens); their probability is not
                given to the others: ``probs`` stay the model's softmax over the whole vocabulary.

        Returns:
            ``(ids [M, k] int64, probs [M, k] float32)``, most probable first, row-major order of
            the positions.
        """
        logits = self.forward(input_ids, attention_mask, positions_mask).float()  # (M, V)
        probs = logits.softmax(dim=-1)
        if len(exclude_ids):
            idx = torch.as_tensor(list(exclude_ids), dtype=torch.long, device=probs.device)
            probs = probs.index_fill(1, idx, -1.0)  # below every real probability
        k = max(1, min(int(k), probs.shape[1]))
        top = probs.topk(k, dim=-1)
        return top.indices, top.values.clamp_min(0.0)
