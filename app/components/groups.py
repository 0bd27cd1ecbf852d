"""Seed groups, a baseline run with deltas by direction, and configs with results in one table:
Compare's summary of many runs (no Streamlit here; the page draws what these return).

- :func:`seed_groups`: runs whose configs differ only in ``train.seed`` (replicates, as a sweep's
  ``seeds`` makes them) form one group, named by what sets it apart from the other groups.
- :func:`band`: a group's mean and band over its runs, the band as min-max, one standard deviation
  or one standard error of the mean (:data:`BANDS`).
- :func:`group_curves`: the mean and band of each group's curves, step by step.
- :func:`results_frame`: one row per run, the config fields that differ, then its figures
  (:data:`FIGURES`: the headline at its last evaluation, the downstream accuracies, SSIM, cost).
- :func:`deltas`: each figure's change from a chosen baseline run's, and whether that change is
  better or worse by the figure's direction (:data:`FIGURES`), the colour the page gives it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from app.components.runs import grid_label, run_vocab
from app.components.urlstate import flatten
from engine.api import method_label

#: Fields that never make two runs different experiments: the seed (what a replicate varies), the
#: name, and the CPU threads (the same computation).
REPLICATE_FIELDS = ("train.seed", "name", "train.num_threads")
#: Band choices: name -> its label in the page.
BANDS = {"minmax": "min–max", "std": "± 1 standard deviation", "sem": "± 1 standard error"}
#: Better direction of the figures of :func:`results_frame` ("max": higher is better).
FIGURES = {"headline": None, "linear probe": "max", "kNN (k=20)": "max", "fine-tune": "max",
           "SSIM, masked patches": "max", "throughput (samples/s)": "max", "wall time (s)": "min",
           "peak memory (MiB)": "min"}
#: Colours of a delta: better, worse, unchanged.
GOOD, BAD, SAME = "#15803d", "#b91c1c", "#6b7280"


def replicate_key(config: Mapping[str, Any]) -> str:
    """The config without :data:`REPLICATE_FIELDS`, as a canonical string: equal for replicates."""
    flat = {k: v for k, v in flatten(config or {}).items() if k not in REPLICATE_FIELDS}
    return repr(sorted((k, repr(v)) for k, v in flat.items()))


def seed_groups(configs: Mapping[str, Mapping[str, Any]]) -> dict[str, list[str]]:
    """Runs grouped by :func:`replicate_key`, in the order of each group's first run: group name ->
    run ids. A group of one run is that run alone (named by its id). Names: the fields that set the
    groups apart (``masking.ratio=0.5``), or ``"<n> seeds"`` when one group holds every run.

    Args:
        configs: run id -> its config (as stored), in the order the page lists the runs.
    """
    by_key: dict[str, list[str]] = {}
    for run_id, cfg in configs.items():
        by_key.setdefault(replicate_key(cfg), []).append(run_id)
    flat = {k: {f: v for f, v in flatten(configs[ids[0]] or {}).items() if f not in REPLICATE_FIELDS}
            for k, ids in by_key.items()}
    fields = sorted({f for d in flat.values() for f in d})
    varying = [f for f in fields if len({repr(d.get(f)) for d in flat.values()}) > 1]
    out: dict[str, list[str]] = {}
    for k, ids in by_key.items():
        if len(ids) == 1:
            out[ids[0]] = ids
            continue
        what = " · ".join(f"{f}={flat[k].get(f, '(unset)')}" for f in varying[:3]) or "same config"
        name = f"{what} ({len(ids)} seeds)"
        out[name if name not in out else f"{name} #{len(out)}"] = ids
    return out


def band(values: Sequence[float], kind: str) -> tuple[float, float, float]:
    """``(mean, low, high)`` of ``values`` (NaNs left out) with the band :data:`BANDS` names:
    ``minmax`` the smallest and largest, ``std`` the mean ± the sample standard deviation (ddof 1),
    ``sem`` the mean ± std / sqrt(n). One value: a band of zero width. No value: NaNs.

    Raises:
        ValueError: ``kind`` is not a key of :data:`BANDS`.
    """
    if kind not in BANDS:
        raise ValueError(f"band {kind!r}: choose one of {', '.join(BANDS)}")
    x = np.asarray([v for v in values if v is not None and np.isfinite(v)], np.float64)
    if not len(x):
        return (np.nan, np.nan, np.nan)
    mean = float(x.mean())
    if kind == "minmax":
        return mean, float(x.min()), float(x.max())
    sd = float(x.std(ddof=1)) if len(x) > 1 else 0.0
    half = sd if kind == "std" else sd / np.sqrt(len(x))
    return mean, mean - half, mean + half


def group_curves(df: pd.DataFrame, groups: Mapping[str, Sequence[str]], kind: str) -> pd.DataFrame:
    """Each group's curves as mean and band step by step: columns ``group, key, step, mean, low,
    high, n`` (``n``: how many runs logged that step). ``df``: the long metrics frame (``run_id,
    key, step, value``), smoothed or not as the page draws it."""
    rows = []
    for name, ids in groups.items():
        g = df[df["run_id"].isin(ids)]
        for (key, step), v in g.groupby(["key", "step"])["value"]:
            mean, lo, hi = band(v.to_numpy(), kind)
            rows.append({"group": name, "key": key, "step": int(step), "mean": mean, "low": lo, "high": hi,
                         "n": int(v.notna().sum())})
    return pd.DataFrame(rows, columns=["group", "key", "step", "mean", "low", "high", "n"])


def group_table(frame: pd.DataFrame, groups: Mapping[str, Sequence[str]], labels: Mapping[str, str], kind: str,
                columns: Sequence[str], expand: Sequence[str] = (), fmt: str = "{:.1%}") -> pd.DataFrame:
    """A per-run table (``frame``: column ``run`` with the runs' labels, numeric ``columns``) with
    each group of several runs as one row, ``"mean ± half"`` (``std``, ``sem``) or ``"mean [low–high]"``
    (``minmax``) in each of ``columns``; a group named in ``expand`` is followed by its runs' rows,
    marked ↳. Other columns of a group row read "n runs"."""
    by_label = {labels.get(r, r): r for ids in groups.values() for r in ids}
    rows = []
    for name, ids in groups.items():
        own = frame[frame["run"].map(lambda lab: by_label.get(lab) in ids)]
        if len(ids) == 1 or own.empty:
            rows += [{c: (fmt.format(v) if c in columns and pd.notna(v) else ("–" if c in columns else v))
                      for c, v in r.items()} for r in own.to_dict("records")]
            continue
        row: dict[str, Any] = {"run": f"▸ {name}"}
        for c in frame.columns:
            if c == "run":
                continue
            if c in columns:
                mean, lo, hi = band(pd.to_numeric(own[c], errors="coerce").to_numpy(), kind)
                row[c] = "–" if np.isnan(mean) else (
                    f"{fmt.format(mean)} [{fmt.format(lo)}–{fmt.format(hi)}]" if kind == "minmax"
                    else f"{fmt.format(mean)} ± {fmt.format(hi - mean)}")
            else:
                row[c] = f"{len(own)} runs"
        rows.append(row)
        if name in expand:
            for r in own.to_dict("records"):
                rows.append({c: ("↳ " + str(v) if c == "run" else fmt.format(v) if c in columns and pd.notna(v)
                                 else "–" if c in columns else v) for c, v in r.items()})
    return pd.DataFrame(rows, columns=list(frame.columns))


def group_bars(bars: pd.DataFrame, groups: Mapping[str, Sequence[str]], labels: Mapping[str, str],
               kind: str) -> pd.DataFrame:
    """The downstream bar chart's long frame (``run, figure, encoder, value``:
    :func:`app.components.compare.probe_bars`) with each seed group as one bar per figure and
    encoder: ``run`` the group's name, ``value`` its mean, ``low`` / ``high`` its band (a run alone:
    its own value, a band of zero width)."""
    of = {labels.get(r, r): g for g, ids in groups.items() for r in ids}
    d = bars.assign(run=bars["run"].map(lambda lab: of.get(lab, lab)))
    rows = []
    for (run, fig, enc), v in d.groupby(["run", "figure", "encoder"], sort=False)["value"]:
        mean, lo, hi = band(v.to_numpy(dtype=float), kind)
        rows.append({"run": run, "figure": fig, "encoder": enc, "value": mean, "low": lo, "high": hi, "n": len(v)})
    return pd.DataFrame(rows)


def baseline_rows(frame: pd.DataFrame, figures: Sequence[str], pinned: Mapping[str, str]) -> pd.DataFrame:
    """Pinned baseline rows under a downstream table: for each baseline (``pinned``: column suffix
    -> row name, e.g. ``"random init" -> "baseline · random init"``) the mean over the runs of each
    ``figures`` column's ``"<figure> · <suffix>"`` value (``chance``: the ``chance`` column under
    the first figure). ``frame``: :func:`app.components.compare.downstream_frame`."""
    rows = []
    for suffix, name in pinned.items():
        row: dict[str, Any] = {"run": name}
        for fig in figures:
            col = "chance" if suffix == "chance" else f"{fig} · {suffix}"
            vals = pd.to_numeric(frame[col], errors="coerce") if col in frame and (suffix != "chance" or fig == figures[0]) else None
            row[fig] = float(vals.mean()) if vals is not None and vals.notna().any() else np.nan
        rows.append(row)
    return pd.DataFrame(rows)


def deltas(values: Mapping[str, float], base: Mapping[str, float], directions: Mapping[str, str]) -> dict[str, tuple[float, str]]:
    """Each figure's change from the baseline run's and its verdict: figure -> ``(delta, verdict)``,
    ``delta = value - base`` and verdict ``"better"`` / ``"worse"`` by the figure's direction
    (``directions[figure]``: ``"max"`` higher is better, ``"min"`` lower), ``"same"`` for no change.
    Figures missing on either side, or without a direction, are left out."""
    out = {}
    for fig, d in directions.items():
        v, b = values.get(fig), base.get(fig)
        if d not in ("min", "max") or v is None or b is None or not (np.isfinite(v) and np.isfinite(b)):
            continue
        delta = float(v) - float(b)
        verdict = "same" if delta == 0 else ("better" if (delta > 0) == (d == "max") else "worse")
        out[fig] = (delta, verdict)
    return out


def colour(verdict: str) -> str:
    """The CSS colour of a delta's verdict (:func:`deltas`): green better, red worse, grey same."""
    return {"better": GOOD, "worse": BAD}.get(verdict, SAME)


