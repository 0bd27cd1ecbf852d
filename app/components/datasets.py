"""Cached, display-ready views of a dataset (bounded ``st.cache_data``).

Pages never keep a whole dataset in the cache: :func:`dataset_view` loads it through
``engine.data.load_dataset`` once per (workspace, name, version) and keeps only what the pages
draw: a few sample images, the class counts and the first validation images (the same images a
run shows in its reconstruction grid).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import streamlit as st

from engine.data import list_datasets, load_dataset
from engine.workspace import workspace_root

N_SAMPLES = 24  # images in the Data page's sample grid (half train, half val when both exist)
N_PREVIEW = 8  # first val images: the run's fixed reconstruction images (train.num_vis defaults to 8)


@dataclass(frozen=True)
class DatasetView:
    """What the pages draw of one dataset.

    Attributes:
        info: the engine's ``DatasetInfo`` (name, image_shape (C, H, W), class_names, n_train, n_val...).
        samples: uint8 ``(S, H, W, C)`` sample images; ``sample_captions``: "class · split" each.
        counts: images per class and split (``class_name, split, count``).
        preview: float32 ``(N_PREVIEW, C, H, W)`` in [0, 1]: the first val images (train when no val
            split), exactly what a run puts in its reconstruction grid.
        preview_captions: class name of each preview image.
    """

    info: object
    samples: np.ndarray
    sample_captions: list[str]
    counts: pd.DataFrame
    preview: np.ndarray
    preview_captions: list[str]


def dataset_infos() -> dict:
    """``name -> DatasetInfo`` of every loadable dataset (bundled first). Cheap: no pixels."""
    return {info.name: info for info in list_datasets()}


def get_view(name: str) -> DatasetView:
    """:func:`dataset_view` for the current workspace and the dataset's current version.

    Raises ``engine.errors.DatasetError`` (unknown or unreadable dataset).
    """
    info = dataset_infos().get(name)
    version = info.created_at if info is not None else ""
    return dataset_view(str(workspace_root()), name, version)


@st.cache_data(max_entries=6, ttl=900, show_spinner="Loading dataset…")
def dataset_view(workspace: str, name: str, version: str) -> DatasetView:
    """Load ``name`` and cut out what the pages show. ``workspace`` and ``version`` (the dataset's
    ``created_at``) are only cache keys: a re-imported dataset gets a new entry."""
    ds = load_dataset(name)
    info = ds.info
    rng = np.random.default_rng(0)  # the same samples at every visit
    train, val = ds.indices("train"), ds.indices("val")
    k_val = min(len(val), N_SAMPLES // 2)  # half val when there are enough, train fills the rest
    k_train = min(len(train), N_SAMPLES - k_val)
    picks = [(int(i), "train") for i in np.sort(rng.choice(train, size=k_train, replace=False))]
    picks += [(int(i), "val") for i in np.sort(rng.choice(val, size=k_val, replace=False))]
    samples = ds.images[[i for i, _ in picks]] if picks else ds.images[:0]
    captions = [f"{info.class_names[ds.labels[i]]} · {s}" for i, s in picks]
    x, y = ds.tensors("val" if info.n_val else "train")
    preview = x[:N_PREVIEW].numpy().astype(np.float32)
    return DatasetView(
        info=info,
        samples=samples,
        sample_captions=captions,
        counts=ds.counts(),
        preview=preview,
        preview_captions=[info.class_names[int(c)] for c in y[:N_PREVIEW]],
    )
