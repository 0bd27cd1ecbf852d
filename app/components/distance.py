"""Where reconstruction breaks down: a run's error at hidden units against their distance to the
nearest visible unit, beside trivial baselines on the same inputs and masks (the sample kind's
``SampleView.distance`` gives the numbers; :func:`engine.eval.distance.error_by_distance` pools
them). Run detail draws one run, Compare the picked runs."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import altair as alt
import pandas as pd
import streamlit as st

from app.components.errors import guarded
from app.modalities import sample_view
from engine.api import error_by_distance, load_samples

#: Distances above this are pooled into it (few units are that far from every visible one).
MAX_DISTANCE = 6
#: Runs Compare draws at most (the others are named as left out).
MAX_RUNS = 10


def distance_frame(sample: Any) -> tuple[pd.DataFrame, str, str] | None:
    """``(frame, unit, metric)`` of one run's sample (:func:`engine.eval.distance.error_by_distance`,
    distances over :data:`MAX_DISTANCE` pooled), or None when its kind has no distance view."""
    view = sample_view(sample.kind)
    got = view.distance(sample) if view is not None and view.distance is not None else None
    if got is None:
        return None
    dist, errors, unit, metric = got
    return error_by_distance(dist, errors, MAX_DISTANCE), unit, metric


def distance_chart(frame: pd.DataFrame, unit: str, metric: str, colour: str = "predictor") -> alt.Chart:
    """Lines of ``value`` against ``distance`` (points sized by how many units), one per ``colour``
    value; a baseline (any predictor but "this run") dashed."""
    d = frame.assign(baseline=frame["predictor"] != "this run")
    enc = {"x": alt.X("distance:O", title=f"distance to the nearest visible unit ({unit}; {MAX_DISTANCE} = "
                                         f"{MAX_DISTANCE} or more)"),
           "y": alt.Y("value:Q", title=metric), "color": alt.Color(f"{colour}:N", title=None,
                                                                  legend=alt.Legend(orient="bottom", labelLimit=300)),
           "strokeDash": alt.StrokeDash("baseline:N", legend=None, scale=alt.Scale(domain=[False, True],
                                                                                   range=[[1, 0], [5, 4]])),
           "tooltip": ["predictor", "distance", alt.Tooltip("value:Q", format=".4g"), "units"]}
    if colour != "predictor":
        enc["detail"] = "predictor:N"
    base = alt.Chart(d).encode(**enc)
    return (base.mark_line() + base.mark_point(filled=True).encode(size=alt.Size("units:Q", legend=None))).properties(height=260)


def show_run(run_id: str) -> None:
    """Run detail's plot of the run's latest samples (a caption when there is none)."""
    sample = guarded(load_samples, run_id)
    got = distance_frame(sample) if sample is not None else None
    if got is None or got[0].empty:
        st.caption("No distance plot for this run's samples (none saved yet, or their kind has none).")
        return
    frame, unit, metric = got
    st.altair_chart(distance_chart(frame, unit, metric), width="stretch")
    st.caption(f"Step {sample.step}: every hidden unit of the saved validation inputs, by its distance to the nearest "
               f"visible one ({int(frame[frame.predictor == 'this run'].units.sum())} units); the dashed lines are "
               "trivial baselines on the same inputs and masks. A curve that climbs with the distance is context "
               "running out: masked modeling's known weakness with long-range dependencies.")


def show_runs(records: Sequence[Any], labels: Mapping[str, str]) -> None:
    """Compare's plot: each run's curve (its latest samples), the first run's trivial baselines
    dashed, one chart per unit kind; at most :data:`MAX_RUNS` runs, the rest named as left out."""
    by_unit: dict[tuple[str, str], list[pd.DataFrame]] = {}
    left = [labels.get(r.run_id, r.run_id) for r in records[MAX_RUNS:]]
    for r in records[:MAX_RUNS]:
        sample = guarded(load_samples, r.run_id)
        got = distance_frame(sample) if sample is not None else None
        if got is None or got[0].empty:
            continue
        frame, unit, metric = got
        lab = labels.get(r.run_id, r.run_id)
        frames = by_unit.setdefault((unit, metric), [])
        mine = frame[frame.predictor == "this run"]
        frames.append(mine.assign(series=f"{lab} (step {sample.step})"))
        if len(frames) == 1:  # the first run's baselines, on its inputs and masks
            base = frame[frame.predictor != "this run"]
            frames.append(base.assign(series=base.predictor + f" (on {lab}'s masks)"))
    if not by_unit:
        st.caption("None of these runs has samples with a distance plot.")
        return
    for (unit, metric), frames in by_unit.items():
        st.altair_chart(distance_chart(pd.concat(frames, ignore_index=True), unit, metric, colour="series"),
                        width="stretch")
    st.caption("Each run's error at the hidden units of its saved validation inputs, by distance to the nearest "
               "visible unit; dashed: trivial baselines on the first run's inputs and masks."
               + (f" Left out (more than {MAX_RUNS} runs): {', '.join(left)}." if left else ""))
