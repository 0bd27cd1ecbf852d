"""Compare: saved runs side by side. Filter and pick 2 to N runs, then their curves overlaid (x: step,
time, wall clock or samples seen), the config fields that differ, the same validation inputs
reconstructed by each run (and the evaluation's SSIM / spectral error beside the best trivial
baseline), the downstream figures
(probes and fine-tune) next to a random-init encoder, the raw input and chance, and the training
cost (with FLOPs); export as CSV or a self-contained HTML report.

Every choice lives in the URL (``?runs=a,b&smoothing=0.6&x=step&y=log&loss=0.05&dataset=digits``), so a
link reopens the same comparison. The page only reads the store (status, metrics, samples,
evaluations); an evaluation is started in the background (:func:`engine.runner.launcher.evaluate`).
"""

from __future__ import annotations

import altair as alt
import streamlit as st

from app.components import guarded, run_label, runs_or_stop, short_label
from app.components.access import allowed
from app.components.charts import axis_controls, render_loss_panels, show_read_warnings
from app.components.compare import (
    FINETUNE,
    QUALITY_FIGURES,
    REP_FIGURES,
    config_diff,
    downstream_frame,
    eff_display,
    efficiency_frame,
    fork_frame,
    fork_parent,
    mark_best,
    probe_bars,
    quality_frame,
    quality_groups,
    report_html,
    show_reconstructions,
)
from app.components.errors import user_errors
from app.components.evaluation import evaluation_progress
from app.components.quality import headline_of, loss_groups
from app.components.runs import same_task_first
from app.components.urlstate import PageState
from engine.api import (
    ConfigError,
    counted,
    evaluate,
    evaluation_job,
    get_task,
    latest_evaluation,
    read_metrics,
    read_task_info,
)

#: Pixels the downstream bar chart's run columns share (each at least 90, at most 240 wide).
FACETS_WIDTH = 760

st.title("Compare runs")
url = PageState("compare", ("runs", "smoothing", "x", "y", "loss", "dataset", "modality", "strategy", "status", "tag",
                            "q"))
runs = runs_or_stop()


def _modality(cfg: dict) -> str:
    try:
        return get_task(cfg["task"]).modality
    except (KeyError, ConfigError):  # a task whose plug-in is not loaded here
        return "?"


facets = {  # each gives a run's values for the facet; a run matches when one of them is chosen
    "dataset": lambda r: {(r.config.get("data") or {}).get("dataset", "?")},
    "modality": lambda r: {_modality(r.config)},
    "strategy": lambda r: {(r.config.get("masking") or {}).get("strategy", "?")},
    "status": lambda r: {r.status},
    "tag": lambda r: set(r.tags),
}
cols = st.columns([2, 1, 1, 1, 1, 1])
with cols[0]:
    q = url.widget(st.text_input, "Search names and ids", "q", default="", key="cmp_q")
chosen = {}
for col, (name, of) in zip(cols[1:], facets.items()):
    with col:
        options = sorted(set().union(*(of(r) for r in runs)))
        chosen[name] = url.widget(st.multiselect, name, name, default=[], options=options, key=f"cmp_{name}",
                                  cast=lambda v: str(v).split(","), encode_as=lambda v: ",".join(v) or None)
shown = [r for r in runs if (not q or q.lower() in run_label(r).lower())
         and all(not chosen[n] or facets[n](r) & set(chosen[n]) for n in facets)]
labels = {r.run_id: run_label(r) for r in runs}
legend = {r.run_id: short_label(r) for r in runs}
asked_ids = [i for i in url.get("runs", [], lambda v: str(v).split(",")) if i]  # before the widget rewrites it
if unknown := [i for i in asked_ids if i not in labels]:
    st.info(f"This link's run{'s' * (len(unknown) > 1)} {', '.join(map(repr, unknown))} "
            f"{'are' if len(unknown) > 1 else 'is'} not in this workspace (deleted, or from another workspace): left out.")
picked_ids = url.widget(st.multiselect, f"Runs to compare ({len(shown)} match the filters)", "runs",
                        default=same_task_first(shown, 2), options=[r.run_id for r in shown],
                        format_func=labels.get, key="cmp_runs", cast=lambda v: str(v).split(","),
                        encode_as=lambda v: ",".join(v) or None)  # fmt: skip
if len(picked_ids) < 2:
    st.info("Pick at least two runs to compare.")
    st.stop()
picked = [r for r in runs if r.run_id in picked_ids]
ids = [r.run_id for r in picked]
st.page_link("../pages/present.py", label="Presentation view", query_params={"runs": ",".join(ids)},
             help="These runs full width for a demo: key numbers and reconstructions, no controls")

# ---------------------------------------------------------------- curves
st.header("Curves")
c1, c2 = st.columns([3, 1])
with c2:
    smoothing = url.widget(st.slider, "EMA smoothing", "smoothing", default=0.6, cast=float, min_value=0.0,
                           max_value=0.99, step=0.01, key="cmp_smoothing")  # fmt: skip
with c1:
    x_axis, log_y = axis_controls(url, "cmp", samples=True)
