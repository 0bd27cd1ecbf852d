"""The run table and run labels (from ``engine.store.RunRecord`` value objects)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd
import streamlit as st

from app.components.errors import guarded
from engine.store import list_runs


#: Status -> the word shown with a colour sign (emoji: material icons need a web font, offline here).
STATUS_LABELS = {
    "queued": "⏳ queued", "running": "🔵 running", "completed": "🟢 completed", "cancelled": "⚪ cancelled",
    "failed": "🔴 failed", "diverged": "🟣 diverged", "interrupted": "🟠 interrupted",
}


def status_label(status: str) -> str:
    """``"interrupted"`` -> ``"🟠 interrupted"`` (an unknown status is shown as it is)."""
    return STATUS_LABELS.get(status, status)


def status_message(rec: Any, checkpoint_step: int | None) -> None:
    """The box under a run's status: why it failed, diverged or was interrupted, and what is kept.

    ``checkpoint_step``: step of its newest complete checkpoint (where a resume would start).
    """
    kept = (f" Its latest complete checkpoint is step {checkpoint_step}." if checkpoint_step is not None
            else " It has no complete checkpoint.")
    if rec.status == "failed":
        st.error(f"Run failed: {rec.error or 'no reason recorded'}")
    elif rec.status == "diverged":
        st.error(f"Run diverged: {rec.error or 'the loss became NaN or infinite'}.{kept}")
    elif rec.status == "interrupted":
        st.warning(f"Run interrupted: {rec.error}.{kept}")
    for w in getattr(rec, "warnings", ()):
        st.warning(w)


def runs_or_stop() -> list:
    """All runs, newest first. With none, show a hint and a link to New run, then stop the page."""
    runs = guarded(list_runs)
    if not runs:
        if runs is not None:
            st.info("No runs yet.")
        st.page_link("../pages/new_run.py", label="Start a run", icon="🚀")
        st.stop()
    return runs


def short_label(rec: Any) -> str:
    """``name · <last 6 characters of the id>``: short enough for a chart legend, still unique."""
    name = getattr(rec, "name", "") or ""
    suffix = str(rec.run_id)[-6:]
    return f"{name} · {suffix}" if name and name != rec.run_id else str(rec.run_id)


def run_label(rec: Any) -> str:
    """``name · run_id`` (just the id for an unnamed run, whose name the store sets to the id)."""
    name = getattr(rec, "name", "") or ""
    return f"{name} · {rec.run_id}" if name and name != rec.run_id else str(rec.run_id)


def format_duration(seconds: float | None) -> str:
    """``None`` -> "", 75 -> "1m 15s", 3700 -> "1h 1m"."""
    if seconds is None:
        return ""
    s = int(round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m {s % 60:02d}s"
    return f"{s // 3600}h {(s % 3600) // 60:02d}m"


def masking_label(config: dict | None) -> str:
    """A run's masking in a few words: ``random 0.75``, ``block 0.5→0.9 cosine``, ``region`` (a
    strategy with its own budget shows no ratio)."""
    from engine.masking import MASKING_REGISTRY

    m = (config or {}).get("masking") or {}
    name = m.get("strategy", "random")
    strategy = MASKING_REGISTRY.get(name)
    if strategy is not None and not strategy.uses_ratio:
        return name
    ratio = f"{m.get('ratio', '')}"
    if m.get("schedule", "constant") != "constant":
        ratio = f"{m.get('ratio')}→{m.get('final_ratio')} {m.get('schedule')}"
    return f"{name} {ratio}".strip()


def runs_frame(records: Sequence[Any]) -> pd.DataFrame:
    """One row per run with the columns of the run table (newest first, as given)."""
    rows = []
    for r in records:
        latest = r.latest or {}
        rows.append(
            {
                "name": r.name if r.name != r.run_id else "",
                "masking": masking_label(r.config),
                "run id": r.run_id,
                "status": status_label(r.status),
                "progress": float(r.progress or 0.0),
                "step": f"{r.step} / {r.total_steps}",
                "loss": latest.get("loss"),
                "val loss": latest.get("val_loss"),
                "samples/s": latest.get("throughput"),
                "duration": format_duration(r.duration_s),
                "dataset": (r.config or {}).get("data", {}).get("dataset", ""),
            }
        )
    return pd.DataFrame(rows)


def run_table(records: Sequence[Any]) -> None:
    """``st.dataframe`` of :func:`runs_frame` with a progress bar column."""
    st.dataframe(
        runs_frame(records),
        hide_index=True,
        width="stretch",
        column_config={
            "progress": st.column_config.ProgressColumn("progress", min_value=0.0, max_value=1.0, format="percent"),
            "loss": st.column_config.NumberColumn("loss", format="%.4f"),
            "val loss": st.column_config.NumberColumn("val loss", format="%.4f"),
            "samples/s": st.column_config.NumberColumn("samples/s", format="%.0f"),
        },
    )
