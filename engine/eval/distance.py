"""Where reconstruction breaks down: the error at hidden units against their distance to the nearest
visible unit (MAE-style masked modeling leans on nearby context; long-range dependencies are its
known weakness, so the error should grow with the distance, and faster than a good model's).

Generic over grids: a modality says what a unit is (an image patch, a token, a spectrogram cell),
which axes distance runs along, and what the error at each unit is for the model and for its trivial
baselines; these functions do the rest.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd


def _dilate(a: np.ndarray, axes: Sequence[int]) -> np.ndarray:
    """``a`` (bool) grown by one unit along each of ``axes`` in turn (together: a box, so distances
    are Chebyshev distances on those axes)."""
    out = a.copy()
    for ax in axes:
        grown = out.copy()
        lo = [slice(None)] * a.ndim
        hi = [slice(None)] * a.ndim
        lo[ax], hi[ax] = slice(1, None), slice(None, -1)
        grown[tuple(lo)] |= out[tuple(hi)]
        grown[tuple(hi)] |= out[tuple(lo)]
        out = grown
    return out


def distance_to_visible(hidden: np.ndarray, axes: Sequence[int], valid: np.ndarray | None = None) -> np.ndarray:
    """Each unit's distance to the nearest visible unit, in units, along ``axes``.

    Args:
        hidden: bool ``[N, *grid]``, True = hidden from the model.
        axes: the axes of ``hidden`` distance runs along (``(1, 2)``: an image's patch rows and
            columns, Chebyshev; ``(2,)``: time only, each mel bin apart; ``(1,)``: tokens).
        valid: bool like ``hidden``: units that exist (False: padding, special tokens); an invalid
            unit is never a visible neighbour and gets no distance. Default: all.

    Returns:
        int ``[N, *grid]``: 0 at a visible unit, ``d >= 1`` at a hidden one, -1 at an invalid unit or
        one with no visible unit reachable along ``axes`` (a row hidden whole).
    """
    hidden = np.asarray(hidden, bool)
    valid = np.ones_like(hidden) if valid is None else np.asarray(valid, bool)
    reached = valid & ~hidden
    dist = np.where(reached, 0, -1).astype(np.int64)
    k = 0
    todo = valid & hidden
    while (todo & ~reached).any():
        k += 1
        grown = _dilate(reached, axes)
        new = grown & ~reached & todo
        if not new.any():
            break
        dist[new] = k
        reached |= new
    return dist


def error_by_distance(dist: np.ndarray, errors: Mapping[str, np.ndarray], max_distance: int | None = None) -> pd.DataFrame:
    """The mean error of hidden units at each distance to the nearest visible one, per predictor.

    Args:
        dist: :func:`distance_to_visible`'s ``[N, *grid]``.
        errors: predictor name -> error ``[N, *grid]`` at each unit (squared error, L1, or 1 - correct
            for tokens), read at hidden units only (``dist >= 1``); NaN units are left out.
        max_distance: distances above it are pooled into it (the far tail has few units).

    Returns:
        Columns ``predictor``, ``distance`` (int >= 1), ``value`` (mean), ``units`` (how many), one
        row per predictor and distance that has units, by predictor then distance.
    """
    rows = []
    d = np.asarray(dist)
    if max_distance is not None:
        d = np.where(d > max_distance, max_distance, d)
    for name, err in errors.items():
        e = np.asarray(err, np.float64)
        for k in sorted(int(x) for x in np.unique(d[d >= 1])):
            at = (d == k) & np.isfinite(e)
            if at.any():
                rows.append({"predictor": name, "distance": k, "value": float(e[at].mean()), "units": int(at.sum())})
    return pd.DataFrame(rows, columns=["predictor", "distance", "value", "units"])
