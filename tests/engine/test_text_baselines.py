"""engine.eval.text_baselines: unigram / position / bidirectional-bigram baselines, by hand and
against a plain-Python reference of the documented rule."""

from __future__ import annotations

import csv
from collections import Counter

import numpy as np
import pytest
import torch

from engine.eval import BASELINE_KINDS, TokenBaselines, text_baselines
from engine.text.tokenizer import TokenizerSettings, train_tokenizer

PAD, CLS, SEP, MASK, UNK = 0, 1, 2, 3, 4
SPECIALS = (PAD, CLS, SEP, MASK, UNK)
V = 12


def padded(rows, L=None):
    L = L or max(len(r) for r in rows)
    ids = torch.tensor([r + [PAD] * (L - len(r)) for r in rows])
    return ids, ids != PAD


# Training corpus (candidates: the word ids 5..9):
#   A: [CLS] 5 6 [SEP]    B: [CLS] 7 8 9 [SEP]    D: [CLS] 5 8 [SEP]    E = A    F = B
# c(t): 5:3 6:2 7:2 8:3 9:2        position 1: 5:3 7:2   position 2: 6:2 8:3   position 3: 9:2
# c(l,t): (1,5):3 (1,7):2 (5,6):2 (5,8):1 (7,8):2 (8,9):2
# c(t,r): (5,6):2 (5,8):1 (6,2):2 (7,8):2 (8,9):2 (8,2):1 (9,2):2
# c(l,t,r): (1,5,6):2 (1,5,8):1 (1,7,8):2 (5,6,2):2 (5,8,2):1 (7,8,9):2 (8,9,2):2
TRAIN = [[CLS, 5, 6, SEP], [CLS, 7, 8, 9, SEP], [CLS, 5, 8, SEP], [CLS, 5, 6, SEP], [CLS, 7, 8, 9, SEP]]


@pytest.fixture(scope="module")
def base() -> TokenBaselines:
    ids, att = padded(TRAIN)
    return TokenBaselines.fit(ids, att, SPECIALS, V)


def predict(base, kind, row, targets):
    ids, att = padded([row])
    tm = torch.zeros_like(att)
    tm[0, targets] = True
    return base.predict(kind, ids, att, tm).tolist()


def test_unigram_and_position_by_hand(base):
    assert base.unigram_best == 5  # a tie 5:3 / 8:3 -> the smallest id
    row = [CLS, MASK, MASK, MASK, SEP]
    assert predict(base, "unigram", row, [1, 2, 3]) == [5, 5, 5]
    assert predict(base, "position", row, [1, 2, 3]) == [5, 8, 9]
    # a position training never filled with a word (5, past the longest text) -> unigram
    assert predict(base, "position", [CLS, 7, 8, 9, 6, 6, SEP], [4, 5]) == [5, 5]


def test_bigram_rule_1_trigram(base):
    # (CLS, ., 8): 7 twice, 5 once; the left bigram of CLS alone would say 5.
    assert predict(base, "bigram", [CLS, MASK, 8, 9, SEP], [1]) == [7]
    # (5, ., SEP): 6 twice, 8 once.
    assert predict(base, "bigram", [CLS, 5, MASK, SEP], [2]) == [6]


def test_bigram_rule_2_product_of_bigrams(base):
    # (5, ., 9) never seen: c(5,6) c(6,9) / c(6) = 0, c(5,8) c(8,9) / c(8) = 1 * 2 / 3 -> 8,
    # although the left bigram alone would say 6.
    assert predict(base, "bigram", [CLS, 5, MASK, 9, SEP], [2]) == [8]


def test_bigram_rules_3_4_masked_neighbours_are_unknown(base):
    # pos 1: left CLS known, right masked -> left bigram of CLS: 5.  pos 2: left masked, right 9 -> 8.
    assert predict(base, "bigram", [CLS, MASK, MASK, 9, SEP], [1, 2]) == [5, 8]
    # A target that shows a token (BERT's 10% random / 10% unchanged) is still unknown as a
    # neighbour: pos 2 must not use the 9 at pos 3 (that would give 8 by rule 2), so left bigram 6;
    # pos 3: right bigram of [SEP], a tie 6:2 / 9:2 -> 6.
    assert predict(base, "bigram", [CLS, 5, MASK, 9, SEP], [2, 3]) == [6, 6]


def test_bigram_rule_5_unigram(base):
    # left 9 is never followed by a word, right 7 never preceded by one: nothing but the unigram.
    assert predict(base, "bigram", [CLS, 9, MASK, 7, SEP], [2]) == [5]


