"""Objectives: registered loss functions over a model's outputs, and their weighted sum.

A model returns a dict of named outputs (:data:`OUTPUTS` lists the names); an objective is a pure
function of some of them, registered by name with the outputs it reads. The run config picks one
(``objective.loss``) or a weighted sum (``objective.terms``); :class:`Objective` evaluates it and
returns each term's value too, so the training loop logs them separately (``loss/<name>``).

    >>> obj = Objective.from_config(cfg.objective, outputs={"pred", "target", "mask"})
    >>> loss, parts = obj(model_outputs)          # scalar tensor, {"mse": 0.041}

References: He et al. 2022 (MAE: MSE on masked patches, normalised-pixel target); Xie et al. 2022
(SimMIM: L1 on masked pixels); Devlin et al. 2019 (BERT: cross-entropy on masked tokens).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

import torch
import torch.nn.functional as F

from engine.errors import ConfigError
from engine.registry import registrar

if TYPE_CHECKING:
    from engine.config import ObjectiveConfig

#: Output names a model may return, with their shapes. Objectives declare which ones they read.
OUTPUTS = {
    "pred": "float [B, L, D]: predicted values of every unit (pixels of a patch, a frame); a model may "
            "leave units that are never scored (visible ones) as zeros",
    "target": "float [B, L, D]: the values to reconstruct (possibly normalised per unit)",
    "mask": "bool [B, L]: True = masked (the units that are scored)",
    "logits": "float [M, V]: class scores of the M predicted tokens",
    "labels": "int64 [M]: the true token of each predicted position (-100 = not scored)",
    "emb_a": "float [B, E]: pooled embedding of modality a (contrastive)",
    "emb_b": "float [B, E]: pooled embedding of modality b (contrastive)",
    "logit_scale": "float []: log of the inverse temperature (contrastive)",
}


@dataclass(frozen=True)
class ObjectiveFn:
    """A registered loss: ``fn(**outputs) -> scalar`` reading the model outputs named in ``needs``."""

    name: str
    fn: Callable[..., torch.Tensor]
    needs: tuple[str, ...]
    summary: str


OBJECTIVE_REGISTRY: dict[str, ObjectiveFn] = {}


def register_objective(name: str, needs: tuple[str, ...], summary: str):
    """Decorator: register ``fn(**outputs)`` as objective ``name`` reading ``needs`` (keys of :data:`OUTPUTS`).

    Raises:
        ValueError: the name is taken, or ``needs`` names an unknown output.
    """
    unknown = set(needs) - set(OUTPUTS)
    if unknown:
        raise ValueError(f"objective {name!r} needs unknown outputs {sorted(unknown)}")

    def deco(fn):
        registrar(OBJECTIVE_REGISTRY, "objective", name)(ObjectiveFn(name, fn, tuple(needs), summary))
        return fn

    return deco


def get_objective(name: str) -> ObjectiveFn:
    """The registered objective ``name``. Raises :class:`ConfigError` listing the known ones."""
    try:
        return OBJECTIVE_REGISTRY[name]
    except KeyError:
        raise ConfigError(f"objective.loss: unknown objective {name!r}; known: {', '.join(sorted(OBJECTIVE_REGISTRY))}") from None


def _check_pred(name: str, pred: torch.Tensor, target: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    if pred.shape != target.shape or pred.dim() != 3 or tuple(mask.shape) != tuple(pred.shape[:2]):
        raise ValueError(
            f"{name}: expected pred, target [B, L, D] and mask [B, L]; got {tuple(pred.shape)}, "
            f"{tuple(target.shape)}, {tuple(mask.shape)}"
        )
    return mask.to(device=pred.device, dtype=torch.bool)


def _masked_mean(per_unit: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of ``per_unit [B, L]`` over the masked units; 0 (still in the graph) when none is masked."""
    per_unit = torch.where(mask, per_unit, torch.zeros_like(per_unit))
    # clamp_min(1): with no masked unit the sum is 0 and so is the loss, without a sync or a branch.
    return per_unit.sum() / mask.sum().clamp_min(1)


