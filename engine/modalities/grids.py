"""Masking grid kinds: what a modality's masking positions are, and which strategies work on them.

A masking strategy declares the grid kinds it works on (``register_masking(..., grids=...)``); a
modality declares the kinds its units form (:attr:`engine.modalities.Modality.grids`). A strategy is
offered for a modality when it works on one of them, so neither names the other: a new modality
whose units form a plain 1-D sequence declares ``"seq-1d"`` (or its own kind that *is a*
``"seq-1d"``, :func:`register_grid_kind`) and gets the span masker without an edit to it.

Kinds form a small hierarchy: ``tokens-1d`` (text tokens: words and sentences are known) and
``frames-1d`` (audio frames: voicing is known) are each a ``seq-1d``; a strategy that works on
``seq-1d`` works on both.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GridKind:
    """``name``; ``dims``: grid dims after the batch (``[B, L]``: 1); ``is_a``: more general kinds it
    also is; ``summary``: one line."""

    name: str
    dims: int
    is_a: tuple[str, ...] = ()
    summary: str = ""


GRID_KINDS: dict[str, GridKind] = {}


def register_grid_kind(name: str, dims: int, is_a: tuple[str, ...] = (), summary: str = "") -> GridKind:
    """Register a grid kind (a plug-in modality whose units are, say, time steps: ``("steps-1d", 1,
    ("seq-1d",))``).

    Raises:
        ValueError: the name is taken, a parent is unknown or has other ``dims``.
    """
    if name in GRID_KINDS:
        raise ValueError(f"grid kind {name!r} is already registered")
    bad = [p for p in is_a if p not in GRID_KINDS or GRID_KINDS[p].dims != dims]
    if bad:
        raise ValueError(f"grid kind {name!r}: parents {bad} are unknown or not {dims}-D grids")
    GRID_KINDS[name] = kind = GridKind(name, int(dims), tuple(is_a), summary)
    return kind


def lineage(name: str) -> set[str]:
    """``name`` and every kind it is (transitively), e.g. ``{"tokens-1d", "seq-1d"}``.

    Raises:
        ValueError: unknown kind (lists the known ones).
    """
    if name not in GRID_KINDS:
        raise ValueError(f"unknown grid kind {name!r}; known: {', '.join(GRID_KINDS)}")
    out, todo = set(), [name]
    while todo:
        k = todo.pop()
        if k not in out:
            out.add(k)
            todo.extend(GRID_KINDS[k].is_a)
    return out


register_grid_kind("seq-1d", 1, summary="any sequence of positions [B, L] (tokens, frames, time steps)")
register_grid_kind("tokens-1d", 1, ("seq-1d",), "text tokens [B, L]; word and sentence ids known")
register_grid_kind("frames-1d", 1, ("seq-1d",), "audio frames [B, T]; voicing known")
register_grid_kind("patch-2d", 2, summary="image patches [B, h, w]")
register_grid_kind("spec-2d", 2, summary="time-frequency cells [B, F, T] (frequency first, time last)")
register_grid_kind("tube-3d", 3, summary="video tubes [B, T, h, w]")
