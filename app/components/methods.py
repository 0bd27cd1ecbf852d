"""A run's method on Run detail: its name in the catalog (:mod:`engine.methods.catalog`), what it
predicts, and for a latent target (data2vec) the collapse watch: the target's spread along training,
with a warning when it falls toward zero."""

from __future__ import annotations

import altair as alt
import streamlit as st

from app.components.errors import guarded
from engine.api import TARGET_STD, collapse_warning, method_label, methods_for, read_metrics


def method_line(config: dict) -> str:
    """``data2vec: data2vec-style latent target ...`` for a config (the summaries of every part of a
    combined method, ``maskfeat+attmask``); "" for a task without methods."""
    known = methods_for(config.get("task"))
    if not known:
        return ""
    label = method_label(config)
    parts = [known[p] for p in label.split("+") if p in known]
    return f"**{label}**: " + "; ".join(parts)


def method_panel(rec) -> None:
    """The method's line, and for a run that logs :data:`TARGET_STD` its spread at the first and last
    step, a small curve, and the collapse warning when it fired."""
    line = method_line(rec.config)
    if line:
        st.caption("Method: " + line)
    if (rec.config.get("task_params") or {}).get("target") not in ("latent", "ema"):
        return
    df = guarded(read_metrics, [rec.run_id], [TARGET_STD, "val_" + TARGET_STD], max_points=400)
    if df is None or df.empty:
        st.caption("The latent target's spread (target_std) is logged from the first step on.")
        return
    train = df[df["key"] == TARGET_STD].sort_values("step")
    warning = collapse_warning(train["value"].tolist())
    if warning:
        st.warning("Collapse: " + warning)
    elif len(train):
        st.caption(f"Latent target spread (target_std, per-dimension standard deviation over the masked units): "
                   f"{train['value'].iloc[0]:.3f} at step {int(train['step'].iloc[0])}, {train['value'].iloc[-1]:.3f} "
                   f"at step {int(train['step'].iloc[-1])}: no collapse (a fall below a tenth of its start is one).")
    chart = alt.Chart(df.assign(series=df["key"].map({TARGET_STD: "train", "val_" + TARGET_STD: "validation"}))).mark_line(
        point=alt.OverlayMarkDef(size=12)).encode(
        x=alt.X("step:Q", title="step"), y=alt.Y("value:Q", title="target spread", scale=alt.Scale(zero=True)),
        color=alt.Color("series:N", title=None, legend=alt.Legend(orient="right")),
        tooltip=["series", "step", alt.Tooltip("value:Q", format=".3f")])
    st.altair_chart(chart.properties(height=200), width="stretch")