@register_objective("mse", ("pred", "target", "mask"), "mean squared error on the masked units (MAE)")
def masked_mse(pred: torch.Tensor, target: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean squared error per unit, averaged over the masked units only.

    ``loss = sum_{b,l} mask[b,l] * mean_d (pred - target)^2 / sum_{b,l} mask[b,l]``. Visible units
    do not contribute (not even a NaN in their prediction). With no masked unit the loss is a zero
    that stays in the autograd graph (its gradient is zero), so ``loss.backward()`` still works.

    Args:
        pred: ``[B, L, D]`` predictions (``D = P*P*C`` for pixel patches).
        target: ``[B, L, D]``.
        mask: ``[B, L]`` bool, True = masked (the units that are scored). Moved to ``pred.device``.

    Returns:
        Scalar tensor, units of the target squared.

    Raises:
        ValueError: shapes do not match.

    References: He et al. 2022, "Masked Autoencoders Are Scalable Vision Learners", sec. 3.
    """
    mask = _check_pred("masked_mse", pred, target, mask)
    return _masked_mean((pred - target).pow(2).mean(dim=-1), mask)


@register_objective("l1", ("pred", "target", "mask"), "mean absolute error on the masked units (SimMIM)")
def masked_l1(pred: torch.Tensor, target: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean absolute error per unit, averaged over the masked units only (same conventions as
    :func:`masked_mse`).

    Args:
        pred, target: ``[B, L, D]``; mask: ``[B, L]`` bool, True = masked.

    Returns:
        Scalar tensor, units of the target.

    Raises:
        ValueError: shapes do not match.

    References: Xie et al. 2022, "SimMIM: A Simple Framework for Masked Image Modeling", sec. 3.3.
    """
    mask = _check_pred("masked_l1", pred, target, mask)
    return _masked_mean((pred - target).abs().mean(dim=-1), mask)


@register_objective("cross_entropy", ("logits", "labels"), "cross-entropy on the masked tokens (BERT)")
def masked_cross_entropy(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Cross-entropy of the predicted tokens, averaged over the scored ones (label != -100).

    Args:
        logits: ``[M, V]`` scores of the M predicted positions (an MLM head that runs only at
            masked positions gives exactly those); any leading shape ``[..., V]`` is flattened.
        labels: int64 ``[M]`` (or the leading shape of ``logits``), -100 where nothing is scored.

    Returns:
        Scalar tensor in nats; a graph-connected 0 when no position is scored (never NaN).

    References: Devlin et al. 2019, "BERT", sec. 3.1 (masked LM).
    """
    logits = logits.reshape(-1, logits.shape[-1])
    labels = labels.reshape(-1).to(logits.device)
    if labels.numel() != logits.shape[0]:
        raise ValueError(f"cross_entropy: {logits.shape[0]} rows of logits but {labels.numel()} labels")
    scored = labels != -100
    loss = F.cross_entropy(logits.float(), labels.clamp_min(0), reduction="none")
    return torch.where(scored, loss, torch.zeros_like(loss)).sum() / scored.sum().clamp_min(1)


@register_objective("contrastive", ("emb_a", "emb_b", "logit_scale"),
                    "symmetric InfoNCE between paired embeddings, learned temperature (CLIP)")
def info_nce(emb_a: torch.Tensor, emb_b: torch.Tensor, logit_scale: torch.Tensor) -> torch.Tensor:
    """Symmetric InfoNCE over a batch of pairs: row ``i`` of ``emb_a`` matches row ``i`` of ``emb_b``.

    ``logits = exp(logit_scale) * normalize(a) @ normalize(b).T``; the loss is the mean of the
    cross-entropies a->b and b->a with the diagonal as targets. ``logit_scale`` is clamped to
    ``log(100)`` as in CLIP.

    Args:
        emb_a, emb_b: ``[B, E]``; logit_scale: scalar tensor (learned).

    Returns:
        Scalar tensor in nats (``log B`` at chance).

    References: Radford et al. 2021, "Learning Transferable Visual Models From Natural Language
    Supervision" (CLIP), fig. 3; Oord et al. 2018 (InfoNCE).
    """
    if emb_a.shape != emb_b.shape or emb_a.dim() != 2:
        raise ValueError(f"contrastive: expected two [B, E] embeddings, got {tuple(emb_a.shape)}, {tuple(emb_b.shape)}")
    a = F.normalize(emb_a.float(), dim=-1)
    b = F.normalize(emb_b.float(), dim=-1)
    logits = logit_scale.float().clamp(max=4.6052).exp() * a @ b.t()  # (B, B)
    target = torch.arange(a.shape[0], device=a.device)
    return 0.5 * (F.cross_entropy(logits, target) + F.cross_entropy(logits.t(), target))


def normalize_patches(target: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """Normalise each patch to zero mean and unit variance over its ``D`` values (MAE's norm_pix_loss).

    ``(t - mean) / sqrt(var + eps)`` with the unbiased variance, as in MAE's ``forward_loss``.

    Args:
        target: ``[B, L, D]`` patches (``D = P*P*C``).
        eps: added to the variance; keeps flat patches finite.

    Returns:
        ``[B, L, D]``.

    Raises:
        ValueError: ``D < 2`` (a patch of one value has no variance; use ``P*P*C >= 2``).

    References: He et al. 2022, "Masked Autoencoders Are Scalable Vision Learners", sec. 4.
    """
    if target.shape[-1] < 2:
        raise ValueError(f"normalize_patches: need at least 2 values per patch, got D={target.shape[-1]}")
    mean = target.mean(dim=-1, keepdim=True)  # (B, L, 1)
    var = target.var(dim=-1, keepdim=True)  # (B, L, 1), unbiased like MAE
    return (target - mean) / (var + eps).sqrt()


class Objective:
    """A weighted sum of registered objectives, evaluated on a model's output dict.

    Args:
        terms: ``[(name, weight), ...]``; weights are finite and >= 0 with at least one > 0.

    Calling it with the model outputs returns ``(loss, parts)``: the weighted sum (scalar tensor,
    in the graph) and each term's unweighted value as a float (``{"mse": 0.04}``), which the loop
    logs as ``loss/<name>`` when there is more than one term.
    """

    def __init__(self, terms: list[tuple[str, float]]):
        if not terms:
            raise ConfigError("objective.terms: at least one term is needed")
        self.terms = [(get_objective(n), float(w)) for n, w in terms]

    @classmethod
    def from_config(cls, cfg: "ObjectiveConfig", outputs: set[str] | None = None) -> "Objective":
        """Build from the ``objective`` config section (``terms`` when given, else ``loss``).

        Args:
            outputs: the output names the task's model returns; a term needing another is refused.

        Raises:
            ConfigError: unknown objective, or one the model cannot feed (names the field and what
                it needs).
        """
        terms = [(t.loss, t.weight) for t in cfg.terms] or [(cfg.loss, 1.0)]
        obj = cls(terms)
        if outputs is not None:
            for i, (o, _) in enumerate(obj.terms):
                missing = [n for n in o.needs if n not in outputs]
                if missing:
                    field = f"objective.terms.{i}.loss" if cfg.terms else "objective.loss"
                    raise ConfigError(f"{field}: {o.name!r} needs model outputs {', '.join(missing)}, which this "
                                      f"model does not produce (it gives {', '.join(sorted(outputs))})")
        return obj

    @property
    def names(self) -> list[str]:
        """Term names in order."""
        return [o.name for o, _ in self.terms]

    def __call__(self, out: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, float]]:
        total, parts = None, {}
        for o, w in self.terms:
            v = o.fn(**{k: out[k] for k in o.needs})
            parts[o.name] = v.detach()
            total = w * v if total is None else total + w * v
        return total, {k: float(v) for k, v in parts.items()} if len(parts) > 1 else {}
