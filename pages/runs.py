"""Runs: every run in the workspace with its key hyperparameters, live curves, cancel (confirmed).

A run whose worker process is gone shows as interrupted; a metrics file that cannot be read is
skipped with a warning above the charts. The runs plotted, the smoothing and the axes live in the
URL (``?runs=a,b&smoothing=0.6&x=step&y=log``), so a reload or a copied link shows the same view.
Archived runs are hidden unless **Show archived** is on (``&archived=true``); the table says how much
disk each run takes, and the caption under it the totals.

The table and the charts are fragments that rerun every 2 s on their own while something they show
can change (the table: a queued or running run, or an evaluation job queued or running; the charts: a
plotted run that is queued or running), and stop when it ends (the page then reruns once, without a
timer). They only read the run index the store keeps in this process (``list_runs(max_age_s=1)``,
``latest_points``: at most 1 s old, a lookup even at thousands of runs) and Parquet metrics through
its caches (``read_metrics``). By default the charts show the most recent runs that have points,
queued or running ones first; losses of different kinds (MSE, cross-entropy...) get a panel each.
"""

from __future__ import annotations

import streamlit as st

from app.components import guarded, render_metrics_chart, run_label, run_table, runs_or_stop, short_label
from app.components.access import allowed
from app.components.charts import axis_controls, render_loss_panels, show_read_warnings
from app.components.evaluation import evaluation_progress
from app.components.portable import portable_panel
from app.components.quality import loss_groups
from app.components.resume import resume_buttons
from app.components.runs import LIST_MAX_AGE_S, REFRESH, activity, is_live, latest_points, progress_with_cancel
from app.components.urlstate import PageState
from engine.api import STATUSES, cancel, disk_usage, format_bytes, has_evaluation_job, list_runs, read_metrics, workspace_root

LOSS_KEYS = ["loss", "val_loss"]
PER_PAGE = 100  # rows of the run table a page: only those are built and sent
N_DEFAULT = 3  # runs plotted by default: the most recent ones that have points, queued or running first


def _changing(records, evaluations: bool = False) -> bool:
    """True while one of ``records`` can still change: queued or running (a running run may be
    evaluating its final checkpoint); with ``evaluations``, also while one's evaluation job is queued
    or running (:func:`app.components.runs.is_live`). The fragments refresh only then."""
    return any(r.is_active for r in records) or evaluations and any(is_live(r) for r in records)


def _with_points_first(records, n: int) -> list[str]:
    """Ids of up to ``n`` runs to plot by default (``records`` newest first): the queued or running
    runs that have logged a loss, then the others that have; the newest run when none has. Reads
    each record's latest values (its status file); only a run whose status has none (written by hand,
    or damaged) has its metrics files read."""
    bare = [r for r in records if not r.latest]
    points = latest_points(bare) if bare else {}
    has = [r for r in records if "loss" in (r.latest or {}) or (r.run_id, "loss") in points]
    ordered = [r for r in has if r.is_active] + [r for r in has if not r.is_active]
    return [r.run_id for r in ordered[:n]] or [r.run_id for r in records[:1]]

st.title("Runs")
url = PageState("runs", ("runs", "smoothing", "x", "y", "archived", "q", "status", "page"))
every = runs_or_stop()
show_archived = url.widget(st.toggle, "Show archived", "archived", default=False, key="runs_archived",
                           cast=bool, encode_as=lambda v: True if v else None)  # fmt: skip
runs = [r for r in every if show_archived or not r.archived]
cfgs = {r.run_id: r.config for r in runs}


@st.cache_data(ttl=30, show_spinner=False, max_entries=8)
def _disk_usage(workspace: str):
    """:func:`engine.store.disk_usage`, walked at most every 30 s per workspace (it stats every
    file; the panel below redraws every 2 s)."""
    return disk_usage(workspace)


def _matching(records, q: str, statuses: list[str]) -> list:
    """The runs the table's filter keeps: ``q`` in the run's label or one of its tags (any case), and
    its status among ``statuses`` (all when empty)."""
    q = q.strip().lower()
    return [r for r in records if (not statuses or r.status in statuses)
            and (not q or q in run_label(r).lower() or any(q in t.lower() for t in r.tags))]


def runs_panel(show_archived: bool, live: bool, q: str, statuses: list[str], page: int) -> None:
    """Run table (the runs the filter keeps, :data:`PER_PAGE` a page: only those rows are built) with
    disk space, totals, then one progress line and a Cancel button (with confirmation; editors) per
    active run, and one with a Stop button per evaluation job under way (of every run, not only the
    page's). ``live``: the page set a refresh timer; when nothing can change any more, the page
    reruns once to drop it."""
    listed = guarded(list_runs, max_age_s=LIST_MAX_AGE_S) or []
    records = [r for r in listed if show_archived or not r.archived]
    if live and not _changing(records, evaluations=True):
        st.rerun()  # the whole page: its fragments are set up again, without a timer
    usage = guarded(_disk_usage, str(workspace_root()))
    matching = _matching(records, q, statuses)
    start = page * PER_PAGE
    if matching[start:start + PER_PAGE]:
        run_table(matching[start:start + PER_PAGE], usage.runs if usage is not None else None)
    elif q or statuses:
        st.caption("No run matches the filter.")
    hidden = len(listed) - len(records)
    shown = (f"{len(records)} run{'s' * (len(records) != 1)} shown" if len(matching) == len(records) else
             f"{len(matching)} of {len(records)} runs match")
    if len(matching) > PER_PAGE:
        shown = shown.removesuffix(" shown") + f", rows {start + 1}–{min(start + PER_PAGE, len(matching))} shown"
    st.caption(" · ".join([shown] + [f"{hidden} archived hidden"] * bool(hidden) + (
        [f"runs take {format_bytes(usage.runs_total)} on disk, datasets {format_bytes(usage.datasets_total)}, "
         f"the whole workspace {format_bytes(usage.total)}"] if usage is not None else [])))
    for r in (r for r in records if r.is_active):
        progress_with_cancel(r, allowed("run.cancel", cancel), "runs_cancel", f"**{run_label(r)}** · {activity(r)}")
    for r in (r for r in records if not r.is_active and has_evaluation_job(r.path)):  # asked for later (Compare, CLI)
        evaluation_progress(r, "runs_eval", label=run_label(r))
    resume_buttons(records)


