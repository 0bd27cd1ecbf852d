"""Span completion: T5-style sentinel span infilling with a small encoder-decoder Transformer.

One contiguous segment of a text (e.g. from the ``sentence_span`` masking strategy) is replaced by
a single sentinel token in the encoder input; the decoder generates the hidden tokens followed by
an end-of-sequence token. :func:`span_corrupt` builds the pair, :class:`SpanInfiller` learns it
with teacher forcing and fills spans in with :meth:`SpanInfiller.generate` (greedy).

Shapes: B batch, L tokens of the original text, Ls tokens of the encoder input, T target tokens
(span + eos), D width, V vocabulary. Token ids follow the tokenizer's special tokens
``[PAD] [CLS] [SEP] [MASK] [UNK]`` = ``0..4``: the sentinel is ``[MASK]`` (3), eos is ``[SEP]`` (2),
the decoder's start token is ``[CLS]`` (1).

References: Raffel et al. 2020, "Exploring the Limits of Transfer Learning with a Unified
Text-to-Text Transformer" (T5), JMLR 21: sec. 3.1.4 (span corruption: each corrupted span replaced
by a sentinel in the input, the target is the dropped-out spans delimited by sentinels; with one
span per text a single sentinel and a final eos), sec. 3.1 (encoder-decoder, shared embeddings);
Vaswani et al. 2017, "Attention Is All You Need" (causal decoder with cross-attention).
"""

from __future__ import annotations

from typing import Any, Literal, NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from engine.masking.segment import segment_bounds
from engine.models.layers import Block, DecoderBlock
from engine.models.text_common import TokenEmbedding, bert_init, check_ids, masked_mean, padding_keys

__all__ = [
    "SPAN_PRESETS",
    "SpanExample",
    "SpanInfiller",
    "shift_right",
    "span_corrupt",
    "span_exact_match",
    "span_scored_mask",
    "span_token_accuracy",
]

# Widths/depths of SpanInfiller (keyword arguments without vocab_size / max_len): the BERT presets'
# widths with a decoder about half as deep as the encoder. One AdamW step at batch 64 x 32 tokens,
# vocab 8000, one sentence_span segment per row, 2-core CPU (bench/text_step_time.py, load about 1):
# tiny 138 ms (2 threads) / 218 ms (1 thread), mini 364 / 640 ms, small 1022 / 1792 ms.
SPAN_PRESETS: dict[str, dict[str, Any]] = {
    "tiny": dict(embed_dim=128, enc_depth=2, dec_depth=2, num_heads=2, mlp_ratio=4.0),
    "mini": dict(embed_dim=256, enc_depth=4, dec_depth=2, num_heads=4, mlp_ratio=4.0),
    "small": dict(embed_dim=384, enc_depth=6, dec_depth=3, num_heads=6, mlp_ratio=4.0),
}


class SpanExample(NamedTuple):
    """An encoder input and a decoder target, rows left-aligned and padded with ``pad_id``.

    Attributes:
        src_ids: ``[B, Ls]`` int64: the text with its span replaced by one sentinel.
        src_mask: ``[B, Ls]`` bool, True = real token.
        tgt_ids: ``[B, T]`` int64: the span's tokens, then eos.
        tgt_mask: ``[B, T]`` bool, True = real target token (span and eos).
    """

    src_ids: torch.Tensor
    src_mask: torch.Tensor
    tgt_ids: torch.Tensor
    tgt_mask: torch.Tensor


def _compact(keep: torch.Tensor, values: torch.Tensor, width: int, fill: int) -> torch.Tensor:
    """Move the kept ``values`` of each row to its front, in order: ``[B, L] -> [B, width]``, the rest ``fill``."""
    B, L = keep.shape
    W = max(L, width) + 1  # the last column collects the values that are not kept
    dest = torch.where(keep, keep.long().cumsum(dim=1) - 1, torch.full_like(values, W - 1))
    out = torch.full((B, W), fill, dtype=values.dtype, device=values.device)
    out.scatter_(1, dest, values)
    return out[:, :width]


