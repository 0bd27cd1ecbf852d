"""The Data page's import panel, the same for every modality.

Upload a file -> masklab inspects it (``engine.data.inspect_source``: modality, columns and their
detected roles, classes, cleaning counts, a preview) -> the user changes the column roles or the
options and sees the plan again -> "Import" starts ``engine.data.jobs.start_import`` (another process:
a progress bar and Cancel, re-read every second, the page stays live) and at its end shows the
per-file report, with a banner whose colour says all in / some refused / nothing in.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

import pandas as pd
import streamlit as st

from app.components.access import actor
from app.components.errors import guarded
from app.modalities import ui_for
from engine.api import (
    AUDIO_EXTENSIONS,
    AUDIO_UPSAMPLED,
    COLUMN_ROLES,
    NOTE_LOST_ON_FILL,
    TABLE_EXTENSIONS,
    ImportOptions,
    ImportOutcome,
    cancel_import,
    classes_text,
    counted,
    import_status,
    inspect_source,
    start_import,
)

#: The upload's label: every type the importer takes (``engine.data.ingest``), from the same lists it checks.
UPLOAD_LABEL = ("Dataset file: a .zip of images (PNG, JPEG, WebP, BMP, TIFF, GIF), of audio clips (WAV, FLAC, Ogg) or of "
                ".txt files, or one " + " / ".join([".txt", *TABLE_EXTENSIONS, *AUDIO_EXTENSIONS]))


def item_name(modality: str, planned: bool = False) -> str:
    """What one item of ``modality`` is called in the report (``ModalityUI.item``), or with
    ``planned`` in the plan, before the import decodes them (``ModalityUI.plan_item``: images and
    clips are counted by their file names then; a refused file, e.g. text named .png, leaves the
    count at import). ``"item"`` for a modality without a UI."""
    ui = ui_for(modality)
    if ui is None:
        return "item"
    return (ui.plan_item or ui.item) if planned else ui.item


_AUTO, _NONE = "(detect)", "(none)"


STALE_UPLOAD_S = 24 * 3600
"""An upload's temporary copy untouched this long belongs to a session that ended without importing
it or removing the file (Streamlit tells a page no session's end): the next upload removes it."""


def _sweep_stale_copies(now: float | None = None) -> None:
    """Remove ``masklab-upload-*`` folders of the temporary directory older than :data:`STALE_UPLOAD_S`."""
    now = time.time() if now is None else now
    for d in Path(tempfile.gettempdir()).glob("masklab-upload-*"):
        try:
            if now - d.stat().st_mtime > STALE_UPLOAD_S:
                shutil.rmtree(d, ignore_errors=True)
        except OSError:
            continue


def _stash(upload) -> Path:
    """The upload written once to a private temporary folder (kept while the same file is selected,
    so inspecting and importing read the same bytes); the previous upload's folder is removed. The
    folder goes when its import ends or the file is removed from the uploader (:func:`_drop_stash`)."""
    held = st.session_state.get("imp_file")
    if held and held[0] == upload.file_id and Path(held[1]).exists():
        return Path(held[1])
    _drop_stash()
    _sweep_stale_copies()
    path = Path(tempfile.mkdtemp(prefix="masklab-upload-")) / Path(upload.name).name  # the user's name, for reports
    path.write_bytes(upload.getvalue())
    st.session_state["imp_file"] = (upload.file_id, str(path))
    return path


def _drop_stash() -> None:
    """Remove the temporary copy of the upload (:func:`_stash`), if this session holds one and no
    running import reads it (that one goes when the import ends: :func:`_imported`)."""
    held = st.session_state.pop("imp_file", None)
    if held and held[1] != st.session_state.get("data_job_file"):
        shutil.rmtree(Path(held[1]).parent, ignore_errors=True)


def _imported() -> None:
    """After an import ended: remove the copy it read; if the uploader still holds that file, empty
    the uploader (a second click cannot import the same file again by mistake)."""
    done = st.session_state.pop("data_job_file", None)
    if done is None:
        return
    shutil.rmtree(Path(done).parent, ignore_errors=True)
    held = st.session_state.get("imp_file")
    if held and held[1] == done:
        st.session_state.pop("imp_file")
        st.session_state["data_upload_gen"] = st.session_state.get("data_upload_gen", 0) + 1


def _uploader_key() -> str:
    """The uploader's key; a finished import moves it on, which empties the uploader (:func:`_imported`)."""
    return f"data_upload_{st.session_state.get('data_upload_gen', 0)}"


@st.cache_data(max_entries=8, ttl=600, show_spinner="Reading the file…")
def _plan(path: str, file_id: str, options_json: str, label: str):
    """``inspect_source`` cached per upload and options (``file_id`` is a cache key)."""
    return inspect_source(path, ImportOptions.model_validate_json(options_json), source_label=label)


def _column_options(plan, key: str) -> dict:
    """One select per role for a table: detect, a column, or none."""
    out = {}
    cols = st.columns(len(COLUMN_ROLES))
    for c, role in zip(cols, COLUMN_ROLES):
        detected = getattr(plan.roles, role) if plan.roles else None
        choices = [_AUTO, *plan.columns, _NONE]
        pick = c.selectbox(f"{role} column", choices, key=f"{key}_{role}",
                           format_func=lambda v, d=detected: f"detect ({d or 'none'})" if v == _AUTO else v,
                           help=plan.roles.reasons.get(role, "") if plan.roles else None)  # fmt: skip
        out[f"{role}_column"] = None if pick == _AUTO else ("" if pick == _NONE else pick)
    return out


#: The plan's preview table: at most this tall (pixels, scrolls beyond), rows of ``ROW_PX``.
PREVIEW_HEIGHT, ROW_PX = 180, 35


def _show_plan(plan) -> None:
    st.markdown(f"**{plan.source}**: {plan.modality} ({plan.kind}) · "
                f"{counted(plan.n_items, item_name(plan.modality, planned=True))} to import · "
                f"{classes_text(len(plan.class_names))}")
    if plan.label_counts:
        st.caption("Classes: " + ", ".join(f"{c} ({n})" for c, n in plan.label_counts.items()))
    if plan.cleaning:
        st.caption("Cleaning: " + ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in plan.cleaning.items()))
    for note in plan.notes:
        st.caption(note)
    if plan.preview:
        preview = pd.DataFrame(plan.preview)  # a short preview gets no empty rows under it
        st.dataframe(preview, hide_index=True, width="stretch",
                     height=min(PREVIEW_HEIGHT, ROW_PX * (len(preview) + 1) + 3))
    _refusals(plan.rejected, plan.skipped)


