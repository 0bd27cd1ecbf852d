"""Estimated training FLOPs of a run: one optimiser step's forward and backward, counted.

:func:`train_step_flops` runs the task's own training loss on one batch of train rows
(:meth:`engine.tasks.Task.train_loss`, masks drawn at ``masking.ratio`` from a seeded generator)
and its backward pass under ``torch.utils.flop_counter.FlopCounterMode``, which counts the
floating-point operations of matrix products, convolutions and attention (2 per multiply-add) from
the shapes; element-wise work (activations, norms, the optimiser update) is not counted, as in the
usual ``6 N`` estimates of transformer training. The count depends on the shapes only, not on the
weights, so it is measured once per run on any weights. An MAE encoder sees only the visible
patches, so its FLOPs fall with the mask ratio: the figure is at ``masking.ratio`` (a ratio schedule
changes it along the run), and a text batch's cost follows its longest row (the batch is the
first ``batch_size`` train rows).

References: PyTorch ``torch.utils.flop_counter``; Kaplan et al. 2020 (training compute ~ 6 N per
token: 2 N forward, 4 N backward).
"""

from __future__ import annotations

import torch
from torch.utils.flop_counter import FlopCounterMode


def train_step_flops(task, seed: int = 0) -> dict[str, float]:
    """FLOPs of one training step of ``task`` (module docstring); gradients it leaves are cleared.

    Returns:
        ``{"flops_per_step", "flops_per_sample", "forward_flops_per_step", "batch_size",
        "mask_ratio"}``: FLOPs of forward + backward of one batch, the same per row of the batch,
        the forward pass alone, the batch size counted (``task.batch_size``) and the ratio used.
    """
    ratio = float(task.cfg.masking.ratio)
    idx = torch.arange(task.batch_size) % task.n_train
    was = task.model.training
    task.model.train()
    try:
        fwd = FlopCounterMode(display=False)
        with fwd:
            loss, _ = task.train_loss(idx, torch.Generator().manual_seed(seed), ratio)
        both = FlopCounterMode(display=False)
        with both:
            loss, _ = task.train_loss(idx, torch.Generator().manual_seed(seed), ratio)
            loss.backward()
    finally:
        task.model.zero_grad(set_to_none=True)
        task.model.train(was)
    total, forward = float(both.get_total_flops()), float(fwd.get_total_flops())
    return {"flops_per_step": total, "flops_per_sample": total / max(task.batch_size, 1),
            "forward_flops_per_step": forward, "batch_size": float(task.batch_size), "mask_ratio": ratio}
