"""Image grids and MAE-style mask overlays.

Conventions: dataset images are uint8 ``(N, H, W, C)``; model-side images (tensors, samples) are
float ``(N, C, H, W)`` in [0, 1]; masks are bool ``(N, h, w)`` with True = masked (hidden from the
encoder), one cell per ``P x P`` patch where ``P = H / h``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import streamlit as st

from app.components.media import show_image

#: Grey drawn over masked patches (like the MAE paper's figures): distinct from black and white ink.
MASK_GREY = 0.5
#: Tiny images (8x8 digits) are upscaled with nearest neighbour to about this many pixels a side.
TARGET_PX = 96
#: CSS that keeps upscaled pixels crisp when the browser stretches an image to its column width, and
#: frames every image with a thin grey line, so that white (or black) padding shows against the page.
PIXELATED_CSS = ("<style>[data-testid='stImage'] img { image-rendering: pixelated; "
                 "box-shadow: 0 0 0 1px #9e9e9e; }</style>")


def as_numpy(x: Any) -> np.ndarray:
    """A numpy view of ``x`` (numpy array, torch tensor on any device, or nested lists)."""
    if hasattr(x, "detach"):  # torch.Tensor, without importing torch here
        x = x.detach().float().cpu().numpy() if x.dtype.is_floating_point else x.detach().cpu().numpy()
    return np.asarray(x)


def chw_to_hwc_uint8(images: Any) -> np.ndarray:
    """``(N, C, H, W)`` floats in [0, 1] -> ``(N, H, W, C)`` uint8 (values clipped)."""
    x = as_numpy(images).astype(np.float32)
    x = np.clip(x, 0.0, 1.0).transpose(0, 2, 3, 1)
    return np.round(x * 255.0).astype(np.uint8)


def as_rgb(images: Any) -> np.ndarray:
    """``(N, H, W, C)`` uint8 with C = 1 or 3 -> ``(N, H, W, 3)`` (grey repeated), so that grey
    images and colour overlays can be shown in one grid."""
    x = as_numpy(images)
    return np.repeat(x, 3, axis=3) if x.shape[3] == 1 else x[..., :3]


def upscale(img: np.ndarray, target_px: int = TARGET_PX) -> np.ndarray:
    """Nearest-neighbour upscale of one ``(H, W[, C])`` image by an integer factor so that its
    longer side is about ``target_px`` (no smoothing: each pixel stays a crisp square)."""
    k = max(1, target_px // max(img.shape[0], img.shape[1]))
    return img.repeat(k, axis=0).repeat(k, axis=1) if k > 1 else img


def _displayable(img: np.ndarray) -> np.ndarray:
    """``(H, W, 1)`` -> ``(H, W)`` grey; RGB(A) unchanged; floats in [0, 1] -> uint8."""
    if img.dtype != np.uint8:
        img = np.round(np.clip(img.astype(np.float32), 0.0, 1.0) * 255.0).astype(np.uint8)
    if img.ndim == 3 and img.shape[2] == 1:
        img = img[:, :, 0]
    return img


def image_grid(
    images: Any,
    captions: Sequence[str] | None = None,
    *,
    columns: int | None = None,
    target_px: int = TARGET_PX,
) -> None:
    """Show ``(N, H, W, C)`` images (uint8, or floats in [0, 1]) in a grid of ``columns`` columns
    (default: all in one row, at most 12), each with its caption.

    Tiny images are upscaled with nearest neighbour so that an 8x8 digit is visible; every image
    fills its column, so rows of equally many images line up (original above its reconstruction).
    """
    arr = as_numpy(images)
    n = len(arr)
    if n == 0:
        st.caption("no images")
        return
    ncols = columns or min(n, 12)
    for start in range(0, n, ncols):
        cols = st.columns(ncols, gap="small")
        for j in range(min(ncols, n - start)):
            i = start + j
            show_image(cols[j], upscale(_displayable(arr[i]), target_px),
                       caption=captions[i] if captions is not None else None)


def mask_overlay(images: Any, mask: Any) -> np.ndarray:
    """Grey out the masked patches.

    Args:
        images: ``(N, C, H, W)`` floats in [0, 1], C = 1 or 3.
        mask: ``(N, h, w)`` bool, True = masked; ``H % h == 0`` and ``W % w == 0``.

    Returns:
        ``(N, H, W, 3)`` uint8: visible patches as they are, masked patches flat grey.
    """
    x = as_numpy(images).astype(np.float32)
    if as_numpy(mask).shape[0] != x.shape[0]:
        raise ValueError(f"mask {as_numpy(mask).shape} does not tile images {x.shape}")
    pixel_mask = _pixel_mask(mask, x.shape[2:])  # (N, H, W)
    rgb = np.repeat(x, 3, axis=1) if x.shape[1] == 1 else x[:, :3]
    out = np.where(pixel_mask[:, None], MASK_GREY, np.clip(rgb, 0.0, 1.0))
    return chw_to_hwc_uint8(out)


def image_rows(rows: Sequence[tuple[str, Any]], captions: Sequence[str] | None = None) -> None:
    """Labelled rows of equally many images, e.g. original / masked / reconstruction.

    Args:
        rows: ``(label, images)`` pairs; images ``(N, H, W, C)`` uint8 or floats in [0, 1].
        captions: per-column captions, shown under the first row only.
    """
    for i, (label, imgs) in enumerate(rows):
        st.markdown(f"**{label}**")
        image_grid(imgs, captions if i == 0 else None, columns=len(imgs))


def _pixel_mask(mask: Any, shape: tuple[int, int]) -> np.ndarray:
    """``(N, h, w)`` bool patch mask -> ``(N, H, W)`` bool pixel mask for images of ``shape = (H, W)``."""
    m = as_numpy(mask).astype(bool)
    if shape[0] % m.shape[1] or shape[1] % m.shape[2]:
        raise ValueError(f"mask {m.shape} does not tile images of {shape[0]}x{shape[1]}")
    return m.repeat(shape[0] // m.shape[1], axis=1).repeat(shape[1] // m.shape[2], axis=2)


def masked_only(pred: Any, mask: Any) -> np.ndarray:
    """The prediction at the masked patches only; visible patches flat grey (they are not scored,
    so the model is not trained to reproduce them).

    Args:
        pred: ``(N, C, H, W)`` floats in [0, 1], C = 1 or 3; mask: ``(N, h, w)`` bool, True = masked.

    Returns:
        ``(N, H, W, 3)`` uint8.
    """
    x = as_numpy(pred).astype(np.float32)
    pm = _pixel_mask(mask, x.shape[2:])
    rgb = np.repeat(x, 3, axis=1) if x.shape[1] == 1 else x[:, :3]
    return chw_to_hwc_uint8(np.where(pm[:, None], np.clip(rgb, 0.0, 1.0), MASK_GREY))


#: Squared error (pixel units, [0, 1]) at which the error map saturates.
ERROR_MAX = 0.25
#: Anchors of the error colour map, from 0 to ERROR_MAX (a perceptually ordered dark-to-bright
#: ramp in the spirit of matplotlib's "inferno": black, purple, red-orange, yellow).
_ERROR_ANCHORS = np.array([[0, 0, 4], [87, 16, 110], [188, 55, 84], [249, 142, 9], [252, 255, 164]], np.float32)
#: Colour of the visible patches in the error map (not scored): a cool grey apart from the ramp.
ERROR_VISIBLE_RGB = (150, 170, 190)


def error_colors(err: np.ndarray, vmax: float = ERROR_MAX) -> np.ndarray:
    """Map squared errors to RGB: ``(...) float -> (..., 3) uint8``, 0 black to ``vmax`` (and above)
    pale yellow, linear in between over the anchors of :data:`_ERROR_ANCHORS`."""
    t = np.clip(np.asarray(err, np.float32) / vmax, 0.0, 1.0) * (len(_ERROR_ANCHORS) - 1)
    lo = np.minimum(t.astype(np.int64), len(_ERROR_ANCHORS) - 2)
    frac = (t - lo)[..., None]
    return np.round(_ERROR_ANCHORS[lo] * (1 - frac) + _ERROR_ANCHORS[lo + 1] * frac).astype(np.uint8)


def error_map(images: Any, pred: Any, mask: Any, vmax: float = ERROR_MAX) -> tuple[np.ndarray, np.ndarray]:
    """Per-pixel squared error at the masked patches, as colours, and the masked-patch MSE per image.

    Args:
        images, pred: ``(N, C, H, W)`` floats in [0, 1] (the prediction is clipped to [0, 1]);
        mask: ``(N, h, w)`` bool, True = masked; vmax: the error shown at full brightness.

    Returns:
        ``(rgb (N, H, W, 3) uint8, mse (N,) float)``: the squared error averaged over channels,
        coloured by :func:`error_colors`, visible patches in :data:`ERROR_VISIBLE_RGB`; and each
        image's mean squared error over its masked pixels (NaN when nothing is masked).
    """
    x, p = as_numpy(images).astype(np.float32), np.clip(as_numpy(pred).astype(np.float32), 0.0, 1.0)
    pm = _pixel_mask(mask, x.shape[2:])
    err = ((p - x) ** 2).mean(axis=1)  # (N, H, W)
    rgb = error_colors(err, vmax)
    rgb[~pm] = ERROR_VISIBLE_RGB
    n = pm.reshape(len(pm), -1).sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        mse = np.where(n > 0, (err * pm).reshape(len(pm), -1).sum(axis=1) / n, np.nan)
    return rgb, mse


def heat_map(values: Any, shape: tuple[int, int]) -> np.ndarray:
    """A per-patch map as a heat map the size of its images: ``(N, h, w)`` floats (e.g. attention)
    -> ``(N, H, W, 3)`` uint8, each map stretched from its own minimum (black) to its maximum (pale
    yellow, :func:`error_colors`' ramp), so that its order shows even when its values are close (a
    flat map is black), each patch a flat ``H/h x W/w`` square.

    Raises:
        ValueError: ``(h, w)`` does not tile ``shape``.
    """
    v = np.nan_to_num(as_numpy(values).astype(np.float32))
    flat = v.reshape(len(v), -1)
    lo = flat.min(axis=1, initial=np.inf).reshape(-1, 1, 1)
    span = flat.max(axis=1, initial=-np.inf).reshape(-1, 1, 1) - lo
    scaled = np.where(span > 0, (v - lo) / np.where(span > 0, span, 1.0), 0.0)
    if shape[0] % v.shape[1] or shape[1] % v.shape[2]:
        raise ValueError(f"map {v.shape} does not tile images of {shape[0]}x{shape[1]}")
    rgb = error_colors(scaled, 1.0)  # (N, h, w, 3)
    return rgb.repeat(shape[0] // v.shape[1], axis=1).repeat(shape[1] // v.shape[2], axis=2)


def recon_rows(images: Any, mask: Any, pred: Any, pasted: Any) -> list[tuple[str, np.ndarray]]:
    """The rows of an MAE reconstruction figure as uint8 ``(N, H, W, C)`` arrays: original, masked
    input, the prediction at the masked patches only (visible ones grey: not trained there), the
    reconstruction with the visible patches pasted back, and the error map.

    Args:
        images, pred, pasted: ``(N, C, H, W)`` floats (original, prediction of every patch,
            prediction with the visible patches pasted back).
        mask: ``(N, h, w)`` bool, True = masked.
    """
    return [
        ("Original", chw_to_hwc_uint8(images)),
        ("Masked input", mask_overlay(images, mask)),
        ("Prediction at masked patches (grey: visible, not scored)", masked_only(pred, mask)),
        ("Reconstruction + visible patches", chw_to_hwc_uint8(pasted)),
        (f"Squared error at masked patches (black 0 → yellow ≥ {ERROR_MAX:g})", error_map(images, pasted, mask)[0]),
    ]
