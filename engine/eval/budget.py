"""The evaluation budget: an automatic evaluation costs at most ``evaluation.budget`` times the
training time it judges (default 0.5), on the same machine.

The *training time* of a checkpoint at step N is what the run took to get there on this machine: its
training wall time (``status.json``: start to the end of training, plus the legs before a resume;
at the end of a run, while its worker evaluates, start to now) times N over the steps it trained;
for a run without those times, the sum of its measured optimiser-step times (the ``step_time``
metric) over steps 1..N. The cheap phases (features, reconstruction figures, probes, kNN,
k-means, maps) always run; fine-tuning takes what is left of the budget, in steps, the same number for
the trained and the random-init encoder, at most the recipe's (``evaluation.finetune_epochs``,
:data:`engine.eval.finetune.MAX_STEPS`). It starts when the rows it must encode without gradient (each
encoder's head before, its figures after) fit in what is left; its step count is planned once, after
the trained encoder's first step, from that step's time, its head's and the measured cost of a
forward pass per row, so the cosine schedule knows its length (its first step's rate does not depend
on it). A budget of 0 skips fine-tuning, none (null) sets no limit; a run with no training time
recorded is fine-tuned by the full recipe, and the evaluation says so; a checkpoint at step 0 (a run
of 0 steps: an imported model shown on a dataset) trained for 0 s, so only the full recipe, asked
for, fine-tunes it.

Why time, not FLOPs: the cheap phases are mostly scikit-learn work that FLOP counters do not see,
and the budget is what a user waits for. The FLOPs of a training step are still reported
(:mod:`engine.eval.flops`).
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from engine.store.metrics import read_run_table
from engine.store.runs import read_status

#: The share of the budget the fine-tune is planned to fill: what a plan cannot see (copying the
#: model, batches slower than the timed ones, accuracy passes over rows of mixed lengths) made the
#: fine-tune of the 2,000-step fortunes run take 20% longer than planned (bench/eval_budget.py).
PLAN_SHARE = 0.85


def training_seconds(run_dir: Path, step: int) -> float | None:
    """The training time of the run's checkpoint at ``step`` (module docstring), seconds: from its
    status's times when it has them, else :func:`step_seconds`; 0 at step 0. None when it has neither."""
    if step == 0:  # no optimiser step: a run of 0 steps (an imported model shown as it is) trained nothing
        return 0.0
    st = read_status(Path(run_dir))
    started, done = st.get("started_at"), int(st.get("step") or 0)
    if started and done > 0:
        # no end yet: its worker evaluates right after training, and wrote when training ended
        end = st.get("ended_at") or st.get("trained_at") or time.time()
        wall = float(st.get("prior_s") or 0.0) + float(end) - float(started)
        if wall > 0:
            return wall * min(step, done) / done
    return step_seconds(run_dir, step)


def step_seconds(run_dir: Path, step: int) -> float | None:
    """Seconds of optimiser steps 1..``step`` of a run: the sum of its ``step_time`` metric (the last
    value logged for each step: a resumed run logs a step once more). None when it logged none."""
    table, _ = read_run_table(Path(run_dir), ["step_time"])
    if table.num_rows == 0:
        return None
    last: dict[int, float] = {}
    for s, v in zip(table.column("step").to_pylist(), table.column("value").to_pylist()):
        if s <= step and v is not None and math.isfinite(v):
            last[int(s)] = float(v)
    return sum(last.values()) if last else None


