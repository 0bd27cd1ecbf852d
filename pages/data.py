"""Data: pick a dataset, import a .zip of images, look at samples and class counts."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pandas as pd
import streamlit as st

from app.components import counts_chart, guarded, image_grid
from app.components.datasets import dataset_infos, get_view
from engine.data import bundled_status, import_archive

st.title("Data")

if "data_pending" in st.session_state:  # select a dataset that was just imported
    st.session_state["data_ds"] = st.session_state.pop("data_pending")


def show_report(rep, file_name: str) -> None:
    """The per-file import report: accepted count, every rejected file with its reason, skipped files."""
    if rep.dataset is not None:
        st.success(f"Imported {rep.accepted} images from {file_name} as dataset **{rep.dataset.name}**.")
    else:
        st.error(f"Nothing was imported from {file_name}.")
    head = rep.summary().splitlines()[1:2]  # "Dataset 'x': N train + M val images, CxHxW, K classes (...)"
    counts = f"{rep.accepted} accepted · {len(rep.rejected)} rejected · {len(rep.skipped)} skipped."
    st.caption(" ".join([counts, *head]))
    if rep.rejected:
        st.markdown(f"**Rejected files ({len(rep.rejected)})**")
        st.dataframe(pd.DataFrame(rep.rejected, columns=["file", "reason"]), hide_index=True, width="stretch")
    if rep.skipped:
        with st.expander(f"Skipped files ({len(rep.skipped)})"):
            st.dataframe(pd.DataFrame(rep.skipped, columns=["file", "reason"]), hide_index=True, width="stretch")


with st.expander("Import a .zip of images", expanded=False):
    st.caption(
        "PNG or JPEG files; the first folder inside the archive is the class "
        "(e.g. `cats/001.png`, `dogs/002.jpg`; one top folder wrapping everything is ignored). Images are resized to a square of the chosen size."
    )
    upload = st.file_uploader("Zip archive", type=["zip"], key="data_upload")
    c1, c2, c3 = st.columns(3)
    new_name = c1.text_input("Dataset name", placeholder="from the file name", key="data_new_name")
    size = c2.select_slider("Image size (pixels)", options=[8, 16, 28, 32, 48, 64], value=32)
    val_fraction = c3.slider("Validation fraction", 0.0, 0.5, 0.1, 0.05)
    overwrite = st.checkbox("Replace an existing dataset of the same name")
    if st.button("Import", disabled=upload is None, type="primary"):
        with tempfile.TemporaryDirectory(prefix="masklab-upload-") as tmp:
            path = Path(tmp) / Path(upload.name).name  # keep the user's file name for the report
            path.write_bytes(upload.getvalue())
            with st.spinner(f"Importing {upload.name}…"):
                report = guarded(
                    import_archive, path, new_name.strip() or None,
                    image_size=int(size), val_fraction=float(val_fraction), overwrite=overwrite,
                    source_label=upload.name,
                )  # fmt: skip
        st.session_state.pop("data_report", None)  # never show an older import's report under a new error
        if report is not None:
            st.session_state["data_report"] = (report, upload.name)
            if report.dataset is not None:
                st.session_state["data_pending"] = report.dataset.name
                st.rerun()
    if "data_report" in st.session_state:
        show_report(*st.session_state["data_report"])

for b in bundled_status():
    if not b.available:
        st.info(f"Bundled dataset **{b.name}** is not available on this machine. To get it: {b.how_to_get}")

infos = guarded(dataset_infos) or {}
if not infos:
    st.warning("No dataset can be loaded. Import a .zip above.")
    st.stop()

name = st.selectbox(
    "Dataset", list(infos), key="data_ds",
    format_func=lambda n: f"{n}  ({infos[n].n_train + infos[n].n_val} images, "
    f"{'x'.join(map(str, infos[n].image_shape[1:]))} px)" if n in infos else n,
)  # fmt: skip
view = guarded(get_view, name)
if view is None:
    st.stop()
info = view.info

st.write(info.description or "")
m = st.columns(5)
m[0].metric("Train images", f"{info.n_train:,}")
m[1].metric("Val images", f"{info.n_val:,}")
m[2].metric("Classes", len(info.class_names))
m[3].metric("Image size", f"{info.image_shape[1]}x{info.image_shape[2]}")
m[4].metric("Channels", info.image_shape[0])
st.caption(f"Source: {info.source}" + (f" · registered {info.created_at}" if info.created_at else ""))

st.subheader("Samples")
image_grid(view.samples, view.sample_captions)

st.subheader("Images per class and split")
left, right = st.columns([2, 3])
table = view.counts.pivot(index="class_name", columns="split", values="count").reindex(info.class_names)
table["total"] = table.sum(axis=1)
left.dataframe(table, width="stretch")
right.altair_chart(counts_chart(view.counts), width="stretch")