#: Up to this many refusals are listed as a table whose cells wrap (a whole reason is readable);
#: more go to a scrollable data frame.
WRAPPED_ROWS = 20


def _refusals(rejected, skipped) -> None:
    if rejected:
        st.markdown(f"**Refused ({len(rejected)})**: each with the reason and what to do")
        frame = pd.DataFrame(rejected, columns=["file", "reason"])
        if len(frame) <= WRAPPED_ROWS:
            st.table(frame.set_index("file"))
        else:
            st.dataframe(frame, hide_index=True, width="stretch",
                         column_config={"reason": st.column_config.TextColumn("reason", width="large")})
    if skipped:
        with st.expander(f"Skipped, each with the reason ({len(skipped)})"):
            st.dataframe(pd.DataFrame(skipped, columns=["file", "why skipped"]), hide_index=True, width="stretch")


def show_report(outcome, name: str) -> None:
    """An import's outcome (``engine.data.jobs.ImportOutcome``) under a banner coloured by the
    outcome: all in, some refused, nothing in."""
    what = item_name(outcome.modality)
    if outcome.dataset is None:
        n = len(outcome.rejected)
        refused = "the file was refused" if n == 1 else f"all {n} files were refused"
        st.error(f"Nothing was imported from {name}: "
                 + (f"{refused} (listed below); nothing was registered." if n else "it holds no file masklab imports."))
    elif outcome.rejected:
        st.warning(f"Imported {counted(outcome.accepted, what)} from {name} as **{outcome.dataset}**; "
                   f"{len(outcome.rejected)} refused (listed below).")
    else:
        every = "" if outcome.accepted == 1 else "all "
        st.success(f"Imported {every}{counted(outcome.accepted, what)} from {name} as dataset **{outcome.dataset}**.")
    if outcome.geometry:
        st.caption(f"Geometry: {outcome.geometry}.")
    unit = {"audio": "clip"}.get(outcome.modality, "image")
    for note, n, files in getattr(outcome, "converted", ()):
        # a conversion that lost what the data shows (an image on its fill, an upsampled clip's high
        # bins) is a warning; the others are worth knowing
        named = f" ({', '.join(files)}{', …' if n > len(files) else ''})" if files else ""
        warn = NOTE_LOST_ON_FILL in note or AUDIO_UPSAMPLED in note
        (st.warning if warn else st.caption)(f"{counted(n, unit)}{named}: {note}.")
    _refusals(outcome.rejected, outcome.skipped)


@st.fragment(run_every="1s")
def import_progress() -> None:
    """The running import of this session (``engine.data.jobs``, another process): a progress bar
    and Cancel; at its end the report (or why it ended), and the new dataset is selected. Re-read
    every second; :func:`import_panel` draws it only while this session holds an import."""
    held = st.session_state.get("data_job")
    if held is None:
        return
    job_id, name = held
    job = guarded(import_status, job_id)
    if job is None:
        st.session_state.pop("data_job", None)
        return
    if job.active:
        bar, button = st.columns([5, 1], vertical_alignment="bottom")
        frac = job.done / job.total if job.total else 0.0
        bar.progress(frac, text=f"Importing {name}: {job.done:,} / {job.total:,} files read" if job.total
                     else f"Importing {name}…")  # fmt: skip
        if button.button("Cancel import", key=f"cancel_{job_id}"):
            guarded(cancel_import, job_id, actor=actor())
        return
    # Ended: the whole page reruns (the fragment, and its 1 s timer, stop; the note outlives it).
    st.session_state.pop("data_job", None)
    _imported()
    if job.state == "completed":
        st.session_state["data_report"] = (job.outcome, name)
        if job.outcome.dataset:
            st.session_state["data_pending"] = job.outcome.dataset
    elif job.rejected:  # every file refused: the banner, then the table of them as for a partial import
        st.session_state["data_report"] = (ImportOutcome(modality="", dataset=None, accepted=0,
                                                         rejected=job.rejected, skipped=job.skipped), name)
    else:
        st.session_state["data_report"] = None
        st.session_state["data_import_note"] = (
            ("info", f"Import of {name} cancelled; nothing was registered.") if job.state == "cancelled"
            else ("error", f"Import of {name} {job.state}: {job.error}"))
    st.rerun(scope="app")


