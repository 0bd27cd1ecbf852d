"""The Presentation page's numbers: each run's task figure next to its best trivial baseline, and
its latest evaluation's linear-probe and kNN accuracy next to the same model at its initial
weights (random init) and chance. Read-only: everything comes from the run's record, its metrics
and its stored evaluations (:mod:`engine.store.evaluations`).

- :func:`key_numbers`: one run's figures as a plain dict (no Streamlit);
- :func:`show_key_metrics`: one run's figures as a row of ``st.metric`` tiles;
- :func:`key_table`: several runs' figures as a text table (one row per run);
- :func:`group_key_table`: seed groups' figures as mean and band, one row per group.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
import streamlit as st

from app.components.errors import guarded
from app.components.groups import band
from app.components.names import METRIC_NAMES, metric_label
from app.components.quality import headline_of, loss_title, quality_rows
from engine.api import latest_evaluation


def figure_title(metric: str, config: dict) -> str:
    """A metric's name for people: ``val loss (MSE (masked units))``, ``top-1``, ``log-mel MSE``."""
    if metric == "val_loss":
        return f"val loss ({loss_title(config)})"
    return metric_label(metric, config)


def fmt_value(metric: str, value: float | None, better: str = "min") -> str:
    """``0.0741``, ``41.2%`` (accuracies: higher-is-better fractions), ``18.31`` (PSNR), ``–``."""
    if value is None or pd.isna(value):
        return "–"
    if metric == "val_psnr":
        return f"{value:.2f}"
    known = METRIC_NAMES.get(metric)
    pct = known[1] if known else better == "max" and 0 <= value <= 1
    return f"{value:.1%}" if pct else f"{value:.4f}"


def key_numbers(rec: Any, points: dict, evaluation: Any | None) -> dict[str, Any]:
    """One run's key figures.

    Args:
        rec: the run's :class:`engine.store.RunRecord`.
        points: ``(run_id, key) -> (step, value)`` of the last logged points
            (:func:`app.components.runs.latest_points`).
        evaluation: the run's latest :class:`engine.store.evaluations.Evaluation`, or None.

    Returns:
        ``metric``, ``better`` ("min" | "max"), ``title``, ``step`` and ``value`` of the task's
        headline (``Task.headline``: val loss for images, top-1 for MLM...) at its last logged
        point; ``baseline`` (its name, e.g. "mean image") and ``baseline_value``: the best of the
        trivial predictors logged at step 0 (``baseline/<name>``), None when the run has none;
        ``eval_step``, ``probe``, ``knn``, ``probe_random``, ``knn_random``, ``chance``,
        ``finetune``, ``finetune_random``: accuracies as fractions from ``evaluation`` (None without
        one; the fine-tune's None when the evaluation has none).
    """
    metric, better = headline_of(rec.config)
    step, value = points.get((rec.run_id, metric), (None, None))
    df, _ = quality_rows(rec, step, value)
    base = pd.to_numeric(df[metric].iloc[1:], errors="coerce").dropna()
    best = (base.idxmin() if better == "min" else base.idxmax()) if len(base) else None
    rep = evaluation.representation if evaluation is not None else {}
    down = (getattr(evaluation, "downstream", None) or {}) if evaluation is not None else {}
    return {
        "metric": metric, "better": better, "title": figure_title(metric, rec.config), "step": step, "value": value,
        "baseline": df["predictor"][best] if best is not None else None,
        "baseline_value": float(base[best]) if best is not None else None,
        "eval_step": evaluation.step if evaluation is not None else None,
        "probe": rep.get("trained", {}).get("probe_acc"), "knn": rep.get("trained", {}).get("knn_acc"),
        "probe_random": rep.get("random_init", {}).get("probe_acc"),
        "knn_random": rep.get("random_init", {}).get("knn_acc"), "chance": rep.get("chance", {}).get("probe_acc"),
        "finetune": down.get("trained", {}).get("finetune_acc"),
        "finetune_random": down.get("random_init", {}).get("finetune_acc"),
    }  # fmt: skip


def latest_presentable(records: Sequence[Any]) -> Any | None:
    """The first of ``records`` (newest first) that is completed and has a stored evaluation
    (:func:`engine.store.evaluations.latest_evaluation`), or None: what Presentation opens without
    ``?run=``. Reads evaluations only until it finds one."""
    for r in records:
        if r.status == "completed" and guarded(latest_evaluation, r.run_id) is not None:
            return r
    return None


