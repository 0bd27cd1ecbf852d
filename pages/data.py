"""Data: import a dataset (images or text, every format through one panel), then look at any
dataset: representative samples (class by class), sizes and class counts, drawn by the dataset's
modality view, and the disk space it takes. The dataset shown is in the URL (``?dataset=name``): a reload or a link reopens it."""

from __future__ import annotations

import streamlit as st

from app.components import guarded
from app.components.access import actor, allowed, delete_panel
from app.components.datasets import dataset_infos
from app.components.importing import import_panel
from app.components.urlstate import PageState, index_of
from app.modalities import ui_for
from engine.api import bundled_status, can, counted, dataset_bytes, delete_dataset, format_bytes

st.title("Data")
url = PageState("data", ("dataset",))

if "data_pending" in st.session_state:  # select a dataset that was just imported
    st.session_state["data_ds"] = st.session_state.pop("data_pending")
    url.put("dataset", st.session_state["data_ds"])

if can("data.import", actor()):  # editors; the engine refuses anyone else anyway
    # Open while an import runs or has something to say (its report, or why it ended without one).
    busy = any(st.session_state.get(k) is not None for k in ("data_job", "data_report", "data_import_note"))
    with st.expander("Import a dataset", expanded=busy):
        import_panel()  # a finished import selects its dataset through data_pending

for b in bundled_status():
    if not b.available:
        st.info(f"Bundled dataset **{b.name}** is not available on this machine. To get it: {b.how_to_get}")

infos = guarded(dataset_infos) or {}
if not infos:
    st.warning("No dataset can be loaded. Import one above.")
    st.stop()


def _describe(n: str) -> str:
    i = infos.get(n)
    if i is None:
        return n
    ui = ui_for(i.modality)
    if ui is not None and ui.describe is not None:
        return f"{n}  ({ui.describe(i)})"
    return f"{n}  ({counted(i.n_train + i.n_val, i.modality + ' item')})"


names = list(infos)
if (asked := url.get("dataset")) is not None and asked not in names:
    st.info(f"This link's dataset {str(asked)!r} is not in this workspace: showing {names[0]!r} instead.")
# Once the selection is in session state (a finished import sets it), the index must stay at its
# default: Streamlit warns about a widget given both a default and a value set through the state.
start = 0 if "data_ds" in st.session_state else index_of(names, url.get("dataset"))
name = st.selectbox("Dataset", names, key="data_ds", format_func=_describe, index=start)
url.put("dataset", name)
info = infos[name]
st.write(info.description or "")
st.caption(f"Source: {info.source}" + (f" · registered {info.created_at}" if info.created_at else "")
           + (f" · content hash {info.source_hash[:12]}" if getattr(info, "source_hash", "") else "")
           + (f" · {format_bytes(dataset_bytes(name))} on disk" if info.created_at else " · not stored yet"))
ui = ui_for(info.modality)
if ui is None or ui.data_section is None:
    st.info(f"The dashboard cannot show {info.modality} datasets yet.")
else:
    ui.data_section(info)
remove = allowed("data.delete", delete_dataset)
if remove is not None and info.created_at and not info.source.startswith("bundled"):  # admins
    delete_panel("dataset", f"Deletes **{name}** for good. Runs trained on it keep their results but cannot be resumed.",
                 f"data_delete_{name}", lambda: remove(name), lambda: (st.session_state.pop("data_ds", None),
                                                                       url.put("dataset", None)))  # fmt: skip