def results_frame(records: Sequence[Any], labels: Mapping[str, str], evaluations: Mapping[str, Any],
                  headline: Mapping[str, tuple[str, str, float | None]], diff: pd.DataFrame,
                  extra: Mapping[str, Mapping[str, float]] | None = None) -> tuple[pd.DataFrame, dict[str, str]]:
    """Configs and results in one table: one row per run (``run``: its label), its method
    (:func:`engine.methods.catalog.method_label`), its tokenizer with the vocabulary it really has
    when a run has one (:func:`app.components.runs.grid_label`), its tags and note,
    the config fields that differ (``diff``: :func:`app.components.compare.config_diff`, fields by
    run labels), then its figures: the headline at its last evaluation (``headline``: run id ->
    ``(metric title, "min" | "max", value)``), the downstream accuracies and SSIM of its latest
    evaluation, and ``extra`` (run id -> figure -> value: throughput, wall time...). Returns the
    frame and each figure column's direction ("min" / "max")."""
    rows, directions = [], {}
    for r in records:
        lab = labels.get(r.run_id, r.run_id)
        row: dict[str, Any] = {"run": lab, "method": method_label(getattr(r, "config", None) or {}),
                               "tags": ", ".join(getattr(r, "tags", ()) or ()),
                               "note": (getattr(r, "note", "") or "")[:80]}
        if any(((getattr(x, "config", None) or {}).get("data") or {}).get("tokenizer") for x in records):
            cfg = getattr(r, "config", None) or {}
            row["tokenizer"] = grid_label({"data": cfg.get("data"), "model": {"init_from": (cfg.get("model") or {}).get(
                "init_from")}}, run_vocab(r))
        for field in diff.index if not diff.empty else []:
            row[field] = diff.loc[field, lab] if lab in diff.columns else ""
        title, better, value = headline.get(r.run_id, ("headline", None, None))
        if better is not None:
            row[title] = value
            directions[title] = better
        ev = evaluations.get(r.run_id)
        if ev is not None:
            rep = (ev.representation or {}).get("trained", {})
            down = (getattr(ev, "downstream", None) or {}).get("trained", {})
            q = (getattr(ev, "quality", None) or {}).get("trained", {})
            for fig, v in (("linear probe", rep.get("probe_acc")), ("kNN (k=20)", rep.get("knn_acc")),
                           ("fine-tune", down.get("finetune_acc")), ("SSIM, masked patches", q.get("ssim"))):
                if v is not None:
                    row[fig] = v
                    directions[fig] = FIGURES[fig]
        for fig, v in ((extra or {}).get(r.run_id) or {}).items():
            row[fig] = v
            if FIGURES.get(fig):
                directions[fig] = FIGURES[fig]
        rows.append(row)
    df = pd.DataFrame(rows)
    figs = [c for c in directions if c in df]
    first = [c for c in df.columns if c not in figs]
    return df[first + figs], directions


