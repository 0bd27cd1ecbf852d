"""Compare: saved runs side by side. Filter and pick 2 to N runs; runs that differ only in
``train.seed`` form seed groups (a mean and a band, expandable), and one run can be the baseline
every other run's figures are measured against. Then: the curves overlaid (x: step, time, wall clock
or samples seen; the trivial baselines dashed), configs and results in one table (differing fields,
tags, notes, figures, the baselines pinned under the runs, deltas coloured by direction, sortable),
the reconstruction matrix (the same validation inputs from every run at one step; one step control,
four views, paged), the evaluation's SSIM / spectral error beside the best trivial baseline, the
downstream figures (probes and fine-tune) next to a random-init encoder, the raw input and chance,
and the training cost (samples/s, MFU, peak memory, FLOPs); export as CSV or a self-contained HTML report.

Every choice lives in the URL (``?runs=a,b&smoothing=0.6&x=step&mstep=200&mview=wipe&band=std&base=a``),
so a link reopens the same comparison. The page only reads the store (status, metrics, samples,
evaluations); an evaluation is started in the background (:func:`engine.runner.launcher.evaluate`).
"""

from __future__ import annotations

import altair as alt
import pandas as pd
import streamlit as st

from app.components import guarded, run_label, runs_or_stop, short_label
from app.components.access import allowed
from app.components.charts import axis_controls, render_loss_panels, show_read_warnings
from app.components.compare import (
    FINETUNE,
    FINETUNE_STEPS,
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
from app.components.distance import show_runs as show_distance_runs
from app.components.errors import user_errors
from app.components.evaluation import evaluation_progress, skipped_lines
from app.components.groups import (
    BANDS,
    baseline_rows,
    full_config,
    group_bars,
    group_table,
    pinned_baselines,
    results_frame,
    results_styler,
    seed_groups,
)
from app.components.matrix import run_matrix
from app.components.quality import figure_title, headline_of, loss_groups, predictor_name
from app.components.runs import same_task_first, vocab_warning
from app.components.speed import task_info
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
                            "q", "mstep", "mview", "mpage", "group", "band", "expand", "base", "sort", "desc", "fields"))
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

# ---------------------------------------------------------------- seed groups and the baseline run
seeds = seed_groups({r.run_id: r.config for r in picked})
replicated = {g: m for g, m in seeds.items() if len(m) > 1}
g1, g2, g3, g4 = st.columns([1.2, 1.3, 2.2, 2.2], vertical_alignment="bottom")
grouped = bool(replicated) and g1.toggle("Group seeds", value=str(url.get("group", "1")) != "0", key="cmp_group",
                                         help="Runs that differ only in train.seed: one line with a band, one row")
url.put("group", None if grouped or not replicated else "0")
with g2:
    band_kind = url.widget(st.selectbox, "Band", "band", default="minmax", options=list(BANDS), format_func=BANDS.get,
                           key="cmp_band", disabled=not grouped)
with g3:
    expand = url.widget(st.multiselect, "Expand groups", "expand", default=[], options=list(replicated),
                        key="cmp_expand", cast=lambda v: str(v).split("|"), encode_as=lambda v: "|".join(v) or None,
                        disabled=not grouped)
with g4:
    base_id = url.widget(st.selectbox, "Baseline run (deltas beside every figure)", "base", default=None,
                         options=[None, *ids], format_func=lambda i: "none" if i is None else legend[i], key="cmp_base")
if replicated:
    st.caption(f"{len(replicated)} seed group(s) of {sum(len(m) for m in replicated.values())} runs: "
               + " · ".join(replicated) + ("" if grouped else " (shown run by run)"))
shown_groups = seeds if grouped else None

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
    return read_metrics(list(ids), ["loss", "val_loss", "throughput", "mfu"], max_points=1000)


