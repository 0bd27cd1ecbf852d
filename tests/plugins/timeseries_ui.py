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
                         "value": v.ravel(), "prediction": p.ravel(), "masked": m.astype(bool).ravel()})


def series_chart(df: pd.DataFrame, lines: dict[str, str], height: int = 140) -> alt.LayerChart:
    """One series: grey bands over its masked steps, the true values as a line, and each column of
    ``lines`` (column -> legend name) as a dashed line over the masked steps only."""
    masked = df[df.masked]
    bands = alt.Chart(masked).mark_rect(color="#d0d0d0", opacity=0.6).encode(
        x=alt.X("x0:Q", title="step"), x2="x1:Q").transform_calculate(x0="datum.step - 0.5", x1="datum.step + 0.5")
    truth = alt.Chart(df).mark_line(color="#333333").encode(x="step:Q", y=alt.Y("value:Q", title="value (normalised)"))
    long = masked.melt(id_vars=["step"], value_vars=list(lines), var_name="predictor", value_name="guess")
    long["predictor"] = long["predictor"].map(lines)
    guesses = alt.Chart(long).mark_line(point=True, strokeDash=[4, 2]).encode(
        x="step:Q", y="guess:Q", color=alt.Color("predictor:N", title=None), detail="predictor:N")
    return alt.layer(bands, truth, guesses).properties(height=height)


def samples_view(sample, run) -> None:
    """A time-series run's latest samples: one chart per fixed validation series."""
    df = series_frame(sample)
    hidden = int(df.masked.sum())
    st.caption(f"Step {sample.step} · {df.series.nunique()} fixed validation series · {hidden} of {len(df)} steps "
               "hidden (grey) · black: the series, dashed: the model's prediction of the hidden steps")
    for i, part in df.groupby("series"):
        st.altair_chart(series_chart(part, {"prediction": "prediction"}).properties(title=f"series {i}"),
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
        st.altair_chart(series_chart(base, {lab: lab for lab in samples}).properties(title=f"series {i}"),
                        width="stretch")
    return []


register_ui(ModalityUI("timeseries", item="series", samples=(SampleView(KIND, TITLE, samples_view, compare_view),)))
