"""A run's validation figures next to its trivial baselines (same masks, same units).

Every task logs its baselines once at step 0 (engine.tasks.Task.baselines) and names its headline
metric (``Task.headline``); a task may declare more figures (``figures``: ``[(metric, "min" |
"max")]``, e.g. the image task's pixel MSE and PSNR) and notes on how its baselines were measured
(``quality_notes(config)``). Key convention: ``baseline/<name>`` is predictor ``name`` on the headline,
``baseline/<name>/<figure>`` the same predictor on the figure ``val_<figure>``. This component puts
them in one small table (predictors by figures, the best of each starred) so a viewer can tell
learning from averaging.
"""

from __future__ import annotations

import pandas as pd
import streamlit as st

from app.components.names import LOSS_NAMES, metric_label, name_table
from engine.api import read_task_info, task_fact

#: Axis titles of the loss curves by objective.
LOSS_TITLES = {"mse": "MSE (masked units)", "l1": "L1 (masked units)", "cross_entropy": "cross-entropy (nats/token)",
               "contrastive": "InfoNCE (nats)"}


def _terms(config: dict | None) -> list[tuple[float, str]]:
    """``[(weight, objective)]`` of a weighted-sum objective, sorted by objective; [] for one loss."""
    terms = ((config or {}).get("objective") or {}).get("terms") or []
    return sorted((float(t.get("weight", 1.0)), str(t.get("loss", "?"))) for t in terms)


def loss_kind(config: dict | None) -> str:
    """What a run's loss measures, as a key: its objective (``cross_entropy``, ``contrastive``...);
    a regression loss (``mse``, ``l1``) also by what it regresses (``mse image``, ``mse audio``,
    ``mse image norm`` with ``norm_pix_loss``: pixels, standardised log-mel cells and per-patch
    normalised pixels are not one unit); a weighted sum by its terms (``1 mse + 0.5 cross_entropy``).
    Curves of one kind share a y axis; other kinds get a panel each (an image MSE near 0.05 and a
    text cross-entropy near 5 on one linear axis flatten each other)."""
    terms = _terms(config)
    if terms:
        return " + ".join(f"{w:g} {name}" for w, name in terms)
    obj = (config or {}).get("objective") or {}
    loss = str(obj.get("loss") or "loss")
    if loss in ("mse", "l1"):
        return " ".join([loss, _modality(config)] + ["norm"] * bool(obj.get("norm_pix_loss")))
    return loss


def _modality(config: dict | None) -> str:
    """The modality of the run's task (``image``, ``audio``...), "" when the task is unknown."""
    try:
        return str(task_fact((config or {}).get("task"), "modality"))  # a built-in task: no torch
    except KeyError:
        pass
    from engine.api import ConfigError, get_task  # noqa: PLC0415 (a plug-in's task: its registry loads torch)

    try:
        return str(getattr(get_task((config or {}).get("task")), "modality", ""))
    except ConfigError:
        return ""


def loss_title(config: dict) -> str:
    """Y-axis title of a run's loss curve from its resolved config: :data:`LOSS_TITLES` by objective;
    a weighted sum names its terms (``weighted loss: 1 x MSE + 0.5 x cross-entropy``)."""
    terms = _terms(config)
    if terms:
        return "weighted loss: " + " + ".join(f"{w:g} x {LOSS_NAMES.get(n, n)}" for w, n in terms)
    loss = ((config or {}).get("objective") or {}).get("loss", "")
    return LOSS_TITLES.get(loss, loss or "loss")


def loss_groups(run_ids: list[str], configs: dict[str, dict]) -> list[tuple[str, list[str]]]:
    """``run_ids`` grouped by :func:`loss_kind`, as ``[(axis title, ids)]`` in the order of each
    kind's first run: one panel per group, so that an axis never mixes units. Two kinds with one
    title (an image and an audio MSE) say which modality each is (``MSE (masked units) · audio``)."""
    groups: dict[str, tuple[str, list[str]]] = {}
    for r in run_ids:
        cfg = configs.get(r) or {}
        groups.setdefault(loss_kind(cfg), (loss_title(cfg), []))[1].append(r)
    titles = [t for t, _ in groups.values()]
    return [(t + (f" · {' · '.join(kind.split()[1:]).replace('norm', 'normalised per patch')}" if titles.count(t) > 1 else ""), ids)
            for kind, (t, ids) in groups.items()]  # fmt: skip


