"""Learning-rate schedule: linear warmup, then half-cycle cosine decay (MAE's ``util/lr_sched.py``).

References: He et al. 2022, "Masked Autoencoders Are Scalable Vision Learners", appendix A.1
(cosine decay, warmup); Loshchilov & Hutter 2017, "SGDR".
"""

from __future__ import annotations

import math


def lr_at(step: int, *, base_lr: float, min_lr: float, warmup_steps: int, total_steps: int) -> float:
    """The learning rate for optimizer step ``step`` (0-based: the number of steps already taken).

    - ``step < warmup_steps``: ``base_lr * step / warmup_steps`` (0 at step 0).
    - then ``min_lr + (base_lr - min_lr) * 0.5 * (1 + cos(pi * t))`` with
      ``t = (step - warmup_steps) / (total_steps - warmup_steps)``: ``base_lr`` at the end of warmup,
      ``min_lr`` at ``total_steps`` and after (``t`` is clamped to 1).
    - ``warmup_steps >= total_steps``: warmup to ``base_lr`` (reached at ``warmup_steps``), then ``min_lr``.

    Pure function of its arguments (no optimizer state), so resuming needs only the step.

    Raises:
        ValueError: negative ``step`` or ``warmup_steps``, or ``total_steps < 1``.

    References: He et al. 2022, "Masked Autoencoders Are Scalable Vision Learners".
    """
    if step < 0 or warmup_steps < 0 or total_steps < 1:
        raise ValueError(
            "lr_at: need step >= 0, warmup_steps >= 0, total_steps >= 1 "
            f"(got step={step}, warmup_steps={warmup_steps}, total_steps={total_steps})"
        )
    if step < warmup_steps:
        return base_lr * step / warmup_steps
    t = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
    return min_lr + (base_lr - min_lr) * 0.5 * (1.0 + math.cos(math.pi * t))
