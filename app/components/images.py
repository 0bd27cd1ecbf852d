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
            cols[j].image(
                upscale(_displayable(arr[i]), target_px),
                caption=captions[i] if captions is not None else None,
                width="stretch",
            )


def mask_overlay(images: Any, mask: Any) -> np.ndarray:
    """Grey out the masked patches.

    Args:
        images: ``(N, C, H, W)`` floats in [0, 1], C = 1 or 3.
        mask: ``(N, h, w)`` bool, True = masked; ``H % h == 0`` and ``W % w == 0``.

    Returns:
        ``(N, H, W, 3)`` uint8: visible patches as they are, masked patches flat grey.
    """
    x = as_numpy(images).astype(np.float32)
    m = as_numpy(mask).astype(bool)
    n, c, h_px, w_px = x.shape
    if m.shape[0] != n or h_px % m.shape[1] or w_px % m.shape[2]:
        raise ValueError(f"mask {m.shape} does not tile images {x.shape}")
    ph, pw = h_px // m.shape[1], w_px // m.shape[2]
    pixel_mask = m.repeat(ph, axis=1).repeat(pw, axis=2)  # (N, H, W)
    rgb = np.repeat(x, 3, axis=1) if c == 1 else x[:, :3]
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


def recon_rows(images: Any, mask: Any, pred: Any, pasted: Any) -> list[tuple[str, np.ndarray]]:
    """The four rows of an MAE reconstruction figure as uint8 ``(N, H, W, C)`` arrays.

    Args:
        images, pred, pasted: ``(N, C, H, W)`` floats (original, reconstruction, reconstruction
            with the visible patches pasted back).
        mask: ``(N, h, w)`` bool, True = masked.
    """
    return [
        ("Original", chw_to_hwc_uint8(images)),
        ("Masked input", mask_overlay(images, mask)),
        ("Reconstruction", chw_to_hwc_uint8(pred)),
        ("Reconstruction + visible patches", chw_to_hwc_uint8(pasted)),
    ]
