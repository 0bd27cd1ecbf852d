"""Runs: every run in the workspace, live loss and throughput curves, cancel buttons.

A run whose worker process is gone shows as interrupted; a metrics file that cannot be read is
skipped with a warning above the charts.

The table and the charts are fragments that rerun every 2 s on their own; they only read
``status.json`` files (``list_runs``) and Parquet metrics (``read_metrics``), both cheap.
"""

from __future__ import annotations

import streamlit as st

from app.components import (
    guarded, render_metrics_chart, run_label, run_table, runs_or_stop, short_label, show_read_warnings,
)
from engine.launcher import cancel
from app.components.quality import loss_title
from app.components.resume import resume_buttons
from engine.store import list_runs, read_metrics

LOSS_KEYS = ["loss", "val_loss"]
N_DEFAULT = 3  # runs plotted by default: the most recent ones

st.title("Runs")
runs = runs_or_stop()
cfgs = {r.run_id: r.config for r in runs}


@st.fragment(run_every="2s")
def runs_panel() -> None:
    """Run table, then one progress line and a Cancel button per active run."""
    records = guarded(list_runs) or []
    run_table(records)
    for r in (r for r in records if r.is_active):
        bar, button = st.columns([6, 1], vertical_alignment="bottom")
        bar.progress(r.progress, text=f"**{run_label(r)}** · {r.status} · step {r.step} / {r.total_steps}")
        if button.button("Cancel", key=f"cancel-{r.run_id}", help=f"stop {r.run_id} after its current step"):
            if guarded(cancel, r.run_id):
                st.toast(f"Cancelling {r.run_id}: it stops after the current step.")
    resume_buttons(records)


runs_panel()

labels = {r.run_id: run_label(r) for r in runs}
legend = {r.run_id: short_label(r) for r in runs}
top = st.columns([3, 1])
selected = top[0].multiselect(
    "Runs to plot", list(labels), default=list(labels)[:N_DEFAULT], format_func=labels.get, key="runs_selected"
)
smoothing = top[1].slider("EMA smoothing", 0.0, 0.99, 0.6, 0.01, key="runs_smoothing")


@st.fragment(run_every="2s")
def live_charts(run_ids: list[str], smoothing: float) -> None:
    """Loss / val loss and throughput against step for ``run_ids``, re-read every 2 s."""
    df = guarded(read_metrics, run_ids, LOSS_KEYS + ["throughput"], max_points=1000)
    if df is None:
        return
    show_read_warnings(df)
    loss = df[df["key"].isin(LOSS_KEYS)]
    titles = " / ".join(sorted({loss_title(cfgs.get(r, {})) for r in run_ids})) or "loss"
    left, right = st.columns(2)
    with left:
        st.subheader("Loss")
        render_metrics_chart(loss, smoothing=smoothing, run_labels=legend, y_title=titles)
    with right:
        st.subheader("Throughput")
        render_metrics_chart(df[df["key"] == "throughput"], smoothing=smoothing, run_labels=legend, y_title="samples/s")
    n_train = int((loss["key"] == "loss").sum())
    last = int(loss["step"].max()) if len(loss) else 0
    st.caption(f"{n_train} loss points · latest step {last} · refreshes every 2 s")


if selected:
    live_charts(selected, smoothing)
    st.page_link("../pages/run_detail.py", label=f"Open run detail: {labels[selected[0]]}", icon="🔍",
                 query_params={"run": selected[0]})  # fmt: skip
else:
    st.caption("Pick runs to plot.")
