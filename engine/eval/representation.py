"""Representation quality of frozen features (scikit-learn): linear probe, kNN, k-means, 2-D maps.

Every figure takes the features of a train split (the probe's training set, the kNN memory) and of a
validation split (scored), ``X [N, D]`` float with labels ``y [N]`` int64 (-1 = no label: left out).
The same recipe serves the trained encoder, the randomly initialised encoder of the same shape and
the raw input, so the three are comparable:

- **Standardisation**: ``StandardScaler`` fitted on the train features, applied to both splits
  (constant features are left at 0). Every figure below sees the standardised features. Sparse
  features (a SciPy matrix: TF-IDF) are scaled to unit variance but not centred, which would make
  them dense (scikit-learn's rule for sparse input); every figure below takes them sparse.
- **Linear probe**: :func:`engine.eval.probe.linear_probe`: multinomial ``LogisticRegression``
  (L-BFGS) whose strength ``C`` is chosen for each feature set by 3-fold cross-validation on the
  train rows alone (``PROBE_CS``), top-1 accuracy on val. Choosing C the same way for every
  feature set gives each its best probe: one fixed C = 1 under-regularised the widest ones (raw
  MNIST pixels, 784 features and 7,200 rows, probe at 88.3% with it and at 90.8% with the chosen
  C = 0.01), which made the raw-input baseline weaker than it is.
- **kNN**: ``KNeighborsClassifier`` with k = 20, cosine distance, brute force, majority vote
  (uniform weights), top-1 accuracy on val (the kNN monitor of Wu et al. 2018 / DINO, without the
  temperature-weighted vote).
- **k-means**: ``KMeans`` with as many clusters as classes in val (``n_init`` = 4, seeded) on the
  val features; NMI (arithmetic normalisation) and ARI of the clusters against the labels.
- **2-D map** of the val features coloured by label: PCA always, t-SNE (perplexity 30, PCA init,
  seeded) when there are at most ``tsne_max_rows`` rows.

Accuracies, NMI and ARI are fractions in [0, 1] (ARI can be slightly negative). Seeded (``seed``):
the same features give the same figures.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import numpy as np
from scipy import sparse

from engine.data.importer import UNLABELED  # the class of rows imported without a label (every modality's)
from engine.errors import EvaluationError

KNN_K = 20
KMEANS_N_INIT = 4
TSNE_PERPLEXITY = 30.0
#: The figures of :func:`representation_figures`, in display order.
FIGURES = ("probe_acc", "knn_acc", "kmeans_nmi", "kmeans_ari")


@dataclass
class RepresentationResult:
    """Figures of one feature set: ``figures`` (name -> value, names of :data:`FIGURES`), and the
    2-D maps of its val rows (``maps``: ``"pca"`` / ``"tsne"`` -> float32 ``[N, 2]``)."""

    figures: dict[str, float]
    maps: dict[str, np.ndarray] = field(default_factory=dict)


def _labelled(X, y, what: str) -> tuple[np.ndarray, np.ndarray]:
    X = sparse.csr_matrix(X, dtype=np.float32) if sparse.issparse(X) else np.asarray(X, dtype=np.float32)
    y = np.asarray(y, dtype=np.int64)
    if X.ndim != 2 or X.shape[0] != len(y):
        raise EvaluationError(f"{what}: features must be [N, D] with one label per row (got {X.shape}, {y.shape})")
    keep = y >= 0
    return X[keep], y[keep]


def tfidf_splits(train_texts: list[str], splits: list[list[str]], what: str = "text", **params) -> list:
    """TF-IDF vectors of each list of texts in ``splits``, fitted on ``train_texts`` (scikit-learn's
    ``TfidfVectorizer(**params)``): a float32 SciPy CSR matrix ``[N, V]`` per list, ``[0, V]`` for an
    empty one (a dataset without a validation split). ``what``: what a text is, for the message.

    Raises:
        EvaluationError: no train text has a word the vectorizer counts (its vocabulary is empty).
    """
    from sklearn.feature_extraction.text import TfidfVectorizer  # noqa: PLC0415 (scikit-learn loads only when an evaluation or baseline runs)

    try:
        vec = TfidfVectorizer(**params).fit(train_texts)
    except ValueError as e:
        if "empty vocabulary" not in str(e):
            raise
        raise EvaluationError(f"raw input: no train {what} has a word its TF-IDF counts (letters or digits, two or "
                              "more unless the task counts one), so the raw input has no features") from None
    V = len(vec.vocabulary_)
    return [vec.transform(t).astype(np.float32) if len(t) else sparse.csr_matrix((0, V), dtype=np.float32)
            for t in splits]


def standardise(train: np.ndarray, val: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Both splits standardised with the train split's mean and standard deviation (constant
    features become 0; sparse ones are only divided by it). float32 in, float32 out."""
    from sklearn.preprocessing import StandardScaler  # noqa: PLC0415 (scikit-learn loads only when an evaluation or baseline runs)

    scaler = StandardScaler(with_mean=not sparse.issparse(train)).fit(train)
    return scaler.transform(train).astype(np.float32), scaler.transform(val).astype(np.float32)


