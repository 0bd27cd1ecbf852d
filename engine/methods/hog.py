"""Histograms of oriented gradients per image patch: MaskFeat's regression target, and its picture.

Per patch of ``P x P`` pixels cut into ``cells x cells`` cells: the grey image's gradients (central
differences ``[-1, 0, 1]``, edges replicated), each pixel voting its gradient magnitude into the
``bins`` unsigned orientation bins over [0, pi) (linear interpolation between the two nearest bin
centres), summed per cell, the patch's ``cells * cells * bins`` values L2-normalised together (the
patch is the normalisation block).

References: Dalal and Triggs 2005, "Histograms of Oriented Gradients for Human Detection";
Wei et al. 2022, "Masked Feature Prediction for Self-Supervised Visual Pre-Training" (MaskFeat:
9 orientation bins, the HOG of each masked patch as the target).
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F


def hog_dim(bins: int, cells: int) -> int:
    """Values per patch: ``cells * cells * bins``."""
    return cells * cells * bins


def check_cells(patch: int, cells: int) -> None:
    """Raises ValueError when ``cells`` does not divide the patch side ``patch``."""
    if cells < 1 or patch % cells:
        raise ValueError(f"hog_cells {cells} does not divide the {patch}-pixel patch; use a divisor of {patch}")


@torch.no_grad()
def patch_hog(imgs: torch.Tensor, patch: int, bins: int = 9, cells: int = 1, eps: float = 1e-6) -> torch.Tensor:
    """HOG of every patch: ``imgs [B, C, H, W]`` (any range; channels averaged to grey) ->
    float32 ``[B, L, cells*cells*bins]``, ``L = (H/P) * (W/P)`` patches in row-major order, the values
    of patch ``l`` ordered (cell row, cell column, bin); each patch's vector has unit L2 norm (0 for a
    flat patch).

    Raises:
        ValueError: ``patch`` does not divide ``H`` and ``W``, or ``cells`` does not divide ``patch``.
    """
    B, C, H, W = imgs.shape
    if H % patch or W % patch:
        raise ValueError(f"patch size {patch} does not divide the {H}x{W} image")
    check_cells(patch, cells)
    g = imgs.float().mean(dim=1, keepdim=True)  # (B, 1, H, W)
    p = F.pad(g, (1, 1, 1, 1), mode="replicate")
    gx = (p[:, :, 1:-1, 2:] - p[:, :, 1:-1, :-2]) / 2
    gy = (p[:, :, 2:, 1:-1] - p[:, :, :-2, 1:-1]) / 2
    mag = torch.sqrt(gx * gx + gy * gy)[:, 0]  # (B, H, W)
    ang = torch.remainder(torch.atan2(gy, gx)[:, 0], math.pi)  # unsigned orientation in [0, pi)
    pos = ang / (math.pi / bins) - 0.5  # bin centres at (k + 0.5) * pi / bins
    lo = torch.floor(pos)
    frac = pos - lo
    lo_i = torch.remainder(lo.long(), bins)
    hi_i = torch.remainder(lo_i + 1, bins)
    votes = torch.zeros(B, bins, H, W, dtype=torch.float32, device=imgs.device)
    votes.scatter_add_(1, lo_i[:, None], (mag * (1 - frac))[:, None])
    votes.scatter_add_(1, hi_i[:, None], (mag * frac)[:, None])
    c = patch // cells  # cell side in pixels
    hist = votes.reshape(B, bins, H // c, c, W // c, c).sum(dim=(3, 5))  # (B, bins, H/c, W/c)
    h, w = H // patch, W // patch
    hist = hist.reshape(B, bins, h, cells, w, cells).permute(0, 2, 4, 3, 5, 1)  # (B, h, w, cy, cx, bins)
    hist = hist.reshape(B, h * w, cells * cells * bins)
    return hist / (hist.norm(dim=-1, keepdim=True) + eps)


def _glyphs(bins: int, size: int) -> np.ndarray:
    """``[bins, size, size]`` line images: bin ``k``'s edge direction (perpendicular to its gradient
    orientation) through the cell's centre, as HOG pictures draw them."""
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float64) - (size - 1) / 2
    out = np.zeros((bins, size, size), np.float32)
    for k in range(bins):
        theta = (k + 0.5) * math.pi / bins + math.pi / 2  # the edge runs across the gradient
        # (cos, sin) in the image's x-right, y-down coordinates, as the gradients are measured
        dist = np.abs(xx * math.sin(theta) - yy * math.cos(theta))
        along = np.abs(xx * math.cos(theta) + yy * math.sin(theta))
        out[k] = np.clip(1.0 - dist, 0, 1) * (along <= size / 2)
    return out


def hog_picture(hog: np.ndarray | torch.Tensor, grid: tuple[int, int], bins: int = 9, cells: int = 1,
                cell_px: int = 12) -> np.ndarray:
    """A picture of patch HOGs: each cell drawn as ``bins`` lines along its edge directions, each as
    bright as its bin's value. ``hog [B, L, cells*cells*bins]`` on the ``grid = (h, w)`` patch grid ->
    float32 ``[B, h*cells*cell_px, w*cells*cell_px]`` in [0, 1] (scaled by the largest value of each image).

    Raises:
        ValueError: the last axis is not ``cells*cells*bins`` or ``L`` is not ``h*w``.
    """
    a = np.asarray(hog.detach().cpu() if isinstance(hog, torch.Tensor) else hog, dtype=np.float32)
    h, w = grid
    B, L, D = a.shape
    if D != hog_dim(bins, cells) or L != h * w:
        raise ValueError(f"hog_picture: expected [B, {h * w}, {hog_dim(bins, cells)}], got {list(a.shape)}")
    cellv = a.reshape(B, h, w, cells, cells, bins).transpose(0, 1, 3, 2, 4, 5).reshape(B, h * cells, w * cells, bins)
    pic = np.einsum("byxk,kij->byixj", cellv, _glyphs(bins, cell_px))
    pic = pic.reshape(B, h * cells * cell_px, w * cells * cell_px)
    top = pic.reshape(B, -1).max(axis=1).clip(min=1e-9)[:, None, None]
    return np.clip(pic / top, 0, 1).astype(np.float32)
