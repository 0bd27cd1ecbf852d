"""New run's method fields, shared by the modalities whose tasks have methods (image, text): the
method (a name of :mod:`engine.methods.catalog`: what the model predicts), and the weight of a
contrastive term mixed into the objective (0: none). The masking stays the form's own (attention-guided
masking is the ``attention`` strategy there)."""

from __future__ import annotations

from typing import Any

import streamlit as st

from app.components.urlstate import dig, index_of
from engine.api import apply_method, method_label, methods_for

#: Methods that are not a choice of their own in the form: a contrastive weight, an attention strategy.
NOT_LISTED = ("mae-contrastive", "mlm-contrastive", "attmask")


def method_select(task: str, key: str, carried: dict) -> str:
    """The "Method" select of ``task`` (its catalog methods but :data:`NOT_LISTED`), defaulting to the
    carried config's method; each option with its summary in the help."""
    known = methods_for(task)
    options = [m for m in known if m not in NOT_LISTED]
    current = [p for p in method_label({"task": task, **carried}).split("+") if p in options] if carried else []
    return st.selectbox("Method (what the model predicts)", options, key=f"{key}_method_{task}",
                        index=index_of(options, current[0] if current else None),
                        format_func=lambda m: f"{m}: {known[m].split(':')[0]}",
                        help="\n\n".join(f"**{m}**: {known[m]}" for m in options)
                        + "\n\nAttention-guided masking (AttMask) is the masking strategy 'attention' above.")


def method_base(task: str, method: str, form: dict, carried: dict) -> dict:
    """The form's partial config made into ``method`` (:func:`engine.methods.catalog.apply_method`),
    with every one of the task's parameters set, so that no stale method parameter carries over from a
    link: the task's defaults, then the method's own values, then (when ``carried`` is a config of the
    same method) the carried ones, then the form's own (e.g. BERT's replacement shares)."""
    from engine.api import get_task  # noqa: PLC0415 (torch: the task's parameter model; New run has loaded it by now)

    d = apply_method({"task": task, **form}, method)
    tp = {**get_task(task).params().model_dump(mode="json"), **d.get("task_params", {})}
    if carried and same_method(task, method, carried):
        tp.update({k: v for k, v in (dig(carried, "task_params") or {}).items() if k in tp})
    tp.update(form.get("task_params") or {})
    d["task_params"] = tp
    return d


def same_method(task: str, method: str, carried: dict) -> bool:
    """Whether the carried config is of ``method`` (its values for the method's parameters then apply)."""
    return method_label({"task": task, **carried}).split("+")[0] == method


def contrastive_weight(key: str, carried: dict, disabled: bool = False, why: str = "") -> float:
    """The contrastive term's weight (0: none), defaulting to the carried config's."""
    given = {t.get("loss"): float(t.get("weight", 1.0)) for t in (dig(carried, "objective.terms") or [])
             if isinstance(t, dict)}
    return float(st.number_input(
        "Contrastive term weight (0: none)", min_value=0.0, max_value=100.0, step=0.05, format="%g",
        value=0.0 if disabled else given.get("contrastive", 0.0), disabled=disabled, key=f"{key}_contrastive",
        help=why or "InfoNCE between the pooled encodings of two independently masked views of each input "
                    "(CMAE, SSAST), added to the reconstruction loss with this weight; each term is logged as "
                    "loss/<name>. Its temperature is task_params.temperature."))


def with_contrastive(objective: dict[str, Any], recon: str, weight: float) -> dict[str, Any]:
    """``objective`` with the weighted mix ``recon`` (weight 1) + ``contrastive`` (``weight``) when
    ``weight > 0``; else ``objective`` with one term ``recon``."""
    if weight <= 0:
        return {**objective, "loss": recon, "terms": []}
    return {**objective, "loss": recon, "terms": [{"loss": recon, "weight": 1.0},
                                                  {"loss": "contrastive", "weight": float(weight)}]}