def linear_probe(Xtr: np.ndarray, ytr: np.ndarray, Xva: np.ndarray, yva: np.ndarray, seed: int = 0) -> float:
    """Val top-1 accuracy of a multinomial logistic regression on standardised features, its ``C``
    chosen by cross-validation on the train rows (:func:`engine.eval.probe.linear_probe`).

    Args:
        Xtr: ``[N, D]``; ytr: ``[N]``; Xva: ``[M, D]``; yva: ``[M]``; seed: the folds' and solver's seed.

    Raises:
        ValueError: fewer than two classes in ``ytr``, or empty or mismatched arrays.
    """
    from sklearn.exceptions import ConvergenceWarning  # noqa: PLC0415 (scikit-learn loads only when an evaluation or baseline runs)

    from engine.eval.probe import linear_probe as tuned_probe  # noqa: PLC0415 (scikit-learn loads only when an evaluation or baseline runs)

    with warnings.catch_warnings():  # the iteration cap (engine.eval.probe.MAX_ITER) is part of the recipe
        warnings.simplefilter("ignore", ConvergenceWarning)
        return tuned_probe(Xtr, ytr, Xva, yva, seed=seed).accuracy


def knn_accuracy(Xtr: np.ndarray, ytr: np.ndarray, Xva: np.ndarray, yva: np.ndarray, k: int = KNN_K) -> float:
    """Val top-1 accuracy of a k-nearest-neighbour vote (cosine distance, k capped at the train size)."""
    from sklearn.neighbors import KNeighborsClassifier  # noqa: PLC0415 (scikit-learn loads only when an evaluation or baseline runs)

    clf = KNeighborsClassifier(n_neighbors=min(k, Xtr.shape[0]), metric="cosine", algorithm="brute").fit(Xtr, ytr)
    return float((clf.predict(Xva) == yva).mean())


def kmeans_scores(X: np.ndarray, y: np.ndarray, seed: int = 0) -> tuple[float, float]:
    """``(NMI, ARI)`` of k-means clusters (k = number of classes in ``y``) against the labels ``y``."""
    from sklearn.cluster import KMeans  # noqa: PLC0415 (scikit-learn loads only when an evaluation or baseline runs)
    from sklearn.metrics import adjusted_rand_score, normalized_mutual_info_score  # noqa: PLC0415 (scikit-learn loads only when an evaluation or baseline runs)

    k = len(np.unique(y))
    if k < 2 or X.shape[0] <= k:
        return float("nan"), float("nan")
    clusters = KMeans(n_clusters=k, n_init=KMEANS_N_INIT, random_state=seed).fit_predict(X)
    return float(normalized_mutual_info_score(y, clusters)), float(adjusted_rand_score(y, clusters))


