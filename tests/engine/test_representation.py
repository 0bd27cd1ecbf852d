"""Representation figures (engine.eval.representation) on real MNIST pixels and on exact cases."""

from __future__ import annotations

import gzip

import numpy as np
import pytest

from engine.errors import EvaluationError
from engine.eval.representation import kmeans_scores, knn_accuracy, maps_2d, representation_figures


@pytest.fixture(scope="module")
def mnist(shared_data):
    d = shared_data / "mnist-t10k"
    with gzip.open(d / "images-idx3-ubyte.gz") as f:
        X = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 784)[:2000].astype(np.float32) / 255
    with gzip.open(d / "labels-idx1-ubyte.gz") as f:
        y = np.frombuffer(f.read(), np.uint8, offset=8)[:2000].astype(np.int64)
    return (X[:1500], y[:1500]), (X[1500:], y[1500:])


@pytest.mark.slow
def test_pixels_of_mnist_probe_well_and_noise_does_not(mnist):
    train, val = mnist
    r = representation_figures(train, val, tsne_max_rows=600)
    assert 0.80 < r.figures["probe_acc"] < 0.97 and 0.80 < r.figures["knn_acc"] < 0.98
    assert 0.2 < r.figures["kmeans_nmi"] < 0.8 and r.figures["kmeans_ari"] > 0.05
    assert r.maps["pca"].shape == (500, 2) and r.maps["tsne"].shape == (500, 2)
    rng = np.random.default_rng(0)
    noise = representation_figures((rng.normal(size=(1500, 50)), train[1]), (rng.normal(size=(500, 50)), val[1]),
                                   maps=False)
    assert noise.figures["probe_acc"] < 0.2 and noise.figures["knn_acc"] < 0.2 and abs(noise.figures["kmeans_ari"]) < 0.02
    assert noise.maps == {}
    again = representation_figures(train, val, tsne_max_rows=600)
    assert again.figures == r.figures and np.array_equal(again.maps["tsne"], r.maps["tsne"])


def test_exact_small_cases():
    Xtr = np.array([[1, 0], [0.9, 0.1], [0, 1], [0.1, 0.9]], np.float32)
    ytr = np.array([0, 0, 1, 1])
    assert knn_accuracy(Xtr, ytr, np.array([[5, 0.2], [0.2, 5]], np.float32), np.array([0, 1]), k=1) == 1.0
    X = np.array([[0, 0], [0, 0.1], [10, 10], [10, 10.1]], np.float32)
    nmi, ari = kmeans_scores(X, np.array([0, 0, 1, 1]))
    assert nmi == pytest.approx(1.0) and ari == pytest.approx(1.0)
    assert maps_2d(X[:1]) == {} and set(maps_2d(X)) == {"pca"}
    m = maps_2d(np.random.default_rng(0).normal(size=(30, 5)), tsne_max_rows=30)
    assert m["pca"].shape == m["tsne"].shape == (30, 2) and m["tsne"].dtype == np.float32


def test_unlabelled_rows_are_left_out_and_bad_input_refused():
    rng = np.random.default_rng(1)
    X, y = rng.normal(size=(40, 3)), np.repeat([0, 1, -1, -1], 10)
    r = representation_figures((X, y), (X, y), maps=False)
    assert 0 <= r.figures["probe_acc"] <= 1
    with pytest.raises(EvaluationError, match=r"need labels: 1 class\(es\) among 10 labelled train rows"):
        representation_figures((X[:20], np.repeat([0, -1], 10)), (X, y))
    with pytest.raises(EvaluationError, match=r"train features: features must be \[N, D\]"):
        representation_figures((X, y[:5]), (X, y))


def test_sparse_tfidf_of_real_questions_stays_sparse_and_scores_as_its_dense_copy(shared_data):
    """TF-IDF (the text raw input) goes through every figure sparse: scaled to unit variance, never
    centred (zeros stay zeros); kNN reads the same neighbours as from the dense copy; the probe reads
    the question types far above chance; the figure cache tells two matrices apart by content."""
    from scipy import sparse  # noqa: PLC0415 (only this test builds sparse matrices)
    from sklearn.feature_extraction.text import TfidfVectorizer  # noqa: PLC0415 (only this test builds TF-IDF)

    from engine.eval.representation import linear_probe, prepare  # noqa: PLC0415 (beside the module's other names, used here only)
    from engine.store.evaluations import figure_key  # noqa: PLC0415 (the cache key, used here only)

    rows = [line.split("\t") for line in (shared_data / "trec" / "train.tsv").read_text(encoding="utf-8").splitlines()[1:1201]]
    names = sorted({r[0] for r in rows})
    y = np.array([names.index(r[0]) for r in rows])
    vec = TfidfVectorizer(sublinear_tf=True).fit([r[2] for r in rows[:900]])
    tr, va = (vec.transform([r[2] for r in part]).astype(np.float32) for part in (rows[:900], rows[900:]))
    Xtr, ytr, Xva, yva = prepare((tr, y[:900]), (va, y[900:]))
    assert sparse.issparse(Xtr) and sparse.issparse(Xva) and Xtr.nnz == tr.nnz and Xva.nnz == va.nnz
    std = np.sqrt(Xtr.multiply(Xtr).mean(0).A1 - np.square(Xtr.mean(0).A1))
    assert np.allclose(std[std > 0], 1, atol=1e-3)
    assert knn_accuracy(Xtr, ytr, Xva, yva) == knn_accuracy(Xtr.toarray(), ytr, Xva.toarray(), yva)
    chance = np.bincount(yva).max() / len(yva)
    assert linear_probe(Xtr, ytr, Xva, yva) > chance + 0.3  # TREC's six types from their words
    nmi, ari = kmeans_scores(Xva, yva)
    assert 0 <= nmi <= 1 and np.isfinite(ari)
    changed = Xtr.copy()
    changed.data[0] += 1
    assert figure_key("probe", 0, Xtr) == figure_key("probe", 0, Xtr.copy()) != figure_key("probe", 0, changed)
