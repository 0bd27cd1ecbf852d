"""Image-text retrieval figures: Recall@K from a similarity matrix, its exact chance level, and the
classical baseline (CCA between PCA-reduced pixels and TF-IDF caption vectors).

A retrieved item counts as a hit when its caption is identical to the query's (Tux Paint has
several stamps captioned "A frog."): with ``N`` pairs, query ``i`` has ``m_i >= 1`` relevant items
(the pairs whose caption equals its own, itself included).

References: Hotelling 1936 (canonical correlation analysis); Karpathy & Fei-Fei 2015 and CLIP
(Radford et al. 2021) for Recall@K in both directions.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence

import numpy as np

KS = (1, 5, 10)
#: The CCA baseline's sizes: PCA components of the pixels, TF-IDF terms, canonical components.
CCA_PCA, CCA_TFIDF_TERMS, CCA_COMPONENTS = 64, 2000, 16
#: TF-IDF words of one character too (scikit-learn's default drops them): an audio clip's class
#: name ``"7"`` is its whole text. Image captions keep scikit-learn's default (None here).
ONE_CHAR_WORDS = r"(?u)\b\w+\b"
#: scikit-learn's ``TfidfVectorizer`` words (its default ``token_pattern``): two characters or more.
TFIDF_WORDS = r"(?u)\b\w\w+\b"
#: The fewest train pairs the CCA baseline fits on: PCA keeps at most ``N - 1`` components of ``N``
#: pixel rows (one row has none), and CCA needs one component on each side.
CCA_MIN_PAIRS = 2


def cca_problem(n_train: int, train_captions: Iterable[str], token_pattern: str | None = None) -> str | None:
    """Why :func:`cca_embeddings` cannot fit on ``n_train`` train pairs with these captions, in words,
    or None when it can: fewer than :data:`CCA_MIN_PAIRS` pairs, or no caption with a word the TF-IDF
    counts (``token_pattern``, default :data:`TFIDF_WORDS`: a set whose captions are all one-letter
    words, punctuation or emoji). Reads the captions until the first word."""
    if n_train < CCA_MIN_PAIRS:
        return (f"it fits PCA and CCA on the train pairs and needs at least {CCA_MIN_PAIRS}; there "
                f"{'is' if n_train == 1 else 'are'} {n_train}")
    word = re.compile(token_pattern or TFIDF_WORDS)
    if not any(word.search(c) for c in train_captions):
        what = "a letter or digit" if token_pattern == ONE_CHAR_WORDS else "a word of two letters or digits"
        return f"no train caption has {what} for its TF-IDF, so the captions give it nothing to correlate"
    return None


def relevance(captions: Sequence[str]) -> np.ndarray:
    """``rel [N, N]`` bool: ``rel[i, j]`` when caption ``j`` is identical to caption ``i``."""
    _, inv = np.unique(np.asarray(captions, dtype=object).astype(str), return_inverse=True)
    return inv[:, None] == inv[None, :]


def recall_at_k(sim: np.ndarray, captions: Sequence[str], ks: Sequence[int] = KS) -> dict[int, float]:
    """Recall@K of ranking the columns of ``sim [N_query, N]`` for each query row (higher = more
    similar); query ``i`` and column ``j`` share the pair index, ``captions[j]`` decides a hit.

    Returns:
        ``{k: fraction of queries with a hit among their k best columns}`` (ties broken by index).
    """
    sim = np.asarray(sim, dtype=np.float64)
    rel = relevance(captions)
    order = np.argsort(-sim, axis=1, kind="stable")
    hits = np.take_along_axis(rel, order, axis=1)  # (N, N) relevance in rank order
    return {k: float(hits[:, :k].any(axis=1).mean()) if len(sim) else 0.0 for k in ks}


def chance_recall(captions: Sequence[str], ks: Sequence[int] = KS) -> dict[int, float]:
    """The expected Recall@K of a uniformly random ranking: ``mean_i 1 - C(N - m_i, k) / C(N, k)``."""
    rel = relevance(captions)
    n = len(rel)
    m = rel.sum(axis=1)
    out = {}
    for k in ks:
        k_ = min(k, n)
        out[k] = float(np.mean([1.0 - math.comb(n - int(mi), k_) / math.comb(n, k_) for mi in m])) if n else 0.0
    return out


def cca_embeddings(train_pixels: np.ndarray, train_captions: list[str], val_pixels: np.ndarray,
                   val_captions: list[str], seed: int = 0,
                   token_pattern: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The classical baseline's embeddings of the val pairs: pixels ``[N, C*H*W]`` in [0, 1] reduced
    by PCA (:data:`CCA_PCA` components), captions as TF-IDF vectors (words, sublinear tf, at most
    :data:`CCA_TFIDF_TERMS` terms), both fitted on train, then scikit-learn's CCA
    (:data:`CCA_COMPONENTS` components, fitted on train) projects each side to the shared space.
    ``token_pattern``: the TF-IDF's words (None: scikit-learn's, words of two characters or more;
    :data:`ONE_CHAR_WORDS` for texts that may be one character).

    Returns:
        ``(image [N_val, K], text [N_val, K])``; rank by cosine similarity.

    Raises:
        ValueError: :func:`cca_problem`'s reason, when it has one (too few pairs, no caption word).
    """
    if problem := cca_problem(len(train_pixels), train_captions, token_pattern):
        raise ValueError(f"the CCA baseline cannot be fitted: {problem}")
    from sklearn.cross_decomposition import CCA  # noqa: PLC0415 (scikit-learn loads only when an evaluation or baseline runs)
    from sklearn.decomposition import PCA  # noqa: PLC0415 (scikit-learn loads only when an evaluation or baseline runs)
    from sklearn.feature_extraction.text import TfidfVectorizer  # noqa: PLC0415 (scikit-learn loads only when an evaluation or baseline runs)

    n_pca = min(CCA_PCA, len(train_pixels) - 1, train_pixels.shape[1])
    pca = PCA(n_components=n_pca, random_state=seed).fit(train_pixels)
    words = {} if token_pattern is None else {"token_pattern": token_pattern}
    vec = TfidfVectorizer(sublinear_tf=True, max_features=CCA_TFIDF_TERMS, **words).fit(train_captions)
    xt, yt = pca.transform(train_pixels), vec.transform(train_captions).toarray()
    k = min(CCA_COMPONENTS, n_pca, yt.shape[1])
    cca = CCA(n_components=k, max_iter=1000).fit(xt, yt)
    xv, yv = cca.transform(pca.transform(val_pixels), vec.transform(val_captions).toarray())
    return xv, yv


def cosine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Cosine similarity ``[N_a, N_b]`` of the rows of ``a [N_a, K]`` and ``b [N_b, K]``."""
    a = a / np.maximum(np.linalg.norm(a, axis=1, keepdims=True), 1e-12)
    b = b / np.maximum(np.linalg.norm(b, axis=1, keepdims=True), 1e-12)
    return a @ b.T


def retrieval_figures(image_emb: np.ndarray, text_emb: np.ndarray, captions: Sequence[str],
                      ks: Sequence[int] = KS) -> dict[str, float]:
    """``t2i_r{k}`` (a caption queries the images) and ``i2t_r{k}`` (an image queries the captions)."""
    sim = cosine(text_emb, image_emb)  # (N text queries, N images)
    t2i, i2t = recall_at_k(sim, captions, ks), recall_at_k(sim.T, captions, ks)
    return {**{f"t2i_r{k}": v for k, v in t2i.items()}, **{f"i2t_r{k}": v for k, v in i2t.items()}}
