"""Sweeps: a result plotted against the swept value, mean and spread over the seed replicates, next to
the random-init encoder and the raw input (e.g. mask ratio vs linear-probe accuracy, MAE's figure 5
on the user's own data).

A sweep is queued from New run's Sweep section, which links here with the sweep selected, from the
CLI (``python -m engine sweep CONFIG --over masking.ratio=0.25,0.5,0.75,0.9 --seeds 2``) or
:func:`engine.runner.sweep.submit_sweep`; each run is evaluated at its end. The sweep and the
figure are in the URL (``?sweep=ab12cd&figure=probe_acc``).
"""

from __future__ import annotations

import altair as alt
import pandas as pd
import streamlit as st

from app.components import guarded, runs_or_stop
from app.components.groups import BANDS, band
from app.components.names import metric_label
from app.components.urlstate import PageState
from engine.api import METHOD_FIELD, counted, get_run, methods_for, sweep_of, sweep_table

FIGURES = {"probe_acc": "linear-probe accuracy", "knn_acc": "kNN accuracy (k=20)"}
ENCODERS = {"": "trained", "/random_init": "random init", "/raw_input": "raw input"}


def _task(df: pd.DataFrame) -> str | None:
    """The task of a sweep's runs (the first run's)."""
    rec = guarded(get_run, str(df["run_id"].iloc[0])) if len(df) else None
    return rec.config.get("task") if rec is not None else None


st.title("Sweeps")
url = PageState("sweeps", ("sweep", "figure", "band"))
runs = runs_or_stop()
sweeps: dict[str, dict] = {}
for r in runs:
    sw = sweep_of(r.name)
    if sw:
        sweeps.setdefault(sw["id"], {"field": sw["field"], "base": sw["base"], "n": 0})["n"] += 1
if not sweeps:
    st.info("No sweep yet. Queue one from New run (its Sweep section) or with `python -m engine sweep CONFIG "
            "--over masking.ratio=0.25,0.5,0.75,0.9 --seeds 2`.")
    st.stop()
a, b = st.columns([3, 1])
with a:
    sid = url.widget(st.selectbox, "Sweep", "sweep", default=next(iter(sweeps)), options=list(sweeps),
                     format_func=lambda s: f"{sweeps[s]['base']} · {sweeps[s]['field']} · "
                                           f"{counted(sweeps[s]['n'], 'run')} · {s}", key="sw_id")  # fmt: skip
with b:
    fig = url.widget(st.selectbox, "Result", "figure", default="probe_acc", options=list(FIGURES),
                     format_func=FIGURES.get, key="sw_fig")
df = guarded(sweep_table, sid)
if df is None or df.empty:
    st.stop()
field = sweeps[sid]["field"]
long = pd.DataFrame([{"value": r["value"], "seed": r["seed"], "encoder": name, "accuracy": r[fig + suffix]}
                     for _, r in df.iterrows() for suffix, name in ENCODERS.items() if pd.notna(r[fig + suffix])])
done = int(df[fig].notna().sum())
band_kind = url.widget(st.selectbox, "Band over the seeds", "band", default="minmax", options=list(BANDS),
                       format_func=BANDS.get, key="sw_band")
st.caption(f"{done} of {counted(len(df), 'run')} evaluated · mean over seeds (line), {BANDS[band_kind]} (band), each "
           "seed a point · evaluated at each run's final checkpoint")
if long.empty:
    st.info("No run of this sweep is evaluated yet: each is evaluated when it completes.")
    st.stop()
numeric = pd.api.types.is_numeric_dtype(long["value"])
x = alt.X("value:Q", title=field, axis=alt.Axis(values=sorted(long["value"].unique()), format=".2f")) if numeric \
    else alt.X("value:N", title=field, sort=list(dict.fromkeys(  # a method sweep: the menu's order
        [m for m in methods_for(None if field != METHOD_FIELD else _task(df)) if m in set(long["value"])]
        + sorted(set(long["value"])))))
color = alt.Color("encoder:N", title=None, legend=alt.Legend(orient="bottom", symbolOpacity=1),
                  scale=alt.Scale(domain=list(ENCODERS.values()), range=["#d62728", "#1f77b4", "#7f7f7f"]))
# the axis spans the results, not 0 to 1: seeds and encoders differ by a few points (MAE's figure 5 does the same)
y_scale = alt.Scale(zero=False, nice=True)
y_axis = alt.Axis(format=".1%")  # ticks half a point apart read as 92.5%, not 93% twice
base = alt.Chart(long).encode(x=x, color=color)
stats = long.groupby(["value", "encoder"])["accuracy"].agg(["mean", "min", "max", "count"]).reset_index()
stats[["low", "high"]] = [band(g.to_numpy(), band_kind)[1:] for _, g in long.groupby(["value", "encoder"])["accuracy"]]
area = alt.Chart(stats).mark_area(opacity=0.15).encode(
    x=x, color=color, y=alt.Y("low:Q", title=FIGURES[fig], scale=y_scale, axis=y_axis), y2="high:Q")
line = base.mark_line(point=True).encode(y=alt.Y("mean(accuracy):Q", title=FIGURES[fig], scale=y_scale, axis=y_axis))
dots = base.mark_point(size=25, opacity=0.6).encode(y="accuracy:Q", tooltip=["value", "seed", "encoder",
                                                                             alt.Tooltip("accuracy:Q", format=".1%")])
st.altair_chart((area + line + dots).properties(height=360), width="stretch")
stats["cell"] = [f"{m:.1%} ({lo:.1%} to {hi:.1%}, {n} seed{'s' if n > 1 else ''})"
                 for m, lo, hi, n in zip(stats["mean"], stats["min"], stats["max"], stats["count"])]
st.table(stats.pivot(index="value", columns="encoder", values="cell")[[e for e in ENCODERS.values()
                                                                        if e in set(stats["encoder"])]])
runs_table = df[["run_id", "value", "seed", "status", fig, fig + "/random_init", fig + "/raw_input"]].copy()
for c in runs_table.columns[-3:]:
    runs_table[c] = [("not yet" if pd.isna(v) else f"{v:.1%}") for v in runs_table[c]]
# column titles for people (the keys, ``knn_acc/random_init``, stay in the CSV exports)
runs_table.columns = ["run", field, "seed", "status"] + [metric_label(fig + s) for s in ENCODERS]
st.table(runs_table.set_index("run"))