metrics = guarded(_metrics, tuple(ids), tuple((r.status, r.step, r.updated_at) for r in picked))
if metrics is not None:
    show_read_warnings(metrics)
    render_loss_panels(metrics[metrics["key"].isin(["loss", "val_loss"])], loss_groups(ids, {r.run_id: r.config for r in picked}),
                       smoothing=smoothing, log_y=log_y, height=320, run_labels=legend, x=x_axis, records=picked,
                       seed_groups=shown_groups, band=band_kind,
                       batch_sizes={r.run_id: (r.config.get("train") or {}).get("batch_size") for r in picked})  # fmt: skip
    if shown_groups:
        st.caption("Seed groups: each line is the mean of the group's runs at each step, the band their "
                   f"{BANDS[band_kind]}; runs without replicates are groups of one. Step axis only.")
    st.caption("Dashed grey lines: the trivial baselines of the validation loss (each the mean over the runs "
               "that logged it at step 0; same masks, same units).")
    last = metrics[metrics["key"] == "loss"].groupby("run_id")["step"].max()
    st.caption("Latest step per run: " + " · ".join(f"{legend[r]}: {int(last[r])}" for r in ids if r in last.index))

# ---------------------------------------------------------------- configs and results
st.header("Configs and results")
diff = config_diff({r.run_id: r.config for r in picked}, legend)
evals = {r.run_id: guarded(latest_evaluation, r.run_id) for r in picked}
all_fields = url.widget(st.toggle, "Every config field (not only those that differ)", "fields", default=False,
                        cast=lambda v: str(v) == "all", encode_as=lambda v: "all" if v else None, key="cmp_fields")
fields = full_config({r.run_id: r.config for r in picked}, legend) if all_fields else diff
headlines = {}
for r in picked:
    metric, better = headline_of(r.config)
    headlines[r.run_id] = (f"{figure_title(metric, r.config)} {'↓' if better == 'min' else '↑'}", better,
                       (r.latest or {}).get(metric))
infos = {r.run_id: task_info(r) for r in picked}  # where each trained, and the peak its MFU is measured against
cost = efficiency_frame(picked, metrics if metrics is not None else pd.DataFrame(columns=["run_id", "key", "step", "value"]),
                        legend, None, evals, infos)
extra = {r.run_id: {k: cost.iloc[i][k] for k in ("throughput (samples/s)", "wall time (s)", "peak memory (MiB)")}
         for i, r in enumerate(picked)}
results, directions = results_frame(picked, legend, evals, headlines, fields, extra)
figure_cols = list(directions)
s1, s2 = st.columns([3, 1], vertical_alignment="bottom")
with s1:
    sort_by = url.widget(st.selectbox, "Sort by", "sort", default=None, options=[None, *figure_cols, *fields.index],
                         format_func=lambda c: "as picked" if c is None else c, key="cmp_sort")
with s2:
    descending = url.widget(st.toggle, "Descending", "desc", default=False, cast=lambda v: str(v) == "1",
                            encode_as=lambda v: "1" if v else None, key="cmp_desc")
if sort_by in results:
    results = results.sort_values(sort_by, ascending=not descending, kind="stable", na_position="last")
pins = pinned_baselines(picked, evals, headlines, predictor_name)
results = pd.concat([results, pins], ignore_index=True).fillna({c: "" for c in results.columns if c not in directions}) \
    if not pins.empty else results  # pinned: never sorted
st.dataframe(results_styler(results, directions, legend.get(base_id) if base_id else None), hide_index=True,
             width="stretch", height=min(35 * (len(results) + 1) + 3, 740))
st.caption(("Config fields that differ between these runs" if not all_fields else "Every config field")
           + (", each text run's tokenizer with the vocabulary it really has (the size asked beside it when they "
              "differ)" if "tokenizer" in results.columns else "")
           + ", then each run's figures: the validation headline at its last evaluation (↓ lower is better, ↑ higher), "
           "the downstream accuracies and SSIM of its latest evaluation, and its training cost. Pinned under the runs "
           "(grey, never sorted): the trivial baselines, each the mean over the runs that have it."
           + (f" Baseline run: {legend[base_id]}; beside every other run's figure its change, green where better "
              "and red where worse by that figure's direction." if base_id else " Pick a baseline run above to see "
              "every figure's change from it."))
for r in picked:  # a tokenizer far below its request: said under the table that shows its real size
    if warning := vocab_warning(r):
        st.warning(f"{legend[r.run_id]}: {warning}")


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
st.header("Reconstructions of the validation inputs")


@st.fragment
def _matrix() -> int:
    """A step, view or page change redraws the matrix only, not the page's charts and tables."""
    return run_matrix(picked, legend, url)


in_matrix = _matrix()
with st.expander("Each run's latest samples as one grid (what the HTML report holds)", expanded=not in_matrix):
    drawn = show_reconstructions(picked, legend)  # the caption says whether the runs saw the same ones