def span_corrupt(
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    span_mask: torch.Tensor,
    sentinel_id: int = 3,
    eos_id: int = 2,
    pad_id: int = 0,
) -> SpanExample:
    """T5 span corruption with one span per row: the span becomes one sentinel in the encoder input
    and, followed by eos, the decoder target.

    Row ``b`` with real tokens ``x_0 .. x_{n-1}`` (``attention_mask``) and span ``x_s .. x_{s+l-1}``
    (``span_mask``, one contiguous run) gives::

        src = x_0 .. x_{s-1}  sentinel  x_{s+l} .. x_{n-1}      (n - l + 1 tokens)
        tgt = x_s .. x_{s+l-1}  eos                              (l + 1 tokens)

    both left-aligned and padded with ``pad_id`` to the batch's longest row (``Ls``, ``T``). T5 puts
    a sentinel before each span of the target too; with a single span that sentinel carries no
    information, so the target is the span and eos only. A row with an empty span is kept
    unchanged with ``tgt = eos``. Fully vectorised: two cumulative sums and two scatters, no loop
    over rows or tokens.

    Args:
        input_ids: ``[B, L]`` int token ids (``[CLS] tokens [SEP] [PAD]...``).
        attention_mask: ``[B, L]`` bool or 0/1, True = real token.
        span_mask: ``[B, L]`` bool, True = hidden; at most one contiguous run per row, inside the
            real tokens.
        sentinel_id: the sentinel (the tokenizer's ``[MASK]``).
        eos_id: end of the target (the tokenizer's ``[SEP]``).
        pad_id: padding.

    Returns:
        :class:`SpanExample` ``(src_ids [B, Ls], src_mask [B, Ls], tgt_ids [B, T], tgt_mask [B, T])``,
        ids as int64, masks bool, on the device of ``input_ids``.

    Raises:
        ValueError: shapes differ, ``span_mask`` is not bool, a row has more than one run, or the
            span covers padding.

    References: Raffel et al. 2020, T5, sec. 3.1.4.
    """
    if input_ids.dim() != 2 or attention_mask.shape != input_ids.shape or span_mask.shape != input_ids.shape:
        raise ValueError(f"span_corrupt: input_ids, attention_mask and span_mask must all be [B, L] "
                         f"(got {tuple(input_ids.shape)}, {tuple(attention_mask.shape)}, {tuple(span_mask.shape)})")
    device = input_ids.device
    ids = input_ids.long()
    real = attention_mask.to(device).bool()
    span = span_mask.to(device)
    start, length = segment_bounds(span)  # ValueError unless one run per row
    if bool((span & ~real).any()):
        raise ValueError("span_corrupt: span_mask covers padding (attention_mask is False there)")
    B, L = ids.shape
    first = span & (torch.arange(L, device=device)[None, :] == start[:, None])  # the sentinel's slot

    src_keep = (real & ~span) | first
    src_vals = torch.where(first, torch.full_like(ids, sentinel_id), ids)
    src_len = src_keep.sum(dim=1)
    Ls = int(src_len.max()) if B else 0
    src_ids = _compact(src_keep, src_vals, Ls, pad_id)
    src_mask = torch.arange(Ls, device=device)[None, :] < src_len[:, None]

    T = int(length.max()) + 1 if B else 0
    tgt_ids = _compact(span, ids, T + 1, pad_id)
    tgt_ids.scatter_(1, length[:, None], eos_id)  # eos right after the span
    tgt_ids = tgt_ids[:, :T]
    tgt_mask = torch.arange(T, device=device)[None, :] <= length[:, None]
    return SpanExample(src_ids, src_mask, tgt_ids, tgt_mask)