def headline_of(config: dict) -> tuple[str, str]:
    """``(metric, "min" | "max")`` of the run's task (``val_loss``/min when the task is unknown)."""
    try:
        return tuple(task_fact((config or {}).get("task"), "headline"))  # a built-in task: no torch
    except KeyError:
        pass
    from engine.api import ConfigError, get_task  # noqa: PLC0415 (a plug-in's task: its registry loads torch)

    try:
        return get_task((config or {}).get("task")).headline
    except ConfigError:
        return ("val_loss", "min")


def figure_title(metric: str, config: dict | None, default: str | None = None) -> str:
    """The column title of ``metric`` in a run's figure table: its name in
    :data:`app.components.names.METRIC_NAMES` (an audio-text ``paired_audio`` run: the spectrogram's
    names), else ``default`` (the key in words when None)."""
    known = name_table(config).get(metric)
    return known[0] if known else metric_label(metric, config) if default is None else default


def figures_of(config: dict) -> list[tuple[str, str]]:
    """The figures a run's table shows, ``[(metric, "min" | "max")]``: the task's headline, then the
    extra figures it declares as ``figures`` (e.g. the image task's pixel MSE and PSNR)."""
    try:
        extra = [tuple(f) for f in task_fact((config or {}).get("task"), "figures") or ()]  # a built-in task: no torch
    except KeyError:
        from engine.api import ConfigError, get_task  # noqa: PLC0415 (a plug-in's task: its registry loads torch)

        try:
            extra = list(getattr(get_task((config or {}).get("task")), "figures", ()))
        except ConfigError:
            extra = []
    return [headline_of(config)] + [f for f in extra if f[0] != headline_of(config)[0]]


def baseline_key(metric: str, headline: str, name: str) -> str:
    """Where predictor ``name``'s value of ``metric`` is logged: ``baseline/<name>`` for the
    headline, ``baseline/<name>/<figure>`` for a figure ``val_<figure>`` (``baseline/knn/mse``)."""
    return f"baseline/{name}" if metric == headline else f"baseline/{name}/{metric.removeprefix('val_')}"


def quality_rows(rec, step: int | None = None, value: float | None = None) -> tuple[pd.DataFrame, list[tuple[str, str]]]:
    """The run and every baseline (rows) by figure (columns), numbers or None where not logged.

    ``step``, ``value``: the headline's last logged point (the last evaluation), when known; else
    the run's latest values at the run's step.

    Baseline names come from the ``baseline/<name>`` keys (a name may itself contain ``_``, never
    ``/``); the first column is the headline. Returns the frame (column ``predictor``, then one per
    figure, titled by the metric key) and the figures.
    """
    figures = figures_of(rec.config)
    headline = figures[0][0]
    latest = rec.latest or {}
    names = sorted({k.split("/")[1] for k in latest if k.startswith("baseline/")})
    run = {m: latest.get(m) for m, _ in figures}
    if value is not None:
        run[headline] = value
    rows = [{"predictor": f"this run (step {rec.step if step is None else step})", **run}]
    rows += [{"predictor": predictor_name(n), **{m: latest.get(baseline_key(m, headline, n)) for m, _ in figures}}
             for n in names]
    return pd.DataFrame(rows), figures


#: The trivial predictors' names in words (``baseline/<name>`` in the logs; a text task's name
#: carries its figure, ``unigram_top1``, and an audio task's ``_mse``, which :func:`predictor_name` drops).
PREDICTOR_NAMES = {
    "mean_image": "training mean image", "visible_mean": "visible-pixel mean", "biharmonic": "biharmonic inpainting",
    "knn": "kNN average (k=10)", "mean_spec": "training mean spectrogram", "interp_spec": "interpolation in time",
    "unigram": "most frequent token", "position": "most frequent per position", "bigram": "bigram (both neighbours)",
    "bigram_tf": "bigram, teacher-forced", "chance": "chance", "cca": "CCA",
}