def test_no_special_token_is_ever_predicted():
    # [UNK] is the most frequent token everywhere, and [CLS]/[SEP] surround every word.
    train = [[CLS, UNK, UNK, 6, SEP], [CLS, UNK, 7, UNK, SEP], [CLS, UNK, UNK, UNK, SEP]]
    ids, att = padded(train)
    base = TokenBaselines.fit(ids, att, SPECIALS, V)
    assert base.unigram_best == 6  # 6 and 7 once each: the smallest
    q, qa = padded([[CLS, MASK, MASK, MASK, SEP], [CLS, UNK, MASK, UNK, SEP]])
    tm = (q == MASK)
    for kind in BASELINE_KINDS:
        pred = base.predict(kind, q, qa, tm)
        assert not torch.isin(pred, torch.tensor(SPECIALS)).any(), kind
    assert base.predict("position", q, qa, tm).tolist() == [6, 7, 6, 7]  # pos 1 saw only [UNK] -> unigram
    # (UNK, ., UNK) was seen with 7 only.
    assert base.predict("bigram", q, qa, tm).tolist()[-1] == 7


def test_accuracy(base):
    ids, att = padded([[CLS, 7, 8, 9, SEP], [CLS, 5, 8, SEP]])
    tm = torch.tensor([[0, 1, 0, 0, 0], [0, 0, 1, 0, 0]], dtype=torch.bool)
    shown = ids.masked_fill(tm, MASK)
    # truth 7, 8.  unigram: 5, 5.  bigram: (CLS, ., 8) -> 7 right, (5, ., SEP) -> 6 wrong.
    assert base.accuracy("unigram", shown, att, tm, ids) == 0.0
    assert base.accuracy("bigram", shown, att, tm, ids) == 0.5
    labels = torch.where(tm, ids, torch.full_like(ids, -100))  # apply_mlm's labels work too
    assert base.accuracy("position", shown, att, tm, labels) == 0.5  # pos 1 -> 5 (wrong), pos 2 -> 8 (right)
    assert np.isnan(base.accuracy("unigram", shown, att, torch.zeros_like(tm), ids))


def test_span_baselines_by_hand(base):
    # Span = positions 2..3 of [CLS] 5 _ _ 9 [SEP].
    ids, att = padded([[CLS, 5, 8, 8, 9, SEP]])
    span = torch.tensor([[0, 0, 1, 1, 0, 0]], dtype=torch.bool)
    assert base.predict_span("unigram", ids, att, span).tolist() == [5, 5]
    assert base.predict_span("position", ids, att, span).tolist() == [8, 9]
    # greedy: first token, left 5, no right neighbour -> left bigram 6; last token, left = the
    # prediction 6, right 9: no trigram, no product (6 is never followed by a word), left bigram of
    # 6 unseen -> right bigram of 9: 8.
    assert base.predict_span("bigram", ids, att, span).tolist() == [6, 8]
    # A one-token span sees both neighbours: (5, ., 9) -> rule 2 -> 8.
    one = torch.tensor([[0, 0, 1, 0, 0, 0]], dtype=torch.bool)
    ids1, att1 = padded([[CLS, 5, 6, 9, SEP]])
    assert base.predict_span("bigram", ids1, att1, one[:, :5]).tolist() == [8]
    # Several rows of different lengths, row-major order; the hidden ids are never read.
    # Row 1: a one-token span between CLS and 8 -> trigram -> 7.
    ids2, att2 = padded([[CLS, 5, 0, 0, 9, SEP], [CLS, 0, 8, 9, SEP]])
    span2 = torch.tensor([[0, 0, 1, 1, 0, 0], [0, 1, 0, 0, 0, 0]], dtype=torch.bool)
    att2 = att2 | span2
    assert base.predict_span("bigram", ids2, att2, span2).tolist() == [6, 8, 7]
    assert base.span_accuracy("bigram", torch.where(span2, torch.tensor([[0, 0, 6, 8, 0, 0], [0, 7, 0, 0, 0, 0]]), ids2),
                              att2, span2) == 1.0
    with pytest.raises(ValueError, match="2 masked runs"):
        base.predict_span("bigram", ids, att, torch.tensor([[0, 1, 0, 1, 0, 0]], dtype=torch.bool))


