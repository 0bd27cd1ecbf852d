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

from app.components.access import allowed
from app.components.compare import BEST, FINETUNE, QUALITY_FIGURES, REP_FIGURES, finetune_steps
from app.components.errors import guarded, user_errors
from app.components.quality import predictor_name
from app.components.runs import format_metric, job_progress, seconds_text
from engine.api import EVAL_PHASES, cancel, evaluate, evaluation_job, latest_evaluation, load_maps, load_samples

#: Columns of :func:`downstream_table`: encoder key -> title.
ENCODER_TITLES = {"trained": "this run", "random_init": "random init", "raw_input": "raw input", "chance": "chance"}


#: What a figure still being computed shows in :func:`downstream_table`.
PENDING = "…"

#: What :func:`skipped_lines` calls each part of an evaluation its data could not give (``Evaluation.skipped``).
SKIPPED_TITLES = {"probe": "linear probe", "knn": "kNN", "clustering": "k-means", "finetune": "fine-tune",
                  "raw_input": "the raw input's figures"}


def skipped_lines(ev: Any) -> list[str]:
    """What the evaluation could not compute on the run's data and why, one sentence per reason
    (``Evaluation.skipped``): "Not computed: linear probe, kNN, k-means, fine-tune. 'notes' has no
    labels (...)."; ``[]`` when it computed everything."""
    skipped = getattr(ev, "skipped", None) or {}
    by_reason: dict[str, list[str]] = {}
    for what in sorted(skipped, key=lambda w: list(SKIPPED_TITLES).index(w) if w in SKIPPED_TITLES else len(SKIPPED_TITLES)):
        by_reason.setdefault(str(skipped[what]), []).append(SKIPPED_TITLES.get(what, what))
    return [f"Not computed: {', '.join(whats)}. {why[:1].upper()}{why[1:]}." for why, whats in by_reason.items()]


def downstream_table(ev: Any) -> pd.DataFrame:
    """Rows = figures (:data:`REP_FIGURES` titles, then ``fine-tune`` when the evaluation has it or
    may still get it), columns = encoders (:data:`ENCODER_TITLES`), values as percentages ("–" where
    an encoder has no such figure: chance has no NMI, raw input no fine-tune; :data:`PENDING` where
    an evaluation under way has not computed it yet)."""
    rows = []
    running = getattr(ev, "status", "complete") == "partial"
    figs = {k: (t, ev.representation) for k, t in REP_FIGURES.items()}
    if getattr(ev, "downstream", None) or running:
        figs["finetune_acc"] = (FINETUNE + shortened_text(ev), ev.downstream)
    for key, (title, source) in figs.items():
        row = {"figure": title}
        for enc, etitle in ENCODER_TITLES.items():
            v = (source.get(enc) or {}).get(key)
            never = (enc == "chance" and key not in ("probe_acc", "knn_acc")) or (enc == "raw_input" and key == "finetune_acc")
            row[etitle] = f"{v:.1%}" if v is not None and not pd.isna(v) else PENDING if running and not never else "–"
        rows.append(row)
    return pd.DataFrame(rows).set_index("figure")


def shortened_text(ev: Any) -> str:
    """`` (12 of 155 steps)`` when the evaluation budget cut the fine-tune short of its recipe, else ``""``."""
    done, recipe = finetune_steps(ev)
    return f" ({done} of {recipe} steps)" if getattr(ev, "downstream", None) and 0 < done < recipe else ""


def budget_text(ev: Any) -> str | None:
    """How the evaluation spent its budget, e.g. "Budget 0.5 × 92 s of training = 46 s; took 44 s;
    fine-tune 20 of the recipe's 150 steps per encoder"; None for an evaluation without one."""
    b = getattr(ev, "budget", None) or {}
    if not b:
        return None
    if "finetune" in (getattr(ev, "skipped", None) or {}):  # nothing the budget could shorten
        head = f"No fine-tune (see above); took {seconds_text(ev.seconds)}"
    elif b.get("share", 0) is None:
        head = f"No budget limit: the fine-tune's full recipe; took {seconds_text(ev.seconds)}"
    elif b.get("budget_s") is None:
        head = f"No budget (the run recorded no training time): the fine-tune's full recipe; took {seconds_text(ev.seconds)}"
    else:
        head = (f"Budget {b['share']:g} × {seconds_text(b['train_s'])} of training = {seconds_text(b['budget_s'])}; "
                f"took {seconds_text(ev.seconds)}")
    if b.get("recipe_steps"):
        head += f"; fine-tune {b['finetune_steps']} of the recipe's {b['recipe_steps']} steps per encoder"
    return head + "."


def deeper_evaluation(rec: Any, ev: Any, key: str) -> None:
    """A budget picker and an "Evaluate again" button (editors, ended runs, no job under way): the
    checkpoint ``ev.step`` evaluated again with a larger share of its training time."""
    run_eval = allowed("run.evaluate", evaluate)
    if run_eval is None or rec.is_active:
        return
    a, b = st.columns([3, 1], vertical_alignment="bottom")
    share = a.selectbox("Evaluation budget (share of the training time)", [1.0, 2.0, 4.0, None], key=f"{key}_budget",
                        format_func=lambda x: "full recipe (no limit)" if x is None else f"{x:g} × training time",
                        help="Probes, kNN and k-means always run; the fine-tune takes what is left of the budget, "
                             "up to its full recipe. The default budget at the end of a run is 0.5.")
    if b.button("Evaluate again", key=f"{key}_go"):
        with user_errors():
            step = run_eval(rec.run_id, ev.step, budget="full" if share is None else share)
            st.toast(f"Evaluating step {step} of {rec.run_id} again"
                     + (" with its full recipe" if share is None else f" with {share:g} × its training time"))
            st.rerun()