def show_key_metrics(n: dict[str, Any]) -> None:
    """:func:`key_numbers` as ``st.metric`` tiles: the headline with its step and its difference
    from the best baseline (green when better: lower for a loss, higher for an accuracy), the
    baseline itself, then, when the run has an evaluation, the probe and kNN accuracy with their
    margin over the same model at its initial weights."""
    delta = None  # none at step 0: the untrained model against the baselines says nothing yet
    if n["value"] is not None and n["baseline_value"] is not None and n["step"]:
        diff = n["value"] - n["baseline_value"]
        delta = f"{diff * 100:+.1f} points vs baseline" if _is_fraction(n) else f"{diff:+.4f} vs baseline"
    tiles = [(f"{n['title']} @ step {n['step']}" if n["step"] is not None else n["title"],
              fmt_value(n["metric"], n["value"], n["better"]), delta, "inverse" if n["better"] == "min" else "normal",
              "the task's main figure at its last evaluation, against the best trivial baseline")]
    if n["baseline"] is not None:
        tiles.append((f"Best trivial baseline: {n['baseline']}", fmt_value(n["metric"], n["baseline_value"], n["better"]),
                      None, "normal", "the best of the predictors that do not learn, measured at step 0 on the same "
                      "validation masks"))
    if n["eval_step"] is not None:
        for key, title in (("probe", "Linear probe accuracy"), ("knn", "kNN accuracy (k=20)")):
            margin = None if n[key] is None or n[f"{key}_random"] is None else (
                f"{(n[key] - n[f'{key}_random']) * 100:+.1f} points vs random init")
            tiles.append((f"{title} @ step {n['eval_step']}", fmt_value("acc", n[key], "max"), margin, "normal",
                          "frozen encoder features, against the same model at its initial weights; chance "
                          f"(the most common class) is {fmt_value('acc', n['chance'], 'max')}"))
        if n["finetune"] is not None:
            margin = None if n["finetune_random"] is None else (
                f"{(n['finetune'] - n['finetune_random']) * 100:+.1f} points vs random init")
            tiles.append((f"Fine-tune accuracy @ step {n['eval_step']}", fmt_value("acc", n["finetune"], "max"), margin,
                          "normal", "the encoder and a linear head (starting as a linear probe) trained on the labels, against the "
                          "same recipe from the model's initial weights"))
    for col, (label, value, d, colour, why) in zip(st.columns(len(tiles)), tiles):
        col.metric(label, value, d, delta_color=colour, help=why)
    if n["eval_step"] is None:
        st.caption("No evaluation of this run yet: its linear-probe and kNN accuracy show here once it has one.")


def _is_fraction(n: dict[str, Any]) -> bool:
    """True when the headline is an accuracy (a higher-is-better fraction; PSNR is not)."""
    return fmt_value(n["metric"], n["value"], n["better"]).endswith("%")


def key_table(rows: Sequence[tuple[str, dict[str, Any]]]) -> pd.DataFrame:
    """Several runs' :func:`key_numbers` as text, one row per ``(label, numbers)``: the headline
    (its title in the cell: runs of different tasks may share the table), its step, the best
    baseline, the probe and kNN accuracy with the random-init encoder's and chance, and the
    fine-tune accuracy with the same from random init."""
    out = []
    for label, n in rows:
        ev = n["eval_step"] is not None
        out.append({
            "run": label,
            "figure": n["title"],
            "value": fmt_value(n["metric"], n["value"], n["better"]) + (f" @ step {n['step']}" if n["step"] is not None else ""),
            "best trivial baseline": "–" if n["baseline"] is None else
            f"{fmt_value(n['metric'], n['baseline_value'], n['better'])} ({n['baseline']})",
            "linear probe": fmt_value("acc", n["probe"], "max") if ev else "no evaluation",
            "kNN (k=20)": fmt_value("acc", n["knn"], "max") if ev else "–",
            "random init (probe / kNN)": f"{fmt_value('acc', n['probe_random'], 'max')} / "
                                         f"{fmt_value('acc', n['knn_random'], 'max')}" if ev else "–",
            "chance": fmt_value("acc", n["chance"], "max") if ev else "–",
            "fine-tune (random init)": "–" if n.get("finetune") is None else
            f"{fmt_value('acc', n['finetune'], 'max')} ({fmt_value('acc', n['finetune_random'], 'max')})",
        })  # fmt: skip
    return pd.DataFrame(out)


def group_key_table(groups: Mapping[str, Sequence[str]], numbers: Mapping[str, dict[str, Any]], kind: str) -> pd.DataFrame:
    """Seed groups' key numbers (:func:`app.components.groups.seed_groups`, groups of two or more
    runs only): one row per group with the mean and band (``kind``: :data:`app.components.groups.BANDS`)
    over its runs of the headline (its title in the cell), the linear probe, kNN and fine-tune
    accuracy. ``numbers``: run id -> :func:`key_numbers`."""
    rows = []
    for name, ids in groups.items():
        if len(ids) < 2:
            continue
        first = numbers[ids[0]]
        row = {"group": name, "runs": len(ids), "figure": first["title"]}
        for col, key, metric, better in (("value", "value", first["metric"], first["better"]),
                                         ("linear probe", "probe", "acc", "max"), ("kNN (k=20)", "knn", "acc", "max"),
                                         ("fine-tune", "finetune", "acc", "max")):
            mean, lo, hi = band([numbers[r].get(key) for r in ids], kind)
            row[col] = "–" if np.isnan(mean) else (
                f"{fmt_value(metric, mean, better)} [{fmt_value(metric, lo, better)}–{fmt_value(metric, hi, better)}]"
                if kind == "minmax" else f"{fmt_value(metric, mean, better)} ± {fmt_value(metric, hi - mean, better)}")
        rows.append(row)
    return pd.DataFrame(rows)

