"""Count-based baselines for masked-token prediction and span infilling.

A masked language model is only worth its training time if it beats what token counts already
know. :class:`TokenBaselines` is fitted on the training split (the same tokenizer as the model) and
predicts the hidden tokens of the SAME masks the model is scored on, with three rules:

- ``unigram``: the most frequent training token, everywhere.
- ``position``: the most frequent training token at the same absolute position of the sequence
  (position 0 is ``[CLS]``); a position where training had no candidate token falls back to unigram.
- ``bigram``: the most likely token given its left neighbour ``l`` and right neighbour ``r``, from
  training counts. A neighbour is *known* when it is inside the sequence, a real token
  (``attention_mask``) and not itself a position being predicted (a masked neighbour is unknown,
  whatever the corrupted input shows there); special tokens (``[CLS]``, ``[SEP]``) are known
  neighbours. The first rule that has evidence decides:

  1. both known and ``(l, ., r)`` seen in training: ``argmax_t c(l, t, r)``;
  2. both known: ``argmax_t c(l, t) c(t, r) / c(t)`` over the ``t`` with a positive score (the
     two bigrams combined as ``P(t | l) P(r | t)``, up to a factor that does not depend on ``t``);
  3. ``l`` known and seen: ``argmax_t c(l, t)``;
  4. ``r`` known and seen: ``argmax_t c(t, r)``;
  5. unigram.

Counts: ``c(t)`` counts the *candidate* tokens of the training set (real, non-special tokens),
``c(l, t)`` / ``c(t, r)`` / ``c(l, t, r)`` count those candidates with their real left / right / both
neighbours (special neighbours included). Special tokens are never predicted, by any rule. Ties go
to the smallest token id.

Span infilling (:meth:`TokenBaselines.predict_span`), for one contiguous hidden span per row:
unigram and position as above (position = absolute position in the original sequence); bigram
decodes greedily left to right: the first span token has the visible token before the span as its
left neighbour, each next one the previous *prediction*; only the last span token has a right
neighbour, the visible token after the span; other span tokens use rules 3 and 5.

References: Jurafsky & Martin, "Speech and Language Processing" (3rd ed. draft), ch. 3 (n-gram
language models, backoff); the issue's acceptance baselines for masked-token accuracy.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

from engine.masking.segment import segment_bounds

__all__ = ["BASELINE_KINDS", "TokenBaselines"]

BASELINE_KINDS = ("unigram", "position", "bigram")
# (l * V + r) * V + t must fit in int64.
_MAX_VOCAB = 2_000_000


def _np(x, dtype=None) -> np.ndarray:
    """A tensor or array-like as a numpy array (on CPU)."""
    if isinstance(x, torch.Tensor):
        x = x.detach().cpu().numpy()
    return np.asarray(x, dtype=dtype)


def _best_per_group(group: np.ndarray, token: np.ndarray, count: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each distinct ``group``, the ``token`` with the highest ``count`` (ties: smallest token).

    Returns ``(groups, best_tokens)``, groups sorted ascending.
    """
    order = np.lexsort((token, -count, group))
    g = group[order]
    first = np.ones(g.shape, dtype=bool)
    first[1:] = g[1:] != g[:-1]
    return g[first], token[order][first]


def _dense(groups: np.ndarray, best: np.ndarray, size: int) -> np.ndarray:
    """``[size]`` int64 table: ``best`` at ``groups``, -1 elsewhere."""
    out = np.full(size, -1, dtype=np.int64)
    out[groups] = best
    return out


