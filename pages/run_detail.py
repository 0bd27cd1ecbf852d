"""Run detail: status, figures (each with its step), device and size, curves, baselines, the
samples of one run, its latest evaluation (probes, fine-tune, reconstruction quality, FLOPs), its
worker log and its checkpoint.

The run comes from ``?run=<id>`` (links from New run and Runs), else the most recent one; the chart
axes are in the URL too (``&x=relative&y=log``), and so are the interactive box's inputs (``box_*``:
the checkpoint, the image or sentence chosen, the patches or words hidden, the caption typed), so F5
reopens the same box. The summary and the samples are fragments that re-read the run every 2 s while
something they show can change (:func:`app.components.runs.is_live`: the run is queued or running,
or an evaluation of it is), so a new eval's samples show up without reloading the page; an ended
run's panels are drawn once and stay still (one full rerun when a live run ends). The interactive box
is a fragment of its own: a click in it reruns the box, not the page. A failed,
diverged or interrupted run says why; an active run can be cancelled (after a confirmation). A run
on a cluster back-end shows its job ("Runs on") and, while active, the job's state.
Editors tag, annotate and archive the run; "Open this config in New run" fills New run's form with it.
"""

from __future__ import annotations

import streamlit as st

from app.components import guarded, run_label, runs_or_stop, short_label, status_message
from app.components.access import allowed, delete_panel
from app.components.annotations import annotations_panel, open_in_new_run
from app.components.charts import axis_controls
from app.components.distance import show_run as show_distance
from app.components.evaluation import evaluation_panel
from app.components.matrix import step_matrix
from app.components.methods import method_panel
from app.components.quality import headline_of, quality_table
from app.components.resume import resume_panel
from app.components.run_summary import checkpoint_download, curves, run_metrics, show_samples, summary
from app.components.runs import REFRESH, is_live, latest_points, progress_with_cancel
from app.components.urlstate import PageState
from app.modalities import interactive_box, sample_title
from engine.api import MasklabError, cancel, cluster_job, delete_run, get_run, job_state, latest_checkpoint_step, load_samples, read_log

st.title("Run detail")
url = PageState("run_detail", ("run", "x", "y", "box_*", "mview", "mpage"))
runs = runs_or_stop()

ids = [r.run_id for r in runs]
labels = {r.run_id: run_label(r) for r in runs}
legend = {r.run_id: short_label(r) for r in runs}
wanted = url.get("run", cast=str)
if wanted and wanted not in ids:
    st.error(f"No run {wanted!r} in this workspace; showing the most recent run instead.")
run_id = url.widget(st.selectbox, "Run", "run", default=ids[0], options=ids, format_func=labels.get, key="rd_run")
box_url = url.scope("box_")
if wanted is not None and wanted != run_id:
    box_url.clear()  # the box settings were another run's
x_axis, log_y = axis_controls(url, "rd")
st.page_link("../pages/present.py", label="Presentation view", query_params={"run": run_id},
             help="This run full width for a demo: key numbers and reconstructions, no controls")


@st.cache_data(ttl=5, max_entries=64, show_spinner=False)
def cluster_job_state(run_id: str):
    """``engine.runner.launcher.job_state`` (one request to the cluster), at most every 5 s per run."""
    return job_state(run_id)


try:
    live = is_live(get_run(run_id))  # fresh (the run list may be a second old)
except MasklabError:  # the summary below shows why
    live = False
every = REFRESH if live else None


def ended_since_drawn(rec) -> None:
    """A live panel whose run has stopped changing reruns the whole page once: the page then
    schedules no refresh, and its other parts (evaluation, checkpoints, the box) catch up."""
    if live and not is_live(rec):
        st.rerun()


@st.fragment(run_every=every)
def status_panel(run_id: str) -> None:
    rec = guarded(get_run, run_id)
    if rec is None:
        return
    ended_since_drawn(rec)
    points = latest_points([rec])
    metrics = run_metrics(run_id, rec.config)
    summary(rec, points, metrics)
    if rec.is_active and cluster_job(rec.path):  # what its cluster says (and a job that ended without its worker)
        state = guarded(cluster_job_state, run_id)
        if state is not None:
            st.caption(f"Cluster job {state.job_id}: {state.state}" + (f" ({state.reason})" if state.reason else ""))
    if rec.is_active:
        progress_with_cancel(rec, allowed("run.cancel", cancel), "rd_cancel", f"{rec.status} · {rec.progress:.0%}")
    status_message(rec, guarded(latest_checkpoint_step, run_id) if rec.is_resumable else None)
    curves(run_id, rec.config, legend, x_axis, log_y, metrics)
    method_panel(rec)
    st.subheader("Validation figure and baselines")  # here, so the table is as fresh as the figures above
    step, value = points.get((rec.run_id, headline_of(rec.config)[0]), (None, None))
    quality_table(rec, step, value)


@st.fragment(run_every=every)
def samples_panel(run_id: str) -> None:
    """The run's latest samples (re-read every 2 s while it is live: a new evaluation's show up)."""
    show_samples(run_id)


@st.fragment
def box_panel(box, rec, sample) -> None:
    """The run's interactive box: its own fragment, so a click reruns the box alone."""
    box(rec, sample, box_url)


status_panel(run_id)
rec = next(r for r in runs if r.run_id == run_id)
annotations_panel(rec, sorted({t for r in runs for t in r.tags}))
resume_panel(rec)
st.subheader(sample_title(rec.config))
samples_panel(run_id)


@st.fragment
def steps_panel(rec) -> None:
    """Every stored evaluation step side by side (a view or page change redraws this alone)."""
    with st.expander("All evaluation steps side by side", expanded=url.get("mview") is not None):
        if not step_matrix(rec, url):
            st.caption("Fewer than two evaluations with samples so far.")


steps_panel(rec)
with st.expander("Where reconstruction breaks down: error by distance to the nearest visible unit"):
    show_distance(run_id)
box = interactive_box(rec.config)
if box is not None:
    box_panel(box, rec, guarded(load_samples, run_id))
st.subheader("Evaluation")


@st.fragment(run_every=every)
def evaluation_fragment(run_id: str) -> None:
    """The run's evaluation: while one runs, its progress and the figures of the phases it finished
    (re-read every 2 s while the run is live)."""
    rec = guarded(get_run, run_id)
    if rec is not None:
        ended_since_drawn(rec)
        evaluation_panel(rec)


evaluation_fragment(run_id)
open_in_new_run(rec)
with st.expander("Resolved config"):
    st.json(rec.config)
with st.expander("Worker log"):  # read only when the page runs, not every 2 s
    log = guarded(read_log, run_id, 64_000)
    if log:
        st.code(log, language=None)
    else:
        st.caption("No worker log: this run ran in the foreground (`python -m engine run`), its output went to "
                   "that terminal." if log is None else "The worker log is empty so far." if rec.is_active else
                   "The worker log is empty: the run printed no warning or error.")
with st.expander("Checkpoint"):
    checkpoint_download(rec)
remove = allowed("run.delete", delete_run)
if remove is not None and not rec.is_active:  # admins; a live run is cancelled first
    delete_panel("run", f"Deletes **{labels[run_id]}** for good: config, metrics, checkpoints, samples and log.",
                 f"rd_delete_{run_id}", lambda: remove(run_id), lambda: (st.session_state.pop("rd_run", None),
                                                                        url.put("run", None)))  # fmt: skip
