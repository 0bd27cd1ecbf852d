"""Feeding a GPU with a dataset's images: uint8 on the device, converted there.

A training batch of images used to be gathered from the (memory-mapped) dataset, converted to
float32 on the CPU and copied from pageable memory: four times the bytes of the stored uint8 pixels,
a synchronous copy, and the CPU's conversion in every step. :class:`ImageFeed` keeps the train split's
uint8 pixels on the device when they fit ``$MASKLAB_DEVICE_DATA_MB`` (default 4096 MiB; a batch is
then one gather on the device), else gathers uint8 rows on the host into pinned memory and copies
them asynchronously; either way the conversion to [0, 1] floats runs on the device. On a CPU it
reads the rows as before. Issue 39, point 4: the GPU must wait on data for under 5% of the step.
"""

from __future__ import annotations

import os

import numpy as np
import torch

from engine.data.dataset import ImageDataset, PairedDataset
from engine.training.perf import pin, to_device

#: Most MiB of a train split's uint8 pixels kept on the GPU for a run (``$MASKLAB_DEVICE_DATA_MB``).
DEVICE_DATA_MB = 4096


def device_data_mb() -> float:
    """``$MASKLAB_DEVICE_DATA_MB`` (MiB), else :data:`DEVICE_DATA_MB`; 0 keeps nothing on the device."""
    raw = os.environ.get("MASKLAB_DEVICE_DATA_MB", "").strip()
    try:
        return max(0.0, float(raw)) if raw else float(DEVICE_DATA_MB)
    except ValueError:
        return float(DEVICE_DATA_MB)


class ImageFeed:
    """Train batches of an image split as float32 ``[B, C, H, W]`` in [0, 1] on ``device``.

    Args:
        images: uint8 ``[N, H, W, C]`` (an array or a memory map: only the rows asked for are read).
        rows: int ``[n]``, the split's row indices into ``images``.
        device: where batches go.
        keep: keep the split's pixels on ``device`` (one gather per batch); default: on CUDA when
            they fit :func:`device_data_mb`, never on a CPU (the rows are read batch by batch).
    """

    def __init__(self, images: np.ndarray, rows: np.ndarray, device: torch.device, keep: bool | None = None):
        self.images, self.rows, self.device = images, np.asarray(rows, dtype=np.int64), torch.device(device)
        nbytes = len(self.rows) * int(np.prod(images.shape[1:]))
        if keep is None:
            keep = self.device.type == "cuda" and nbytes <= device_data_mb() * 2**20
        self.resident = torch.from_numpy(np.ascontiguousarray(images[self.rows])).to(self.device) if keep else None

    def batch(self, idx: torch.Tensor) -> torch.Tensor:
        """Positions ``idx`` (int64 ``[B]``) of the split as float32 ``[B, C, H, W]`` on the device,
        pixel / 255 (the same values as :meth:`engine.data.dataset.ImageDataset.rows_tensors`)."""
        if self.resident is not None:
            raw = self.resident[idx.to(self.device)]
        else:
            host = torch.from_numpy(np.asarray(self.images[self.rows[idx.cpu().numpy()]]))
            raw = to_device(pin(host, self.device), self.device)
        return raw.permute(0, 3, 1, 2).float().div_(255.0).contiguous()


def image_feed(ds, rows: np.ndarray, device: torch.device) -> ImageFeed | None:
    """An :class:`ImageFeed` of ``ds``'s stored uint8 images (an image or image-caption dataset), or
    None for a dataset whose batches are made otherwise (spectrograms of audio pairs, images fitted
    to an imported model's input): those read ``rows_tensors``."""
    return ImageFeed(ds.images, rows, device) if isinstance(ds, ImageDataset | PairedDataset) else None
