"""Predictions of a run's checkpoint or an imported model, as the masking and fill-in boxes make them.

``SOURCE`` is an imported model's name (``models/<name>/``) or a run id (its checkpoint at ``step``,
the latest by default).
"""

from __future__ import annotations

from typing import Any

import numpy as np


def predict_images(source: str, images: np.ndarray, mask: np.ndarray, step: int | None = None,
                   workspace=None) -> np.ndarray:
    """The model's prediction of every patch, its preprocessing undone.

    Args:
        workspace: the workspace whose models/ and runs/ are read (the configured one by default).
        images: float32 ``[B, C, H, W]`` in [0, 1] at the model's input size.
        mask: bool ``[B, L]``, the model's row-major patch order, True = masked.

    Returns:
        float32 ``[B, C, H, W]`` in [0, 1].

    Raises:
        PretrainedError / InferenceError: unknown source, wrong shapes (naming them), not an image model.
    """
    from engine.pretrained.predict_image import predict_images as impl  # noqa: PLC0415 (each modality's predictor imports torch and its model only when asked)

    return impl(source, images, mask, step, workspace=workspace)


def predict_text(source: str, text: str, top_k: int = 5, step: int | None = None,
                 workspace=None) -> list[dict[str, Any]]:
    """One ``{"position", "tokens", "probs"}`` per ``[MASK]`` of ``text``, in order (see issue 32).

    Raises:
        PretrainedError / InferenceError: unknown source, no ``[MASK]``, not a text model.
    """
    from engine.pretrained.predict_text import predict_text as impl  # noqa: PLC0415 (each modality's predictor imports torch and its model only when asked)

    return impl(source, text, top_k, step, workspace=workspace)