def _lookup(sorted_keys: np.ndarray, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Index of each of ``keys`` in ``sorted_keys`` and whether it is there."""
    idx = np.searchsorted(sorted_keys, keys)
    idx_c = np.minimum(idx, max(len(sorted_keys) - 1, 0))
    found = (idx < len(sorted_keys)) & (sorted_keys[idx_c] == keys) if len(sorted_keys) else np.zeros(keys.shape, bool)
    return idx_c, found


#: Rows counted at a time by :meth:`TokenBaselines.fit`.
FIT_CHUNK = 8192


def _merge(parts: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """Sum per-chunk ``(sorted keys, counts)`` into one sorted ``(keys, counts int64)``."""
    if not parts:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    if len(parts) == 1:
        return parts[0][0], parts[0][1].astype(np.int64)
    keys, inv = np.unique(np.concatenate([k for k, _ in parts]), return_inverse=True)
    counts = np.bincount(inv, weights=np.concatenate([c for _, c in parts]), minlength=len(keys))
    return keys, counts.astype(np.int64)


class TokenBaselines:
    """Unigram, position and bidirectional-bigram predictors fitted on training token ids.

    Build with :meth:`fit`. The tables are numpy arrays: dense ``[V]`` / ``[L]`` best-token tables and
    sorted int64 keys with counts for the bigrams and trigrams (no ``V x V`` matrix), so a vocabulary
    of 8k and 100k training sequences fit in about a second. :meth:`fit` counts :data:`FIT_CHUNK`
    rows at a time (a memory-mapped split is read chunk by chunk) and sums the chunks' tables.
    """

    def __init__(self, vocab_size: int, special_ids: Sequence[int], unigram: np.ndarray,
                 position_best: np.ndarray, left_keys: np.ndarray, left_counts: np.ndarray,
                 right_keys: np.ndarray, right_counts: np.ndarray, tri_groups: np.ndarray, tri_best: np.ndarray):
        self.vocab_size = int(vocab_size)
        self.special_ids = tuple(sorted({int(i) for i in special_ids}))
        self.unigram_counts = unigram  # [V] c(t) of candidate tokens
        self.unigram_best = int(np.argmax(unigram))
        self.position_best = position_best  # [L_train]: best token per position, -1 = none
        V = self.vocab_size
        self._lkeys, self._lcounts = left_keys, left_counts  # sorted l * V + t, c(l, t)
        self._rkeys, self._rcounts = right_keys, right_counts  # sorted t * V + r, c(t, r)
        self.left_best = _dense(*_best_per_group(left_keys // V, left_keys % V, left_counts), V)
        self.right_best = _dense(*_best_per_group(right_keys % V, right_keys // V, right_counts), V)
        self._tri_groups, self._tri_best = tri_groups, tri_best  # sorted l * V + r -> argmax_t c(l, t, r)

    # --- fitting -----------------------------------------------------------------------------------

    @classmethod
    def fit(cls, train_ids, train_attention, special_ids: Sequence[int], vocab_size: int) -> "TokenBaselines":
        """Count the training split.

        Args:
            train_ids: ``[N, L]`` int token ids (tensor or array), ``[CLS] tokens [SEP] [PAD]...``.
            train_attention: ``[N, L]`` bool or 0/1, True = real token.
            special_ids: ids never predicted (``[PAD] [CLS] [SEP] [MASK] [UNK]``).
            vocab_size: ``V``; every id must be in ``[0, V)``.

        Returns:
            The fitted :class:`TokenBaselines`.

        Raises:
            ValueError: shapes differ or are not 2-D, an id outside ``[0, V)``, ``V`` not in
                ``[1, 2_000_000]``, or no real non-special token to count.
        """
        V = int(vocab_size)
        shape, a_shape = tuple(train_ids.shape), tuple(train_attention.shape)
        if len(shape) != 2 or a_shape != shape:
            raise ValueError(f"TokenBaselines.fit: train_ids and train_attention must be [N, L] of one shape "
                             f"(got {shape}, {a_shape})")
        if not 1 <= V <= _MAX_VOCAB:
            raise ValueError(f"TokenBaselines.fit: vocab_size must be in [1, {_MAX_VOCAB}] (got {vocab_size})")
        special = np.zeros(V, dtype=bool)
        special[[int(i) for i in special_ids if 0 <= int(i) < V]] = True
        N, L = shape
        unigram = np.zeros(V, dtype=np.int64)
        parts: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {"pos": [], "left": [], "right": [], "tri": []}
        for s in range(0, N, FIT_CHUNK):  # counts are sums: chunk by chunk, the same tables, bounded memory
            real = _np(train_attention[s : s + FIT_CHUNK]).astype(bool)
            width = int(np.flatnonzero(real.any(axis=0)).max()) + 1 if real.any() else 0
            real = real[:, :width]  # columns that are padding in every row of the chunk: never counted
            ids = _np(train_ids[s : s + FIT_CHUNK])[:, :width].astype(np.int64, copy=False)
            if ids.size and (ids[real].min(initial=0) < 0 or ids[real].max(initial=0) >= V):
                raise ValueError(f"TokenBaselines.fit: a token id is outside [0, vocab_size = {V})")
            ids = np.where(real, ids, 0)  # padding ids are never looked at; keep them in range
            cand = real & ~special[ids]  # (n, width) candidate (predictable) tokens
            if not cand.any():
                continue
            unigram += np.bincount(ids[cand], minlength=V)
            cols = np.broadcast_to(np.arange(width, dtype=np.int64), ids.shape)
            parts["pos"].append(np.unique(cols[cand] * V + ids[cand], return_counts=True))
            left_ok = np.zeros_like(cand)
            left_ok[:, 1:] = cand[:, 1:] & real[:, :-1]
            right_ok = np.zeros_like(cand)
            right_ok[:, :-1] = cand[:, :-1] & real[:, 1:]
            left_nb = np.zeros_like(ids)
            left_nb[:, 1:] = ids[:, :-1]
            right_nb = np.zeros_like(ids)
            right_nb[:, :-1] = ids[:, 1:]
            parts["left"].append(np.unique(left_nb[left_ok] * V + ids[left_ok], return_counts=True))
            parts["right"].append(np.unique(ids[right_ok] * V + right_nb[right_ok], return_counts=True))
            both = left_ok & right_ok
            parts["tri"].append(np.unique((left_nb[both] * V + right_nb[both]) * V + ids[both], return_counts=True))
        if not unigram.any():
            raise ValueError("TokenBaselines.fit: the training ids have no real non-special token to count")
        (pk, pc), (lkeys, lcounts), (rkeys, rcounts), (tkeys, tcounts) = (_merge(parts[k]) for k in ("pos", "left", "right", "tri"))
        position_best = _dense(*_best_per_group(pk // V, pk % V, pc), L)
        tri_groups, tri_best = _best_per_group(tkeys // V, tkeys % V, tcounts)
        return cls(V, special_ids, unigram, position_best, lkeys, lcounts, rkeys, rcounts, tri_groups, tri_best)

    # --- the rules ---------------------------------------------------------------------------------

    def _position(self, cols: np.ndarray) -> np.ndarray:
        """Best token at absolute positions ``cols`` (unigram where training had none)."""
        P = len(self.position_best)
        best = self.position_best[np.minimum(cols, max(P - 1, 0))] if P else np.full(cols.shape, -1)
        return np.where((cols < P) & (best >= 0), best, self.unigram_best)

    def _product(self, l: np.ndarray, r: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Rule 2 for query pairs ``(l, r)``: ``argmax_t c(l, t) c(t, r) / c(t)``; returns (best, has_positive)."""
        V = self.vocab_size
        Q = len(l)
        best, has = np.full(Q, -1, dtype=np.int64), np.zeros(Q, dtype=bool)
        if Q == 0 or len(self._lkeys) == 0 or len(self._rkeys) == 0:
            return best, has
        # Row l of the left bigram is a contiguous slice of the sorted keys l * V + t.
        lo = np.searchsorted(self._lkeys, l * V)
        hi = np.searchsorted(self._lkeys, (l + 1) * V)
        n = hi - lo
        total = int(n.sum())
        if total == 0:
            return best, has
        qid = np.repeat(np.arange(Q), n)
        offs = np.arange(total) - np.repeat(np.cumsum(n) - n, n)
        idx = np.repeat(lo, n) + offs
        t = self._lkeys[idx] % V
        ridx, found = _lookup(self._rkeys, t * V + r[qid])
        num = self._lcounts[idx] * np.where(found, self._rcounts[ridx], 0)
        score = num / self.unigram_counts[t]  # c(t) >= c(l, t) > 0
        pos = score > 0
        qid, t, score = qid[pos], t[pos], score[pos]
        if len(qid):
            g, b = _best_per_group(qid, t, score)
            best[g], has[g] = b, True
        return best, has

    def _bigram(self, l: np.ndarray, lk: np.ndarray, r: np.ndarray, rk: np.ndarray) -> np.ndarray:
        """Rules 1-5 for queries with neighbours ``l`` / ``r`` (ids) known where ``lk`` / ``rk``."""
        V = self.vocab_size
        l = np.where(lk, l, 0)
        r = np.where(rk, r, 0)
        pred = np.full(len(l), self.unigram_best, dtype=np.int64)
        done = np.zeros(len(l), dtype=bool)
        both = lk & rk
        # 1. trigram
        idx, found = _lookup(self._tri_groups, l * V + r)
        hit = both & found
        pred[hit] = self._tri_best[idx[hit]]
        done |= hit
        # 2. product of the two bigrams
        q = np.nonzero(both & ~done)[0]
        b, has = self._product(l[q], r[q])
        pred[q[has]] = b[has]
        done[q[has]] = True
        # 3. left bigram, 4. right bigram
        for known, table, nb in ((lk, self.left_best, l), (rk, self.right_best, r)):
            cand = table[nb]
            use = known & ~done & (cand >= 0)
            pred[use] = cand[use]
            done |= use
        return pred  # 5. unigram elsewhere

    # --- masked tokens -----------------------------------------------------------------------------

    def predict(self, kind: str, input_ids, attention_mask, target_mask) -> torch.Tensor:
        """Predictions at the masked positions.

        Args:
            kind: ``"unigram"``, ``"position"`` or ``"bigram"``.
            input_ids: ``[B, L]`` the input the model sees (masked / corrupted); only the
                non-target real tokens are read (as bigram neighbours).
            attention_mask: ``[B, L]`` True / 1 = real token.
            target_mask: ``[B, L]`` bool, the positions to predict (``M`` of them).

        Returns:
            ``[M]`` int64 (CPU) in row-major order of ``target_mask`` (the order of ``x[target_mask]``
            and of :meth:`engine.models.bert.BertMLM.forward`'s logits); never a special id.

        Raises:
            ValueError: unknown ``kind``, or shapes differ.
        """
        ids, real, tm = self._inputs(kind, input_ids, attention_mask, target_mask, "target_mask")
        rows, cols = np.nonzero(tm)
        if kind == "unigram":
            out = np.full(len(rows), self.unigram_best, dtype=np.int64)
        elif kind == "position":
            out = self._position(cols)
        else:
            L = ids.shape[1]
            visible = real & ~tm
            lc, rc = np.maximum(cols - 1, 0), np.minimum(cols + 1, L - 1)
            lk = (cols >= 1) & visible[rows, lc]
            rk = (cols <= L - 2) & visible[rows, rc]
            out = self._bigram(ids[rows, lc], lk, ids[rows, rc], rk)
        return torch.from_numpy(out)

    def accuracy(self, kind: str, input_ids, attention_mask, target_mask, labels) -> float:
        """Top-1 accuracy of :meth:`predict` against ``labels [B, L]`` (the original ids; only the
        target positions are read, so ``-100`` elsewhere is fine). NaN when nothing is masked."""
        pred = self.predict(kind, input_ids, attention_mask, target_mask).numpy()
        truth = _np(labels).astype(np.int64)[_np(target_mask).astype(bool)]
        return float((pred == truth).mean()) if len(pred) else float("nan")

    # --- spans -------------------------------------------------------------------------------------

    def predict_span(self, kind: str, input_ids, attention_mask, span_mask, teacher_forced: bool = False) -> torch.Tensor:
        """Predictions for one hidden contiguous span per row (see the module docstring for bigram).

        By default the bigram is greedy, left to right: its left neighbour inside the span is its own
        previous prediction (what free generation has). ``teacher_forced=True`` gives it the true
        previous token instead (what a decoder has under teacher forcing): ``input_ids`` must then
        hold the span's true ids, and a position's own id is still never read.

        Args:
            kind: ``"unigram"``, ``"position"`` or ``"bigram"``.
            input_ids: ``[B, L]`` original ids (the span's own ids are never read).
            attention_mask: ``[B, L]`` True / 1 = real token.
            span_mask: ``[B, L]`` bool, at most one contiguous run per row (e.g. ``sentence_span``).

        Returns:
            ``[M]`` int64 (CPU), ``M = span_mask.sum()``, row-major (each row's span left to right);
            comparable with the span tokens of :func:`engine.models.span_infill.span_corrupt`'s
            target (eos excluded, as in :func:`~engine.models.span_infill.span_token_accuracy`).

        Raises:
            ValueError: unknown ``kind``, shapes differ, or a row has more than one run.
        """
        ids, real, sm = self._inputs(kind, input_ids, attention_mask, span_mask, "span_mask")
        if kind != "bigram":
            return self.predict(kind, ids, real, sm)
        start, length = (x.numpy() for x in segment_bounds(torch.from_numpy(sm), "span_mask"))
        B, L = ids.shape
        rows = np.arange(B)
        before, after = np.maximum(start - 1, 0), np.minimum(start + length, L - 1)
        prev = ids[rows, before]
        prev_k = (start >= 1) & real[rows, before]
        r = ids[rows, after]
        r_k = (start + length <= L - 1) & real[rows, after] & ~sm[rows, after]
        width = int(length.max(initial=0))
        out = np.zeros((B, width), dtype=np.int64)
        for i in range(width):  # greedy, left to right; all rows at once
            pred = self._bigram(prev, prev_k, r, r_k & (i == length - 1))
            out[:, i] = pred
            truth = ids[rows, np.minimum(start + i, L - 1)]  # the token just predicted, read only as context
            prev, prev_k = (truth if teacher_forced else pred), np.ones(B, dtype=bool)
        return torch.from_numpy(out[np.arange(width)[None, :] < length[:, None]])

    def span_accuracy(self, kind: str, input_ids, attention_mask, span_mask) -> float:
        """Token accuracy of :meth:`predict_span` against the hidden tokens. NaN when nothing is hidden."""
        pred = self.predict_span(kind, input_ids, attention_mask, span_mask).numpy()
        truth = _np(input_ids).astype(np.int64)[_np(span_mask).astype(bool)]
        return float((pred == truth).mean()) if len(pred) else float("nan")

    # --- helpers -----------------------------------------------------------------------------------

    def _inputs(self, kind, input_ids, attention_mask, mask, name):
        if kind not in BASELINE_KINDS:
            raise ValueError(f"unknown baseline {kind!r}; known: {', '.join(BASELINE_KINDS)}")
        ids = _np(input_ids).astype(np.int64)
        real = _np(attention_mask).astype(bool)
        m = _np(mask).astype(bool)
        if ids.ndim != 2 or real.shape != ids.shape or m.shape != ids.shape:
            raise ValueError(f"input_ids, attention_mask and {name} must be [B, L] of one shape "
                             f"(got {ids.shape}, {real.shape}, {m.shape})")
        ids = np.where(real, ids, 0)  # padding ids are never read
        if ids.size and (ids.min() < 0 or ids.max() >= self.vocab_size):
            raise ValueError(f"input_ids: a token id is outside [0, vocab_size = {self.vocab_size})")
        return ids, real, m