#: Image sizes offered; "auto" is the images' own size when they all share one (else 64).
SIZES = ["auto", 8, 16, 28, 32, 48, 64, 96, 128, 224]
GEOMETRY_LABELS = {"crop": "centre crop", "stretch": "stretch", "pad": "pad"}
PAD_LABELS = {"edge": "edge pixels", "mean": "mean colour", "colour": "a colour"}


def geometry_options(key: str) -> dict:
    """How images become square (``engine.data.images.fit_square``): size, geometry, pad fill,
    and the colour under transparency. Returns ``import_source``'s image keyword arguments."""
    c, d = st.columns(2)
    size = c.selectbox("Image size (pixels)", SIZES, key=f"{key}_size",
                       format_func=lambda v: "auto (the images' own size)" if v == "auto" else f"{v} x {v}",
                       help="auto: the images' size when they all share one; 64 when sizes differ")  # fmt: skip
    geometry = d.radio("Non-square images", list(GEOMETRY_LABELS), format_func=GEOMETRY_LABELS.get, horizontal=True,
                       key=f"{key}_geometry", help="centre crop keeps the middle square; stretch changes the "
                       "aspect ratio; pad keeps the whole image and fills the rest")  # fmt: skip
    out = {"image_size": None if size == "auto" else int(size), "geometry": geometry}
    e, f = st.columns(2)
    if geometry == "pad":
        how = e.radio("Pad with", list(PAD_LABELS), format_func=PAD_LABELS.get, horizontal=True, key=f"{key}_padfill")
        out["pad_fill"] = f.color_picker("Pad colour", "#808080", key=f"{key}_padcolour") if how == "colour" else how
    out["fill"] = st.color_picker("Colour under transparency", "#ffffff", key=f"{key}_fill")
    return out


def name_encoding_field(key: str) -> dict:
    """The member-name encoding of a zip (images, audio, pairs): ``{"name_encoding": str | None}``."""
    enc = st.text_input("Member-name encoding", placeholder="detected", key=f"{key}_enc",
                        help="for zips whose names are not UTF-8, e.g. cp437, cp1252, cp932")
    return {"name_encoding": enc.strip() or None}


def import_panel() -> str | None:
    """The whole panel: the running import (if any), the upload, its plan and options, Import.
    Returns None (a finished import selects its dataset through ``data_pending``)."""
    # Any file is taken: one of another type is refused by the engine in masklab's words (a type
    # filter here would show a red chip whose reason appears only on hover).
    if st.session_state.get("data_job") is not None:  # the 1 s fragment only while an import runs
        import_progress()
    note = st.session_state.pop("data_import_note", None)
    if note is not None:
        (st.info if note[0] == "info" else st.error)(note[1])
    upload = st.file_uploader(UPLOAD_LABEL, key=_uploader_key())
    if upload is None:
        _drop_stash()  # a file taken out of the uploader: its copy goes too
        if held := st.session_state.get("data_report"):  # the last import's report stays after it
            show_report(*held)
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
    ui = ui_for(plan.modality)  # the modality's own options (text lengths, sample rate, image geometry)
    if ui is not None and ui.import_fields is not None:
        fields, keywords = ui.import_fields(plan, key)
        base.update(fields)
        extra.update(keywords)
    options = ImportOptions(**base)
    if options != ImportOptions(val_fraction=base["val_fraction"]):  # roles or filters changed: inspect again
        plan = guarded(_plan, str(path), upload.file_id, options.model_dump_json(), upload.name) or plan
    _show_plan(plan)
    overwrite = st.checkbox("Replace an existing dataset of the same name", key=f"{key}_over")
    busy = "data_job" in st.session_state
    if st.button("Import", type="primary", key="data_import", disabled=busy):
        # In a background process (engine.data.jobs): progress, cancel, a memory cap; this page stays live.
        job = guarded(start_import, path, new_name.strip() or None, options, overwrite=overwrite,
                      source_label=upload.name, actor=actor(), **extra)  # fmt: skip
        if job is not None:
            st.session_state["data_job"] = (job, upload.name)
            st.session_state["data_job_file"] = str(path)  # removed when the job ends
            st.session_state["data_report"] = None
            st.rerun(scope="app")
    held = st.session_state.get("data_report")
    if held:
        show_report(*held)
    return None
