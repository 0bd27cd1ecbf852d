"""The Data page's import panel, the same for every modality.

Upload a file -> masklab inspects it (``engine.data.inspect_source``: modality, columns and their
detected roles, classes, cleaning counts, a preview) -> the user changes the column roles or the
options and sees the plan again -> "Import" runs ``engine.data.import_source`` and shows the
per-file report, with a banner whose colour says all in / some refused / nothing in.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pandas as pd
import streamlit as st

from app.components.errors import guarded
from engine.data import ImportOptions, import_source, inspect_source
from engine.data.tabular import ROLES

ACCEPTED = ["zip", "txt", "csv", "tsv", "jsonl"]
UPLOAD_LABEL = "Dataset file: a .zip of images (PNG, JPEG, WebP, BMP, TIFF, GIF) or of .txt files, or one .txt / .csv / .tsv / .jsonl"
_AUTO, _NONE = "(detect)", "(none)"


def _stash(upload) -> Path:
    """The upload written once to a private temporary folder (kept while the same file is selected,
    so inspecting and importing read the same bytes); the previous upload's folder is removed."""
    held = st.session_state.get("imp_file")
    if held and held[0] == upload.file_id and Path(held[1]).exists():
        return Path(held[1])
    if held:
        shutil.rmtree(Path(held[1]).parent, ignore_errors=True)
    path = Path(tempfile.mkdtemp(prefix="masklab-upload-")) / Path(upload.name).name  # the user's name, for reports
    path.write_bytes(upload.getvalue())
    st.session_state["imp_file"] = (upload.file_id, str(path))
    return path


@st.cache_data(max_entries=8, ttl=600, show_spinner="Reading the file…")
def _plan(path: str, file_id: str, options_json: str, label: str):
    """``inspect_source`` cached per upload and options (``file_id`` is a cache key)."""
    return inspect_source(path, ImportOptions.model_validate_json(options_json), source_label=label)


def _column_options(plan, key: str) -> dict:
    """One select per role for a table: detect, a column, or none."""
    out = {}
    cols = st.columns(len(ROLES))
    for c, role in zip(cols, ROLES):
        detected = getattr(plan.roles, role) if plan.roles else None
        choices = [_AUTO, *plan.columns, _NONE]
        pick = c.selectbox(f"{role} column", choices, key=f"{key}_{role}",
                           format_func=lambda v, d=detected: f"detect ({d or 'none'})" if v == _AUTO else v,
                           help=plan.roles.reasons.get(role, "") if plan.roles else None)  # fmt: skip
        out[f"{role}_column"] = None if pick == _AUTO else ("" if pick == _NONE else pick)
    return out


def _show_plan(plan) -> None:
    st.markdown(f"**{plan.source}**: {plan.modality} ({plan.kind}) · {plan.n_items:,} "
                f"{'images' if plan.modality == 'image' else 'texts'} to import · {len(plan.class_names)} classes")
    if plan.label_counts:
        st.caption("Classes: " + ", ".join(f"{c} ({n})" for c, n in plan.label_counts.items()))
    if plan.cleaning:
        st.caption("Cleaning: " + ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in plan.cleaning.items()))
    for note in plan.notes:
        st.caption(note)
    if plan.preview:
        st.dataframe(pd.DataFrame(plan.preview), hide_index=True, width="stretch", height=180)
    _refusals(plan.rejected, plan.skipped)


def _refusals(rejected, skipped) -> None:
    if rejected:
        st.markdown(f"**Refused ({len(rejected)})**: each with the reason and what to do")
        st.dataframe(pd.DataFrame(rejected, columns=["file", "reason"]), hide_index=True, width="stretch")
    if skipped:
        with st.expander(f"Skipped, not data files ({len(skipped)})"):
            st.dataframe(pd.DataFrame(skipped, columns=["file", "why skipped"]), hide_index=True, width="stretch")


def show_report(report, name: str) -> None:
    """The import report under a banner coloured by the outcome: all in, some refused, nothing in."""
    what = "texts" if hasattr(report, "cleaning") else "images"
    if report.dataset is None:
        st.error(f"Nothing was imported from {name}.")
    elif report.rejected:
        st.warning(f"Imported {report.accepted:,} {what} from {name} as **{report.dataset.name}**; "
                   f"{len(report.rejected)} refused (listed below).")
    else:
        st.success(f"Imported all {report.accepted:,} {what} from {name} as dataset **{report.dataset.name}**.")
    _refusals(report.rejected, report.skipped)


def import_panel() -> str | None:
    """The whole panel; returns the name of a dataset that was just imported (else None)."""
    upload = st.file_uploader(UPLOAD_LABEL, type=ACCEPTED, key="data_upload")
    if upload is None:
        return None
    path = _stash(upload)
    key = f"imp_{upload.file_id}"
    a, b = st.columns(2)
    new_name = a.text_input("Dataset name", placeholder="from the file name", key="data_new_name")
    val_fraction = b.slider("Validation fraction", 0.0, 0.5, 0.1, 0.05, key=f"{key}_val")
    base = {"val_fraction": float(val_fraction)}
    plan = guarded(_plan, str(path), upload.file_id, ImportOptions(**base).model_dump_json(), upload.name)
    if plan is None:
        return None
    extra: dict = {}
    if plan.columns:
        base.update(_column_options(plan, key))
    if plan.modality == "text":
        c, d = st.columns(2)
        lo = c.number_input("Drop texts shorter than (characters)", 0, 1_000_000, 0, key=f"{key}_min")
        hi = d.number_input("Drop texts longer than (characters, 0 = no limit)", 0, 10_000_000, 0, key=f"{key}_max")
        base.update(min_chars=int(lo) or None, max_chars=int(hi) or None)
    else:
        c, d, e = st.columns(3)
        extra["image_size"] = int(c.select_slider("Image size (pixels)", [8, 16, 28, 32, 48, 64], 32, key=f"{key}_size"))
        extra["fill"] = d.color_picker("Fill under transparency", "#ffffff", key=f"{key}_fill")
        enc = e.text_input("Member-name encoding", placeholder="detected", key=f"{key}_enc",
                           help="for zips whose names are not UTF-8, e.g. cp437, cp1252, cp932")
        base["name_encoding"] = enc.strip() or None
    options = ImportOptions(**base)
    if options != ImportOptions(val_fraction=base["val_fraction"]):  # roles or filters changed: inspect again
        plan = guarded(_plan, str(path), upload.file_id, options.model_dump_json(), upload.name) or plan
    _show_plan(plan)
    overwrite = st.checkbox("Replace an existing dataset of the same name", key=f"{key}_over")
    if st.button("Import", type="primary", key="data_import"):
        with st.spinner(f"Importing {upload.name}…"):
            report = guarded(import_source, path, new_name.strip() or None, options, overwrite=overwrite,
                             source_label=upload.name, **extra)  # fmt: skip
        st.session_state["data_report"] = (report, upload.name) if report is not None else None
        if report is not None and report.dataset is not None:
            return report.dataset.name
    held = st.session_state.get("data_report")
    if held:
        show_report(*held)
    return None