def shift_right(tgt_ids: torch.Tensor, bos_id: int) -> torch.Tensor:
    """Teacher-forcing decoder input: ``[bos] + tgt[:, :-1]`` -> ``[B, T]``.

    For left-aligned targets the real positions of the result are those of ``tgt_mask``.
    """
    bos = torch.full_like(tgt_ids[:, :1], bos_id)
    return torch.cat([bos, tgt_ids[:, :-1]], dim=1)


class SpanInfiller(nn.Module):
    """Encoder-decoder Transformer for span infilling; embeddings shared by encoder, decoder and output.

    Encoder: token + learned position embedding, ``enc_depth`` pre-LN blocks (padding keys ignored),
    final LayerNorm. Decoder: the same token table plus its own learned positions, ``dec_depth``
    pre-LN :class:`~engine.models.layers.DecoderBlock` (causal self-attention, cross-attention to
    the encoder output), final LayerNorm, then logits ``h @ E^T + b`` with the token table ``E``
    (tied, stored once) and an output bias.

    Args:
        vocab_size: ``V``.
        max_len: longest encoder input ``Ls`` and longest decoder sequence ``T``.
        embed_dim, enc_depth, dec_depth, num_heads, mlp_ratio: sizes (``num_heads`` divides ``D``).
        pad_id: padding id (output of :meth:`generate` after eos).
        bos_id: the decoder's start token (default ``[CLS]`` = 1).
        eos_id: end of a generated span (default ``[SEP]`` = 2).
        dropout: dropout on the embeddings and on each residual branch (train mode only; T5: 0.1).

    Raises:
        ValueError: ``num_heads`` does not divide ``embed_dim``, or a size is < 1.

    References: Raffel et al. 2020, T5, sec. 3.1 (shared input/output embeddings, encoder-decoder);
    Vaswani et al. 2017.
    """

    def __init__(
        self,
        vocab_size: int,
        max_len: int,
        embed_dim: int,
        enc_depth: int,
        dec_depth: int,
        num_heads: int,
        mlp_ratio: float = 4.0,
        pad_id: int = 0,
        bos_id: int = 1,
        eos_id: int = 2,
        dropout: float = 0.0,
    ):
        super().__init__()
        self.vocab_size, self.max_len = vocab_size, max_len
        self.pad_id, self.bos_id, self.eos_id = pad_id, bos_id, eos_id
        self.tok_embed = TokenEmbedding(vocab_size, max_len, embed_dim)  # encoder positions inside
        self.dec_pos = nn.Parameter(torch.zeros(1, max_len, embed_dim))
        self.embed_drop = nn.Dropout(dropout) if dropout > 0 else nn.Identity()
        self.enc_blocks = nn.ModuleList([Block(embed_dim, num_heads, mlp_ratio, dropout) for _ in range(enc_depth)])
        self.enc_norm = nn.LayerNorm(embed_dim, eps=1e-6)
        self.dec_blocks = nn.ModuleList(
            [DecoderBlock(embed_dim, num_heads, mlp_ratio, dropout) for _ in range(dec_depth)]
        )
        self.dec_norm = nn.LayerNorm(embed_dim, eps=1e-6)
        self.out_bias = nn.Parameter(torch.zeros(vocab_size))
        self.apply(bert_init)
        nn.init.normal_(self.dec_pos, std=0.02)

    @property
    def output_weight(self) -> torch.Tensor:
        """The output projection ``[V, D]``: the shared token embedding itself (tied)."""
        return self.tok_embed.weight

    def encode(self, src_ids: torch.Tensor, src_mask: torch.Tensor) -> torch.Tensor:
        """``src_ids [B, Ls]``, ``src_mask [B, Ls]`` (True = real) -> ``memory [B, Ls, D]``.

        Raises:
            ValueError: bad shapes, or ``Ls > max_len``.
        """
        x = self.embed_drop(self.tok_embed(src_ids, "src_ids"))
        pad = padding_keys(src_mask, tuple(src_ids.shape), "src_mask").to(x.device)
        for blk in self.enc_blocks:
            x = blk(x, pad)
        return self.enc_norm(x)

    def decode(
        self, memory: torch.Tensor, src_mask: torch.Tensor, tgt_in: torch.Tensor, tgt_mask: torch.Tensor | None = None,
        last_only: bool = False,
    ) -> torch.Tensor:
        """Decoder logits for every position: ``memory [B, Ls, D]``, ``tgt_in [B, T]`` -> ``[B, T, V]``.

        Position ``t`` sees ``tgt_in[:, :t+1]`` (causal) and every real encoder token. With
        ``last_only`` only the last position is projected onto the vocabulary (``[B, 1, V]``): what
        a decoding step reads, without the ``[B, T, V]`` projection of the whole prefix.

        Raises:
            ValueError: bad shapes, or ``T > max_len``.
        """
        check_ids(tgt_in, self.max_len, "tgt_in")
        T = tgt_in.shape[1]
        x = self.embed_drop(self.tok_embed.tok(tgt_in) + self.dec_pos[:, :T])  # (B, T, D)
        mem_pad = padding_keys(src_mask, tuple(memory.shape[:2]), "src_mask").to(x.device)
        tgt_pad = None if tgt_mask is None else padding_keys(tgt_mask, tuple(tgt_in.shape), "tgt_mask").to(x.device)
        for blk in self.dec_blocks:
            x = blk(x, memory, tgt_pad, mem_pad)
        if last_only:
            x = x[:, -1:]
        return F.linear(self.dec_norm(x), self.output_weight, self.out_bias)  # (B, T, V) or (B, 1, V)

    def forward(
        self, src_ids: torch.Tensor, src_mask: torch.Tensor, tgt_in: torch.Tensor, tgt_mask: torch.Tensor
    ) -> torch.Tensor:
        """Teacher forcing: ``logits [B, T, V]``, position ``t`` predicting ``tgt[:, t]`` from
        ``tgt_in = shift_right(tgt, bos_id)`` (see :func:`shift_right`) and the encoder input.

        The loss is ``F.cross_entropy(logits[tgt_mask], tgt[tgt_mask])`` (eos included, so the
        model learns where a span ends).
        """
        return self.decode(self.encode(src_ids, src_mask), src_mask, tgt_in, tgt_mask)

    @torch.no_grad()
    def generate(self, src_ids: torch.Tensor, src_mask: torch.Tensor, max_new_tokens: int,
                 lengths: torch.Tensor | None = None) -> torch.Tensor:
        """Greedy decoding: the most probable token at each step, until every row has produced eos.

        With ``lengths`` (``[B]`` int, the span's token count per row, eos excluded), decoding is
        length-constrained: pad, bos and eos are never chosen inside the span and eos is forced right
        after it, so each row holds exactly ``lengths[i]`` span tokens, then eos. This is what the
        count baselines know (:meth:`engine.eval.TokenBaselines.predict_span` emits one token per
        hidden position), so their accuracies compare with this mode's.

        Each step re-runs the decoder on the whole prefix (no key/value cache: spans are tens of
        tokens, and the cost is ``O(T^2)`` decoder positions).

        Args:
            src_ids, src_mask: ``[B, Ls]`` encoder input (from :func:`span_corrupt`).
            max_new_tokens: most tokens to generate, eos included (``<= max_len``).
            lengths: optional ``[B]`` span lengths for length-constrained decoding; each ``<
                max_new_tokens``.

        Returns:
            ``[B, T]`` int64 with ``T <= max_new_tokens``: each row's tokens up to and including its
            first eos, then ``pad_id`` (a row that never produced eos runs to ``T``); comparable
            position by position with ``tgt_ids`` of :func:`span_corrupt`.

        Raises:
            ValueError: ``max_new_tokens`` not in ``[1, max_len]``, ``lengths`` not ``[B]`` or not
                in ``[0, max_new_tokens)``, or bad encoder input.
        """
        if not 1 <= max_new_tokens <= self.max_len:
            raise ValueError(f"generate: max_new_tokens must be in [1, max_len = {self.max_len}] (got {max_new_tokens})")
        memory = self.encode(src_ids, src_mask)
        B = src_ids.shape[0]
        if lengths is not None:
            lengths = torch.as_tensor(lengths, device=memory.device).long()
            if lengths.shape != (B,) or bool((lengths < 0).any()) or bool((lengths >= max_new_tokens).any()):
                raise ValueError(f"generate: lengths must be [B = {B}] span lengths in [0, max_new_tokens = "
                                 f"{max_new_tokens}) (got shape {tuple(lengths.shape)})")
            max_new_tokens = int(lengths.max()) + 1 if B else 1
        seq = torch.full((B, 1), self.bos_id, dtype=torch.long, device=memory.device)
        done = torch.zeros(B, dtype=torch.bool, device=memory.device)
        for t in range(max_new_tokens):
            logits = self.decode(memory, src_mask, seq, last_only=True)[:, -1]  # (B, V)
            if lengths is not None:
                logits[:, [self.pad_id, self.bos_id, self.eos_id]] = float("-inf")
            nxt = logits.argmax(dim=-1)  # (B,)
            if lengths is not None:
                nxt = torch.where(lengths == t, torch.full_like(nxt, self.eos_id), nxt)
            nxt = nxt.masked_fill(done, self.pad_id)
            seq = torch.cat([seq, nxt[:, None]], dim=1)
            done |= nxt == self.eos_id
            if bool(done.all()):
                break
        return seq[:, 1:]

    @torch.no_grad()
    def per_position(self, src_ids: torch.Tensor, src_mask: torch.Tensor, lengths: torch.Tensor,
                     unknown_id: int) -> torch.Tensor:
        """Each span position's most probable token from the text and the position alone, in one
        decoder pass: the decoder reads ``[bos, unknown, ..., unknown]`` instead of a prefix.

        Token accuracy scores each position on its own, and the decision that maximises its
        expectation is, at each position ``t``, the most probable token under ``p(y_t | x, t)``, not
        the continuation of a greedy prefix that, once wrong, drags every later position with it
        (minimum Bayes risk under the Hamming loss; Kumar & Byrne 2004). A model trained with part of
        its decoder input hidden (``task_params.decoder_input_mask``, word dropout as in Bowman et
        al. 2016; a fully hidden input as in the conditional masked language model of Ghazvininejad
        et al. 2019) learns that distribution for an all-hidden input. For a model trained without it
        the output is meaningless. The result is the best guess per position, not fluent text (the
        fill-in views use :meth:`generate`).

        Args:
            src_ids, src_mask: ``[B, Ls]`` encoder input (from :func:`span_corrupt`).
            lengths: ``[B]`` int span lengths (eos excluded), each ``< max_len``.
            unknown_id: the token that stood for a hidden decoder input in training (``[MASK]``).

        Returns:
            ``[B, T]`` int64, ``T = max(lengths) + 1``: ``lengths[i]`` tokens (never pad, bos, eos or
            ``unknown_id``), eos, then ``pad_id``; comparable position by position with ``tgt_ids``
            of :func:`span_corrupt`.

        Raises:
            ValueError: ``lengths`` not ``[B]`` or not in ``[0, max_len)``.
        """
        memory = self.encode(src_ids, src_mask)
        B = src_ids.shape[0]
        lengths = torch.as_tensor(lengths, device=memory.device).long()
        if lengths.shape != (B,) or bool((lengths < 0).any()) or bool((lengths >= self.max_len).any()):
            raise ValueError(f"per_position: lengths must be [B = {B}] span lengths in [0, max_len = "
                             f"{self.max_len}) (got shape {tuple(lengths.shape)})")
        T = int(lengths.max()) + 1 if B else 1
        tgt_in = torch.full((B, T), unknown_id, dtype=torch.long, device=memory.device)
        tgt_in[:, 0] = self.bos_id
        logits = self.decode(memory, src_mask, tgt_in)  # (B, T, V)
        logits[..., [self.pad_id, self.bos_id, self.eos_id, unknown_id]] = float("-inf")
        out = logits.argmax(dim=-1)
        pos = torch.arange(T, device=memory.device)[None, :]
        out = torch.where(pos == lengths[:, None], self.eos_id, out)
        return out.masked_fill(pos > lengths[:, None], self.pad_id)

    @torch.no_grad()
    def features(self, src_ids: torch.Tensor, src_mask: torch.Tensor) -> torch.Tensor:
        """Frozen features for linear probes: the encoder output averaged over real tokens -> ``[B, D]``."""
        memory = self.encode(src_ids, src_mask)
        return masked_mean(memory, src_mask.to(memory.device))