def full_config(configs: Mapping[str, Mapping[str, Any]], labels: Mapping[str, str]) -> pd.DataFrame:
    """Every config field (dotted, :data:`REPLICATE_FIELDS`' name and threads left out) by run label,
    as :func:`app.components.compare.config_diff` lays out only those that differ."""
    flat = {labels.get(r, r): flatten(c or {}) for r, c in configs.items()}
    keys = sorted({k for f in flat.values() for k in f} - {"name", "train.num_threads"})
    rows = [{"field": k, **{lab: (v if isinstance(v := f.get(k, "(unset)"), str) else repr(v)) for lab, f in flat.items()}}
            for k in keys]
    return pd.DataFrame(rows).set_index("field") if rows else pd.DataFrame()


#: How :func:`results_styler` writes a figure: accuracies as percentages, the rest by size.
_PERCENT = ("linear probe", "kNN (k=20)", "fine-tune")


def _fmt(fig: str, v: float, signed: bool = False) -> str:
    sign = "+" if signed else ""
    if fig in _PERCENT:
        return f"{v * 100:{sign}.1f} pts" if signed else f"{v:.1%}"
    if fig in ("throughput (samples/s)", "peak memory (MiB)"):
        return f"{v:{sign}.0f}"
    if fig == "wall time (s)":
        return f"{v:{sign}.1f}"
    return f"{v:{sign}.4f}"


