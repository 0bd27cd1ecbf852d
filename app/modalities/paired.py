"""Image-caption pairs in the dashboard (issue 11): the Data page's pairs (each image with its
caption beneath), the run's two masks on real pairs (New run, Mask lab), a run's joint
reconstruction (masked patches and masked tokens next to the model's reconstruction of both, and
the caption predicted from the image alone), the retrieval box and the Compare view.

The image half is drawn as :mod:`app.modalities.image` draws images (grey masked patches), the
caption half as :mod:`app.modalities.text` draws sentences (masked tokens highlighted); every
string shown is HTML-escaped there. Conventions: images float ``(N, C, H, W)`` in [0, 1], image
masks bool ``(N, h, w)``, caption tokens ``(N, L)`` strings (``""`` at padding), caption masks
bool ``(N, L)``; True = masked.
"""

from __future__ import annotations

import streamlit as st

from app.components.charts import counts_chart
from app.components.errors import guarded
from app.components.images import image_grid
from app.modalities.text import length_panel, text_lengths
from engine.workspace import workspace_root

N_SAMPLES = 12  # pairs in the Data page's sample grid (half train, half val when both exist)
SAMPLE_COLUMNS = 6


@st.cache_data(max_entries=6, ttl=900, show_spinner="Loading pairs…")
def pairs_view(workspace: str, name: str, version: str) -> dict:
    """What the Data page shows of a paired dataset: representative pairs (class by class, half
    val: :func:`app.components.datasets.sample_rows`) as uint8 ``(S, H, W, C)`` images with their
    captions, label and split; caption lengths of every pair; class counts. ``workspace`` and
    ``version`` are cache keys only."""
    from app.components.datasets import sample_rows
    from engine.data import load_dataset

    ds = load_dataset(name)
    picks = sample_rows(ds, N_SAMPLES)
    rows = [i for i, _ in picks]
    texts = ds.texts()
    return {"images": ds.images[rows], "captions": [texts[i] for i in rows],
            "tags": [f"{ds.info.class_names[ds.labels[i]]} · {s}" for i, s in picks],
            "lengths": text_lengths(texts, ["train" if s == 0 else "val" for s in ds.split]),
            "counts": ds.counts()}


def pair_captions(captions: list[str], tags: list[str] | None = None) -> list[str]:
    """One caption per image for :func:`app.components.images.image_grid`: the pair's caption in
    quotes, then its tag (``class · split``) when given."""
    return [f"“{c}”" + (f" · {tags[i]}" if tags else "") for i, c in enumerate(captions)]


def describe(info) -> str:
    """The dataset in a few words for the Data page's selector: ``785 pairs, 32x32 px``."""
    return f"{info.n_train + info.n_val:,} pairs, {'x'.join(map(str, info.image_shape[1:]))} px"


def data_section(info) -> None:
    """The Data page body for a paired dataset: sizes, pairs (image with its caption beneath),
    caption lengths, pairs per class and split."""
    view = guarded(pairs_view, str(workspace_root()), info.name, info.created_at)
    if view is None:
        return
    m = st.columns(5)
    m[0].metric("Train pairs", f"{info.n_train:,}")
    m[1].metric("Val pairs", f"{info.n_val:,}")
    m[2].metric("Classes", len(info.class_names))
    m[3].metric("Image size", f"{info.image_shape[1]}x{info.image_shape[2]}")
    m[4].metric("Mean caption", f"{view['lengths'].words.mean():.1f} words")
    st.subheader("Pairs")
    st.caption("Each image with its caption beneath, then its class and split; chosen class by class.")
    image_grid(view["images"], pair_captions(view["captions"], view["tags"]), columns=SAMPLE_COLUMNS)
    left, right = st.columns(2)
    with left:
        length_panel(view["lengths"], info.name, "caption")
    with right:
        st.subheader("Pairs per class and split")
        st.altair_chart(counts_chart(view["counts"], unit="pairs"), width="stretch")
