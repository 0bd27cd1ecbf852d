"""The Compare page's tables and figures, built from the engine's read API (no Streamlit state here
except in the ``show_*`` functions).

- :func:`config_diff`: the config fields that differ between runs (flattened dotted keys).
- :func:`downstream_frame`: each run's latest evaluation (:mod:`engine.store.evaluations`): probe
  and kNN accuracy, k-means NMI/ARI of the trained encoder, beside the same figures of its random
  init, its raw input and chance, and the fine-tune accuracy beside the same fine-tune from the
  random init; the best run per column is marked.
- :func:`quality_frame`: the evaluation's reconstruction figures (images: SSIM; audio: spectral
  error) of each run beside the best of its trivial baselines on the same inputs and masks.
- :func:`efficiency_frame`: throughput (median of the logged samples/s), MFU (median of the logged
  ``mfu``, with its peak), peak memory (CUDA's or private: :mod:`app.components.speed`), wall time,
  time to reach a chosen training loss, parameters, and the FLOPs of a training step (measured by
  the evaluation) and of the steps trained.
- :func:`fork_frame`: each fork beside its parent (a compared run it started from, or the 0-step
  view run of the imported model it started from): the parent's headline figure at the checkpoint
  the fork took, the fork's at its step 0 and at its latest evaluation, and the change, better or worse.
- :func:`report_html`: the comparison as one self-contained HTML file (tables and the
  reconstruction grid as inline PNG; no script, no network).
- :func:`show_reconstructions`: the same validation inputs reconstructed by each run, drawn by the
  compare view of their sample kind (``app.modalities.SampleView.compare``); Compare and Presentation.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
import streamlit as st

from app.components.errors import guarded
from app.components.media import png_url, show_image
from app.components.names import metric_label
from app.components.quality import predictor_name
from app.components.runs import masking_label
from app.components.speed import run_speed
from app.components.urlstate import flatten
from app.modalities import sample_view
from engine.api import ConfigError, load_samples, masking_uses_ratio

#: Representation figures shown for each run, with their column titles.
REP_FIGURES = {"probe_acc": "linear probe", "knn_acc": "kNN (k=20)", "kmeans_nmi": "k-means NMI",
               "kmeans_ari": "k-means ARI"}
#: Column suffixes of the baselines beside every figure.
BASELINES = {"random_init": "random init", "raw_input": "raw input"}
#: Column title of the downstream fine-tune's val accuracy (its baseline: the same from random init).
FINETUNE = "fine-tune"
#: The fine-tune's steps per encoder, "12 of 155" when the evaluation budget cut its recipe short.
FINETUNE_STEPS = "fine-tune steps"
#: Reconstruction figures of an evaluation (``Evaluation.quality``): title and "max"/"min" (better).
QUALITY_FIGURES = {"ssim": ("SSIM, masked patches", "max"), "ssim_full": ("SSIM, whole image", "max"),
                   "spec_l1": ("log-mel L1, masked", "min"), "lsd_db": ("log-spectral distance (dB), masked", "min"),
                   "spectral_convergence": ("spectral convergence, masked", "min")}
BEST = " ★"
#: Fields every run has its own value of: never a "difference" worth a row.
_IGNORED = ("name", "train.num_threads")


def fork_parent(rec: Any, records: Sequence[Any]) -> Any | None:
    """The compared run a fork started from: the run ``model.init_from`` names, or for a run from an
    imported model, the 0-step run that shows that model on the same dataset; None if not compared."""
    src = ((rec.config or {}).get("model") or {}).get("init_from")
    if not src:
        return None
    dataset = (rec.config.get("data") or {}).get("dataset")
    for r in records:
        if r.run_id == src:
            return r
    for r in records:
        model, train = (r.config.get("model") or {}), (r.config.get("train") or {})
        if (r.run_id != rec.run_id and model.get("init_from") == src and train.get("steps") == 0
                and (r.config.get("data") or {}).get("dataset") == dataset):
            return r
    return None


def fork_frame(records: Sequence[Any], metrics: pd.DataFrame, labels: Mapping[str, str],
               headline: Callable[[dict], tuple[str, str]], took: Mapping[str, int | None]) -> pd.DataFrame:
    """One row per compared fork whose parent is compared too (:func:`fork_parent`).

    Args:
        metrics: ``read_metrics`` rows (``run_id``, ``step``, ``key``, ``value``) of the runs'
            headline figures. headline: config -> ``(metric, "min" | "max")``. took: fork run id ->
            the parent's checkpoint step it started from (``task.json``'s ``init``; None: unknown).

    Returns:
        Columns ``fork``, ``parent``, ``figure``, ``parent (reference)`` (the parent's figure at the
        checkpoint the fork took, else its latest), ``fork at step 0``, ``fork latest`` (with its
        step) and ``change`` (latest minus reference, marked better or worse by the figure's direction).
    """
    rows = []
    for rec in records:
        parent = fork_parent(rec, records)
        if parent is None:
            continue
        key, better = headline(rec.config)

        def values(run_id: str):
            m = metrics[(metrics["run_id"] == run_id) & (metrics["key"] == key)].sort_values("step")
            return list(zip(m["step"].astype(int), m["value"].astype(float)))

        own, theirs = values(rec.run_id), values(parent.run_id)
        if not own or not theirs:
            continue
        step = took.get(rec.run_id)
        ref = theirs[-1][1] if step is None else dict(theirs).get(step, theirs[-1][1])
        last_step, last = own[-1]
        delta = last - ref
        good = (delta < 0) if better == "min" else (delta > 0)
        rows.append({"fork": labels.get(rec.run_id, rec.run_id), "parent": labels.get(parent.run_id, parent.run_id),
                     "figure": key, "parent (reference)": f"{ref:.4f}", "fork at step 0": f"{own[0][1]:.4f}",
                     "fork latest": f"{last:.4f} @ {last_step}",
                     "change": f"{delta:+.4f} " + ("better" if good else "worse" if delta else "same")})
    return pd.DataFrame(rows)


def config_diff(configs: Mapping[str, dict], labels: Mapping[str, str] | None = None) -> pd.DataFrame:
    """Rows = dotted config fields whose values differ between the runs, columns = runs (labels).
    A field missing from a run's config (an older masklab) shows as "(unset)", and ``masking.ratio``
    as "(not used)" in a run whose strategy ignores it (``uses_ratio=False``: its parameters set the
    budget). Empty frame when every field agrees or there are fewer than 2 runs."""
    flat = {r: _unused_ratio(flatten(c or {})) for r, c in configs.items()}
    keys = sorted({k for f in flat.values() for k in f} - set(_IGNORED))
    rows = []
    for k in keys:
        vals = [flat[r].get(k, "(unset)") for r in flat]
        if len({repr(v) for v in vals}) > 1:
            rows.append({"field": k, **{(labels or {}).get(r, r): _plain(v) for r, v in zip(flat, vals)}})
    return pd.DataFrame(rows).set_index("field") if rows and len(flat) > 1 else pd.DataFrame()


def _unused_ratio(flat: dict[str, Any]) -> dict[str, Any]:
    name = str(flat.get("masking.strategy", "random"))
    try:
        uses = masking_uses_ratio(name)  # a built-in strategy: no torch
    except KeyError:
        from engine.api import get_masking  # noqa: PLC0415 (a plug-in's strategy: its registry loads torch)

        try:
            uses = get_masking(name).uses_ratio
        except ConfigError:  # a strategy whose plug-in is not loaded here: the ratio as stored
            uses = True
    if not uses:
        flat["masking.ratio"] = "(not used)"
    return flat


def _plain(v: Any) -> str:
    return v if isinstance(v, str) else repr(v)


def finetune_steps(ev: Any) -> tuple[int, int]:
    """``(steps each encoder was fine-tuned, the recipe's steps)`` of an evaluation (its budget record);
    ``(0, 0)`` when it has none."""
    b = getattr(ev, "budget", None) or {}
    return int(b.get("finetune_steps") or 0), int(b.get("recipe_steps") or 0)


def downstream_frame(evaluations: Mapping[str, Any], labels: Mapping[str, str]) -> pd.DataFrame:
    """One row per run with an evaluation: its step, then for each figure of :data:`REP_FIGURES`
    the trained encoder's value and its random-init and raw-input baselines, then chance, then the
    fine-tune's (:data:`FINETUNE_STEPS`, text). Values are fractions; runs without an evaluation are left out."""
    rows = []
    for run_id, ev in evaluations.items():
        if ev is None:
            continue
        rep = ev.representation
        row: dict[str, Any] = {"run": labels.get(run_id, run_id), "step": ev.step}
        for k, title in REP_FIGURES.items():
            row[title] = rep.get("trained", {}).get(k, np.nan)
            for b, btitle in BASELINES.items():
                row[f"{title} · {btitle}"] = rep.get(b, {}).get(k, np.nan)
        row["chance"] = rep.get("chance", {}).get("probe_acc", np.nan)
        down = getattr(ev, "downstream", None) or {}
        row[FINETUNE] = down.get("trained", {}).get("finetune_acc", np.nan)
        row[f"{FINETUNE} · random init"] = down.get("random_init", {}).get("finetune_acc", np.nan)
        done, recipe = finetune_steps(ev)
        row[FINETUNE_STEPS] = (f"{done} of {recipe}" if 0 < done < recipe else str(done) if done else "–") if down else "–"
        row["rows (train/val)"] = f"{ev.rows.get('train', '?')}/{ev.rows.get('val', '?')}"
        rows.append(row)
    df = pd.DataFrame(rows)
    if not df.empty and df[FINETUNE].isna().all():  # no run fine-tuned (older evaluations): no empty columns
        df = df.drop(columns=[FINETUNE, f"{FINETUNE} · random init", FINETUNE_STEPS])
    return df


def quality_frame(evaluations: Mapping[str, Any], labels: Mapping[str, str]) -> tuple[pd.DataFrame, list[str]]:
    """One row per run whose latest evaluation has reconstruction figures (``Evaluation.quality``):
    for each figure of :data:`QUALITY_FIGURES` the run has, the trained model's value, then
    ``"<figure> · best baseline"``, the best of the run's baselines on that figure, as text
    ``"0.4539 (mean image)"``. Returns the frame (numbers in the figure columns) and the figure
    titles present, for :func:`mark_best`. Runs of different modalities have different figures:
    :func:`quality_groups` splits the frame by them."""
    rows, present = [], []
    for run_id, ev in evaluations.items():
        q = (getattr(ev, "quality", None) or {}) if ev is not None else {}
        if "trained" not in q:
            continue
        row: dict[str, Any] = {"run": labels.get(run_id, run_id), "step": ev.step}
        for key, (title, better) in QUALITY_FIGURES.items():
            if key not in q["trained"]:
                continue
            present += [title] if title not in present else []
            row[title] = q["trained"][key]
            base = {n: f[key] for n, f in q.items() if n != "trained" and key in f and not pd.isna(f[key])}
            if base:
                name = (max if better == "max" else min)(base, key=base.get)
                row[f"{title} · best baseline"] = f"{base[name]:.4f} ({predictor_name(name)})"
        rows.append(row)
    return pd.DataFrame(rows), present


def mark_best(df: pd.DataFrame, columns: Sequence[str], higher: bool = True, fmt: str = "{:.1%}",
              plain: Sequence[str] = ()) -> pd.DataFrame:
    """``df`` with ``columns`` formatted by ``fmt`` and the best value of each (highest when
    ``higher``) marked with a star; ties all marked. ``plain`` columns are formatted without stars
    (baselines: not a run's result). A missing value reads "–". Other columns are kept as they are."""
    out = df.copy()
    for c in plain:
        if c in out:
            out[c] = ["–" if pd.isna(v) else fmt.format(v) for v in df[c]]
    for c in columns:
        if c not in out:
            continue
        if out[c].isna().all():  # not computed for any run: the same dash as a missing baseline
            out[c] = ["–"] * len(out)
            continue
        best = out[c].max() if higher else out[c].min()
        many = int(df[c].notna().sum()) > 1  # a lone value is not "the best" of anything
        out[c] = [("–" if pd.isna(v) else fmt.format(v)) + (BEST if v == best and many else "") for v in df[c]]
    return out


def time_to_loss(df: pd.DataFrame, target: float, smoothing_points: int = 20) -> dict[str, tuple[int, float] | None]:
    """Per run, ``(step, seconds since its first logged point)`` when its training loss, averaged
    over a moving window of ``smoothing_points`` logged points, first reaches ``target`` (None:
    never). ``df``: the long metrics frame of the ``loss`` key (``run_id, step, value, wall_time``)."""
    out: dict[str, tuple[int, float] | None] = {}
    for run_id, g in df.groupby("run_id"):
        g = g.sort_values("step")
        smooth = g["value"].rolling(smoothing_points, min_periods=1).mean()
        hit = np.flatnonzero(smooth.to_numpy() <= target)
        out[run_id] = None if not len(hit) else (int(g["step"].iloc[hit[0]]),
                                                 float(g["wall_time"].iloc[hit[0]] - g["wall_time"].iloc[0]))
    return out


def quality_groups(frame: pd.DataFrame, titles: Sequence[str]) -> list[tuple[pd.DataFrame, list[str]]]:
    """:func:`quality_frame`'s rows grouped by the figures they have (image runs: SSIM; audio runs:
    spectral error), each group with only its own columns: ``[(frame, titles), ...]``, groups in
    the order of their first run."""
    if frame.empty:
        return []
    key = frame[list(titles)].notna().apply(lambda r: tuple(r), axis=1)
    out = []
    for k in dict.fromkeys(key):
        g = frame[key == k]
        own = [t for t, has in zip(titles, k) if has]
        cols = ["run", "step"] + [c for c in g.columns if c not in ("run", "step") and g[c].notna().any()]
        out.append((g[cols].reset_index(drop=True), own))
    return out


#: Training cost's MFU columns: the median of the logged ``mfu`` and the peak it is measured against.
MFU, MFU_PEAK = metric_label("mfu"), f"{metric_label('mfu')} peak"


def efficiency_frame(records: Sequence[Any], metrics: pd.DataFrame, labels: Mapping[str, str],
                     target_loss: float | None, evaluations: Mapping[str, Any] | None = None,
                     infos: Mapping[str, dict] | None = None) -> pd.DataFrame:
    """One row per run: median throughput (samples/s over the logged steps), median MFU (a
    fraction) and the peak it is measured against (or why there is none: ``CPU run``), peak memory
    (MiB) and what it measures (``memory``: CUDA max allocated or private memory), wall time (s),
    step and seconds to reach ``target_loss`` (moving mean of the training loss), parameters
    (millions), the FLOPs of one training step (GFLOPs, forward and backward, from the run's latest
    evaluation: ``Evaluation.cost``) and of the steps trained (TFLOPs, that times the steps), device.
    ``metrics``: the long frame of ``throughput``, ``mfu`` and ``loss``; ``evaluations``: run id ->
    its latest evaluation (or None); ``infos``: run id -> its ``task.json`` (read where missing).
    (:mod:`app.components.speed`)"""
    ttl = time_to_loss(metrics[metrics["key"] == "loss"], target_loss) if target_loss is not None and not metrics.empty else {}
    rows = []
    for r in records:
        speed = run_speed(r, metrics, (infos or {}).get(r.run_id))
        peak = speed.peak_bytes
        hit = ttl.get(r.run_id)
        ev = (evaluations or {}).get(r.run_id)
        flops = ((getattr(ev, "cost", None) or {}) if ev is not None else {}).get("flops_per_step")
        rows.append({
            "run": labels.get(r.run_id, r.run_id),
            "throughput (samples/s)": speed.samples_s if speed.samples_s is not None else np.nan,
            MFU: speed.mfu if speed.mfu is not None else np.nan,
            MFU_PEAK: speed.mfu_note,
            "peak memory (MiB)": peak / 2**20 if peak else np.nan,
            "memory": speed.memory_kind,
            "wall time (s)": r.duration_s if r.duration_s is not None else np.nan,
            "steps": r.step,
            "step to loss": hit[0] if hit else np.nan,
            "seconds to loss": hit[1] if hit else np.nan,
            "parameters (M)": r.extra["n_params"] / 1e6 if r.extra.get("n_params") else np.nan,
            "GFLOPs per step": flops / 1e9 if flops else np.nan,
            "training TFLOPs": flops * r.step / 1e12 if flops and r.step else np.nan,
            "device": r.extra.get("device", "–"),
        })  # fmt: skip
    return pd.DataFrame(rows)


#: How :func:`eff_display` writes each numeric column of :func:`efficiency_frame`.
EFF_FORMATS = {"throughput (samples/s)": "{:.0f}", MFU: "{:.1%}", "peak memory (MiB)": "{:.0f}", "wall time (s)": "{:.1f}",
               "steps": "{:d}", "step to loss": "{:.0f}", "seconds to loss": "{:.1f}", "parameters (M)": "{:.2f}",
               "GFLOPs per step": "{:.3g}", "training TFLOPs": "{:.3g}"}


def eff_display(eff: pd.DataFrame) -> pd.DataFrame:
    """:func:`efficiency_frame` as text for a table: numbers by :data:`EFF_FORMATS`, the fastest
    throughput, highest MFU (of two or more), smallest memory (of one kind) and shortest times and
    fewest FLOPs starred, "-" where unknown; MFU without a value says why (``—, CPU run``), its peak
    column only where there is one, and each peak memory what it measures (``812 (CUDA)``, ``95 (private)``)."""
    out = eff.copy()
    lower = ("peak memory (MiB)", "wall time (s)", "step to loss", "seconds to loss", "GFLOPs per step",
             "training TFLOPs")
    kinds = [f" ({'CUDA' if str(k).startswith('CUDA') else 'private'})" for k in eff["memory"]] if "memory" in eff else None
    for c, fmt in EFF_FORMATS.items():
        if c not in eff:
            continue
        vals = eff[c]
        ranked = vals.notna().sum() > 1 if c == MFU else len(eff) > 1  # MFU: only GPU runs have one
        if c == "peak memory (MiB)" and kinds is not None and len(set(kinds)) > 1:
            ranked = False  # CUDA's allocations and a process's private memory are not one measure
        best = None if vals.isna().all() or c in ("steps", "parameters (M)") or not ranked else (
            vals.min() if c in lower else vals.max())
        suffix = kinds if c == "peak memory (MiB)" and kinds is not None else [""] * len(vals)
        out[c] = [("–" if pd.isna(v) else fmt.format(int(v) if fmt == "{:d}" else v) + k)
                  + (BEST if best is not None and v == best else "") for v, k in zip(vals, suffix)]
    if MFU in eff and MFU_PEAK in eff:
        measured = eff[MFU].notna()
        out[MFU] = [m if ok else f"—, {note}" for m, ok, note in zip(out[MFU], measured, eff[MFU_PEAK])]
        out[MFU_PEAK] = [note if ok else "–" for ok, note in zip(measured, eff[MFU_PEAK])]
    return out.drop(columns="memory", errors="ignore")


def probe_bars(frame: pd.DataFrame) -> pd.DataFrame:
    """The bar chart's long frame: ``run, figure (linear probe / kNN / fine-tune), encoder (trained,
    random init, raw input), value``, from :func:`downstream_frame`'s numeric frame (the fine-tune
    when the frame has it; it has no raw-input baseline)."""
    rows = []
    figures = ["linear probe", "kNN (k=20)"] + ([FINETUNE] if FINETUNE in frame else [])
    for _, r in frame.iterrows():
        for fig in figures:
            rows.append({"run": r["run"], "figure": fig, "encoder": "trained", "value": r[fig]})
            for b in BASELINES.values():
                if f"{fig} · {b}" in r:
                    rows.append({"run": r["run"], "figure": fig, "encoder": b, "value": r[f"{fig} · {b}"]})
    return pd.DataFrame(rows)


def shared_inputs(samples: dict, key: str, n: int) -> tuple[dict, int, bool]:
    """For a reconstruction grid over runs: the first run's sample, how many rows every run has
    (at most ``n``), and whether all runs saw the same inputs there (``samples[run][key]``, the
    validation images, spectrograms or token strings; same shape and values). Where they differ,
    each run's columns show its own inputs, an "original" column per run."""
    first = next(iter(samples.values()))
    k = min(n, *(len(s[key]) for s in samples.values()))

    def equal(a: np.ndarray, b: np.ndarray) -> bool:
        if a.shape != b.shape:
            return False
        numeric = np.issubdtype(a.dtype, np.number) and np.issubdtype(b.dtype, np.number)
        return bool(np.allclose(a, b)) if numeric else bool(np.array_equal(a, b))  # tokens: strings

    same = all(equal(s[key][:k], first[key][:k]) for s in samples.values())
    return first, k, same


def stack_column(images: np.ndarray, gap: int = 2) -> np.ndarray:
    """``(N, H, W, 3)`` uint8 -> one ``(N*H + (N-1)*gap, W, 3)`` image, white gaps between rows."""
    n, h, w, c = images.shape
    out = np.full((n * h + (n - 1) * gap, w, c), 255, np.uint8)
    for i in range(n):
        out[i * (h + gap): i * (h + gap) + h] = images[i]
    return out


def draw_columns(drawn: Sequence[tuple[str, np.ndarray]], per_row: int, fewest: int) -> None:
    """Draw ``(caption, column image)`` pairs side by side, captioned, ``per_row`` at most per row.
    A row has ``max(fewest, len(drawn))`` slots, so two runs' five columns fill the page width while
    one run's three are not stretched to a third of it each."""
    slots = min(per_row, max(fewest, len(drawn)))
    for start in range(0, len(drawn), slots):
        for col, (caption, img) in zip(st.columns(slots, gap="small"), drawn[start:start + slots]):
            show_image(col, img, caption=caption)


def report_html(title: str, tables: Sequence[tuple[str, pd.DataFrame]],
                images: Sequence[tuple[str, np.ndarray]] = (), notes: Sequence[str] = ()) -> str:
    """A self-contained HTML page: a title, ``notes`` (paragraphs), each ``(heading, table)`` and
    each ``(caption, uint8 image)`` inline as a PNG data URL. No script and no external resource."""
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>",
             "<style>body{font-family:sans-serif;margin:2em;max-width:1400px}table{border-collapse:collapse;"
             "font-size:13px}td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}th{background:#f3f3f3}"
             "img{image-rendering:pixelated;margin:4px}figure{display:inline-block;margin:4px;text-align:center}"
             "</style></head><body>", f"<h1>{html.escape(title)}</h1>"]
    parts += [f"<p>{html.escape(n)}</p>" for n in notes]
    for heading, df in tables:
        parts.append(f"<h2>{html.escape(heading)}</h2>")
        parts.append(df.to_html(na_rep="-", border=0, escape=True) if not df.empty else "<p>none</p>")
    if images:
        parts.append("<h2>Reconstructions</h2><div>")
        for caption, img in images:
            h = img.shape[0]
            scale = max(1, 320 // max(h, 1)) if h < 320 else 1
            parts.append(f"<figure><img src='{png_url(img)}' width='{img.shape[1] * scale}'>"
                         f"<figcaption>{html.escape(caption)}</figcaption></figure>")
        parts.append("</div>")
    parts.append("</body></html>")
    return "".join(parts)


def show_reconstructions(records: Sequence[Any], labels: Mapping[str, str]) -> list[tuple[str, np.ndarray]]:
    """Draw the runs' latest samples side by side, one compare view per sample kind
    (``app.modalities.SampleView.compare``: image grids, spectrograms, text tables), each under a
    caption naming the mask seed and each run's masking. A run without samples is left out; a
    kind without a view says so. ``records``: the runs (:class:`engine.store.RunRecord`),
    ``labels``: run id -> its label in captions. Returns the ``(caption, uint8 image)`` columns
    drawn (for the HTML report; text views draw none)."""
    by_kind: dict[str, dict] = {}
    for r in records:
        s = guarded(load_samples, r.run_id)
        if s is not None:
            by_kind.setdefault(s.kind, {})[labels[r.run_id]] = s
    if not by_kind:
        st.caption("None of these runs has saved samples yet.")
    drawn: list[tuple[str, np.ndarray]] = []
    masking = {labels[r.run_id]: masking_label(r.config) for r in records}
    for kind, samples in by_kind.items():
        view = sample_view(kind)
        if view is None or view.compare is None:
            st.caption(f"No compare view for {kind!r} samples.")
            continue
        seeds = {(r.config.get("train") or {}).get("seed") for r in records}
        st.caption(f"Latest saved samples of each run · mask seed {'same for all' if len(seeds) == 1 else 'differs'} "
                   f"(train.seed {', '.join(map(str, sorted(s for s in seeds if s is not None)))}) · "
                   + " · ".join(f"{lab}: {masking[lab]}" for lab in samples))
        drawn += view.compare(samples)
    return drawn
