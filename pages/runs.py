"""Runs: every run in the workspace with its key hyperparameters, live curves, cancel (confirmed).

A run whose worker process is gone shows as interrupted; a metrics file that cannot be read is
skipped with a warning above the charts. The runs plotted, the smoothing and the axes live in the
URL (``?runs=a,b&smoothing=0.6&x=step&y=log``), so a reload or a copied link shows the same view.

The table and the charts are fragments that rerun every 2 s on their own; they only read
``status.json`` files (``list_runs``) and Parquet metrics (``read_metrics``), both cheap.
"""

from __future__ import annotations

import streamlit as st

from app.components import guarded, render_metrics_chart, run_label, run_table, runs_or_stop, short_label
from app.components.charts import axis_controls, show_read_warnings
from app.components.quality import loss_title
from app.components.access import allowed
from app.components.resume import resume_buttons
from app.components.runs import progress_with_cancel
from app.components.urlstate import PageState
from engine.launcher import cancel
from engine.store import list_runs, read_metrics

LOSS_KEYS = ["loss", "val_loss"]
N_DEFAULT = 3  # runs plotted by default: the most recent ones

st.title("Runs")
url = PageState("runs", ("runs", "smoothing", "x", "y"))
runs = runs_or_stop()
cfgs = {r.run_id: r.config for r in runs}


@st.fragment(run_every="2s")
def runs_panel() -> None:
    """Run table, then one progress line and a Cancel button (with confirmation; editors) per active run."""
    records = guarded(list_runs) or []
    run_table(records)
    for r in (r for r in records if r.is_active):
        progress_with_cancel(r, allowed("run.cancel", cancel), "runs_cancel", f"**{run_label(r)}** · {r.status} · step {r.step} / {r.total_steps}")
    resume_buttons(records)


runs_panel()

labels = {r.run_id: run_label(r) for r in runs}
legend = {r.run_id: short_label(r) for r in runs}
top = st.columns([3, 1])
with top[0]:
    selected = url.widget(st.multiselect, "Runs to plot", "runs", default=list(labels)[:N_DEFAULT], options=list(labels),
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
