"""Altair charts of logged metrics.

Input is the long frame that ``engine.store.read_metrics`` returns: one row per
``(run_id, key, step)`` with ``value`` (MLflow's metric history layout).
"""

from __future__ import annotations

from collections.abc import Mapping

import altair as alt
import numpy as np
import pandas as pd
import streamlit as st

from app.components.groups import BANDS, group_curves
from app.components.names import metric_label
from app.components.quality import headline_of, predictor_name

#: Series with fewer points than this also get point marks (a sparse val_loss stays visible).
_POINTS_BELOW = 60


def ema(df: pd.DataFrame, smoothing: float) -> pd.Series:
    """Debiased exponential moving average of ``value`` within each (run_id, key) series.

    ``smoothing`` in [0, 1) is the weight of the past, as TensorBoard's slider: 0 returns the
    raw values, 0.9 averages over roughly the last 10 points. The frame must be sorted by step
    within each series. Debiasing (pandas ``adjust=True``) keeps the first points unbiased.
    """
    if not 0.0 <= smoothing < 1.0:
        raise ValueError(f"smoothing must be in [0, 1), got {smoothing}")
    if smoothing == 0.0 or df.empty:
        return df["value"].astype(float)
    # pandas' grouped EWM (Cython, one pass per series): 20 runs x 1,000 points in milliseconds, and
    # no SciPy to import at a cold start (scipy.signal took seconds there).
    out = df.groupby(["run_id", "key"], sort=False)["value"].ewm(alpha=1.0 - smoothing, adjust=True).mean()
    return out.reset_index(level=[0, 1], drop=True).reindex(df.index).astype(float).rename("value")


#: x axes a metrics chart offers: the step, the time since the run's first logged point, the clock.
X_AXES = {"step": "step", "relative": "time since start", "wall": "wall clock"}
#: The extra x axis of charts that know each run's batch size (Compare): step x batch size.
SAMPLES_AXIS = {"samples": "samples seen"}