# --- metrics ---------------------------------------------------------------------------------------


def span_scored_mask(tgt_mask: torch.Tensor) -> torch.Tensor:
    """The target positions the span metrics score: the real span tokens, eos excluded -> ``[B, T]`` bool.

    The eos is the last real position of each (left-aligned) row. Leaving it out makes the token
    accuracy comparable with the text baselines, which predict the span's tokens only
    (:meth:`engine.eval.TokenBaselines.predict_span`).
    """
    mask = tgt_mask.bool()
    n = mask.sum(dim=1, keepdim=True)  # (B, 1)
    return mask & (torch.arange(mask.shape[1], device=mask.device)[None, :] < n - 1)


def span_token_accuracy(
    logits: torch.Tensor, tgt: torch.Tensor, tgt_mask: torch.Tensor, reduction: Literal["mean", "sum"] = "mean"
) -> torch.Tensor:
    """Teacher-forced token accuracy on the span tokens, **eos excluded** (see :func:`span_scored_mask`).

    Args:
        logits: ``[B, T, V]`` from :meth:`SpanInfiller.forward`.
        tgt: ``[B, T]`` target ids; tgt_mask: ``[B, T]`` real target positions (span + eos).
        reduction: ``"mean"``: the fraction correct (0 when nothing is scored); ``"sum"``: the
            number correct (divide by ``span_scored_mask(tgt_mask).sum()`` when pooling batches).

    Returns:
        Scalar float32 tensor.
    """
    scored = span_scored_mask(tgt_mask.to(logits.device))
    hits = ((logits.argmax(dim=-1) == tgt.to(logits.device)) & scored).sum().float()
    return hits if reduction == "sum" else hits / scored.sum().clamp_min(1)


def span_exact_match(
    generated: torch.Tensor, tgt: torch.Tensor, tgt_mask: torch.Tensor, reduction: Literal["mean", "sum"] = "mean"
) -> torch.Tensor:
    """Fraction of rows whose generated span is exactly the target: every real target token
    (span and eos, so the generation also stopped at the right place) equals the generated token.

    Args:
        generated: ``[B, T']`` from :meth:`SpanInfiller.generate` (padded or cut to ``T``).
        tgt: ``[B, T]``; tgt_mask: ``[B, T]`` real target positions (span + eos).
        reduction: ``"mean"`` (fraction of rows, 0 for an empty batch) or ``"sum"`` (number of rows).

    Returns:
        Scalar float32 tensor.
    """
    B, T = tgt.shape
    gen = generated.to(tgt.device)
    if gen.shape[1] < T:
        gen = torch.cat([gen, gen.new_full((B, T - gen.shape[1]), -1)], dim=1)  # -1: matches no token
    gen = gen[:, :T]
    mask = tgt_mask.to(tgt.device).bool()
    ok = ((gen == tgt) | ~mask).all(dim=1).float()
    return ok.sum() if reduction == "sum" else ok.sum() / max(B, 1)