def evaluation_progress(rec: Any, key: str, label: str | None = None) -> bool:
    """The progress bar of the run's evaluation job while it is queued or running (with a Stop
    button for an ended run's job: the phases finished are kept), its text after ``label`` in bold
    when given. Returns True while one is."""
    job = guarded(evaluation_job, rec.run_id) or {}
    prog = job_progress(job)
    if prog is None:
        return False
    if label:
        prog = (prog[0], f"**{label}** · {prog[1]}")
    stop = allowed("run.cancel", cancel) if not rec.is_active else None  # an active run's Cancel covers it
    if stop is None:
        st.progress(prog[0], text=prog[1])
        return True
    bar, button = st.columns([5, 1], vertical_alignment="bottom")
    bar.progress(prog[0], text=prog[1])
    if button.button("Stop", key=f"{key}_stop_{rec.run_id}",
                     help="Stops the evaluation at its next progress report; the phases it finished are kept"):
        with user_errors():
            guarded(stop, rec.run_id)
            st.toast("Stopping the evaluation: what it finished is kept.")
    return True


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
    """The run's latest evaluation on Run detail: its job's progress while one runs, the downstream
    table (figures as they come), reconstruction quality, cost, budget; or what its last job said.
    Reads the store only."""
    running = evaluation_progress(rec, "ev")
    ev = guarded(latest_evaluation, rec.run_id)
    if ev is None:
        if not running:
            job = guarded(evaluation_job, rec.run_id) or {}
            state = job.get("status")
            st.caption(f"The last evaluation failed: {job.get('error')}" if state == "failed" else
                       f"The last evaluation was cancelled: {job.get('error')}" if state == "cancelled" else
                       "No evaluation yet: a completed run is evaluated at its end; Compare starts one for any saved "
                       "run.")
        return
    st.caption(f"Checkpoint of step {ev.step} · {ev.rows.get('train', '?')} train / {ev.rows.get('val', '?')} val rows "
               f"· {ev.seconds:.0f} s")
    skipped = getattr(ev, "skipped", None) or {}
    for line in skipped_lines(ev):  # what this data cannot give, and why: the rest below is complete
        st.info(line)
    status = getattr(ev, "status", "complete")
    if status == "partial" and not running:
        st.warning("This evaluation stopped before its end (its process is gone): the figures below are the phases "
                   "it finished.")
    elif status in ("cancelled", "failed"):
        done = ", ".join(t for p, t in EVAL_PHASES.items() if p in (getattr(ev, "phases", None) or {})) or "nothing"
        st.info(f"This evaluation was {status} before its end; kept: {done}. "
                + (ev.notes[-1] if ev.notes else ""))
    down = getattr(ev, "downstream", None) or {}
    ft = down.get("trained") or {}
    if {"probe", "knn", "clustering"} <= set(skipped):  # no figure for the table (said above): what was measured
        if ev.reconstruction:
            st.caption("Validation figures of this checkpoint: "
                       + " · ".join(format_metric(k, v) for k, v in ev.reconstruction.items()) + ".")
    else:
        st.table(downstream_table(ev))
        st.caption("Probe: logistic regression on standardised frozen features; kNN: k=20, cosine; k-means against the "
                   "labels. Random init: the same model at its initial weights; raw input: pixels, log-mel statistics or "
                   "TF-IDF." + (f" Fine-tune: a linear head started as a logistic-regression probe of a sample of the "
                                f"train rows (LP-FT), then trained with the encoder for "
                                f"{int(ft.get('finetune_steps', 0))} steps ({ft.get('finetune_epochs', 0):.1f} epochs) on "
                                f"the labelled train rows; the same recipe from the random init." if ft else "")
                   + (" Cut short by the evaluation budget: the first steps move the encoder away from the probe "
                      "before they help, so this is not the recipe's downstream result; Evaluate again with a larger "
                      "budget for it." if shortened_text(ev) else ""))
    quality = quality_rows(ev)
    if not quality.empty:
        st.table(quality)
        how = ("SSIM of the pasted reconstruction (visible pixels kept) against the original" if "ssim" in ev.quality["trained"]
               else "Spectral figures over the masked cells of the clips, never the padding")
        st.caption(f"Reconstruction quality on the same validation inputs and masks, beside each trivial baseline; "
                   f"★ best of each column. {how}.")
    cost, spent = cost_text(ev), budget_text(ev)
    said = set(skipped.values())  # shown above: not again among the notes
    if spent:  # the budget line says how far the fine-tune got: its note is not repeated
        said.add("fine-tune shortened by the budget")
    for line in [x for x in (cost, spent) if x] + [n for n in getattr(ev, "notes", None) or []
                                                   if not any(why in n for why in said)]:
        st.caption(line)
    maps = guarded(load_maps, rec.run_id, ev.step) or {}
    sample = guarded(load_samples, rec.run_id)  # its meta names the classes (kept with the run)
    chart = map_chart(maps, (sample.meta.get("class_names") if sample is not None else None))
    if chart is not None:
        st.altair_chart(chart)
        st.caption(f"This run's frozen features of the {len(maps['labels'])} val rows, in 2-D, coloured by label "
                   "(PCA always; t-SNE for small sets).")
    if not running:
        deeper_evaluation(rec, ev, "ev")