def metrics_chart(
    df: pd.DataFrame,
    *,
    smoothing: float = 0.0,
    run_labels: Mapping[str, str] | None = None,
    raw_keys: tuple[str, ...] = ("val_loss",),
    y_title: str = "value",
    height: int = 280,
    x: str = "step",
    log_y: bool = False,
    y_domain: tuple[float, float] | None = None,
    legends: bool = True,
    batch_sizes: Mapping[str, int] | None = None,
    colour_runs: list[str] | None = None,
    rules: Mapping[str, float] | None = None,
) -> alt.LayerChart | None:
    """Line chart of ``value`` against ``step`` (or time): colour = run, dash = metric key.

    Args:
        df: long frame with columns ``run_id, key, step, value`` (and ``wall_time``, unix seconds,
            for a time axis).
        smoothing: EMA weight in [0, 0.99]; when > 0 the raw curve stays as a faint line.
        run_labels: run_id -> legend label (defaults to the run id).
        raw_keys: keys never smoothed: sparse eval metrics (a few points) that EMA would distort.
        x: ``"step"``, ``"relative"`` (minutes since each run's first logged point) or ``"wall"``
            (local clock time), see :data:`X_AXES`; or ``"samples"`` (step x the run's batch size,
            :data:`SAMPLES_AXIS`) with ``batch_sizes``.
        log_y: a log-scale y axis (values <= 0 are left out, a log scale cannot show them).
        y_domain: a fixed y range (e.g. ``(0, 1)`` for a fraction); default: the data's.
        legends: False leaves them out (a chart under another with the same colours).
        batch_sizes: run_id -> rows per step, for ``x="samples"`` (without it: the step axis).
        colour_runs: run ids in the order of their colours, so that a run keeps its colour in charts
            that show only some of the runs (default: the runs in ``df``).
        rules: reference values drawn as dashed grey horizontal lines, each labelled (the trivial
            baselines of the val figure: :func:`baseline_rules`).

    Returns:
        The chart, or None when ``df`` has no rows (or none left for a log axis).
    """
    if df is None or df.empty:
        return None
    cols = ["run_id", "key", "step", "value"] + (["wall_time"] if "wall_time" in df else [])
    d = df[cols].sort_values(["run_id", "key", "step"]).copy()
    d["run"] = d["run_id"].map(lambda r: (run_labels or {}).get(r, r))
    d["metric"] = d["key"].map(metric_label)  # the legend's names; the key stays in the tooltip
    raw = d["key"].isin(raw_keys)
    d["smoothed"] = ema(d, smoothing).where(~raw, d["value"])
    d = d.dropna(subset=["smoothed"])
    if log_y:
        d = d[(d["smoothed"] > 0) & (d["value"] > 0)]
        if d.empty:
            return None
    if x == "relative" and "wall_time" in d:
        d["minutes"] = (d["wall_time"] - d.groupby("run_id")["wall_time"].transform("min")) / 60.0
        x_enc = alt.X("minutes:Q", title="minutes since the run's first point")
    elif x == "samples" and batch_sizes:
        d["samples"] = d["step"] * d["run_id"].map(lambda r: batch_sizes.get(r, float("nan")))
        x_enc = alt.X("samples:Q", title="samples seen (step x batch size)")
    elif x == "wall" and "wall_time" in d:
        d["time"] = pd.to_datetime(d["wall_time"], unit="s", utc=True).dt.tz_convert(None)
        x_enc = alt.X("time:T", title="wall clock (UTC)")
    else:
        x_enc = alt.X("step:Q", title="step", axis=alt.Axis(format="d", tickMinStep=1))
    y_scale = alt.Scale(type="log") if log_y else alt.Scale(zero=False, domain=list(y_domain) if y_domain else alt.Undefined)
    # Legends under the plot (beside it they take half of a half-width chart), and none for a single
    # run or a single metric (the page says which).
    def legend(field: str, **kw):
        return alt.Legend(orient="bottom", direction="vertical", **kw) if legends and d[field].nunique() > 1 else None

    domain = [(run_labels or {}).get(r, r) for r in colour_runs] if colour_runs else alt.Undefined
    color = alt.Color("run:N", title="run", scale=alt.Scale(scheme="tableau10", domain=domain),
                      legend=legend("run", labelLimit=240))
    dash = alt.StrokeDash("metric:N", title="metric", legend=legend("metric"))
    tooltip = ["run:N", "metric:N", "key:N", "step:Q", alt.Tooltip("value:Q", format=".4g")]
    base = alt.Chart(d.drop(columns=["wall_time"], errors="ignore")).encode(
        x=x_enc, color=color, strokeDash=dash, detail="run_id:N")
    layers = []
    if smoothing > 0 and not d["key"].isin(raw_keys).all():
        faint = base.transform_filter(~alt.FieldOneOfPredicate(field="key", oneOf=list(raw_keys)))
        layers.append(faint.mark_line(opacity=0.2).encode(y=alt.Y("value:Q", scale=y_scale)))
    layers.append(
        base.mark_line().encode(y=alt.Y("smoothed:Q", title=y_title + (" (log)" if log_y else ""), scale=y_scale),
                                tooltip=tooltip)
    )
    sizes = d.groupby(["run_id", "key"])["step"].transform("size")
    sparse = d[sizes < _POINTS_BELOW].drop(columns=["wall_time"], errors="ignore")
    if not sparse.empty:
        layers.append(
            alt.Chart(sparse)
            .mark_point(filled=True, size=30)
            .encode(x=x_enc, y=alt.Y("smoothed:Q", scale=y_scale), color=color, detail="key:N", tooltip=tooltip)
        )
    layers += rule_layers(rules, log_y)
    # "fit-x": the plot is `height` tall and the legends come on top (Streamlit's "fit" would squeeze them in)
    return alt.layer(*layers).properties(height=height, autosize=alt.AutoSizeParams(type="fit-x", contains="padding")).interactive(bind_y=False)


def rule_layers(rules: Mapping[str, float] | None, log_y: bool = False) -> list:
    """Dashed grey horizontal lines at ``rules``' values, each labelled at its right end (a log axis
    leaves out values <= 0)."""
    pts = pd.DataFrame([{"baseline": k, "value": float(v)} for k, v in (rules or {}).items()
                        if v is not None and np.isfinite(v) and (v > 0 or not log_y)])
    if pts.empty:
        return []
    base = alt.Chart(pts).encode(y=alt.Y("value:Q"))
    return [base.mark_rule(strokeDash=[5, 4], color="#888", opacity=0.8).encode(
                tooltip=["baseline:N", alt.Tooltip("value:Q", format=".4g")]),
            base.mark_text(align="right", baseline="bottom", dx=-2, dy=-2, fontSize=10, color="#666").encode(
                x=alt.value("width"), text="baseline:N")]  # fmt: skip


