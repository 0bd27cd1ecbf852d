"""Watching a latent target for collapse, without torch (the dashboard reads it).

A data2vec-style run logs its target's spread, :data:`TARGET_STD` (per-dimension standard deviation
of the teacher's targets over the masked units, :func:`engine.methods.teacher.target_std`), with
every step and ``val_target_std`` at every evaluation. Collapse (student and teacher agreeing on a
near-constant output) shows as that spread falling toward zero; :func:`collapse_warning` says so.

References: Baevski et al. 2022, "data2vec" (sec. 5: target variance as the collapse diagnostic).
"""

from __future__ import annotations

from collections.abc import Sequence

#: The logged metric that watches for collapse.
TARGET_STD = "target_std"
#: A target whose spread fell below this share of its first logged value is called collapsed.
COLLAPSE_SHARE = 0.1


def collapse_warning(values: Sequence[float], share: float = COLLAPSE_SHARE) -> str | None:
    """A warning when the logged target spread (:data:`TARGET_STD`, in step order) fell below
    ``share`` of its first value, else None (also for fewer than 2 values or a first value of 0)."""
    vals = [float(v) for v in values if v == v]  # NaN dropped
    if len(vals) < 2 or vals[0] <= 0:
        return None
    last = vals[-1]
    if last >= share * vals[0]:
        return None
    return (f"the latent target is collapsing: its spread ({TARGET_STD}) fell from {vals[0]:.3g} to {last:.3g}, "
            f"below {share:g} of its start; student and teacher agree on a near-constant output. Raise the teacher's "
            "decay (task_params.ema_decay), lower the learning rate, or average more teacher blocks (top_k).")