def test_teacher_forced_span_bigram_reads_the_true_previous_token(base):
    # Span = 7 8 9 of [CLS] 7 8 9 [SEP]. First token: left [CLS] -> 5 in both modes. Greedy, the
    # second token follows the prediction 5 -> 6; teacher-forced, it follows the true 7 -> 8, and the
    # last one sits between the true 8 and [SEP] -> trigram (8, 9, SEP) -> 9.
    ids, att = padded([[CLS, 7, 8, 9, SEP]])
    span = torch.tensor([[0, 1, 1, 1, 0]], dtype=torch.bool)
    assert base.predict_span("bigram", ids, att, span).tolist()[:2] == [5, 6]
    assert base.predict_span("bigram", ids, att, span, teacher_forced=True).tolist() == [5, 8, 9]
    # the unigram and position baselines read no context, so teacher forcing changes nothing for them
    for kind in ("unigram", "position"):
        assert base.predict_span(kind, ids, att, span, teacher_forced=True).tolist() == base.predict_span(kind, ids, att, span).tolist()


def test_errors(base):
    ids, att = padded([[CLS, 5, SEP]])
    with pytest.raises(ValueError, match="unknown baseline 'trigram'"):
        base.predict("trigram", ids, att, att)
    with pytest.raises(ValueError, match="outside"):
        base.predict("unigram", torch.tensor([[CLS, 50, SEP]]), att, att)
    with pytest.raises(ValueError, match="no real non-special token"):
        TokenBaselines.fit(torch.tensor([[CLS, SEP]]), torch.ones(1, 2, dtype=torch.bool), SPECIALS, V)
    with pytest.raises(ValueError, match="outside"):
        TokenBaselines.fit(torch.tensor([[CLS, 99, SEP]]), torch.ones(1, 3, dtype=torch.bool), SPECIALS, V)


# --- against a plain-Python reference of the documented rule --------------------------------------


class Reference:
    """The module docstring's rules with Counters and loops (slow, obviously right)."""

    def __init__(self, train):
        self.uni, self.pos, self.left, self.right, self.tri = Counter(), Counter(), Counter(), Counter(), Counter()
        for r in train:
            for i, t in enumerate(r):
                if t in SPECIALS:
                    continue
                self.uni[t] += 1
                self.pos[i, t] += 1
                if i >= 1:
                    self.left[r[i - 1], t] += 1
                if i + 1 < len(r):
                    self.right[t, r[i + 1]] += 1
                if i >= 1 and i + 1 < len(r):
                    self.tri[r[i - 1], t, r[i + 1]] += 1
        self.ub = self.best(self.uni)
        self.rules = Counter()  # which rule decided, to check the test exercises each

    @staticmethod
    def best(scores):
        scores = {t: s for t, s in scores.items() if s > 0}
        return min(scores, key=lambda t: (-scores[t], t)) if scores else None

    def bigram(self, l, r):
        if l is not None and r is not None:
            p = self.best({t: c for (a, t, b), c in self.tri.items() if a == l and b == r})
            if p is not None:
                self.rules[1] += 1
                return p
            p = self.best({t: self.left[l, t] * self.right[t, r] / self.uni[t] for t in self.uni})
            if p is not None:
                self.rules[2] += 1
                return p
        if l is not None and (p := self.best({t: c for (a, t), c in self.left.items() if a == l})) is not None:
            self.rules[3] += 1
            return p
        if r is not None and (p := self.best({t: c for (t, b), c in self.right.items() if b == r})) is not None:
            self.rules[4] += 1
            return p
        self.rules[5] += 1
        return self.ub

    def predict(self, kind, row, real, targets):
        out = []
        for j in targets:
            if kind == "unigram":
                out.append(self.ub)
            elif kind == "position":
                out.append(self.best({t: c for (i, t), c in self.pos.items() if i == j}) or self.ub)
            else:
                known = lambda k: 0 <= k < len(row) and real[k] and k not in targets  # noqa: E731
                out.append(self.bigram(row[j - 1] if known(j - 1) else None, row[j + 1] if known(j + 1) else None))
        return out

    def predict_span(self, row, real, s, n):
        """Greedy bigram over the span ``s .. s+n-1``."""
        l = row[s - 1] if s >= 1 and real[s - 1] else None
        r = row[s + n] if s + n < len(row) and real[s + n] else None
        out = []
        for i in range(n):
            l = self.bigram(l, r if i == n - 1 else None)
            out.append(l)
        return out


def random_corpus(g, n, vocab, p):
    return [[CLS, *(g.choice(np.arange(5, vocab), size=g.integers(2, 11), p=p)).tolist(), SEP] for _ in range(n)]


