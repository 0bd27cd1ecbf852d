"""Runs: every run in the workspace with its key hyperparameters, live curves, cancel (confirmed).

A run whose worker process is gone shows as interrupted; a metrics file that cannot be read is
skipped with a warning above the charts. The runs plotted, the smoothing and the axes live in the
URL (``?runs=a,b&smoothing=0.6&x=step&y=log``), so a reload or a copied link shows the same view.
Archived runs are hidden unless **Show archived** is on (``&archived=true``); the table says how much
disk each run takes, and the caption under it the totals.

The table and the charts are fragments that rerun every 2 s on their own; they only read
run index the store keeps in this process (``list_runs(max_age_s=1)``, ``latest_points``: at most 1 s
old, a lookup even at thousands of runs) and Parquet metrics through its caches (``read_metrics``).
"""

from __future__ import annotations

import streamlit as st

from app.components import guarded, render_metrics_chart, run_label, run_table, runs_or_stop, short_label
from app.components.access import allowed
from app.components.charts import axis_controls, show_read_warnings
from app.components.quality import loss_title
from app.components.resume import resume_buttons
from app.components.runs import LIST_MAX_AGE_S, activity, progress_with_cancel, same_task_first
from app.components.urlstate import PageState
from engine.api import cancel, disk_usage, format_bytes, list_runs, read_metrics, workspace_root

LOSS_KEYS = ["loss", "val_loss"]
N_DEFAULT = 3  # runs plotted by default: the most recent ones of the newest run's task

st.title("Runs")
url = PageState("runs", ("runs", "smoothing", "x", "y", "archived"))
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


@st.fragment(run_every="2s")
def runs_panel(show_archived: bool) -> None:
    """Run table with disk space, totals, then one progress line and a Cancel button (with
    confirmation; editors) per active run."""
    listed = guarded(list_runs, max_age_s=LIST_MAX_AGE_S) or []
    records = [r for r in listed if show_archived or not r.archived]
    usage = guarded(_disk_usage, str(workspace_root()))
    if records:
        run_table(records, usage.runs if usage is not None else None)
    hidden = len(listed) - len(records)
    st.caption(" · ".join([f"{len(records)} run{'s' * (len(records) != 1)} shown"] + [f"{hidden} archived hidden"] * bool(hidden) + (
        [f"runs take {format_bytes(usage.runs_total)} on disk, datasets {format_bytes(usage.datasets_total)}, "
         f"the whole workspace {format_bytes(usage.total)}"] if usage is not None else [])))
    for r in (r for r in records if r.is_active):
        progress_with_cancel(r, allowed("run.cancel", cancel), "runs_cancel", f"**{run_label(r)}** · {activity(r)}")
    resume_buttons(records)


runs_panel(show_archived)

labels = {r.run_id: run_label(r) for r in runs}
legend = {r.run_id: short_label(r) for r in runs}
top = st.columns([3, 1])
with top[0]:
    selected = url.widget(st.multiselect, "Runs to plot", "runs", default=same_task_first(runs, N_DEFAULT), options=list(labels),
                          format_func=labels.get, key="runs_selected", cast=lambda v: str(v).split(","),
                          encode_as=lambda v: ",".join(v) or None)  # fmt: skip
with top[1]:
    smoothing = url.widget(st.slider, "EMA smoothing", "smoothing", default=0.6, cast=float, min_value=0.0,
                           max_value=0.99, step=0.01, key="runs_smoothing")  # fmt: skip
x_axis, log_y = axis_controls(url, "runs")


@st.fragment(run_every="2s")
def live_charts(run_ids: list[str], smoothing: float, x_axis: str, log_y: bool) -> None:
    """Loss / val loss, throughput, learning rate and mask ratio for ``run_ids``, re-read every 2 s."""
    df = guarded(read_metrics, run_ids, LOSS_KEYS + ["throughput", "lr", "mask_ratio"], max_points=1000)
    if df is None:
        return
    show_read_warnings(df)
    opts = {"run_labels": legend, "x": x_axis}
    titles = " / ".join(sorted({loss_title(cfgs.get(r, {})) for r in run_ids})) or "loss"
    panels = [("Loss", LOSS_KEYS, titles, smoothing, log_y, 280), ("Throughput", ["throughput"], "samples/s", smoothing, False, 280),
              ("Learning rate", ["lr"], "learning rate", 0.0, log_y, 180), ("Mask ratio", ["mask_ratio"], "masked fraction", 0.0, False, 180)]
    for row in (panels[:2], panels[2:]):
        for col, (title, keys, y_title, smooth, log, height) in zip(st.columns(2), row):
            with col:
                st.subheader(title)
                render_metrics_chart(df[df["key"].isin(keys)], smoothing=smooth, y_title=y_title, log_y=log, height=height,
                                     y_domain=(0, 1) if keys == ["mask_ratio"] else None, legends=height > 200,
                                     **opts)  # fmt: skip
    loss = df[df["key"] == "loss"]
    last = loss.groupby("run_id")["step"].max()
    steps = " · ".join(f"{legend.get(r, r)}: step {int(last[r])}" for r in run_ids if r in last.index)
    st.caption(f"{len(loss)} loss points · latest step per run: {steps or 'none yet'} · colours as in the charts "
               "above · refreshes every 2 s")


if selected:
    live_charts(selected, smoothing, x_axis, log_y)
    st.page_link("../pages/run_detail.py", label=f"Open run detail: {labels[selected[0]]}",
                 query_params={"run": selected[0]})  # fmt: skip
else:
    st.caption("Pick runs to plot.")