def maps_2d(X: np.ndarray, seed: int = 0, tsne_max_rows: int = 1000) -> dict[str, np.ndarray]:
    """2-D maps of ``X [N, D]``: ``pca`` always (N >= 2), ``tsne`` when ``N <= tsne_max_rows`` and N > 4."""
    from sklearn.decomposition import PCA  # noqa: PLC0415 (scikit-learn loads only when an evaluation or baseline runs)

    out: dict[str, np.ndarray] = {}
    if len(X) < 2:
        return out
    d = min(2, X.shape[1])
    pca = PCA(n_components=d, random_state=seed).fit_transform(X)
    out["pca"] = np.pad(pca, ((0, 0), (0, 2 - d))).astype(np.float32)
    if 4 < len(X) <= tsne_max_rows:
        from sklearn.manifold import TSNE  # noqa: PLC0415 (scikit-learn loads only when an evaluation or baseline runs)

        perplexity = min(TSNE_PERPLEXITY, (len(X) - 1) / 3)
        out["tsne"] = TSNE(n_components=2, perplexity=perplexity, init="pca", random_state=seed).fit_transform(X).astype(np.float32)
    return out


def labels_problem(y_train: np.ndarray, y_val: np.ndarray, class_names=(), dataset: str | None = None) -> str | None:
    """Why the figures that read labels (linear probe, kNN, k-means; the fine-tune) cannot be
    computed on rows labelled ``y_train [N]`` / ``y_val [M]`` (int, -1 = no label), in words with
    what to do, or None when they can: the dataset has no labels (its only class is
    :data:`UNLABELED`), its labelled train rows hold fewer than 2 classes, or it has no labelled
    validation row. ``class_names``: the dataset's; ``dataset``: its name, for the message."""
    y_train, y_val = np.asarray(y_train, np.int64), np.asarray(y_val, np.int64)
    ytr, yva = y_train[y_train >= 0], y_val[y_val >= 0]
    name = f"{dataset!r}" if dataset else "the dataset"
    if tuple(class_names) == (UNLABELED,):
        return (f"{name} has no labels (every row is {UNLABELED!r}); import it with a label column or one "
                "sub-folder per class to score how well the features separate them")
    k = len(np.unique(ytr))
    if k < 2:
        rows = f"{len(ytr)} labelled train row{'s' * (len(ytr) != 1)}"
        return (f"the {rows} of {name} hold{'s' * (len(ytr) == 1)} {k} class{'es' * (k != 1)}; these figures "
                "need 2 or more: import more labelled rows")
    if not len(yva):
        return (f"{name} has no labelled validation row to score them on; import it again with a validation "
                "fraction above 0")
    return None


def prepare(train: tuple, val: tuple) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The labelled rows of both splits, standardised with the train split's statistics: what every
    figure below reads. ``train``, ``val``: ``(X [N, D], y [N])`` (rows with ``y < 0`` left out).

    Returns:
        ``(Xtr [N', D], ytr [N'], Xva [M', D], yva [M'])``, float32 (CSR when given sparse) and int64.

    Raises:
        EvaluationError: malformed arrays, fewer than 2 classes in train, or no labelled val row.
    """
    Xtr, ytr = _labelled(*train, "train features")
    Xva, yva = _labelled(*val, "val features")
    if len(np.unique(ytr)) < 2 or Xva.shape[0] == 0:
        raise EvaluationError(f"representation figures need labels: {len(np.unique(ytr))} class(es) among "
                              f"{len(ytr)} labelled train rows, {len(yva)} labelled val rows")
    Xtr, Xva = standardise(Xtr, Xva)
    return Xtr, ytr, Xva, yva


def representation_figures(train: tuple, val: tuple, *, seed: int = 0, tsne_max_rows: int = 1000,
                           maps: bool = True) -> RepresentationResult:
    """Every figure of the module docstring for one feature set.

    Args:
        train, val: ``(X [N, D], y [N])`` of each split (rows with ``y < 0`` are left out).
        seed: seeds the probe, k-means, PCA and t-SNE.
        tsne_max_rows: t-SNE only for at most this many val rows.
        maps: compute the 2-D maps.

    Raises:
        EvaluationError: malformed arrays, fewer than 2 classes in train, or no labelled val row.
    """
    Xtr, ytr, Xva, yva = prepare(train, val)
    nmi, ari = kmeans_scores(Xva, yva, seed)
    figures = {"probe_acc": linear_probe(Xtr, ytr, Xva, yva, seed), "knn_acc": knn_accuracy(Xtr, ytr, Xva, yva),
               "kmeans_nmi": nmi, "kmeans_ari": ari}
    return RepresentationResult(figures, maps_2d(Xva, seed, tsne_max_rows) if maps else {})