def baseline_rules(records, ids: list[str]) -> dict[str, float]:
    """The trivial baselines of the runs ``ids`` on their val loss (``baseline/<name>``, logged at
    step 0 when the task's headline is ``val_loss``), each the mean over the runs that have it, named
    in words: the dashed reference lines of a loss panel. Runs whose headline is another figure add none."""
    vals: dict[str, list[float]] = {}
    for r in records:
        if r.run_id not in ids or headline_of(r.config)[0] != "val_loss":
            continue
        for k, v in (r.latest or {}).items():
            if k.startswith("baseline/") and k.count("/") == 1 and v is not None:
                vals.setdefault(predictor_name(k.split("/")[1]), []).append(float(v))
    return {f"{k} (baseline)": float(np.mean(v)) for k, v in vals.items()}


def band_chart(curves: pd.DataFrame, *, y_title: str, height: int = 320, log_y: bool = False,
               rules: Mapping[str, float] | None = None, band_title: str = "") -> alt.LayerChart | None:
    """Seed groups' curves (:func:`app.components.groups.group_curves`): per group and metric a line
    at the mean and a shaded band from ``low`` to ``high``; colour = group, dash = metric; ``rules``
    as :func:`metrics_chart`. None when there is nothing to draw."""
    if curves is None or curves.empty:
        return None
    d = curves.dropna(subset=["mean"]).copy()
    if log_y:
        d = d[(d["low"] > 0) & (d["mean"] > 0)]
    if d.empty:
        return None
    d["metric"] = d["key"].map(metric_label)
    y_scale = alt.Scale(type="log") if log_y else alt.Scale(zero=False)
    color = alt.Color("group:N", title="group", scale=alt.Scale(scheme="tableau10"),
                      legend=alt.Legend(orient="bottom", direction="vertical", labelLimit=420))
    x = alt.X("step:Q", title="step", axis=alt.Axis(format="d", tickMinStep=1))
    base = alt.Chart(d).encode(x=x, color=color, detail="metric:N")
    tip = ["group:N", "metric:N", "step:Q", alt.Tooltip("mean:Q", format=".4g"), alt.Tooltip("low:Q", format=".4g"),
           alt.Tooltip("high:Q", format=".4g"), "n:Q"]
    layers = [base.mark_area(opacity=0.18).encode(y=alt.Y("low:Q", scale=y_scale), y2="high:Q"),
              base.mark_line().encode(y=alt.Y("mean:Q", title=y_title + (f" · mean, band {band_title}" if band_title else ""),
                                                scale=y_scale),
                                      strokeDash=alt.StrokeDash("metric:N", title="metric",
                                                                legend=alt.Legend(orient="bottom")), tooltip=tip)]
    layers += rule_layers(rules, log_y)
    return alt.layer(*layers).properties(height=height, autosize=alt.AutoSizeParams(type="fit-x", contains="padding")).interactive(bind_y=False)


def axis_controls(url, key: str, samples: bool = False) -> tuple[str, bool]:
    """The x axis (:data:`X_AXES`, plus :data:`SAMPLES_AXIS` when ``samples``) and log-y choice of a
    page's charts, kept in its URL (``x``, ``y``)."""
    axes = {**X_AXES, **(SAMPLES_AXIS if samples else {})}
    a, b = st.columns([3, 1], vertical_alignment="bottom")
    with a:
        x = url.widget(st.radio, "x axis", "x", default="step", options=list(axes), format_func=axes.get,
                       horizontal=True, key=f"{key}_x")  # fmt: skip
    with b:
        log_y = url.widget(st.checkbox, "log y axis", "y", default=False, cast=lambda v: v == "log",
                           encode_as=lambda v: "log" if v else None, key=f"{key}_logy")  # fmt: skip
    return x, log_y


def render_metrics_chart(df: pd.DataFrame, *, empty_text: str = "no points yet", **kwargs) -> None:
    """Draw :func:`metrics_chart` full width, or a caption when there is nothing to draw."""
    chart = metrics_chart(df, **kwargs)
    if chart is None:
        st.caption(empty_text)
    else:
        st.altair_chart(chart, width="stretch")


