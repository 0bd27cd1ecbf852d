"""Run detail: status, resolved config, curves and the reconstruction grid of one run.

The run comes from ``?run=<id>`` (links from New run and Runs), else the most recent one. The
status and the reconstruction grid are fragments that re-read the run every 2 s, so a new eval's
samples show up without reloading the page. A failed, diverged or interrupted run says why; its
worker log is in a collapsed expander.
"""

from __future__ import annotations

import streamlit as st

from app.components import (
    format_duration, guarded, render_metrics_chart, run_label, runs_or_stop, short_label, show_read_warnings,
    status_label, status_message,
)
from app.components.quality import headline_of, loss_title, quality_table
from app.components.resume import resume_panel
from app.modalities import INTERACTIVE, SAMPLE_TITLES, SAMPLE_VIEWS, TASK_KIND
from engine.store import get_run, latest_checkpoint_step, load_samples, read_log, read_metrics

st.title("Run detail")
runs = runs_or_stop()

ids = [r.run_id for r in runs]
labels = {r.run_id: run_label(r) for r in runs}
legend = {r.run_id: short_label(r) for r in runs}
wanted = st.query_params.get("run")
if wanted and wanted not in ids:
    st.error(f"No run {wanted!r} in this workspace; showing the most recent run instead.")
run_id = st.selectbox("Run", ids, index=ids.index(wanted) if wanted in ids else 0, format_func=labels.get)
st.query_params["run"] = run_id  # the URL names the run shown (shareable, survives a reload)


@st.fragment(run_every="2s")
def status_panel(run_id: str) -> None:
    rec = guarded(get_run, run_id)
    if rec is None:
        return
    m = st.columns(5)
    m[0].metric("Status", status_label(rec.status))
    m[1].metric("Step", f"{rec.step} / {rec.total_steps}")
    metric, _ = headline_of(rec.config)
    for col, key in ((m[2], "loss"), (m[3], metric)):
        v = rec.latest.get(key)
        col.metric(key.replace("_", " "), f"{v:.4f}" if v is not None else "–")
    m[4].metric("Duration", format_duration(rec.duration_s) or "–")
    st.progress(rec.progress, text=f"{rec.progress:.0%}")
    status_message(rec, guarded(latest_checkpoint_step, run_id) if rec.is_resumable else None)
    df = guarded(read_metrics, [run_id], ["loss", "val_loss"], max_points=500)
    if df is not None:
        show_read_warnings(df)
        render_metrics_chart(df, smoothing=0.6, run_labels=legend, y_title=loss_title(rec.config), height=220)


@st.fragment(run_every="2s")
def samples_panel(run_id: str) -> None:
    """The run's latest samples, drawn by the view of their kind (app.modalities.SAMPLE_VIEWS)."""
    sample = guarded(load_samples, run_id)
    run = guarded(get_run, run_id)
    if sample is None:
        if run is not None and not run.is_active:
            st.info(f"This run ended ({run.status}) before saving any sample.")
        else:
            every = run.config.get("train", {}).get("eval_interval", "?") if run else "?"
            st.info(f"No reconstructions yet: they are saved when training starts (step 0), then every {every} steps.")
        return
    view = SAMPLE_VIEWS.get(sample.kind)
    if view is None:
        st.info(f"The dashboard has no view for {sample.kind!r} samples.")
        return
    view(sample, run)


status_panel(run_id)
rec = next(r for r in runs if r.run_id == run_id)
resume_panel(rec)
st.subheader("Validation figure and baselines")
quality_table(rec)
st.subheader(SAMPLE_TITLES.get(TASK_KIND.get(rec.config.get("task", "image_mim"), ""), "Samples"))
samples_panel(run_id)
box = INTERACTIVE.get(rec.config.get("task", "image_mim"))
if box is not None:
    box(rec, guarded(load_samples, run_id))
with st.expander("Resolved config"):
    st.json(rec.config)
with st.expander("Worker log"):  # read only when the page runs, not every 2 s
    log = guarded(read_log, run_id, 64_000)
    if log:
        st.code(log, language=None)
    else:
        st.caption("No worker log: this run ran in the foreground (`python -m engine run`), its output went to "
                   "that terminal." if log is None else "The worker log is empty so far.")
