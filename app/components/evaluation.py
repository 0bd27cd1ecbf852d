"""Run detail's evaluation panel: the run's latest evaluation (:mod:`engine.store.evaluations`) as two
small tables, each figure beside its baselines, and the cost of a training step.

- :func:`downstream_table`: figures (linear probe, kNN, k-means NMI/ARI, fine-tune) by encoder
  (this run's checkpoint, the random init, the raw input, chance).
- :func:`quality_rows`: the reconstruction figures (SSIM / spectral error) of the checkpoint and of
  each trivial baseline on the same inputs and masks.
- :func:`map_chart`: the 2-D maps (PCA, t-SNE) of the checkpoint's val features, coloured by label.
"""

from __future__ import annotations

from typing import Any

import altair as alt
import numpy as np
import pandas as pd
import streamlit as st

from app.components.compare import BEST, FINETUNE, QUALITY_FIGURES, REP_FIGURES
from app.components.errors import guarded
from app.components.quality import predictor_name
from engine.api import evaluation_job, latest_evaluation, load_maps, load_samples

#: Columns of :func:`downstream_table`: encoder key -> title.
ENCODER_TITLES = {"trained": "this run", "random_init": "random init", "raw_input": "raw input", "chance": "chance"}


def downstream_table(ev: Any) -> pd.DataFrame:
    """Rows = figures (:data:`REP_FIGURES` titles, then ``fine-tune`` when the evaluation has it),
    columns = encoders (:data:`ENCODER_TITLES`), values as percentages ("–" where an encoder has no
    such figure: chance has no NMI, raw input no fine-tune)."""
    rows = []
    figs = {k: (t, ev.representation) for k, t in REP_FIGURES.items()}
    if getattr(ev, "downstream", None):
        figs["finetune_acc"] = (FINETUNE, ev.downstream)
    for key, (title, source) in figs.items():
        row = {"figure": title}
        for enc, etitle in ENCODER_TITLES.items():
            v = (source.get(enc) or {}).get(key)
            row[etitle] = "–" if v is None or pd.isna(v) else f"{v:.1%}"
        rows.append(row)
    return pd.DataFrame(rows).set_index("figure")


def quality_rows(ev: Any) -> pd.DataFrame:
    """Rows = predictors (this run, then the baselines by name), columns = the reconstruction
    figures of :data:`QUALITY_FIGURES` the evaluation has (arrow: higher or lower is better), the
    best of each column starred. Empty when the evaluation has none."""
    q = getattr(ev, "quality", None) or {}
    if "trained" not in q:
        return pd.DataFrame()
    names = ["trained"] + [n for n in q if n != "trained"]
    out = pd.DataFrame({"predictor": [f"this run (step {ev.step})" if n == "trained" else predictor_name(n)
                                      for n in names]})
    for key, (title, better) in QUALITY_FIGURES.items():
        vals = pd.Series([q[n].get(key, np.nan) for n in names], dtype=float)
        if vals.isna().all():
            continue
        best = vals.idxmax() if better == "max" else vals.idxmin()
        out[f"{title} {'↑' if better == 'max' else '↓'}"] = [
            "–" if pd.isna(v) else f"{v:.4f}" + (BEST if i == best else "") for i, v in vals.items()]
    return out.set_index("predictor")


#: Titles of the stored 2-D maps (:func:`engine.store.evaluations.load_maps`), in display order.
MAP_TITLES = {"pca": "PCA", "tsne": "t-SNE"}


