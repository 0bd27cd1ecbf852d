"""Audit (admins): who launched, resumed, cancelled, deleted or imported what, and when, newest
first, from the workspace's append-only log (``engine.access.audit.read_audit``), with refusals."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from app.components import guarded
from app.components.access import actor
from engine.api import read_audit

st.title("Audit")
limit = st.select_slider("Lines", options=[100, 1000, 10_000], value=1000, key="audit_limit")
entries = guarded(read_audit, limit=limit, actor=actor()) or []
if not entries:
    st.info("Nothing recorded yet: launches, cancels, resumes, imports and deletions are written here.")
    st.stop()
outcomes = st.multiselect("Outcome", ["ok", "failed", "refused"], default=["ok", "failed", "refused"], key="audit_outcome")
frame = pd.DataFrame([{"time": e.time, "user": e.user, "role": e.role, "action": e.action, "target": e.target,
                       "outcome": e.outcome, "reason": e.details.get("reason", "")} for e in entries])
st.dataframe(frame[frame["outcome"].isin(outcomes)], hide_index=True, width="stretch")
st.caption(f"{len(entries)} newest lines of the workspace's audit log (audit/audit.jsonl); "
           "also `python -m engine audit`.")