st.subheader("Where reconstruction breaks down")
show_distance_runs(picked, legend)
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
    tuned = [FINETUNE, f"{FINETUNE} · random init", FINETUNE_STEPS] if FINETUNE in frame else []
    probes = frame.drop(columns=tuned)
    if shown_groups and replicated:
        figs = [c for c in [*REP_FIGURES.values(), FINETUNE] if c in frame]
        table = group_table(frame[["run", "step", *figs]], shown_groups, legend, band_kind, figs, expand)
        pins = baseline_rows(frame, figs, {"random init": "baseline · random init", "raw input": "baseline · raw input",
                                           "chance": "baseline · chance"})
        pins = pins.assign(step="", **{f: ["–" if pd.isna(v) else f"{v:.1%}" for v in pins[f]] for f in figs})
        st.table(pd.concat([table, pins], ignore_index=True).astype(str).set_index("run"))
        st.caption(f"Seed groups: mean and {BANDS[band_kind]} over each group's runs (▸ a group, ↳ its runs when "
                   "expanded above); pinned under them, the baselines, each the mean over the compared runs: the same "
                   "encoder at its initial weights (random init), the raw input (pixels / TF-IDF) and chance (the most "
                   "common val class).")
    else:
        st.table(mark_best(probes, list(REP_FIGURES.values()), plain=[c for c in probes if " · " in c] + ["chance"]).set_index("run"))
    if tuned and not (shown_groups and replicated):
        st.table(mark_best(frame[["run", "step", *tuned]], tuned[:1], plain=tuned[1:2]).set_index("run"))
    if not (shown_groups and replicated):
        st.caption("Trained encoder at its latest evaluated checkpoint, beside the same model at its initial weights "
                   "(random init), the raw input (pixels / TF-IDF) and chance (the most common val class); best run per "
                   "column starred (the trained encoder's figures only). Probe: logistic regression on standardised features; kNN: k=20, cosine. "
                   "Fine-tune: the encoder and a linear head (starting as a linear probe) trained together on the labelled "
                   "train rows for a few epochs, or the steps the evaluation budget left (the same recipe from the checkpoint and from the random init), val accuracy. –: not computed "
                   "(k-means needs more val rows than classes).")
    bars = probe_bars(frame)
    if shown_groups and replicated:
        bars = group_bars(bars, shown_groups, legend, band_kind)
    bar = alt.Chart().mark_bar().encode(
        x=alt.X("encoder:N", title=None, sort=["trained", "random init", "raw input"]),
        y=alt.Y("value:Q", title="val accuracy", scale=alt.Scale(domain=[0, 1])),
        color=alt.Color("encoder:N", legend=alt.Legend(orient="bottom")),
        tooltip=["run", "figure", "encoder", alt.Tooltip("value:Q", format=".1%")])
    layers = [bar]
    if "low" in bars:  # seed groups: the band as an error bar on each mean
        layers.append(alt.Chart().mark_rule(color="black").encode(
            x=alt.X("encoder:N", title=None, sort=["trained", "random init", "raw input"]), y="low:Q", y2="high:Q"))
    width = max(90, min(240, FACETS_WIDTH // max(1, bars["run"].nunique())))
    chart = alt.layer(*layers, data=bars).properties(width=width, height=140).facet(column=alt.Column("run:N", title=None), row=alt.Row("figure:N", title=None,
                                                                              sort=["linear probe", "kNN (k=20)", FINETUNE]))
    st.altair_chart(chart)
for r in picked:  # what a run's data could not give (an unlabelled set...), and why
    for line in skipped_lines(evals[r.run_id]) if evals[r.run_id] is not None else []:
        st.caption(f"{legend[r.run_id]}: {line}")
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
eff = efficiency_frame(picked, metrics if metrics is not None else frame.iloc[0:0], legend, target, evals, infos)
st.table(eff_display(eff).set_index("run"))
st.caption("Throughput and MFU: medians over the logged steps; MFU (model FLOPs utilisation, logged on a GPU of known "
           "peak): a step's counted FLOPs over its time, over the GPU's datasheet peak for the step's dtype. "
           "Peak memory: CUDA max allocated on a GPU, else the worker's peak private memory (RssAnon high-water). "
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