def predictor_name(name: str) -> str:
    """A baseline's name in words: :data:`PREDICTOR_NAMES` (after its figure suffix), else spaced."""
    for suffix in ("_top1", "_acc", "_mse"):
        if name.endswith(suffix) and name.removesuffix(suffix) in PREDICTOR_NAMES:
            return PREDICTOR_NAMES[name.removesuffix(suffix)]
    return PREDICTOR_NAMES.get(name, name.replace("_", " "))


def _fmt(metric: str, v: float, pct: bool) -> str:
    return f"{v:.1%}" if pct else f"{v:.2f}" if metric == "val_psnr" else f"{v:.4f}"


def quality_table(rec, step: int | None = None, value: float | None = None) -> bool:
    """The run's figures at its latest step next to every baseline's, the best of each column starred.

    The headline (``Task.headline``) and the task's extra ``figures`` are the columns; a column no
    predictor has is left out. The caption compares the run with the best baseline on the last
    lower-is-better figure the run has (its share of that baseline's value; the image task: pixel
    MSE), else on the last figure that has baselines (its margin when higher is better; span
    completion: per-position decoding where the run has it), and adds the task's notes and the run's
    (a baseline its data could not give, e.g. the paired tasks' CCA: ``task.json``'s ``baseline_notes``).
    ``step``, ``value``: as in :func:`quality_rows`. Returns False (and draws nothing) when the run
    has no baseline or no headline value yet.
    """
    df, figures = quality_rows(rec, step, value)
    first = pd.to_numeric(df[figures[0][0]], errors="coerce")
    if len(df) == 1 or pd.isna(first.iloc[0]):
        return False
    shown, compare = pd.DataFrame({"predictor": df["predictor"]}), None
    for metric, better in figures:
        col = pd.to_numeric(df[metric], errors="coerce")
        if col.isna().all():
            continue
        best = col.idxmax() if better == "max" else col.idxmin()
        pct = better == "max" and metric != "val_psnr" and bool(col.dropna().between(0, 1).all())  # accuracies
        title = loss_title(rec.config) if metric == "val_loss" else figure_title(metric, rec.config)
        shown[f"{title} {'↓' if better == 'min' else '↑'}"] = [
            "–" if pd.isna(v) else _fmt(metric, v, pct) + (" ★" if i == best else "") for i, v in col.items()]
        base = col.iloc[1:]
        if not pd.isna(col.iloc[0]) and base.notna().any() and (compare is None or better == "min" or compare[1] == "max"):
            compare = (metric, better, title, pct, col.iloc[0], base)
    st.dataframe(shown, hide_index=True, width="content")
    notes = []
    if compare is not None:
        metric, better, title, pct, run, base = compare
        b = base.idxmin() if better == "min" else base.idxmax()
        who = df["predictor"][b]
        notes.append(f"{title}: this run at {run / base[b]:.0%} of the best baseline ({who})" if better == "min" else
                     f"{title}: this run {abs(run - base[b]) * 100:.1f} points {'above' if run >= base[b] else 'below'} "
                     f"the best baseline ({who})" if pct else
                     f"{title}: this run {abs(run - base[b]):.2f} {'above' if run >= base[b] else 'below'} the best "
                     f"baseline ({who})")
    st.caption(f"★ best of each column · baselines measured once at step 0 on the same validation masks, "
               f"this run at step {rec.step if step is None else step}" + "".join(f" · {n}" for n in notes + _baseline_notes(rec.config)
                                                                     + _run_baseline_notes(rec)))
    return True


def _run_baseline_notes(rec) -> list[str]:
    """The baselines the run could not measure on its data, and why (``task.json``'s
    ``baseline_notes``: :meth:`engine.tasks.Task.run_info`); ``[]`` before training started."""
    try:
        notes = read_task_info(rec.path).get("baseline_notes") if getattr(rec, "path", None) is not None else None
    except (OSError, ValueError, AttributeError):
        return []
    return [str(n) for n in notes] if isinstance(notes, list) else []


def _baseline_notes(config: dict) -> list[str]:
    """What the task says about how its figures and baselines were measured
    (``Task.quality_notes(config)``, when the task has it)."""
    from engine.api import ConfigError, get_task  # noqa: PLC0415 (torch loads when a view draws masks or runs a checkpoint, not when a page imports this module)

    try:
        notes = getattr(get_task((config or {}).get("task")), "quality_notes", None)
    except ConfigError:
        return []
    return list(notes(config or {})) if notes is not None else []
