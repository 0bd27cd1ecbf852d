"""``python -m engine predict SOURCE --images X.npy --mask M.npy --out Y.npy``: an image model's
prediction of every patch, from an imported MAE (``models/<name>/``) or a run's checkpoint.

References: He et al. 2022, "Masked Autoencoders Are Scalable Vision Learners".
"""

from __future__ import annotations

import numpy as np
import torch

from engine.errors import RunNotFoundError
from engine.pretrained.image import predict_pixels
from engine.pretrained.store import MODEL_FILE, PretrainedError, list_pretrained, load_pretrained, models_root


def predict_images(source: str, images: np.ndarray, mask: np.ndarray, step: int | None = None,
                   workspace=None) -> np.ndarray:
    """The model's prediction of every patch, its preprocessing undone, clamped to [0, 1].

    An imported model reads ``(x - mean) / std`` (its ``preprocessing``) and, when trained with
    ``norm_pix_loss``, its prediction is de-normalised with each input patch's own mean and std
    (:func:`engine.pretrained.image.predict_pixels`); a run's model reads ``x`` itself (its
    ``reconstruct``'s ``pred_img``).

    Args:
        source: an imported model's name, else a run id.
        images: float ``[B, C, H, W]`` in [0, 1] at the model's input size.
        mask: bool ``[B, L]`` (0/1 integers accepted), the model's row-major patch order, True = masked;
            rows may mask different numbers of patches.
        step: a run's checkpoint step (the latest when None); unused for an imported model.

    Returns:
        float32 ``[B, C, H, W]`` in [0, 1].

    Raises:
        PretrainedError: no imported model or run named ``source``, not an image model, or shapes
            other than the model's (naming the shape expected).
        InferenceError: the run keeps no checkpoint (at ``step``).
    """
    from engine.eval.inference import load_model  # noqa: PLC0415 (loads the run's task code and config)

    if (models_root(workspace) / source / MODEL_FILE).is_file():
        model, info = load_pretrained(source, workspace)
        if info.modality != "image":
            raise PretrainedError(f"{source} is a {info.modality} model; --images/--mask need an image model "
                                  "(give --text for a text model)")
        x, m = _check(model, images, mask, f"imported model {source}")
        return predict_pixels(model, x, m, info.preprocessing).numpy().astype(np.float32)
    try:
        loaded = load_model(source, step, workspace)
    except RunNotFoundError:
        known = ", ".join(i.name for i in list_pretrained(workspace)) or "none"
        raise PretrainedError(f"no imported model or run named {source!r} (imported models: {known})") from None
    model = loaded.model
    if "image_shape" not in loaded.info or not all(hasattr(model, a) for a in ("reconstruct", "grid_size",
                                                                                  "in_chans", "img_size")):
        raise PretrainedError(f"run {source} does not train an image patch model; --images/--mask need one")
    x, m = _check(model, images, mask, f"run {source}")
    with torch.no_grad():
        return model.reconstruct(x, m)["pred_img"].float().numpy().astype(np.float32)


def _check(model, images: np.ndarray, mask: np.ndarray, what: str) -> tuple[torch.Tensor, torch.Tensor]:
    """``(images [B, C, H, W] float32, mask [B, L] bool)`` as tensors, or a :class:`PretrainedError`
    naming the shapes expected."""
    C, (H, W) = model.in_chans, model.img_size
    h, w = model.grid_size
    images, mask = np.asarray(images), np.asarray(mask)
    if images.ndim != 4 or tuple(images.shape[1:]) != (C, H, W) or images.shape[0] < 1:
        raise PretrainedError(f"images of shape {list(images.shape)}, but {what} takes [B, {C}, {H}, {W}] "
                              "(float32 in [0, 1])")
    if not np.issubdtype(images.dtype, np.floating):
        raise PretrainedError(f"images of dtype {images.dtype}; {what} takes float32 pixels in [0, 1]")
    x = torch.from_numpy(np.ascontiguousarray(images, dtype=np.float32))
    if not torch.isfinite(x).all() or x.min() < 0 or x.max() > 1:
        raise PretrainedError(f"images must hold finite pixels in [0, 1] (got min {float(x.min()):.4g}, "
                              f"max {float(x.max()):.4g})")
    B, L = images.shape[0], h * w
    if tuple(mask.shape) != (B, L):
        raise PretrainedError(f"mask of shape {list(mask.shape)}, but {what} takes [B, L] = [{B}, {L}] "
                              f"(bool, its {h}x{w} patches row-major, True = masked)")
    if mask.dtype != np.bool_:
        if not np.issubdtype(mask.dtype, np.integer) or not np.isin(mask, (0, 1)).all():
            raise PretrainedError(f"mask of dtype {mask.dtype}; give bool (True = masked) or 0/1 integers")
        mask = mask.astype(bool)
    return x, torch.from_numpy(np.ascontiguousarray(mask))
