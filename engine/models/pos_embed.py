"""Fixed 2-D sine-cosine positional embeddings (MAE / MoCo v3).

References: He et al. 2022, "Masked Autoencoders Are Scalable Vision Learners" (util/pos_embed.py);
Vaswani et al. 2017, "Attention Is All You Need" (1-D sin-cos).
"""

from __future__ import annotations

import torch


def sincos_1d(dim: int, pos: torch.Tensor) -> torch.Tensor:
    """1-D sin-cos embedding of positions ``pos`` ``[M]`` -> ``[M, dim]`` (first half sin, second cos).

    Frequencies ``omega_i = 1 / 10000^(i / (dim/2))``, ``i = 0 .. dim/2 - 1``.

    Raises:
        ValueError: ``dim`` is odd.
    """
    if dim % 2:
        raise ValueError(f"sincos_1d: dim must be even (got {dim})")
    omega = torch.arange(dim // 2, dtype=torch.float64) / (dim / 2.0)
    omega = 1.0 / 10000**omega  # (dim/2,)
    angles = pos.to(torch.float64).reshape(-1, 1) * omega.reshape(1, -1)  # (M, dim/2)
    return torch.cat([angles.sin(), angles.cos()], dim=1)  # (M, dim)


def sincos_2d(dim: int, grid_hw: tuple[int, int], cls_token: bool = False) -> torch.Tensor:
    """2-D sin-cos embedding of an ``h x w`` patch grid, row-major: ``[h*w (+1), dim]`` float32.

    Half of the channels encode the column, half the row (MAE's layout: column first). With
    ``cls_token`` a zero row is prepended for the class token.

    Raises:
        ValueError: ``dim`` is not a multiple of 4.

    References: He et al. 2022, "Masked Autoencoders Are Scalable Vision Learners".
    """
    if dim % 4:
        raise ValueError(f"sincos_2d: embedding dim must be a multiple of 4 (got {dim})")
    h, w = grid_hw
    rows = torch.arange(h).repeat_interleave(w)  # (h*w,) row index of each patch, row-major
    cols = torch.arange(w).repeat(h)  # (h*w,) column index
    emb = torch.cat([sincos_1d(dim // 2, cols), sincos_1d(dim // 2, rows)], dim=1)  # (h*w, dim)
    if cls_token:
        emb = torch.cat([torch.zeros(1, dim, dtype=emb.dtype), emb], dim=0)
    return emb.float()
