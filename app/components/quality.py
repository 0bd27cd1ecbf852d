"""A run's headline validation figure next to its trivial baselines (same masks, same units).

Every task logs its baselines once at step 0 as ``baseline/<name>`` (engine.tasks.Task.baselines)
and names its headline metric (``Task.headline``); this component puts them in one small table so a
viewer can tell learning from averaging.
"""

from __future__ import annotations

import pandas as pd
import streamlit as st

from engine.objectives import OBJECTIVE_REGISTRY

#: Axis titles of the loss curves by objective.
LOSS_TITLES = {"mse": "MSE (masked units)", "l1": "L1 (masked units)", "cross_entropy": "cross-entropy (nats/token)",
               "contrastive": "InfoNCE (nats)"}


def loss_title(config: dict) -> str:
    """Y-axis title of a run's loss curve from its resolved config (a mix says "weighted loss")."""
    obj = (config or {}).get("objective", {})
    if obj.get("terms"):
        return "weighted loss"
    return LOSS_TITLES.get(obj.get("loss", ""), obj.get("loss", "loss") if obj.get("loss") in OBJECTIVE_REGISTRY else "loss")


def headline_of(config: dict) -> tuple[str, str]:
    """``(metric, "min" | "max")`` of the run's task (``val_loss``/min when the task is unknown)."""
    from engine.errors import ConfigError
    from engine.tasks import get_task

    try:
        return get_task((config or {}).get("task", "image_mim")).headline
    except ConfigError:
        return ("val_loss", "min")


def quality_table(rec, step: int | None = None, value: float | None = None) -> None:
    """The headline figure at its latest step next to every baseline, best marked.

    ``step``, ``value``: the headline's last logged point (the last evaluation), when known; else the
    value of ``rec.latest`` and the run's step."""
    metric, better = headline_of(rec.config)
    latest = rec.latest or {}
    rows = [{"predictor": f"this run ({metric})", "value": latest.get(metric) if value is None else value}]
    rows += [{"predictor": k.removeprefix("baseline/").replace("_", " "), "value": v}
             for k, v in sorted(latest.items()) if k.startswith("baseline/")]
    if len(rows) == 1 or rows[0]["value"] is None:
        return
    df = pd.DataFrame(rows)
    best = df["value"].idxmax() if better == "max" else df["value"].idxmin()
    df["best"] = ["★" if i == best else "" for i in df.index]
    pct = better == "max"  # accuracies
    st.dataframe(df, hide_index=True, width="content",
                 column_config={"value": st.column_config.NumberColumn(format="percent" if pct else "%.4f")})
    st.caption(("higher is better · baselines on the same validation masks and inputs" if pct else
                "lower is better · baselines on the same validation masks, scored with the run's objective")
               + f" · baselines from step 0, this run at step {rec.step if step is None else step}")
