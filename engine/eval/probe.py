"""Linear probes on frozen features: how much of the labels a representation makes linearly readable.

:func:`linear_probe` standardises the features (mean and variance of the train rows) and fits an
L2-regularised multinomial logistic regression (scikit-learn, lbfgs). Its strength ``C`` is chosen
on the train rows alone, by cross-validation over their groups when there are at least two (leave
one group out: e.g. one train speaker held out at a time, the way the validation speaker is unseen),
else over 3 stratified folds; in each fold the strengths are fitted in increasing order, each
starting from the previous one's weights (a warm-started regularisation path: the same optimum,
fewer L-BFGS iterations); the probe is then refit on every train row with the chosen ``C``. Sparse
features (TF-IDF) stay sparse: scaled, not centred (:mod:`engine.eval.representation`).
The same protocol scores every feature set (a model's, a baseline's), so their figures compare.

References: Alain & Bengio 2016, "Understanding intermediate layers using linear classifier probes";
He et al. 2022 (MAE) sec. 4 (linear probing); SUPERB (Yang et al. 2021): frozen features, mean
pooling, a linear head.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import sparse

PROBE_CS = (0.01, 0.1, 1.0)
"""Inverse regularisation strengths tried by :func:`linear_probe`."""
MAX_ITER = 2000


@dataclass(frozen=True)
class ProbeResult:
    """A probe's score: ``accuracy`` on the validation rows (fraction correct), the ``C`` chosen,
    the cross-validated train accuracy of each ``C`` tried, and the feature width."""

    accuracy: float
    C: float
    cv: dict[float, float]
    dim: int


def _probe(C: float, seed: int, sparse_x: bool):
    """An unfitted probe: standardisation (sparse: scaling only), then logistic regression that
    starts from its last fit's weights (``warm_start``)."""
    from sklearn.linear_model import LogisticRegression  # noqa: PLC0415 (scikit-learn loads only when an evaluation or baseline runs)
    from sklearn.pipeline import make_pipeline  # noqa: PLC0415 (scikit-learn loads only when an evaluation or baseline runs)
    from sklearn.preprocessing import StandardScaler  # noqa: PLC0415 (scikit-learn loads only when an evaluation or baseline runs)

    return make_pipeline(StandardScaler(with_mean=not sparse_x),
                         LogisticRegression(C=C, max_iter=MAX_ITER, random_state=seed, warm_start=True))


def linear_probe(x_train: np.ndarray, y_train: np.ndarray, x_val: np.ndarray, y_val: np.ndarray,
                 groups: np.ndarray | None = None, Cs: tuple[float, ...] = PROBE_CS, seed: int = 0) -> ProbeResult:
    """Fit a logistic-regression probe on ``x_train`` and score it on ``x_val`` (module docstring).

    Args:
        x_train: float ``[N, D]`` (dense or SciPy sparse); y_train: int ``[N]``; x_val: ``[M, D]``; y_val: ``[M]``.
        groups: optional ``[N]`` group of each train row (e.g. speaker) for choosing ``C``.
        Cs: the strengths tried; seed: the solver's random state.

    Returns:
        :class:`ProbeResult`.

    Raises:
        ValueError: fewer than two classes in ``y_train``, or empty or mismatched arrays.
    """
    from sklearn.model_selection import LeaveOneGroupOut, StratifiedKFold  # noqa: PLC0415 (scikit-learn loads only when an evaluation or baseline runs)

    is_sparse = sparse.issparse(x_train)
    if is_sparse:
        x_train, x_val = sparse.csr_matrix(x_train, dtype=np.float64), sparse.csr_matrix(x_val, dtype=np.float64)
    else:
        x_train, x_val = np.asarray(x_train, np.float64), np.asarray(x_val, np.float64)
    y_train, y_val = np.asarray(y_train), np.asarray(y_val)
    if len(np.unique(y_train)) < 2:
        raise ValueError("linear_probe: the train rows need at least two classes")
    if x_train.shape[0] != len(y_train) or x_val.shape[0] != len(y_val) or not x_val.shape[0]:
        raise ValueError(f"linear_probe: {x_train.shape[0]} train rows for {len(y_train)} labels, "
                         f"{x_val.shape[0]} val rows for {len(y_val)} labels")
    if groups is not None and len(np.unique(groups)) >= 2:
        splits = list(LeaveOneGroupOut().split(x_train, y_train, groups))
    else:
        k = int(min(3, np.bincount(np.unique(y_train, return_inverse=True)[1]).min()))
        splits = list(StratifiedKFold(max(k, 2), shuffle=True, random_state=seed).split(x_train, y_train)) if k >= 2 else []
    scores: dict[float, list[float]] = {C: [] for C in Cs}
    for a, b in splits:
        probe = _probe(Cs[0], seed, is_sparse)
        for C in sorted(Cs):  # strongest regularisation first; each fit starts from the last one
            probe.set_params(logisticregression__C=C)
            scores[C].append(probe.fit(x_train[a], y_train[a]).score(x_train[b], y_train[b]))
    cv = {C: float(np.mean(scores[C])) if scores[C] else 0.0 for C in Cs}
    best = max(Cs, key=lambda c: (cv[c], -abs(np.log10(c))))  # ties: the strength nearest 1
    acc = float(_probe(best, seed, is_sparse).fit(x_train, y_train).score(x_val, y_val))
    return ProbeResult(acc, float(best), cv, int(x_train.shape[1]))
