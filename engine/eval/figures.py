"""The representation figures of one encoder's features, as every evaluation computes them (the
job's phases, :mod:`engine.eval.job`; the prefetch, :mod:`engine.eval.prefetch`), and their cache."""

from __future__ import annotations

from collections.abc import Callable

from threadpoolctl import threadpool_limits

from engine.eval.representation import kmeans_scores, knn_accuracy, linear_probe
from engine.store.evaluations import cached_figures, figure_key

#: The seed of the raw input's probe and k-means: a property of the dataset, the same for every run
#: (so its figures are computed once per workspace, whatever the runs' ``train.seed``).
RAW_INPUT_SEED = 0

#: The representation phases in order, each one's figures of a prepared feature set ``X``
#: (:func:`engine.eval.representation.prepare`) at a seed.
FIGURE_PHASES: dict[str, Callable[[tuple, int], dict[str, float]]] = {
    "probe": lambda X, s: {"probe_acc": linear_probe(*X, s)},
    "knn": lambda X, s: {"knn_acc": knn_accuracy(*X)},
    "clustering": lambda X, s: dict(zip(("kmeans_nmi", "kmeans_ari"), kmeans_scores(X[2], X[3], s))),
}

#: The figures each phase of :data:`FIGURE_PHASES` gives.
PHASE_FIGURES = {"probe": ("probe_acc",), "knn": ("knn_acc",), "clustering": ("kmeans_nmi", "kmeans_ari")}


def encoder_figures(phase: str, X: tuple, seed: int, cache_at) -> dict[str, float]:
    """The figures of ``phase`` (:data:`FIGURE_PHASES`) for the prepared features ``X`` at ``seed``,
    read from the workspace ``cache_at``'s figure cache when an earlier run or the run's prefetch
    (:mod:`engine.eval.prefetch`) computed them. Computed with BLAS on one thread, wherever they are
    computed: the figures do not depend on the machine's cores, and OpenBLAS's threads made these small
    problems slower (the 300-step fortunes probe took 21.3 s on two threads, 3.9 s on one)."""

    def compute() -> dict[str, float]:
        with threadpool_limits(limits=1, user_api="blas"):
            return FIGURE_PHASES[phase](X, seed)

    return cached_figures(cache_at, figure_key(phase, seed, *X), compute)