@st.cache_data(max_entries=16, ttl=600, show_spinner=False)
def _metrics(ids: tuple[str, ...], versions: tuple) -> object:
    """The compared runs' curves, re-read only when one of them moved on (``versions``: each run's
    status, step and last status write), so a rerun of finished runs costs no Parquet read."""
    return read_metrics(list(ids), ["loss", "val_loss", "throughput"], max_points=1000)


metrics = guarded(_metrics, tuple(ids), tuple((r.status, r.step, r.updated_at) for r in picked))
if metrics is not None:
    show_read_warnings(metrics)
    render_loss_panels(metrics[metrics["key"].isin(["loss", "val_loss"])], loss_groups(ids, {r.run_id: r.config for r in picked}),
                       smoothing=smoothing, log_y=log_y, height=320, run_labels=legend, x=x_axis,
                       batch_sizes={r.run_id: (r.config.get("train") or {}).get("batch_size") for r in picked})  # fmt: skip
    last = metrics[metrics["key"] == "loss"].groupby("run_id")["step"].max()
    st.caption("Latest step per run: " + " · ".join(f"{legend[r]}: {int(last[r])}" for r in ids if r in last.index))

# ---------------------------------------------------------------- config diff
st.header("Config differences")
diff = config_diff({r.run_id: r.config for r in picked}, legend)
if diff.empty:
    st.caption("These runs have the same config (apart from their names).")
else:
    st.table(diff)

def _init_step(rec) -> int | None:
    """The parent's checkpoint step a fork started from (its ``task.json``), None when unknown."""
    try:
        return (read_task_info(rec.path).get("init") or {}).get("step")
    except (OSError, ValueError):
        return None


forks = [r for r in picked if fork_parent(r, picked) is not None]
if forks:
    st.subheader("Forks beside their parents")
    heads = {headline_of(r.config)[0] for r in picked}
    fm = guarded(read_metrics, ids, sorted(heads), max_points=2000)
    took = {r.run_id: _init_step(r) for r in forks}
    table = fork_frame(picked, fm, legend, headline_of, took) if fm is not None else None
    if table is not None and not table.empty:
        st.table(table.set_index("fork"))
    st.caption("A fork's reference is its parent's figure at the checkpoint it started from (for a run from an "
               "imported model, the run that shows that model on the same data, 0 steps): its step 0 repeats it "
               "when the masks and data are the same.")

# ---------------------------------------------------------------- reconstructions
st.header("Reconstructions of the validation inputs")  # the caption says whether the runs saw the same ones
drawn = show_reconstructions(picked, legend)
evals = {r.run_id: guarded(latest_evaluation, r.run_id) for r in picked}
quality, q_titles = quality_frame(evals, legend)
if not quality.empty:
    st.subheader("Reconstruction quality beside the best baseline")
    best = {t: QUALITY_FIGURES[k][1] == "max" for k, (t, _) in QUALITY_FIGURES.items()}
    for group, titles in quality_groups(quality, q_titles):  # one table per kind of figures (image, audio)
        shown = group.set_index("run")
        for t in titles:
            shown = mark_best(shown, [t], higher=best[t], fmt="{:.4f}")
        st.table(shown)
    st.caption("At each run's latest evaluation, on its fixed validation inputs and masks; each figure beside the best "
               "of that run's trivial baselines on the same inputs (images: mean image, visible mean, biharmonic "
               "inpainting, nearest training images; audio: each bin's mean, interpolation in time). SSIM: the "
               "pasted reconstruction (visible pixels kept) against the original, averaged over the masked patches, "
               "and over the whole image. Spectral figures over the masked cells, never the padding.")

