"""The dashboard views of the time-series plug-in modality (tests/plugins/timeseries.py), imported
by the dashboard on demand: the Modality names this module as its ``ui``. Nothing outside
tests/plugins/ names it.

- Run detail: each fixed validation series of the latest samples as a line, the masked steps
  shaded, the model's prediction of them overlaid (:func:`samples_view`);
- Compare: the first series, every run's prediction overlaid on the same chart (:func:`compare_view`).
"""

from __future__ import annotations

import altair as alt
import numpy as np
import pandas as pd
import streamlit as st

from app.modalities import ModalityUI, SampleView, register_ui

KIND = "series"
TITLE = "Validation series and predictions"


def series_frame(sample, rows: int | None = None) -> pd.DataFrame:
    """Long table of a ``series`` sample: ``series, step, value, prediction, masked`` per step
    (``values``, ``pred``, ``mask`` ``[N, T]``; the first ``rows`` series)."""
    v, p, m = (np.asarray(sample[k])[:rows] for k in ("values", "pred", "mask"))
    n, t = v.shape
    return pd.DataFrame({"series": np.repeat(np.arange(n), t), "step": np.tile(np.arange(t), n),
                         "value": v.ravel().astype(float), "prediction": p.ravel().astype(float),
                         "masked": m.astype(bool).ravel()})


def series_chart(df: pd.DataFrame, lines: dict[str, str], height: int = 180) -> alt.LayerChart:
    """One series: grey bands over its masked steps, the true values as a line, and each column of
    ``lines`` (column -> legend name) as a dashed line with points over the masked steps only."""
    df = df.rename(columns=lines).reset_index(drop=True).assign(x0=lambda d: d.step - 0.5, x1=lambda d: d.step + 0.5)
    values = df[["value", *lines.values()]].to_numpy()
    df["lo"], df["hi"] = float(values.min()), float(values.max())  # the bands' height: every line's range
    base = alt.Chart(df)
    scale = alt.Scale(domain=[-0.5, float(df.step.max()) + 0.5], nice=False)
    x = alt.X("step:Q", title="step", scale=scale)
    bands = base.transform_filter("datum.masked").mark_rect(color="#cccccc", opacity=0.5).encode(
        x=alt.X("x0:Q", scale=scale), x2="x1:Q", y="lo:Q", y2="hi:Q")
    truth = base.mark_line(color="#333333").encode(x=x, y=alt.Y("value:Q", title="value (normalised)"))
    guesses = (base.transform_filter("datum.masked").transform_fold(list(lines.values()), as_=["predictor", "guess"])
               .mark_line(point=True, strokeDash=[4, 2]).encode(x=x, y="guess:Q", color=alt.Color("predictor:N", title=None)))
    return alt.layer(bands, truth, guesses).properties(height=height)


def samples_view(sample, run) -> None:
    """A time-series run's latest samples: one chart per fixed validation series."""
    df = series_frame(sample)
    hidden = int(df.masked.sum())
    st.caption(f"Step {sample.step} · {df.series.nunique()} fixed validation series · {hidden} of {len(df)} steps "
               "hidden (grey) · black: the series, dashed: the model's prediction of the hidden steps")
    for i, part in df.groupby("series"):
        st.caption(f"Series {i}")  # not a chart title: Streamlit then squeezes a layered chart's plot
        st.altair_chart(series_chart(part, {"prediction": "prediction"}).properties(description=f"series {i}"),
                        width="stretch")


def compare_view(samples: dict, n: int = 2) -> list:
    """Compare: the first ``n`` series with every run's prediction of its own hidden steps overlaid
    (runs with the same seed and masking hide the same steps). Returns ``[]`` (no images)."""
    for i in range(n):
        frames = []
        for label, s in samples.items():
            f = series_frame(s, rows=n)
            frames.append(f[f.series == i].rename(columns={"prediction": label}))
        base = frames[0].copy()
        for label, f in zip(samples, frames):
            base[label] = f[label].to_numpy()
            base["masked"] |= f["masked"].to_numpy()
        st.caption(f"Series {i}: each run's prediction of the hidden steps (grey: hidden in any run)")
        st.altair_chart(series_chart(base, {lab: lab for lab in samples}).properties(description=f"series {i}"),
                        width="stretch")
    return []


register_ui(ModalityUI("timeseries", item="series", samples=(SampleView(KIND, TITLE, samples_view, compare_view),)))