f1, f2, f3 = st.columns([3, 2, 1], vertical_alignment="bottom")
with f1:
    q = url.widget(st.text_input, "Search runs (name, id, tag)", "q", default="", key="runs_q")
with f2:
    statuses = url.widget(st.multiselect, "Status", "status", default=[], options=list(STATUSES), key="runs_status",
                          cast=lambda v: str(v).split(","), encode_as=lambda v: ",".join(v) or None)
if st.session_state.get("runs_filter_was", (q, statuses)) != (q, statuses):
    url.put("page", None)  # a new filter starts on its first page (a new widget key drops the old value)
    st.session_state["runs_filter_n"] = st.session_state.get("runs_filter_n", 0) + 1
st.session_state["runs_filter_was"] = (q, statuses)
pages = max(1, -(-len(_matching(runs, q, statuses)) // PER_PAGE))
with f3:
    page = url.widget(st.number_input, f"Page (of {pages})", "page", default=1, min_value=1, max_value=pages, step=1,
                      key=f"runs_page_{pages}_{st.session_state.get('runs_filter_n', 0)}", cast=int, encode_as=lambda v: int(v) if v > 1 else None) - 1
table_live = _changing(runs, evaluations=True)
st.fragment(runs_panel, run_every=REFRESH if table_live else None)(show_archived, table_live, q, statuses, page)

labels = {r.run_id: run_label(r) for r in runs}
legend = {r.run_id: short_label(r) for r in runs}
top = st.columns([3, 1])
with top[0]:
    selected = url.widget(st.multiselect, "Runs to plot", "runs", default=_with_points_first(runs, N_DEFAULT), options=list(labels),
                          format_func=labels.get, key="runs_selected", cast=lambda v: str(v).split(","),
                          encode_as=lambda v: ",".join(v) or None)  # fmt: skip
with top[1]:
    smoothing = url.widget(st.slider, "EMA smoothing", "smoothing", default=0.6, cast=float, min_value=0.0,
                           max_value=0.99, step=0.01, key="runs_smoothing")  # fmt: skip
x_axis, log_y = axis_controls(url, "runs")


def live_charts(run_ids: list[str], smoothing: float, x_axis: str, log_y: bool, live: bool) -> None:
    """Loss / val loss (one panel per kind of loss), throughput, learning rate and mask ratio for
    ``run_ids``, re-read every 2 s while ``live`` (one of them queued or running)."""
    df = guarded(read_metrics, run_ids, LOSS_KEYS + ["throughput", "lr", "mask_ratio"], max_points=1000)
    if df is None:
        return
    show_read_warnings(df)
    opts = {"run_labels": legend, "x": x_axis}
    st.subheader("Loss")
    colours = {"colour_runs": run_ids}  # one colour per run in every panel
    render_loss_panels(df[df["key"].isin(LOSS_KEYS)], loss_groups(run_ids, cfgs), smoothing=smoothing, log_y=log_y,
                       height=280, **colours, **opts)  # fmt: skip
    panels = [("Throughput", ["throughput"], "samples/s", smoothing, False, 180), ("Learning rate", ["lr"], "learning rate", 0.0, log_y, 180),
              ("Mask ratio", ["mask_ratio"], "masked fraction", 0.0, False, 180)]
    for col, (title, keys, y_title, smooth, log, height) in zip(st.columns(len(panels)), panels):
        with col:
            st.subheader(title)
            render_metrics_chart(df[df["key"].isin(keys)], smoothing=smooth, y_title=y_title, log_y=log, height=height,
                                 y_domain=(0, 1) if keys == ["mask_ratio"] else None, legends=False, **colours, **opts)
    loss = df[df["key"] == "loss"]
    last = loss.groupby("run_id")["step"].max()
    steps = " · ".join(f"{legend.get(r, r)}: step {int(last[r])}" for r in run_ids if r in last.index)
    st.caption(f"{len(loss)} loss points · latest step per run: {steps or 'none yet'} · colours as in the charts "
               "above · " + ("refreshes every 2 s while a plotted run is queued or running" if live else
                             "the plotted runs have ended: no refresh"))
    if live and not _changing([r for r in guarded(list_runs, max_age_s=LIST_MAX_AGE_S) or [] if r.run_id in run_ids]):
        st.rerun()  # the plotted runs ended: the page sets its fragments up again, without a timer


if selected:
    chart_live = _changing([r for r in runs if r.run_id in selected])
    st.fragment(live_charts, run_every=REFRESH if chart_live else None)(selected, smoothing, x_axis, log_y, chart_live)
    st.page_link("../pages/run_detail.py", label=f"Open run detail: {labels[selected[0]]}",
                 query_params={"run": selected[0]})  # fmt: skip
else:
    st.caption("Pick runs to plot.")
portable_panel(runs, labels, selected)