def map_chart(maps: dict[str, np.ndarray], class_names: list[str] | None = None):
    """Scatter plots side by side of the val features' 2-D maps (``pca``, ``tsne`` ``[N, 2]``),
    coloured by ``labels [N]`` (named by ``class_names`` when given); None without a map."""
    shown = [k for k in MAP_TITLES if k in maps and len(maps[k]) == len(maps.get("labels", ()))]
    if not shown:
        return None
    labels = [class_names[i] if class_names and 0 <= i < len(class_names) else str(i) for i in maps["labels"]]
    charts = []
    for k in shown:
        df = pd.DataFrame({"x": maps[k][:, 0], "y": maps[k][:, 1], "label": labels})
        charts.append(alt.Chart(df, title=MAP_TITLES[k]).mark_circle(size=18, opacity=0.7).encode(
            x=alt.X("x:Q", title=None, axis=alt.Axis(labels=False, ticks=False)),
            y=alt.Y("y:Q", title=None, axis=alt.Axis(labels=False, ticks=False)),
            color=alt.Color("label:N", title="label", scale=alt.Scale(scheme="tableau10")),
            tooltip=["label"]).properties(width=320, height=280))
    return alt.hconcat(*charts)


def cost_text(ev: Any) -> str | None:
    """"3.08 GFLOPs per training step (24.1 MFLOPs per sample, batch 128, mask ratio 0.75)", or None."""
    c = getattr(ev, "cost", None) or {}
    if not c.get("flops_per_step"):
        return None
    return (f"{c['flops_per_step'] / 1e9:.3g} GFLOPs per training step ({c['flops_per_sample'] / 1e6:.3g} MFLOPs per "
            f"sample, batch {int(c.get('batch_size', 0))}, mask ratio {c.get('mask_ratio', 0):g}; forward and backward, "
            f"counted by torch's FlopCounterMode)")


def evaluation_panel(rec: Any) -> None:
    """The run's latest evaluation on Run detail: downstream table, reconstruction quality, cost;
    or what its evaluation job is doing. Reads the store only."""
    ev = guarded(latest_evaluation, rec.run_id)
    if ev is None:
        job = guarded(evaluation_job, rec.run_id) or {}
        state = job.get("status")
        at = f"step {job['step']}" if job.get("step") is not None else "the latest checkpoint"
        st.caption(f"Evaluation {state} ({at})." if state in ("queued", "running") else
                   f"The last evaluation failed: {job.get('error')}" if state == "failed" else
                   "No evaluation yet: a completed run is evaluated at its end; Compare starts one for any saved run.")
        return
    st.caption(f"Checkpoint of step {ev.step} · {ev.rows.get('train', '?')} train / {ev.rows.get('val', '?')} val rows "
               f"· {ev.seconds:.0f} s")
    st.table(downstream_table(ev))
    down = getattr(ev, "downstream", None) or {}
    ft = down.get("trained") or {}
    st.caption("Probe: logistic regression on standardised frozen features; kNN: k=20, cosine; k-means against the "
               "labels. Random init: the same model at its initial weights; raw input: pixels, log-mel statistics or "
               "TF-IDF." + (f" Fine-tune: the encoder and a linear head, {ft.get('finetune_epochs', 0):.1f} epochs "
                            f"({int(ft.get('finetune_steps', 0))} steps) on the labelled train rows, the same recipe "
                            f"from the random init." if ft else ""))
    quality = quality_rows(ev)
    if not quality.empty:
        st.table(quality)
        how = ("SSIM of the pasted reconstruction (visible pixels kept) against the original" if "ssim" in ev.quality["trained"]
               else "Spectral figures over the masked cells of the clips, never the padding")
        st.caption(f"Reconstruction quality on the same validation inputs and masks, beside each trivial baseline; "
                   f"★ best of each column. {how}.")
    cost = cost_text(ev)
    for line in ([cost] if cost else []) + list(getattr(ev, "notes", None) or []):
        st.caption(line)
    maps = guarded(load_maps, rec.run_id, ev.step) or {}
    sample = guarded(load_samples, rec.run_id)  # its meta names the classes (kept with the run)
    chart = map_chart(maps, (sample.meta.get("class_names") if sample is not None else None))
    if chart is not None:
        st.altair_chart(chart)
        st.caption(f"This run's frozen features of the {len(maps['labels'])} val rows, in 2-D, coloured by label "
                   "(PCA always; t-SNE for small sets).")
