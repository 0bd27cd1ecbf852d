"""Resume controls: the Resume buttons of Runs and Run detail, and a run's config history.

A failed, cancelled, diverged or interrupted run with a complete checkpoint can be resumed
(``engine.runner.launcher.resume``): it queues again and continues from that checkpoint. Run detail
offers two optional changes (learning rate, total steps); the config history shows what a resume
changed, from which step.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd
import streamlit as st

from app.components.access import allowed
from app.components.errors import guarded
from app.components.runs import run_label, status_label
from engine.api import latest_checkpoint_step, read_config_history, resume


def _checkpoint(rec: Any) -> int | None:
    """Step a resume of ``rec`` would start from, or None (not resumable, or no complete checkpoint)."""
    return guarded(latest_checkpoint_step, rec.run_id) if rec.is_resumable else None


def resume_buttons(records: Sequence[Any]) -> None:
    """Runs page: one line per resumable run that has a complete checkpoint, with a Resume button
    (same config; Run detail offers changes). Nothing for a session that may not resume."""
    do_resume = allowed("run.resume", resume)
    if do_resume is None:
        return
    for r in records:
        step = _checkpoint(r)
        if step is None:
            continue
        line, button = st.columns([6, 1], vertical_alignment="bottom")
        line.markdown(f"**{run_label(r)}** · {status_label(r.status)} at step {r.step} / {r.total_steps} · "
                      f"resumable from step {step}")
        if button.button("Resume", key=f"resume-{r.run_id}", help=f"continue {r.run_id} from its checkpoint of step {step}"):
            if guarded(do_resume, r.run_id) is not None:
                st.toast(f"Resuming {r.run_id} from step {step}.")


def resume_panel(rec: Any) -> None:
    """Run detail: a Resume form (optional new learning rate and total steps) for a resumable run
    with a checkpoint (editors), and the config history of a run that was resumed before."""
    do_resume = allowed("run.resume", resume)
    step = _checkpoint(rec) if do_resume is not None else None
    train = (rec.config or {}).get("train", {})
    if step is not None:
        with st.form(f"resume-form-{rec.run_id}", border=True):
            st.markdown(f"**Resume** from the checkpoint of step {step}: weights, optimiser, generators and data "
                        f"order are restored; metrics after step {step} are replaced.")
            left, right = st.columns(2)
            lr = left.number_input("Learning rate (train.lr)", min_value=1e-8, max_value=10.0,
                                   value=float(train.get("lr", 1.5e-3)), step=1e-5, format="%.2e", key="resume_lr")
            steps = right.number_input("Total steps (train.steps)", min_value=step + 1,
                                       value=max(int(train.get("steps", step + 1)), step + 1), step=100,
                                       key="resume_steps")
            go = st.form_submit_button("Resume")
        if go:
            overrides = ([f"train.lr={lr!r}"] if lr != train.get("lr") else []) + \
                        ([f"train.steps={int(steps)}"] if int(steps) != train.get("steps") else [])
            if guarded(do_resume, rec.run_id, overrides) is not None:
                st.success(f"Resuming from step {step}" + (f" with {', '.join(overrides)}" if overrides else "")
                           + ": it is queued and starts when a slot is free.")
    config_history(rec)


def config_history(rec: Any) -> None:
    """What each resume changed in the config, from which step (nothing for a run never resumed)."""
    history = guarded(read_config_history, rec.path) or []
    if len(history) < 2:
        return
    st.markdown("**Config history**")
    st.dataframe(pd.DataFrame([{
        "from step": h["step"],
        "changed": "; ".join(f"{k}: {a} → {b}" for k, (a, b) in h.get("changed", {}).items()) or "nothing (same config)",
    } for h in history[1:]]), hide_index=True, width="stretch")
    restarts = rec.extra.get("restarts")
    if restarts:
        st.caption(f"Restarted automatically {restarts} time(s) after its worker died (train.max_restarts).")