def pinned_baselines(records: Sequence[Any], evaluations: Mapping[str, Any],
                     headline: Mapping[str, tuple[str, str, float | None]], predictor_name=str) -> pd.DataFrame:
    """The trivial baselines as rows of :func:`results_frame`'s table, each the mean over the
    compared runs that have it: every predictor logged on a run's headline at step 0
    (``baseline/<name>``: mean image, kNN, most frequent token...) in that headline's column, and the
    evaluation's random-init encoder (probe, kNN, fine-tune), raw input (probe, kNN) and chance
    (probe) in the downstream columns. ``run`` reads ``baseline · <name>``; ``predictor_name``
    writes a logged name in words."""
    acc: dict[str, dict[str, list[float]]] = {}

    def add(name: str, fig: str, v: Any) -> None:
        if v is not None and np.isfinite(v):
            acc.setdefault(name, {}).setdefault(fig, []).append(float(v))

    for r in records:
        title, _, _ = headline.get(r.run_id, ("", None, None))
        for k, v in (r.latest or {}).items():
            if k.startswith("baseline/") and k.count("/") == 1 and title:
                add(predictor_name(k.split("/")[1]), title, v)
        ev = evaluations.get(r.run_id)
        if ev is None:
            continue
        rep = ev.representation or {}
        down = getattr(ev, "downstream", None) or {}
        for who, name in (("random_init", "random init"), ("raw_input", "raw input")):
            add(name, "linear probe", rep.get(who, {}).get("probe_acc"))
            add(name, "kNN (k=20)", rep.get(who, {}).get("knn_acc"))
        add("random init", "fine-tune", down.get("random_init", {}).get("finetune_acc"))
        add("chance", "linear probe", rep.get("chance", {}).get("probe_acc"))
    return pd.DataFrame([{"run": f"baseline · {name}", **{f: float(np.mean(v)) for f, v in figs.items()}}
                         for name, figs in acc.items()])


def results_styler(df: pd.DataFrame, directions: Mapping[str, str], base_label: str | None):
    """:func:`results_frame` as a pandas Styler for ``st.dataframe``: figures formatted, and with a
    baseline run (``base_label``, its row's ``run``) every other run's figure followed by its change
    from the baseline's (``(+0.0123)``) in green where better and red where worse by the figure's
    direction (:func:`deltas`); the baseline's row in bold."""
    figs = [c for c in directions if c in df]
    base_row = df[df["run"] == base_label]
    base = {f: base_row.iloc[0][f] for f in figs} if len(base_row) else None
    text = df.astype(object).copy()
    css = pd.DataFrame("", index=df.index, columns=df.columns)
    for i, row in df.iterrows():
        if str(row["run"]).startswith("baseline · "):  # a pinned baseline row: plain, grey
            for f in figs:
                text.at[i, f] = "–" if pd.isna(row[f]) else _fmt(f, float(row[f]))
            css.loc[i, :] = "color: #6b7280; font-style: italic"
            continue
        vals = {f: row[f] for f in figs if pd.notna(row[f])}
        d = deltas(vals, {f: v for f, v in (base or {}).items() if pd.notna(v)}, directions) if base is not None else {}
        for f in figs:
            if pd.isna(row[f]):
                text.at[i, f] = "–"
                continue
            text.at[i, f] = _fmt(f, float(row[f]))
            if row["run"] == base_label:
                css.at[i, f] = "font-weight: 600"
            elif f in d:
                delta, verdict = d[f]
                text.at[i, f] += f" ({_fmt(f, delta, signed=True)})"
                css.at[i, f] = f"color: {colour(verdict)}"
        if row["run"] == base_label:
            text.at[i, "run"] = f"{row['run']} (baseline)"
            css.at[i, "run"] = "font-weight: 600"
    return text.style.apply(lambda _: css, axis=None)
