"""Statistics of a batch of masks: what a strategy actually does, measured rather than assumed.

The Mask lab page draws a batch with a strategy and shows these numbers: the mask ratio each
sample really gets (a Bernoulli or block strategy is not exact), the sizes of the contiguous masked
regions (random patches are scattered, block/span masks form larger pieces), how often each grid
position is masked (a strategy with a spatial bias shows it here) and how many masks per second
the function draws.

Pure numpy/scipy/torch: no UI code, so the engine and the tests use it as well.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import ndimage


@dataclass(frozen=True)
class MaskStats:
    """Statistics of a bool mask batch ``[B, *grid]`` (True = masked).

    Attributes:
        ratio: float64 ``[B]``: fraction of each sample's (eligible) positions that are masked.
        region_sizes: int64 ``[R]``: size in positions of every contiguous masked region of the
            batch (4-connected on a 2-D grid, runs on a 1-D sequence, 6-connected on a 3-D grid;
            regions never join across samples), in label order.
        regions_per_sample: int64 ``[B]``: number of contiguous masked regions of each sample.
        frequency: float64 ``[*grid]``: fraction of the ``B`` samples that mask each position.
        grid: the grid shape ``tuple(mask.shape[1:])``.
    """

    ratio: np.ndarray
    region_sizes: np.ndarray
    regions_per_sample: np.ndarray
    frequency: np.ndarray
    grid: tuple[int, ...]

    @property
    def batch_size(self) -> int:
        """``B``, the number of samples the statistics are over."""
        return int(self.ratio.shape[0])


def _as_bool_numpy(x: Any) -> np.ndarray:
    if hasattr(x, "detach"):  # torch.Tensor on any device, without requiring torch here
        x = x.detach().cpu().numpy()
    return np.asarray(x).astype(bool, copy=False)


def mask_stats(mask: Any, eligible: Any = None) -> MaskStats:
    """Per-sample ratios, contiguous-region sizes and positional frequencies of a mask batch.

    Connected components are found with one :func:`scipy.ndimage.label` call over the whole
    batch, using a structuring element that is the grid's face connectivity in the grid axes and
    empty along the batch axis, so two samples' regions never merge (no Python loop over samples).

    Args:
        mask: bool ``[B, *grid]`` (numpy array or torch tensor on any device), at least 2 dims;
            ``[B, L]`` sequence, ``[B, h, w]`` patch grid / ``[B, F, T]`` spectrogram, ``[B, T, h, w]`` video.
        eligible: optional bool of the same shape; the ratio is then over the eligible positions
            (masked positions outside it still count in regions and frequency).

    Returns:
        :class:`MaskStats`. Edge cases: ``B = 0`` gives empty ``ratio``/``regions_per_sample`` and a
        frequency of zeros; a sample with no (eligible) position (empty grid, all ineligible) has
        ratio 0.0; a mask with nothing masked has no regions (``region_sizes`` empty).

    Raises:
        ValueError: ``mask`` has fewer than 2 dims, or ``eligible`` does not have its shape.
    """
    m = _as_bool_numpy(mask)
    if m.ndim < 2:
        raise ValueError(f"mask_stats: expected a [B, *grid] mask with at least 2 dims, got shape {m.shape}")
    B, grid = m.shape[0], tuple(int(s) for s in m.shape[1:])
    L = int(np.prod(grid, dtype=np.int64))
    flat = m.reshape(B, L)
    masked = flat.sum(axis=1)
    if eligible is None:
        n = np.full(B, L, dtype=np.int64)
    else:
        e = _as_bool_numpy(eligible)
        if e.shape != m.shape:
            raise ValueError(f"mask_stats: eligible has shape {e.shape}, expected {m.shape}")
        flat_e = e.reshape(B, L)
        n = flat_e.sum(axis=1)
        masked = (flat & flat_e).sum(axis=1)
    ratio = np.divide(masked, n, out=np.zeros(B, dtype=np.float64), where=n > 0)

    frequency = m.mean(axis=0, dtype=np.float64) if B else np.zeros(grid, dtype=np.float64)

    if m.size == 0:
        sizes = np.zeros(0, dtype=np.int64)
        per_sample = np.zeros(B, dtype=np.int64)
    else:
        # Face connectivity inside a sample; the batch axis' neighbours (index 0 and 2) are empty.
        structure = np.zeros((3,) * m.ndim, dtype=bool)
        structure[1] = ndimage.generate_binary_structure(m.ndim - 1, 1)
        labels, n_regions = ndimage.label(m, structure=structure)
        sizes = np.bincount(labels.ravel(), minlength=n_regions + 1)[1:].astype(np.int64)
        # Every label lies inside one sample: scatter the sample index onto its labels.
        sample_of = np.zeros(n_regions + 1, dtype=np.int64)
        sample_idx = np.broadcast_to(np.arange(B).reshape((B,) + (1,) * len(grid)), m.shape)
        sample_of[labels[m]] = sample_idx[m]
        per_sample = np.bincount(sample_of[1:], minlength=B).astype(np.int64)
    return MaskStats(ratio=ratio, region_sizes=sizes, regions_per_sample=per_sample, frequency=frequency, grid=grid)


def masks_per_second(fn: Callable[[], Any], *, min_time: float = 0.2, warmup: bool = True) -> float:
    """Throughput of a mask function in rows (masks) per second.

    Calls ``fn()`` repeatedly until at least ``min_time`` seconds of wall-clock time
    (:func:`time.perf_counter`) have passed, at least once, and divides the rows drawn by the time.

    Args:
        fn: draws one batch, returns a mask ``[B, *grid]`` (anything with ``shape``); ``B`` rows count.
        min_time: seconds to keep drawing (> 0; more gives a steadier number).
        warmup: call ``fn`` once untimed first (lazy initialisation, allocator, caches).

    Returns:
        Rows per second (float); 0.0 when ``fn`` returns empty batches; ``inf`` if the timer saw
        no elapsed time at all.

    Raises:
        ValueError: ``min_time`` is not positive.
    """
    if not min_time > 0:
        raise ValueError(f"masks_per_second: min_time must be > 0, got {min_time}")
    if warmup:
        fn()
    rows = 0
    start = time.perf_counter()
    while True:
        rows += int(fn().shape[0])
        elapsed = time.perf_counter() - start
        if elapsed >= min_time:
            break
    return rows / elapsed if elapsed > 0 else float("inf")