@dataclass
class EvalBudget:
    """What an evaluation may spend.

    Attributes:
        share: ``evaluation.budget`` (or the ``--budget`` asked for), a multiple of the training time;
            None: no limit (the fine-tune's full recipe).
        train_s: the checkpoint's training time (:func:`training_seconds`), None when unknown.
        budget_s: ``share * train_s`` (s), None when unknown (then no limit).
        cheap_s: seconds spent when the fine-tune was planned (the cheap phases, the first encoder's head
            and first step).
        finetune_steps: steps each encoder is fine-tuned (set by :meth:`plan_finetune`).
        recipe_steps: steps the recipe alone would take.
        step_s: measured seconds of one fine-tune step (0: not measured, no budget was left); row_s: of
            one row's forward pass; head_s: of the first encoder's head (:mod:`engine.eval.finetune`).
    """

    share: float | None
    train_s: float | None
    budget_s: float | None = None
    cheap_s: float = 0.0
    finetune_steps: int = 0
    recipe_steps: int = 0
    step_s: float = 0.0
    row_s: float = 0.0
    head_s: float = 0.0

    def __post_init__(self) -> None:
        if self.budget_s is None and self.train_s is not None and self.share is not None:
            self.budget_s = self.share * self.train_s

    @property
    def fine_tunes(self) -> bool:
        """False for a budget of 0 (no fine-tune at all)."""
        return self.share is None or self.share > 0

    def room_for_finetune(self, elapsed_s: float, row_s: float, rows_per_encoder: int, encoders: int = 2) -> bool:
        """Whether a fine-tune of ``encoders`` encoders fits once ``elapsed_s`` are spent: the rows each
        encodes without gradient (its head's rows before, its figures' rows after) at ``row_s`` seconds a
        row within the budget (``row_s``, measured on the features' larger batches, is itself an upper
        bound: the fine-tune's batches pad less). Always True without a limit; False for a share of 0;
        a fine-tune that does not fit is recorded as 0 steps."""
        fits = self.fine_tunes and (self.budget_s is None
                                    or elapsed_s + encoders * rows_per_encoder * row_s <= self.budget_s)
        if not fits:
            self.cheap_s, self.row_s, self.finetune_steps = elapsed_s, row_s, 0
        return fits

    def plan_finetune(self, elapsed_s: float, recipe_steps: int, step_s: float, row_s: float,
                      rows_per_encoder: int, encoders: int = 2, head_s: float = 0.0, steps_done: int = 0) -> int:
        """Steps each of ``encoders`` encoders may take once ``elapsed_s`` are spent (recorded).

        Args:
            elapsed_s: seconds the evaluation has spent so far (with the first encoder's head and its
                ``steps_done`` steps).
            recipe_steps: the recipe's steps (the most it takes).
            step_s: seconds of one fine-tune step (forward and backward of a batch).
            row_s: seconds of one row's forward pass; each encoder then encodes ``rows_per_encoder``
                rows once trained (the head's statistics, the val and train accuracies).
            head_s: seconds each further encoder's head costs before its first step (:mod:`engine.eval.finetune`).
            steps_done: steps the first encoder has already taken (timed: ``step_s``).

        Returns:
            ``min(recipe_steps, (PLAN_SHARE * budget_s - elapsed_s - encoders * rows_per_encoder * row_s
            - (encoders - 1) * head_s + steps_done * step_s) / (encoders * step_s))``, at least ``steps_done``;
            ``recipe_steps`` without a limit or when the training time is unknown; 0 for a share of 0.
        """
        self.cheap_s, self.recipe_steps, self.step_s, self.row_s = elapsed_s, recipe_steps, step_s, row_s
        self.head_s = head_s
        if not self.fine_tunes:
            steps = 0
        elif self.budget_s is None:
            steps = recipe_steps
        else:
            left = (PLAN_SHARE * self.budget_s - elapsed_s - encoders * rows_per_encoder * row_s
                    - (encoders - 1) * head_s + steps_done * step_s)
            steps = max(steps_done, min(recipe_steps, int(left / (encoders * max(step_s, 1e-9)))))
        self.finetune_steps = steps
        return steps

    def figures(self) -> dict[str, float | None]:
        """The budget as stored with the evaluation (seconds rounded to ms)."""
        return {k: (round(v, 6) if isinstance(v, float) else v) for k, v in asdict(self).items()}
