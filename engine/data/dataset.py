"""In-memory datasets: :class:`DatasetInfo` (metadata), :class:`ImageDataset` (pixels), the seeded split.

Heavy libraries (torch, pandas, scikit-learn) are imported inside the functions that need them, so that
listing datasets from the dashboard stays cheap.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from engine.errors import DatasetError

if TYPE_CHECKING:
    import pandas as pd
    import torch

NAME_RE = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")
"""A dataset name: lower-case letters, digits, ``_`` and ``-``; starts with a letter or digit; 1-64 chars."""

SPLITS = ("train", "val")
"""Split names; ``ImageDataset.split`` stores their index (0 = train, 1 = val)."""


def validate_name(name: str) -> str:
    """Return ``name`` if it is a valid dataset name (:data:`NAME_RE`), else raise :class:`DatasetError`."""
    if not isinstance(name, str) or not NAME_RE.fullmatch(name):
        raise DatasetError(
            f"invalid dataset name {name!r}: use 1-64 characters a-z, 0-9, '_' or '-', "
            "starting with a letter or digit"
        )
    return name


@dataclass(frozen=True)
class DatasetInfo:
    """Metadata of one dataset, stored as ``<workspace>/datasets/<name>/meta.json``.

    Attributes:
        name: dataset name, matches :data:`NAME_RE`.
        modality: ``"image"`` (text and audio come later).
        source: where the data came from, e.g. ``"bundled:digits"``, ``"upload:stamps.zip"``.
        image_shape: ``(C, H, W)`` in pixels, ``C`` in {1, 3}.
        class_names: label ``k`` is ``class_names[k]``.
        n_train: number of train images.
        n_val: number of validation images.
        created_at: ISO-8601 UTC time of registration in the workspace; ``""`` for a bundled set that
            :func:`engine.data.list_datasets` describes before it was first loaded (registered).
        description: one human sentence or two.
    """

    name: str
    modality: str
    source: str
    image_shape: tuple[int, int, int]
    class_names: tuple[str, ...]
    n_train: int
    n_val: int
    created_at: str
    description: str

    @property
    def n_classes(self) -> int:
        """Number of classes (``len(class_names)``)."""
        return len(self.class_names)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (tuples become lists)."""
        d = asdict(self)
        d["image_shape"] = list(self.image_shape)
        d["class_names"] = list(self.class_names)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> DatasetInfo:
        """Inverse of :meth:`to_dict`; extra keys are ignored. Raises KeyError/TypeError/ValueError."""
        return cls(
            name=str(d["name"]),
            modality=str(d["modality"]),
            source=str(d["source"]),
            image_shape=tuple(int(v) for v in d["image_shape"]),  # type: ignore[arg-type]
            class_names=tuple(str(c) for c in d["class_names"]),
            n_train=int(d["n_train"]),
            n_val=int(d["n_val"]),
            created_at=str(d["created_at"]),
            description=str(d["description"]),
        )


@dataclass(eq=False)
class ImageDataset:
    """A labelled image dataset held in memory.

    Attributes:
        info: its :class:`DatasetInfo`.
        images: uint8 ``[N, H, W, C]``, pixel values 0..255 (``C`` = ``info.image_shape[0]``).
        labels: int64 ``[N]``, class index into ``info.class_names``.
        split: uint8 ``[N]``, 0 = train, 1 = val.
    """

    info: DatasetInfo
    images: np.ndarray
    labels: np.ndarray
    split: np.ndarray

    def __len__(self) -> int:
        return int(self.labels.shape[0])

    def indices(self, split: str) -> np.ndarray:
        """Row indices (int64 ``[n]``) of the ``"train"`` or ``"val"`` split, in stored order.

        Raises ValueError for any other split name.
        """
        if split not in SPLITS:
            raise ValueError(f"split must be 'train' or 'val', not {split!r}")
        return np.flatnonzero(self.split == SPLITS.index(split))

    def tensors(self, split: str) -> tuple[torch.Tensor, torch.Tensor]:
        """The ``"train"`` or ``"val"`` split as tensors.

        Returns:
            ``x``: float32 ``[n, C, H, W]``, values in [0, 1] (pixel / 255);
            ``y``: int64 ``[n]`` class indices.
        Raises ValueError for any other split name.
        """
        import torch

        idx = self.indices(split)
        x = torch.from_numpy(self.images[idx]).permute(0, 3, 1, 2).float().div_(255.0).contiguous()
        y = torch.from_numpy(self.labels[idx].astype(np.int64))
        return x, y

    def counts(self) -> pd.DataFrame:
        """Images per class and split: columns ``class_name``, ``split`` ("train"/"val"), ``count`` (int64).

        One row for every class x split pair (zeros included), classes in label order, train before val.
        """
        import pandas as pd

        k = self.info.n_classes
        per_split = [np.bincount(self.labels[self.split == s], minlength=k) for s in range(len(SPLITS))]
        rows = [
            (c, split_name, int(per_split[s][i]))
            for i, c in enumerate(self.info.class_names)
            for s, split_name in enumerate(SPLITS)
        ]
        return pd.DataFrame(rows, columns=["class_name", "split", "count"]).astype({"count": "int64"})


def n_val_for(n: int, val_fraction: float) -> int:
    """Images of a group of ``n`` that :func:`seeded_split` puts in val: ``val_fraction * n`` rounded
    half up, at least 1 when ``val_fraction > 0``, at most ``n - 1`` (0 when ``n < 2``)."""
    if val_fraction <= 0 or n < 2:
        return 0
    return min(n - 1, max(1, math.floor(val_fraction * n + 0.5)))


def seeded_split(labels: np.ndarray, val_fraction: float, seed: int) -> np.ndarray:
    """Seeded train/val split; the same labels, fraction and seed always give the same split.

    Stratified when every class has at least 2 images: each class puts :func:`n_val_for` of its
    images (about ``val_fraction``, at least 1, never all) in val. Otherwise a plain seeded random
    split of ``n_val_for(N, val_fraction)`` images. Rows are drawn with ``numpy.random.default_rng(seed)``.

    Args:
        labels: int ``[N]`` class indices.
        val_fraction: in [0, 1).
        seed: random seed.
    Returns:
        uint8 ``[N]``: 0 = train, 1 = val.
    Raises:
        DatasetError: ``val_fraction`` outside [0, 1).
    """
    if not 0.0 <= val_fraction < 1.0:
        raise DatasetError(f"val_fraction must be in [0, 1), not {val_fraction}")
    labels = np.asarray(labels)
    split = np.zeros(labels.shape[0], dtype=np.uint8)
    rng = np.random.default_rng(seed)
    classes, counts = np.unique(labels, return_counts=True)
    stratified = counts.size > 0 and counts.min() >= 2
    groups = [np.flatnonzero(labels == c) for c in classes] if stratified else [np.arange(labels.shape[0])]
    for rows in groups:
        split[rng.permutation(rows)[: n_val_for(rows.size, val_fraction)]] = 1
    return split
