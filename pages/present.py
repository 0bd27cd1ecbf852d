"""Presentation: one run, or several side by side, for a demo: full width, read only, no controls.

``?run=<id>`` shows one run: its key numbers (the task's main figure next to its best trivial
baseline; the latest evaluation's linear-probe and kNN accuracy next to the same model at its
initial weights), the table of every baseline, and its samples drawn by its modality's view
(``app.modalities.sample_view``). ``?runs=<id>,<id>`` shows several: runs that differ only in
``train.seed`` as seed groups (mean and band, ``?band=minmax|std|sem``), one row of key numbers per
run and the same validation inputs reconstructed by each (``SampleView.compare``). Without
either, the most recent completed run that has an evaluation (or a note that there is none yet: a
run at step 0 has no figures worth presenting). Run detail and Compare link here. Nothing on this page writes: no
Cancel, Resume, Launch, Evaluate or Delete, and no filters; the sidebar starts collapsed.
"""

from __future__ import annotations

import streamlit as st

from app.components import guarded, run_label, short_label, status_badge
from app.components.compare import show_reconstructions
from app.components.groups import BANDS, seed_groups
from app.components.present import group_key_table, key_numbers, key_table, latest_presentable, show_key_metrics
from app.components.quality import headline_of, quality_table
from app.components.run_summary import show_samples
from app.components.runs import format_duration, latest_points, masking_label
from app.components.urlstate import PageState
from app.modalities import sample_title
from engine.api import RunNotFoundError, counted, get_run, latest_evaluation, list_runs

st.set_page_config(initial_sidebar_state="collapsed")  # the entry says "auto"; a direct link opens without it
url = PageState("present", ("run", "runs", "band"))
asked = url.get("runs", "", cast=str) or url.get("run", "", cast=str)
wanted = list(dict.fromkeys(x.strip() for x in asked.split(",") if x.strip()))  # in order, once each
if not wanted:
    chosen = latest_presentable(guarded(list_runs) or [])
    if chosen is None:
        st.title("Presentation")
        st.info("No completed and evaluated run yet: this page shows the most recent one once a run has completed "
                "and its evaluation (linear probe, kNN) is stored. The Present link of Run detail or Compare shows "
                "any run.")
        st.stop()
    wanted = [chosen.run_id]
    st.caption("The most recent completed and evaluated run.")


def record(run_id: str):
    """The run's record; an unknown id raises with a message for people (not the workspace path)."""
    try:
        return get_run(run_id)
    except RunNotFoundError:
        raise RunNotFoundError(f"No run {run_id!r} in this workspace: the link may be mistyped, or the run "
                               "was deleted.") from None


runs = [r for r in (guarded(record, x) for x in wanted) if r is not None]  # damaged folders: their own message
if not runs:
    st.stop()


def subtitle(rec) -> str:
    """One line under a run's name: status, task, dataset, masking, steps and duration."""
    cfg = rec.config
    parts = [status_badge(rec.status), f"task `{cfg.get('task', 'image_mim')}`",
             f"dataset `{(cfg.get('data') or {}).get('dataset', '?')}`", f"masking {masking_label(cfg)}",
             f"step {rec.step} of {rec.total_steps}"]
    return " · ".join(parts + ([format_duration(rec.duration_s)] if rec.duration_s else []))


points = latest_points(runs)
numbers = {r.run_id: key_numbers(r, points, guarded(latest_evaluation, r.run_id)) for r in runs}
if len(runs) == 1:
    (rec,) = runs
    st.title(rec.name or rec.run_id)
    st.markdown(subtitle(rec) + f" · run `{rec.run_id}`")
    show_key_metrics(numbers[rec.run_id])
    heading = st.empty()  # the heading only above a table: a run without baselines has none
    step, value = points.get((rec.run_id, headline_of(rec.config)[0]), (None, None))
    if quality_table(rec, step, value):
        heading.subheader("Validation figure and baselines")
    st.subheader(sample_title(rec.config))
    show_samples(rec.run_id)
else:
    legend = {r.run_id: short_label(r) for r in runs}
    st.title(f"{counted(len(runs), 'run')} compared")
    for r in runs:
        st.markdown(f"**{legend[r.run_id]}** · " + subtitle(r))
    seeds = seed_groups({r.run_id: r.config for r in runs})
    band_kind = url.get("band", "minmax", str) if url.get("band", "minmax", str) in BANDS else "minmax"
    grouped = group_key_table(seeds, numbers, band_kind)
    if not grouped.empty:
        st.subheader("Seed groups")
        st.table(grouped.set_index("group"))
        st.caption(f"Runs that differ only in train.seed, as one row: the mean over the group's runs and their "
                   f"{BANDS[band_kind]} (`?band=minmax|std|sem` in the link); each run's own numbers below.")
    st.subheader("Key numbers")
    st.table(key_table([(legend[r.run_id], numbers[r.run_id]) for r in runs]).set_index("run"))
    st.caption("Each run's main figure at its last evaluation beside the best predictor that does not learn "
               "(measured at step 0 on the same validation masks); probe and kNN: frozen encoder features at its "
               "latest evaluation, beside the same model at its initial weights and chance (the most common class).")
    st.subheader("Reconstructions side by side")
    show_reconstructions(runs, legend)
st.caption("masklab · read-only presentation view · " + " · ".join(run_label(r) for r in runs))
