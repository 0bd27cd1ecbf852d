"""Which rows to show: one seeded, class-stratified choice for every view of "some samples".

The Data page, Mask lab, the New run preview, Run detail and a run's fixed validation /
visualisation rows all call :func:`representative`, so a class-ordered dataset never shows eight
zeros, and a preview shows the very rows the run will put in its samples.

    >>> representative(np.array([0, 0, 0, 1, 1, 2]), 4, seed=0)   # the first 3 picks cover 3 classes
    array([...])

Stored row order is shuffled on import (:func:`import_order`), but not every dataset is stored so
(bundled sets keep their source order: fortunes by topic, asterisk prompts by folder; an official
IDX split keeps its files' order): the rows an evaluation reads are therefore a seeded sample
(:func:`eval_rows`), never the first rows of a split.
"""

from __future__ import annotations

import numpy as np

VIEW_SEED = 0
"""Seed of every sample view and of a run's visualisation rows. It is not ``train.seed``: runs with
different seeds show the same rows, so they can be compared side by side."""


def representative(labels: np.ndarray, n: int, *, seed: int = VIEW_SEED) -> np.ndarray:
    """``n`` positions of ``labels`` chosen class by class: round-robin over the classes in a seeded
    order, a seeded random member of each class in turn.

    Rule: ``rng = numpy.random.default_rng(seed)``; the distinct labels are put in the order
    ``rng.permutation(sorted labels)``; then, in sorted-label order, each class's positions are
    put in the order ``rng.permutation(positions)``. The result takes the first member of every
    class (in the class order), then the second of every class that has one, and so on, until ``n``.
    So the first ``k`` picks cover ``min(k, classes)`` classes, a class with few rows simply runs
    out, the same inputs always give the same rows, and the choice for ``n`` is a prefix of the
    choice for ``n + 1`` (a run with ``num_vis = 8`` shows the first 8 of the 16 a preview may show).
    One class (an unlabelled set) gives a seeded random sample.

    Args:
        labels: int ``[N]`` class index of each row (e.g. the labels of the val split).
        n: rows wanted; fewer come back when ``N < n``.
        seed: the choice's seed (:data:`VIEW_SEED` for every view).

    Returns:
        int64 ``[min(n, N)]`` positions into ``labels`` (distinct), in pick order.

    Raises:
        ValueError: ``n < 0`` or ``labels`` not one-dimensional.
    """
    labels = np.asarray(labels)
    if labels.ndim != 1:
        raise ValueError(f"labels must be one-dimensional, got shape {labels.shape}")
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    rng = np.random.default_rng(seed)
    classes, inverse = np.unique(labels, return_inverse=True)
    class_order = rng.permutation(len(classes))
    members = [rng.permutation(np.flatnonzero(inverse == k)) for k in range(len(classes))]
    # Rank of each row inside its class, then a stable sort by (rank, class position in the order).
    rank_of_class = np.empty(len(classes), np.int64)
    rank_of_class[class_order] = np.arange(len(classes))
    rows = np.concatenate(members) if members else np.zeros(0, np.int64)
    within = np.concatenate([np.arange(len(m)) for m in members]) if members else np.zeros(0, np.int64)
    klass = np.concatenate([np.full(len(m), rank_of_class[k]) for k, m in enumerate(members)]) if members else rows
    order = np.lexsort((klass, within))
    return rows[order][:n].astype(np.int64)


def import_order(n: int, seed: int) -> np.ndarray:
    """The stored order of an import's ``n`` rows: a seeded permutation (``default_rng([seed, 1])``,
    a stream apart from the split's ``default_rng(seed)``). The split is decided first, on the source
    order, and travels with its rows, so the same source, fraction and seed give the same split and
    the same arrays. Returns int64 ``[n]``."""
    return np.random.default_rng([seed, 1]).permutation(n).astype(np.int64)


EVAL_ROWS_SEED = 0
"""Seed of :func:`eval_rows`: every run and every evaluation of a dataset reads the same rows."""


def eval_rows(ds, split: str, max_rows: int | None = None) -> np.ndarray:
    """Row indices of ``split`` that an evaluation reads (probe, kNN, clustering, fine-tune, raw input).

    Every row of the split when it has at most ``max_rows`` (or ``max_rows`` is None); otherwise a
    seeded random sample of ``max_rows`` of them (``default_rng(EVAL_ROWS_SEED)``), in stored order.
    A sample, not the first rows: a split stored in class order would otherwise give the probes a
    few classes only (the first 2,000 train rows of the bundled fortunes held 3 of its 42 topics).

    Args:
        ds: has ``indices(split) -> int [n]`` (every dataset class).
        max_rows: at most this many rows.

    Returns:
        int64 ``[min(n, max_rows)]`` row indices of ``ds``, ascending.
    """
    rows = np.asarray(ds.indices(split), dtype=np.int64)
    if max_rows is None or len(rows) <= max_rows:
        return rows
    pick = np.random.default_rng(EVAL_ROWS_SEED).choice(len(rows), size=max_rows, replace=False)
    return rows[np.sort(pick)]