# ---------------------------------------------------------------- downstream
st.header("Downstream: probes and fine-tuning")
frame = downstream_frame(evals, legend)
missing = [r for r in picked if evals[r.run_id] is None]
if not frame.empty:
    tuned = [FINETUNE, f"{FINETUNE} · random init"] if FINETUNE in frame else []
    probes = frame.drop(columns=tuned)
    st.table(mark_best(probes, list(REP_FIGURES.values()), plain=[c for c in probes if " · " in c] + ["chance"]).set_index("run"))
    if tuned:
        st.table(mark_best(frame[["run", "step", *tuned]], tuned[:1], plain=tuned[1:]).set_index("run"))
    st.caption("Trained encoder at its latest evaluated checkpoint, beside the same model at its initial weights "
               "(random init), the raw input (pixels / TF-IDF) and chance (the most common val class); best run per "
               "column starred (the trained encoder's figures only). Probe: logistic regression on standardised features; kNN: k=20, cosine. "
               "Fine-tune: the encoder and a linear head trained together on the labelled train rows for a few epochs "
               "(the same recipe from the checkpoint and from the random init), val accuracy. –: not computed "
               "(k-means needs more val rows than classes).")
    bars = probe_bars(frame)
    chart = alt.Chart(bars).mark_bar().encode(
        x=alt.X("encoder:N", title=None, sort=["trained", "random init", "raw input"]),
        y=alt.Y("value:Q", title="val accuracy", scale=alt.Scale(domain=[0, 1])),
        color=alt.Color("encoder:N", legend=alt.Legend(orient="bottom")),
        column=alt.Column("run:N", title=None),
        row=alt.Row("figure:N", title=None, sort=["linear probe", "kNN (k=20)", FINETUNE]),
        tooltip=["run", "figure", "encoder", alt.Tooltip("value:Q", format=".1%")]).properties(
            width=max(90, min(240, FACETS_WIDTH // max(1, bars["run"].nunique()))), height=140)
    st.altair_chart(chart)
run_eval = allowed("run.evaluate", evaluate)  # None for a viewer or in demo mode: no button
for r in missing:
    job = guarded(evaluation_job, r.run_id) or {}
    state = job.get("status")
    at = f"step {job['step']}" if job.get("step") is not None else "the latest checkpoint"
    note = f"evaluation {state} ({at})" if state in ("queued", "running") else "no evaluation yet"
    if state == "failed":
        note = f"the last evaluation failed: {job.get('error')}"
    a, b = st.columns([4, 1], vertical_alignment="center")
    a.caption(f"{legend[r.run_id]}: {note}")
    if (state not in ("queued", "running") and not r.is_active and run_eval is not None
            and b.button("Evaluate", key=f"cmp_eval_{r.run_id}")):
        with user_errors():
            step = run_eval(r.run_id)
            st.toast(f"Evaluating step {step} of {legend[r.run_id]} in the background")
            st.rerun()  # the caption then says the job is queued, and the button goes
busy = {r.run_id for r in picked if evals[r.run_id] is not None and evaluation_progress(r, "cmp_evaluating",
                                                                                       label=legend[r.run_id])}
again = [r for r in picked if evals[r.run_id] is not None and not r.is_active and r.run_id not in busy]
if run_eval is not None and again:
    with st.expander("Evaluate again with a larger budget"):
        st.caption("An evaluation at the end of a run spends at most half its training time (evaluation.budget): "
                   "probes, kNN and k-means always run, and the fine-tune gets what is left. A larger budget gives the "
                   "fine-tune more steps, up to its full recipe; the figures above update as each phase ends.")
        a, b, c = st.columns([3, 2, 1], vertical_alignment="bottom")
        chosen = a.multiselect("Runs", [r.run_id for r in again], default=[r.run_id for r in again],
                               format_func=legend.get, key="cmp_again_runs")
        share = b.selectbox("Budget", [1.0, 2.0, 4.0, None], key="cmp_again_budget",
                            format_func=lambda x: "full recipe (no limit)" if x is None else f"{x:g} × training time")
        if c.button("Evaluate", key="cmp_again_go", disabled=not chosen):
            with user_errors():
                for run_id in chosen:
                    run_eval(run_id, evals[run_id].step, budget="full" if share is None else share)
                st.toast(f"Evaluating {len(chosen)} run(s) again in the background")
                st.rerun()

# ---------------------------------------------------------------- efficiency
st.header("Training cost")
losses = metrics[metrics["key"] == "loss"] if metrics is not None else None
default_target = float(round(losses.groupby("run_id")["value"].min().max() * 1.1, 4)) if losses is not None and len(losses) else 0.1
if losses is not None and len(losses):
    # A target outside these runs' losses (kept in the URL from another selection) would read
    # "step 1" or "never" for every run: the default for this selection replaces it.
    kept = url.get("loss", None, float)
    if kept is not None and not losses["value"].min() <= kept <= losses["value"].max():
        url.put("loss", None)
target = url.widget(st.number_input, "Time to reach training loss (moving mean of 20 points)", "loss",
                    default=default_target, cast=float, min_value=0.0, format="%.4f",
                    key=f"cmp_loss_{'_'.join(sorted(picked_ids))}")  # a new selection starts from its own default
eff = efficiency_frame(picked, metrics if metrics is not None else frame.iloc[0:0], legend, target, evals)
st.table(eff_display(eff).set_index("run"))
st.caption("Peak memory: the worker's peak private memory (RssAnon high-water on Linux, CUDA max allocated on a GPU). "
           "FLOPs: forward and backward of one training batch at the run's mask ratio, counted by the evaluation "
           "(torch's FlopCounterMode: matrix products and attention); training TFLOPs = that times the steps trained.")

# ---------------------------------------------------------------- export
tables = [("Downstream", frame), ("Reconstruction quality", quality), ("Training cost", eff),
          ("Config differences", diff.reset_index() if not diff.empty else diff)]
merged = eff.merge(frame, on="run", how="left") if not frame.empty else eff
e1, e2 = st.columns(2)
e1.download_button("Download CSV", merged.to_csv(index=False).encode(), file_name="masklab-compare.csv",
                   mime="text/csv", key="cmp_csv")
report = report_html(f"masklab: {counted(len(picked), 'run')} compared", tables, drawn,
                     [", ".join(labels[r] for r in ids)])
e2.download_button("Download HTML report", report.encode(), file_name="masklab-compare.html",
                   mime="text/html", key="cmp_html")