def test_matches_the_reference_on_a_random_corpus():
    g = np.random.default_rng(0)
    vocab = 40
    # Zipf-like word frequencies: counts with structure, some ties, many unseen trigrams.
    p = 1.0 / np.arange(1, vocab - 4) ** 1.1
    p /= p.sum()
    train = random_corpus(g, 200, vocab, p)
    ref = Reference(train)
    ids, att = padded(train)
    base = TokenBaselines.fit(ids, att, SPECIALS, vocab)
    test = random_corpus(g, 80, vocab, p)
    q, qa = padded(test)
    tm = (torch.rand(q.shape, generator=torch.Generator().manual_seed(1)) < 0.3) & qa & (q > UNK)
    shown = q.masked_fill(tm, MASK)
    for kind in BASELINE_KINDS:
        pred = base.predict(kind, shown, qa, tm).tolist()
        expected = []
        for b in range(len(test)):
            targets = tm[b].nonzero().squeeze(1).tolist()
            expected += ref.predict(kind, shown[b].tolist(), qa[b].tolist(), targets)
        assert pred == expected, kind
    # Spans: one contiguous run per row, of 1..4 tokens somewhere in the words.
    span = torch.zeros_like(qa)
    expected = []
    for b, row in enumerate(test):
        n = int(g.integers(1, min(4, len(row) - 2) + 1))
        s = int(g.integers(1, len(row) - 1 - n + 1))
        span[b, s : s + n] = True
        expected += ref.predict_span(q[b].tolist(), qa[b].tolist(), s, n)
    assert base.predict_span("bigram", q, qa, span).tolist() == expected
    assert all(ref.rules[k] >= 5 for k in range(1, 6)), ref.rules  # every rule decided some tokens


def test_fit_handles_a_big_vocabulary_and_many_sequences():
    """8k vocabulary, 100k sequences of 32 tokens (the scale the brief asks for): fits and predicts
    consistently with the smaller reference test above (its exact rules), in one vectorised pass."""
    g = torch.Generator().manual_seed(0)
    N, L, vocab = 100_000, 32, 8000
    ids = torch.randint(5, vocab, (N, L), generator=g)
    ids[:, 0] = CLS
    n = torch.randint(4, L, (N,), generator=g)
    pos = torch.arange(L)[None, :]
    ids = torch.where(pos < n[:, None], ids, torch.full_like(ids, PAD))
    ids[torch.arange(N), n - 1] = SEP
    base = TokenBaselines.fit(ids, ids != PAD, SPECIALS, vocab)
    q = ids[:64]
    tm = (torch.rand(q.shape, generator=g) < 0.15) & (q > UNK)
    for kind in BASELINE_KINDS:
        pred = base.predict(kind, q.masked_fill(tm, MASK), q != PAD, tm)
        assert pred.shape == (int(tm.sum()),) and (pred > UNK).all()
    # Training sequences: the trigram of every target is known, so rule 1 recovers most of them.
    assert base.accuracy("bigram", q.masked_fill(tm, MASK), q != PAD, tm, q) > 0.5


def test_fitting_chunk_by_chunk_gives_the_same_tables_as_one_pass(shared_data, monkeypatch):
    """fit counts FIT_CHUNK rows at a time (a memory-mapped split is never converted whole); the
    summed tables are those of one pass over every row: real TREC questions, int32 ids in a numpy
    array wider than the longest question (a stored split's layout) against int64 tensors."""
    with open(shared_data / "trec" / "train.tsv", newline="", encoding="utf-8") as f:
        texts = [r["text"] for r in csv.DictReader(f, delimiter="\t")][:2000]
    tok = train_tokenizer(texts, TokenizerSettings(vocab_size=1500))
    enc = tok.encode_batch(texts, max_len=64)
    wide = tok.encode_batch(texts, max_len=64, pad_to_max=True)
    one = TokenBaselines.fit(enc.input_ids, enc.attention_mask, tok.special_ids, tok.vocab_size)
    monkeypatch.setattr(text_baselines, "FIT_CHUNK", 97)  # 21 chunks, the last one short
    chunked = TokenBaselines.fit(wide.input_ids.numpy().astype(np.int32), wide.attention_mask.numpy(),
                                 tok.special_ids, tok.vocab_size)
    assert np.array_equal(one.unigram_counts, chunked.unigram_counts)
    assert np.array_equal(one.position_best, chunked.position_best[: len(one.position_best)])
    assert (chunked.position_best[len(one.position_best):] == -1).all()  # columns no question reaches
    for a in ("_lkeys", "_lcounts", "_rkeys", "_rcounts", "_tri_groups", "_tri_best", "left_best", "right_best"):
        assert np.array_equal(getattr(one, a), getattr(chunked, a)), a
