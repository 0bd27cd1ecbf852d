"""The Runs page's "Move runs between workspaces" panel: download chosen runs as one zip
(:func:`engine.store.portable.export_runs`, built when the button is pressed) and, for editors, import
such a zip (:func:`engine.store.portable.import_runs`: checked as an upload is, a run already here
refused by name)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import streamlit as st

from app.components.access import allowed
from app.components.errors import guarded, user_errors
from engine.api import CHECKPOINT_CHOICES, export_runs, import_runs, workspace_root

#: How each checkpoint choice reads in the panel.
CHECKPOINT_WORDS = {"latest": "the newest checkpoint", "all": "every kept checkpoint", "none": "no checkpoint"}


def portable_panel(records: Sequence[Any], labels: dict[str, str], default: Sequence[str]) -> None:
    """The panel (an expander): a pick of ended runs (``default``: those of them pre-chosen) and the
    checkpoints to take, a download button, then the import (editors only)."""
    with st.expander("Move runs between workspaces (export, import)"):
        ended = [r.run_id for r in records if not r.is_active]
        a, b = st.columns([3, 1], vertical_alignment="bottom")
        chosen = a.multiselect("Runs to export (ended runs)", ended, default=[r for r in default if r in ended],
                               format_func=labels.get, key="runs_export_ids")
        ckpt = b.selectbox("Checkpoints", CHECKPOINT_CHOICES, format_func=CHECKPOINT_WORDS.get, key="runs_export_ckpt")
        st.download_button(f"Download {len(chosen)} run(s) as .zip", lambda: guarded(export_runs, chosen, ckpt) or b"",
                           file_name="masklab-runs.zip", mime="application/zip", disabled=not chosen,
                           key="runs_export_go", on_click="ignore")
        st.caption("The zip holds each run's config, metrics (the store's Parquet: run_id, key, step, value, "
                   "wall_time; DuckDB's read_parquet reads them as they are), evaluations, samples, tags and note, "
                   "the checkpoints chosen and a text run's tokenizer; `python -m engine export-runs` writes the same.")
        run_import = allowed("run.import", import_runs)
        if run_import is None:
            return
        upload = st.file_uploader("Import runs from a masklab .zip", type=["zip"], key="runs_import_file")
        if upload is not None and st.button("Import", key="runs_import_go"):
            scratch = Path(tempfile.mkdtemp(prefix=".upload-", dir=workspace_root()))
            try:
                path = scratch / Path(upload.name).name
                path.write_bytes(upload.getvalue())
                with user_errors():
                    report = run_import(path)
                    if report.imported:
                        st.success(f"Imported {len(report.imported)} run(s): {', '.join(report.imported)}")
                    for run_id, why in report.refused:
                        st.warning(f"Run {run_id} not imported: {why}")
            finally:
                shutil.rmtree(scratch, ignore_errors=True)
