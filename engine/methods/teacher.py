"""The EMA teacher of data2vec-style latent targets, shared by every model that predicts one
(the audio frame model, the image MAE's latent target).

A teacher is a frozen copy of the student's encoder, updated after each optimiser step as
``teacher <- tau * teacher + (1 - tau) * student``; tau is annealed linearly from ``ema_decay`` to
``ema_decay_end`` over ``ema_anneal_steps`` updates. The teacher sees the whole input; the target
is the average of its top ``top_k`` block outputs, each instance-normalised over the units (per
channel). Collapse (the student and teacher agreeing on a constant) shows as the target's spread
falling toward zero: :func:`target_std` is logged with every step, and
:func:`engine.methods.collapse.collapse_warning` reads it back.

References: Baevski et al. 2022, "data2vec: A General Framework for Self-supervised Learning in
Speech, Vision and Language" (sec. 3.3 targets, tau schedule); Baevski et al. 2023, "Efficient
Self-supervised Learning with Contextualized Target Representations for Vision, Speech and Language"
(data2vec 2.0: an MAE-style student on the visible units with a light decoder).
"""

from __future__ import annotations

from typing import Iterable

import torch
import torch.nn.functional as F
from pydantic import BaseModel, ConfigDict, Field, model_validator

from engine.methods.collapse import TARGET_STD, collapse_warning  # noqa: F401  (also named here: the training side's)


class TeacherParams(BaseModel):
    """The teacher's parameters (a task's ``task_params`` inherit them)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    top_k: int = Field(2, ge=1, description="teacher blocks averaged into the target (data2vec: 8 of 12)")
    ema_decay: float = Field(0.999, ge=0.0, le=1.0, description="teacher decay tau at the start (data2vec: 0.999)")
    ema_decay_end: float = Field(0.9999, ge=0.0, le=1.0, description="tau after the anneal (data2vec: 0.9999)")
    ema_anneal_steps: int = Field(1000, ge=0, description="steps of the linear anneal of tau (data2vec: 30,000)")

    @model_validator(mode="after")
    def _order(self) -> "TeacherParams":
        if self.ema_decay_end < self.ema_decay:
            raise ValueError(f"ema_decay_end ({self.ema_decay_end}) must be >= ema_decay ({self.ema_decay})")
        return self


def ema_decay_at(step: int, start: float, end: float, anneal_steps: int) -> float:
    """tau after ``step`` updates: linear from ``start`` to ``end`` over ``anneal_steps``, then ``end``."""
    if anneal_steps <= 0 or step >= anneal_steps:
        return end
    return start + (end - start) * step / anneal_steps


@torch.no_grad()
def ema_update_(teacher: Iterable[torch.Tensor], student: Iterable[torch.Tensor], tau: float) -> None:
    """``t <- tau * t + (1 - tau) * s`` for each pair of tensors (in place on the teacher's)."""
    for t, s in zip(teacher, student, strict=True):
        t.mul_(tau).add_(s.detach().to(t.dtype), alpha=1.0 - tau)


def frozen_copy(module: torch.nn.Module) -> None:
    """Freeze a teacher copy in place: no gradient, never in the optimiser."""
    for p in module.parameters():
        p.requires_grad_(False)


def instance_norm_units(y: torch.Tensor, valid: torch.Tensor | None = None, eps: float = 1e-5) -> torch.Tensor:
    """Instance normalisation of ``y [B, L, D]`` over its ``L`` units, per sample and channel:
    ``(y - mean) / sqrt(var + eps)`` with the biased variance (``F.instance_norm``'s). With ``valid``
    (``[B, L]`` bool, e.g. a text's real tokens) only the valid units enter the mean and variance,
    and the others come back as 0: padding neither shifts nor scales a sequence's target. Returns
    float32 ``[B, L, D]``; ``valid=None`` is exactly ``F.instance_norm``."""
    y = y.float()
    if valid is None:
        return F.instance_norm(y.transpose(1, 2), eps=eps).transpose(1, 2)
    m = valid.to(device=y.device, dtype=y.dtype).unsqueeze(-1)  # (B, L, 1)
    n = m.sum(dim=1, keepdim=True).clamp_min(1.0)  # (B, 1, 1)
    mean = (y * m).sum(dim=1, keepdim=True) / n  # (B, 1, D)
    var = ((y - mean).pow(2) * m).sum(dim=1, keepdim=True) / n
    return (y - mean) * torch.rsqrt(var + eps) * m


@torch.no_grad()
def top_k_targets(layers: list[torch.Tensor], top_k: int, valid: torch.Tensor | None = None) -> torch.Tensor:
    """data2vec's target from a teacher's block outputs ``[B, L, D]`` each: the last ``top_k``,
    each instance-normalised over the ``L`` units per channel (over the ``valid [B, L]`` units only
    when given, padding excluded: :func:`instance_norm_units`), averaged. Returns float32 ``[B, L, D]``.

    Raises:
        ValueError: ``top_k`` is not in ``[1, len(layers)]``.
    """
    if not 1 <= top_k <= len(layers):
        raise ValueError(f"top_k must be in [1, {len(layers)}] (got {top_k})")
    top = [instance_norm_units(y, valid) for y in layers[-top_k:]]
    return torch.stack(top).mean(dim=0)


@torch.no_grad()
def target_std(target: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """The targets' spread: the standard deviation of each dimension over the scored units (``mask``
    ``[B, L]`` True; every unit when None), averaged over dimensions. ``target [B, L, D]`` ->
    scalar tensor (0 with fewer than 2 units). Collapse drives it toward 0."""
    x = target.float().reshape(-1, target.shape[-1]) if mask is None else target.float()[mask.bool()]
    if x.shape[0] < 2:
        return target.new_zeros(())
    return x.std(dim=0).mean()
