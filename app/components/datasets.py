"""Cached, display-ready views of a dataset (bounded ``st.cache_data``).

Pages never keep a whole dataset in the cache: :func:`dataset_view` loads it through
``engine.data.load_dataset`` once per (workspace, name, version) and keeps only what the pages
draw: a few sample images, the class counts and the run's fixed validation images (the same images
a run shows in its reconstruction grid). Every choice is :func:`engine.data.representative`: class
by class, seeded, the same at every visit.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import streamlit as st

from engine.api import list_datasets, load_dataset, representative, workspace_root

N_SAMPLES = 24  # images in the Data page's sample grid (half train, half val when both exist)
N_PREVIEW = 8  # the run's fixed reconstruction images (train.num_vis defaults to 8)


@dataclass(frozen=True)
class DatasetView:
    """What the pages draw of one dataset.

    Attributes:
        info: the engine's ``DatasetInfo`` (name, image_shape (C, H, W), class_names, n_train, n_val...).
        samples: uint8 ``(S, H, W, C)`` sample images; ``sample_captions``: "class · split" each.
        counts: images per class and split (``class_name, split, count``).
        preview: float32 ``(N_PREVIEW, C, H, W)`` in [0, 1]: the representative val images (train
            when no val split), exactly what a run puts in its reconstruction grid.
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
    picks = sample_rows(ds, N_SAMPLES)
    samples = np.asarray(ds.images[[i for i, _ in picks]] if picks else ds.images[:0])  # only these rows are read
    captions = [f"{info.class_names[ds.labels[i]]} · {s}" for i, s in picks]
    pool = ds.indices("val" if info.n_val else "train")
    x, y = ds.rows_tensors(pool[representative(ds.labels[pool], N_PREVIEW)])  # == the run's fixed validation images
    preview = x.numpy()
    return DatasetView(
        info=info,
        samples=samples,
        sample_captions=captions,
        counts=ds.counts(),
        preview=preview,
        preview_captions=[info.class_names[int(c)] for c in y[:N_PREVIEW]],
    )


def sample_rows(ds, n: int) -> list[tuple[int, str]]:
    """``(row, split)`` of ``n`` sample rows of any dataset: half from val when it has enough, train
    fills the rest; each half :func:`engine.data.representative` (class by class)."""
    train, val = ds.indices("train"), ds.indices("val")
    k_val = min(len(val), n // 2)
    k_train = min(len(train), n - k_val)
    picks = [(int(train[i]), "train") for i in representative(ds.labels[train], k_train)]
    return picks + [(int(val[i]), "val") for i in representative(ds.labels[val], k_val)]
