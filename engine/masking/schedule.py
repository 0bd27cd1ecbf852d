"""Mask-ratio schedules over training: constant, linear and cosine ramps between two ratios.

A ramp from a low to a high ratio is a curriculum (easy to hard), e.g. the progressive mask
ratios studied for MAE-style pre-training; from high to low it anneals the task.
"""

from __future__ import annotations

import math

from engine.config import MaskingConfig


def ratio_at(cfg: MaskingConfig, step: int, total_steps: int) -> float:
    """The mask ratio at optimizer step ``step`` of ``total_steps``.

    ``constant``: ``cfg.ratio`` throughout. ``linear``: ``ratio + (final - ratio) * s``.
    ``cosine``: ``final + (ratio - final) * (1 + cos(pi * s)) / 2``; both with progress
    ``s = step / max(1, total_steps - 1)`` clamped to [0, 1], so step 0 uses ``ratio`` and the last
    step (``total_steps - 1``) uses ``final_ratio``.

    Args:
        cfg: the ``masking`` config (``ratio``, ``schedule``, ``final_ratio``).
        step: 0-based step; steps past the end keep ``final_ratio``.
        total_steps: length of the run in steps (>= 1).

    Returns:
        The ratio, a float in [0, 1].
    """
    if cfg.schedule == "constant" or cfg.final_ratio is None:
        return float(cfg.ratio)
    s = min(1.0, max(0.0, step / max(1, total_steps - 1)))
    a, b = float(cfg.ratio), float(cfg.final_ratio)
    if cfg.schedule == "linear":
        return a + (b - a) * s
    return b + (a - b) * 0.5 * (1.0 + math.cos(math.pi * s))
