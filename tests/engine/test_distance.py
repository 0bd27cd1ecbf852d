"""engine/eval/distance.py on hand-made grids: Chebyshev distances on patch grids, distances along
one axis only (time within a mel bin, tokens), padding that is never a neighbour, rows hidden whole,
and the error pooled by distance."""

from __future__ import annotations

import numpy as np
import pytest

from engine.eval.distance import distance_to_visible, error_by_distance


def test_patch_grid_distances_are_chebyshev():
    hidden = np.ones((1, 5, 5), bool)
    hidden[0, 2, 2] = False  # one visible patch in the middle
    d = distance_to_visible(hidden, (1, 2))
    assert d[0].tolist() == [[2, 2, 2, 2, 2], [2, 1, 1, 1, 2], [2, 1, 0, 1, 2], [2, 1, 1, 1, 2], [2, 2, 2, 2, 2]]


def test_distance_along_one_axis_ignores_the_other_and_padding():
    hidden = np.array([[[1, 1, 0, 1, 1, 1],
                        [1, 1, 1, 1, 1, 1]]], bool)  # bin 0 has a visible cell, bin 1 none
    valid = np.array([[[1, 1, 1, 1, 1, 0],
                       [1, 1, 1, 1, 1, 0]]], bool)  # the last frame is padding
    d = distance_to_visible(hidden, (2,), valid)
    assert d[0].tolist() == [[2, 1, 0, 1, 2, -1], [-1, -1, -1, -1, -1, -1]]
    tokens = np.array([[0, 1, 1, 0, 1]], bool)
    assert distance_to_visible(tokens, (1,), np.array([[0, 1, 1, 1, 1]], bool))[0].tolist() == [-1, 2, 1, 0, 1]


def test_errors_pool_by_distance_and_far_distances_into_the_last():
    dist = np.array([[0, 1, 2, 3, 4, -1]])
    err = {"run": np.array([[9.0, 0.1, 0.2, 0.3, 0.5, 7.0]]), "copy": np.array([[9.0, 0.2, np.nan, 0.6, 0.8, 7.0]])}
    f = error_by_distance(dist, err, max_distance=3)
    run = f[f.predictor == "run"].set_index("distance")
    assert run["value"].to_dict() == pytest.approx({1: 0.1, 2: 0.2, 3: 0.4}) and run["units"].tolist() == [1, 1, 2]
    copy = f[f.predictor == "copy"].set_index("distance")
    assert copy["value"].to_dict() == pytest.approx({1: 0.2, 3: 0.7})  # a NaN unit is left out, visible ones never count
