"""Downstream fine-tuning: a linear classification head on the encoder, both trained on the labelled
train rows for a few epochs, top-1 accuracy on val; the same recipe from the randomly initialised
encoder is its baseline.

The frozen-feature probes (:mod:`engine.eval.representation`) ask what a representation makes
linearly readable; fine-tuning asks how good a starting point the pretrained weights are when the
encoder may change too (MAE's end-to-end fine-tuning, He et al. 2022 sec. 4; here much shorter, so
that it runs on a CPU inside the evaluation job).

**Recipe** (the same for every encoder, every run, every modality):

- the encoder's pooled features, the function its probes read (``model.features``: mean of the
  final encoder tokens), called *with* gradient (:func:`pooled_features`), then a head
  ``BatchNorm1d(D, affine=False) -> Linear(D, n_classes)`` that starts as a linear probe of the
  encoder: the features' statistics and a logistic regression's weights on a seeded sample of at most
  :data:`STAT_ROWS` train rows (LP-FT, Kumar et al. 2022; :func:`_probe_head`), so a fine-tune cut to a
  step or two by the evaluation budget scores near that probe, not near chance (a dozen steps at the
  full rate can move the encoder away from it before they help: bench/README.md). The parameter-free
  BatchNorm is MAE's linear-probing head (He et al. 2022, A.2): a randomly initialised encoder's
  pooled features vary little from image to image (their spread across images is about 2% of their
  size on digits), and without it the baseline barely trains, an unfair baseline;
- AdamW (lr :data:`LR`, weight decay :data:`WEIGHT_DECAY`, on the encoder and the head alike),
  linear warm-up over :data:`WARMUP_STEPS` steps and cosine decay to 0 over the steps, batches of
  :data:`BATCH_SIZE` rows in a seeded order, cross-entropy; :data:`EPOCHS` passes over the train
  rows, at most :data:`MAX_STEPS` steps in all;
- the head's normalisation statistics re-estimated with the final encoder on the same train rows
  (the train accuracy is read on them), then val top-1
  accuracy of the final model on every val row (no early stopping, nothing chosen on val).

What a task gives (its :meth:`engine.tasks.Task.finetune_inputs` hook): :class:`FinetuneInputs`, the
train and val labels and how to encode a batch of rows with a given model. The built-in tasks give
the images (image MIM), the tokenised texts (text MLM and span), each clip's first window with the
padding left out of the pooling (audio); a task that gives None gets no fine-tune figure (the
evaluation says so).

References: He et al. 2022, "Masked Autoencoders Are Scalable Vision Learners" (end-to-end
fine-tuning as the downstream figure beside linear probing); Kumar et al. 2022, "Fine-Tuning can
Distort Pretrained Features and Underperform Out-of-Distribution" (LP-FT: the head starts as the
probe); Loshchilov & Hutter 2019 (AdamW, cosine).
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from engine.errors import EvaluationError

EPOCHS = 5
MAX_STEPS = 300
BATCH_SIZE = 64
LR = 1e-3
WEIGHT_DECAY = 0.05
#: Train rows of the head's starting probe, its normalisation statistics and the train accuracy (a
#: seeded sample): the mean and variance of each feature are estimated closely from 512 rows, at a
#: quarter of the encoding cost of 2,000.
STAT_ROWS = 512
#: The inverse L2 strength of the logistic regression the head starts from (:func:`_probe_head`):
#: scikit-learn's default, fixed (nothing is chosen on val).
HEAD_C = 1.0
#: Steps of linear learning-rate warm-up before the cosine decay: the encoder's first updates are small,
#: so a fine-tune that the budget cuts to a step or two stays near the probe it starts from.
WARMUP_STEPS = 10
#: Rows per forward pass without gradient (the head's rows, the accuracies): batches of rows of
#: similar length (:meth:`FinetuneInputs.by_length`) cut to their longest row; smaller batches pad
#: less (512 fortunes: 0.26 s in batches of 64, 0.62 s in batches of 256).
NO_GRAD_BATCH = 64
#: The head's bias for a class none of the head's rows hold (its weights are 0): its logit starts far
#: below the others', as the probe, which never saw it, would score it.
ABSENT_BIAS = -10.0


@dataclass
class FinetuneInputs:
    """A modality's rows for fine-tuning.

    Attributes:
        y_train, y_val: int64 ``[N]`` labels of the rows (-1 = unlabelled: left out).
        encode: ``(model, split, rows int64 [B]) -> [B, D]``: the pooled features of rows
            ``rows`` (positions among the split's first rows, the ones ``y_<split>`` labels) through
            ``model``, in the autograd graph, on the model's device.
        lengths: optional ``{split: int [N]}``, each row's length (text: its tokens); the passes
            without gradient encode rows in that order, so that a batch cut to its longest row
            holds rows of similar length (the figures do not depend on it).
    """

    y_train: np.ndarray
    y_val: np.ndarray
    encode: Callable[[nn.Module, str, torch.Tensor], torch.Tensor]
    lengths: dict[str, np.ndarray] | None = None

    def by_length(self, split: str, rows: np.ndarray) -> np.ndarray:
        """``rows`` shortest first (stable), when the rows' lengths are known; else as given."""
        if not self.lengths or split not in self.lengths:
            return rows
        return rows[np.argsort(np.asarray(self.lengths[split])[rows], kind="stable")]


@dataclass
class FinetuneResult:
    """``accuracy`` (val top-1, fraction), ``train_accuracy`` (on the train rows, after training),
    ``steps`` and ``epochs`` done, ``rows`` (``{"train": N, "val": N}``) and ``seconds`` (wall time)."""

    accuracy: float
    train_accuracy: float
    steps: int
    epochs: float
    rows: dict[str, int]
    seconds: float

    def figures(self) -> dict[str, float]:
        """The figures stored with an evaluation: ``finetune_acc``, ``finetune_train_acc``,
        ``finetune_steps``, ``finetune_epochs``, ``finetune_seconds``."""
        return {"finetune_acc": self.accuracy, "finetune_train_acc": self.train_accuracy,
                "finetune_steps": float(self.steps), "finetune_epochs": float(self.epochs),
                "finetune_seconds": self.seconds}


def pooled_features(model: nn.Module) -> Callable[..., torch.Tensor]:
    """``model.features`` with gradient.

    Every masklab model defines its frozen features once, as ``features`` decorated with
    ``torch.no_grad()`` (the probes never need a gradient). Fine-tuning needs that very function
    with gradient, so it calls the undecorated function ``functools.wraps`` keeps as
    ``__wrapped__``, bound to ``model``; one definition of "the encoder's features" serves both.
    """
    fn = type(model).features
    return getattr(fn, "__wrapped__", fn).__get__(model, type(model))


def _labelled(y: np.ndarray) -> np.ndarray:
    return np.flatnonzero(np.asarray(y) >= 0)


@torch.no_grad()
def _accuracy(model, head, encode, split: str, rows: np.ndarray, y: np.ndarray, batch: int) -> float:
    model.eval(), head.eval()
    right = 0
    for i in range(0, len(rows), batch):
        pos = torch.as_tensor(rows[i : i + batch])
        right += int((head(encode(model, split, pos).float()).argmax(1).cpu() == torch.as_tensor(y[rows[i : i + batch]])).sum())
    return right / max(len(rows), 1)


@torch.no_grad()
def _refresh_norm(model, norm: nn.BatchNorm1d, encode, rows: np.ndarray, batch: int = NO_GRAD_BATCH) -> torch.Tensor:
    """Re-estimate the head's normalisation statistics on the train rows with the final encoder
    (an exact average over the rows: a short fine-tune leaves the running averages far from them).
    Returns the rows' features ``[N, D]`` (float32), which the train accuracy reads too."""
    feats = _encode_rows(model, encode, rows, batch)
    norm.reset_running_stats()
    norm.momentum = None  # cumulative average
    norm.train()
    norm(feats)  # one call: a last chunk of one row would have no variance
    return feats


def recipe_steps(inputs: FinetuneInputs, epochs: int = EPOCHS, max_steps: int = MAX_STEPS,
                 batch_size: int = BATCH_SIZE) -> int:
    """Steps the recipe takes on ``inputs``: ``epochs`` passes of full batches, at most ``max_steps``."""
    n = len(_labelled(inputs.y_train))
    return min(max_steps, epochs * max(1, n // max(1, min(batch_size, n))))


def finetune(model: nn.Module, inputs: FinetuneInputs, *, seed: int = 0, epochs: int = EPOCHS,
             max_steps: int = MAX_STEPS, batch_size: int = BATCH_SIZE, lr: float = LR,
             weight_decay: float = WEIGHT_DECAY, on_step: Callable[[int, int], None] | None = None,
             plan: Callable[[float, float, float], int] | None = None) -> FinetuneResult:
    """Fine-tune a copy of ``model`` with a linear head (module docstring); ``model`` is left unchanged.

    Args:
        model: the encoder (any masklab model with ``features``), on its device.
        inputs: the rows (:class:`FinetuneInputs`).
        seed: seeds the head's train rows and the batch order.
        epochs, max_steps, batch_size, lr, weight_decay: the recipe (module constants by default);
            ``max_steps`` is also how an evaluation budget shortens it (:mod:`engine.eval.budget`),
            at least 1.
        on_step: called with ``(steps done, steps)`` after each step (progress; it may raise to stop).
        plan: called once, after the first step, with the seconds that step took, the seconds the
            head's initialisation took and the seconds of one row's forward pass without gradient
            (measured on the head's rows); returns the steps to take in all (clamped to 1 ..
            the recipe's): how an evaluation budget fits the fine-tune to what is left
            (:meth:`engine.eval.budget.EvalBudget.plan_finetune`), timed on the step itself.

    Returns:
        :class:`FinetuneResult`.

    Raises:
        EvaluationError: fewer than 2 classes among the labelled train rows, or no labelled val row.
    """
    t0 = time.time()
    tr, va = _labelled(inputs.y_train), _labelled(inputs.y_val)
    y_tr, y_va = np.asarray(inputs.y_train, np.int64), np.asarray(inputs.y_val, np.int64)
    classes = int(max(y_tr[tr].max(initial=-1), y_va[va].max(initial=-1))) + 1
    if len(np.unique(y_tr[tr])) < 2 or not len(va):
        raise EvaluationError(f"fine-tuning needs labels: {len(np.unique(y_tr[tr]))} class(es) among {len(tr)} "
                              f"labelled train rows, {len(va)} labelled val rows")
    net = copy.deepcopy(model)
    net.requires_grad_(True)
    device = next(net.parameters()).device
    g = torch.Generator().manual_seed(seed)
    stat = np.sort(np.random.default_rng(seed).choice(tr, STAT_ROWS, replace=False)) if len(tr) > STAT_ROWS else tr
    stat = inputs.by_length("train", stat)
    t_head = time.perf_counter()
    feats = _encode_rows(net, inputs.encode, stat)
    row_s = (time.perf_counter() - t_head) / len(stat)
    head = _probe_head(feats, y_tr[stat], classes, seed)
    head_s = time.perf_counter() - t_head
    batch = min(batch_size, len(tr))
    per_epoch = max(1, len(tr) // batch)  # full batches only
    steps = max(1, min(max_steps, epochs * per_epoch))
    most = steps
    opt = torch.optim.AdamW([*net.parameters(), *head[1].parameters()], lr=lr, weight_decay=weight_decay)
    # the first step's rate (1 / WARMUP_STEPS of lr) does not depend on the length, which ``plan`` may set after it
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / WARMUP_STEPS)
                                              * 0.5 * (1 + math.cos(math.pi * min(s, steps) / steps)))
    labels = torch.as_tensor(y_tr)
    step, order = 0, np.zeros(0, np.int64)
    while step < steps:
        if len(order) < batch:
            order = tr[torch.randperm(len(tr), generator=g).numpy()]
        pos, order = order[:batch], order[batch:]
        t_step = time.perf_counter()
        net.train(), head.train()
        logits = head(inputs.encode(net, "train", torch.as_tensor(pos)).float())
        loss = nn.functional.cross_entropy(logits, labels[pos].to(device))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        step += 1
        if step == 1 and plan is not None:
            steps = max(1, min(most, int(plan(time.perf_counter() - t_step, head_s, row_s))))
        sched.step()
        if on_step is not None:
            on_step(step, steps)
    train_feats = _refresh_norm(net, head[0], inputs.encode, stat)
    acc = _accuracy(net, head, inputs.encode, "val", inputs.by_length("val", va), y_va, NO_GRAD_BATCH)
    head.eval()
    with torch.no_grad():  # the train rows' features are the normalisation's: encoded once
        train_acc = float((head(train_feats).argmax(1).cpu() == torch.as_tensor(y_tr[stat])).float().mean())
    return FinetuneResult(acc, train_acc, steps, round(steps * batch / len(tr), 3),
                          {"train": len(tr), "val": len(va)}, round(time.time() - t0, 3))


def _probe_head(feats: torch.Tensor, y: np.ndarray, classes: int, seed: int) -> nn.Sequential:
    """The fine-tune's head, initialised as a linear probe of an encoder's features ``feats [N, D]``
    of train rows (labels ``y [N]``): ``BatchNorm1d(D, affine=False)`` holding the rows' mean and variance, then
    ``Linear(D, classes)`` holding an L2 logistic regression's weights (:data:`HEAD_C`, lbfgs, one BLAS
    thread) on the normalised rows; a class absent from the rows gets weight 0 and bias :data:`ABSENT_BIAS`
    (rows of one class: that class's bias 0, the others' :data:`ABSENT_BIAS`).
    The LP-FT recipe (Kumar et al. 2022): fine-tuning starts where the probe ends, so the encoder's
    first steps are not spent undoing a random head's gradients, and a fine-tune of a few steps
    scores near its probe instead of near chance."""
    from sklearn.linear_model import LogisticRegression  # noqa: PLC0415 (scikit-learn loads only when an evaluation runs)
    from threadpoolctl import threadpool_limits  # noqa: PLC0415 (with scikit-learn)

    dim = feats.shape[1]
    norm = nn.BatchNorm1d(dim, affine=False).to(feats.device)
    mean, var = feats.mean(0), feats.var(0, unbiased=False)
    norm.running_mean.copy_(mean)
    norm.running_var.copy_(var)
    z = ((feats - mean) / torch.sqrt(var + norm.eps)).double().cpu().numpy()
    w, b = np.zeros((classes, dim), np.float32), np.full(classes, ABSENT_BIAS, np.float32)
    present = np.unique(y)
    if len(present) < 2:  # the sample holds one class of the train rows' several: the probe would answer it
        b[present] = 0.0
        return _head(norm, w, b)
    with threadpool_limits(limits=1, user_api="blas"):
        lr = LogisticRegression(C=HEAD_C, max_iter=1000, random_state=seed).fit(z, y)
    if len(lr.classes_) == 2:  # one logit: the softmax of (-f/2, f/2) is the logistic's
        w[lr.classes_] = np.stack([-lr.coef_[0], lr.coef_[0]]) / 2
        b[lr.classes_] = np.array([-lr.intercept_[0], lr.intercept_[0]]) / 2
    else:
        w[lr.classes_], b[lr.classes_] = lr.coef_, lr.intercept_
    return _head(norm, w, b)


def _head(norm: nn.BatchNorm1d, w: np.ndarray, b: np.ndarray) -> nn.Sequential:
    """``norm -> Linear`` with weights ``w [K, D]`` and biases ``b [K]``, on ``norm``'s device."""
    linear = nn.Linear(w.shape[1], w.shape[0]).to(norm.running_mean.device)
    with torch.no_grad():
        linear.weight.copy_(torch.as_tensor(w))
        linear.bias.copy_(torch.as_tensor(b))
    return nn.Sequential(norm, linear)


@torch.no_grad()
def _encode_rows(model, encode, rows: np.ndarray, batch: int = NO_GRAD_BATCH) -> torch.Tensor:
    """Features ``[N, D]`` (float32) of train ``rows`` through ``model`` in eval mode, without gradient."""
    model.eval()
    return torch.cat([encode(model, "train", torch.as_tensor(rows[i : i + batch])).float()
                      for i in range(0, len(rows), batch)])


def finetune_inputs(task, max_rows: int | None = None) -> FinetuneInputs | None:
    """The task's :class:`FinetuneInputs` (the rows of each split the probes read,
    :meth:`engine.tasks.Task.finetune_inputs`), or None when the task gives none."""
    return task.finetune_inputs(max_rows)