def render_loss_panels(df: pd.DataFrame, groups: list[tuple[str, list[str]]], *, per_row: int = 2,
                       run_labels: Mapping[str, str] | None = None, records=None, seed_groups=None,
                       band: str = "minmax", **kwargs) -> None:
    """One loss chart per group of runs whose losses share a unit (``groups``:
    :func:`app.components.quality.loss_groups`, ``[(axis title, run ids)]``), ``per_row`` side by side,
    so that no y axis mixes an MSE with a cross-entropy. With several groups a caption says why, and
    each chart is headed by its unit. ``df``: the long metrics frame (loss keys only); ``kwargs``: as
    :func:`render_metrics_chart`. ``records``: the runs, for each panel's dashed baseline lines
    (:func:`baseline_rules`); ``seed_groups`` (name -> run ids, :func:`app.components.groups.seed_groups`):
    each group drawn as its mean and a ``band`` (:data:`app.components.groups.BANDS`) instead of its runs."""
    kwargs.setdefault("colour_runs", [r for _, ids in groups for r in ids])  # a run's colour in every panel
    if len(groups) > 1:
        st.caption(f"{len(groups)} kinds of loss: one panel each, one unit per y axis.")
    for start in range(0, len(groups), per_row):
        row = groups[start:start + per_row]
        for col, (title, ids) in zip(st.columns(per_row) if len(groups) > 1 else [st.container()], row):
            with col:
                if len(groups) > 1:
                    names = ", ".join((run_labels or {}).get(r, r) for r in ids)
                    st.markdown(f"**{title}** · {names}")
                rules = baseline_rules(records, ids) if records is not None else None
                if seed_groups:
                    _render_bands(df[df["run_id"].isin(ids)], seed_groups, band, title, rules, kwargs)
                else:
                    render_metrics_chart(df[df["run_id"].isin(ids)], y_title=title, run_labels=run_labels, rules=rules,
                                         **kwargs)


def _render_bands(df: pd.DataFrame, seed_groups, band: str, title: str, rules, kwargs: dict) -> None:
    """One loss panel as seed groups' means and bands (the training loss smoothed as the page asks)."""
    d = df.sort_values(["run_id", "key", "step"]).copy()
    raw = d["key"].isin(("val_loss",))
    d["value"] = ema(d, kwargs.get("smoothing", 0.0)).where(~raw, d["value"])
    present = set(d["run_id"])
    own = {g: [r for r in ids if r in present] for g, ids in seed_groups.items() if set(ids) & present}
    chart = band_chart(group_curves(d, own, band), y_title=title, height=kwargs.get("height", 320),
                       log_y=kwargs.get("log_y", False), rules=rules, band_title=BANDS[band])
    if chart is None:
        st.caption("no points yet")
    else:
        st.altair_chart(chart, width="stretch")


def show_read_warnings(df: pd.DataFrame | None) -> None:
    """One ``st.warning`` per line of ``df.attrs["warnings"]``: what ``read_metrics`` had to skip."""
    for w in (df.attrs.get("warnings", []) if df is not None else []):
        st.warning(w)


def counts_chart(counts: pd.DataFrame, height: int = 260, unit: str = "images", many: int = 12) -> alt.Chart:
    """Stacked bars of items (``unit``) per class, coloured by split. ``counts``: class_name, split, count.

    Up to ``many`` classes the bars stand on a class axis; with more (fortunes' 42 topics) they lie
    along it, one 18 px row per class, so that every class name is written (a slanted axis drops
    the names that would overlap)."""
    n = counts["class_name"].nunique() if len(counts) else 0
    cls = dict(field="class_name", type="nominal", title="class", sort=None)
    val = dict(field="count", type="quantitative", title=unit)
    horizontal = n > many
    enc = dict(x=alt.X(**val), y=alt.Y(**cls, axis=alt.Axis(labelLimit=200, labelOverlap=False))) if horizontal \
        else dict(x=alt.X(**cls), y=alt.Y(**val))
    return (
        alt.Chart(counts)
        .mark_bar()
        .encode(**enc, color=alt.Color("split:N", title="split"), tooltip=["class_name:N", "split:N", "count:Q"])
        .properties(height=max(height, 18 * n) if horizontal else height)
    )
