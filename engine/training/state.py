"""One training state: what a step changes and what a resume must restore (as litgpt's ``state`` dict).

:class:`TrainState` holds the task (its model and :meth:`~engine.tasks.Task.state_dict`), the
optimiser, the generators (``g_mask``: training masks, this rank's; ``g_data``: batch order, the same
on every rank; plus the global torch RNG, and CUDA's), the data position (this epoch's order and the
rows of it used), the step and the val losses kept for the run's outcome. The LR and mask-ratio
schedules are pure functions of the step (:func:`engine.training.schedule.lr_at`,
:func:`engine.masking.ratio_at`), so the step is their whole state.

:meth:`TrainState.state_dict` is a checkpoint's content, keyed as ``state.pt`` is (see
:mod:`engine.store.checkpoints`) plus ``model`` (the weights that go to ``model.safetensors``);
:meth:`TrainState.load_state_dict` restores it, including from checkpoints of older masklab
versions (no ``loop`` or ``task``).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from engine.config import RunConfig
from engine.masking import ratio_at
from engine.training.dist import SINGLE, DistContext, mask_seed
from engine.training.schedule import lr_at

#: Rows per length group, in batches (Hugging Face's ``LengthGroupedSampler`` uses 50 as well).
LENGTH_GROUP_BATCHES = 50


def epoch_order(n: int, batch: int, generator: torch.Generator, lengths: torch.Tensor | None = None,
                group_batches: int = LENGTH_GROUP_BATCHES) -> torch.Tensor:
    """One epoch's order of the train rows ``[0, n)``: ``[n]``, int32 (int64 from ``n >= 2**31``),
    read by the loop ``batch`` at a time.

    Without ``lengths``: ``torch.randperm(n)``. With ``lengths`` (int ``[n]``, e.g. real tokens per
    text; :meth:`engine.tasks.Task.train_lengths`), length-grouped batching: a random permutation
    is cut into groups of ``group_batches * batch`` rows, each group is sorted by length and cut into
    batches, and the full batches are shuffled. Every batch is still a random draw of rows (the
    rows of an epoch are the same; only which rows share a batch changes), but the rows of a
    batch have similar lengths, so a batch cut to its longest row (the text tasks' batching) carries
    little padding: on TREC (WordPiece 4000, batch 64) a training step costs about half as much CPU.
    The ``n % batch`` rows the loop leaves out at the end of the epoch are a random draw taken
    before the grouping (not the longest or shortest rows). References: Hugging Face Trainer's
    ``group_by_length`` (``LengthGroupedSampler``); fairseq's length-bucketed batches.

    Memory: the permutation is sorted group by group in place and the batches are shuffled into one
    new array, so at most two ``[n]`` arrays of 4 bytes a row exist at once (the order of a split of
    millions of texts is part of a training process's memory; issue 15).

    Args:
        n: number of train rows; batch: rows per batch (>= 1); generator: every random number.

    Raises:
        ValueError: ``lengths`` is not ``[n]``, or ``batch < 1``.
    """
    if batch < 1:
        raise ValueError(f"epoch_order: batch must be >= 1 (got {batch})")
    perm = torch.randperm(n, generator=generator, dtype=torch.int32 if n < 2**31 else torch.int64)
    if lengths is None:
        return perm
    if tuple(lengths.shape) != (n,):
        raise ValueError(f"epoch_order: lengths must be [n] = [{n}] (got {tuple(lengths.shape)})")
    full = n - n % batch
    size = max(1, group_batches) * batch
    for start in range(0, full, size):
        g = perm[start : min(start + size, full)]
        g.copy_(g[torch.argsort(lengths[g], stable=True)])
    out = torch.empty_like(perm)
    shuffle = torch.randperm(full // batch, generator=generator)
    torch.index_select(perm[:full].view(-1, batch), 0, shuffle, out=out[:full].view(-1, batch))
    out[full:] = perm[full:]
    return out


def _no_order() -> torch.Tensor:
    return torch.empty(0, dtype=torch.long)


@dataclass(eq=False)
class TrainState:
    """The state of one run's training in this process (built by :func:`engine.training.loop.setup`).

    Attributes:
        cfg: the run config. task: the run's :class:`engine.tasks.Task` (``task.model`` is trained).
        optimizer: AdamW over the model's parameter groups. device: where the model lives.
        g_mask: this rank's training-mask generator. g_data: the batch-order generator.
        dist: this process's place in a data-parallel run. train_loss: ``task.train_loss``, under
        DistributedDataParallel when there are several ranks (not saved: rebuilt by setup).
        lengths: ``[n_train]`` row sizes for length-grouped batches, or None.
        perm: this epoch's order of the train rows (``[n_train]``; empty: draw one at the next step).
        pos: rows of ``perm`` used. step: optimiser steps done.
        val_first, val_last: val loss at step 0 and at the latest eval (NaN until known).
    """

    cfg: RunConfig
    task: Any
    optimizer: torch.optim.Optimizer
    device: torch.device
    g_mask: torch.Generator
    g_data: torch.Generator
    dist: DistContext = SINGLE
    train_loss: Callable | None = None
    lengths: torch.Tensor | None = None
    perm: torch.Tensor = field(default_factory=_no_order)
    pos: int = 0
    step: int = 0
    val_first: float = math.nan
    val_last: float = math.nan

    @property
    def model(self) -> torch.nn.Module:
        return self.task.model

    @property
    def batch(self) -> int:
        """The global batch (rows of a step over every rank)."""
        return self.task.batch_size

    def autocast(self) -> torch.autocast:
        """bfloat16 autocast on CUDA with ``train.amp``; a no-op context elsewhere."""
        enabled = self.device.type == "cuda" and self.cfg.train.amp
        return torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=enabled)

    def lr(self) -> float:
        """The learning rate of the next step (``self.step``)."""
        t = self.cfg.train
        return lr_at(self.step, base_lr=t.lr, min_lr=t.min_lr, warmup_steps=t.warmup_steps, total_steps=t.steps)

    def mask_ratio(self) -> float:
        """The masking ratio of the next step (``masking.schedule``)."""
        return ratio_at(self.cfg.masking, self.step, self.cfg.train.steps)

    def new_epoch(self) -> None:
        """Draw the next epoch's order from ``g_data`` (the finished one is dropped first: one
        ``[n_train]`` array at a time)."""
        self.perm = _no_order()
        self.perm, self.pos = epoch_order(self.task.n_train, self.batch, self.g_data, self.lengths), 0

    def next_batch(self) -> torch.Tensor:
        """This rank's rows of the next global batch (int64 ``[batch / world_size]``); a new epoch
        starts when the current order has fewer than ``batch`` rows left."""
        batch, d = self.batch, self.dist
        if self.pos + batch > len(self.perm):
            self.new_epoch()
        share = batch // d.world_size
        idx = self.perm[self.pos : self.pos + batch][d.rank * share : (d.rank + 1) * share].long()
        self.pos += batch
        return idx

    def state_dict(self) -> dict[str, Any]:
        """The checkpoint of this state: ``step``, ``model`` (weights), ``optimizer``, ``config``,
        ``rng`` (``g_mask``, ``g_data`` states, ``g_mask_ranks`` with several ranks, ``cuda``),
        ``torch_rng``, ``loop`` (``perm``, ``pos``, ``val_first``, ``val_last``) and ``task``.

        Tensors are the live ones (not copies), as ``nn.Module.state_dict`` gives them. With several
        ranks every rank must call it (the ranks' mask generators are gathered).
        """
        rng = {"g_mask": self.g_mask.get_state(), "g_data": self.g_data.get_state()}
        ranks = self.dist.gather_state(rng["g_mask"])  # every rank's, so a resume continues each
        if self.dist.world_size > 1:
            rng["g_mask_ranks"] = ranks
        if self.device.type == "cuda":
            rng["cuda"] = torch.cuda.get_rng_state_all()
        return {"step": int(self.step), "model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                "config": self.cfg.to_dict(), "rng": rng, "torch_rng": torch.get_rng_state(),
                "loop": {"perm": self.perm, "pos": int(self.pos), "val_first": self.val_first,
                         "val_last": self.val_last},
                "task": self.task.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s content (a checkpoint's ``state.pt`` with ``model`` added).

        The optimiser keeps the current config's hyperparameters (a resume may change
        ``train.weight_decay``); only its moments and step counts are loaded. Rank ``r > 0`` takes
        its mask generator from ``rng.g_mask_ranks[r]`` when the checkpoint was written by as many
        ranks, else draws a fresh one from ``mask_seed(seed, r, step)``. A checkpoint without a data
        order for this task's rows (older masklab) leaves ``perm`` empty: the next step draws a new
        one from the restored ``g_data``. The global torch RNG (and CUDA's) is restored last.

        Raises:
            ValueError: the weights or the optimiser state do not fit this run's model.
            KeyError: a required key (``step``, ``rng.g_mask``, ``rng.g_data``, ``torch_rng``) is missing.
        """
        opt, task, d = self.optimizer, self.task, self.dist
        try:
            self.model.load_state_dict(state["model"])
            settings = [{k: v for k, v in g.items() if k != "params"} for g in opt.param_groups]
            opt.load_state_dict(state["optimizer"])
        except (RuntimeError, ValueError, KeyError) as e:
            raise ValueError(f"does not fit this run's model ({str(e).splitlines()[0][:200]})") from None
        for group, kept in zip(opt.param_groups, settings):
            group.update(kept)
        rng, loop = state.get("rng", {}), state.get("loop") or {}
        self.step = int(state["step"])
        ranks = rng.get("g_mask_ranks") or []
        if d.rank == 0:
            self.g_mask.set_state(rng["g_mask"])
        elif len(ranks) == d.world_size:
            self.g_mask.set_state(ranks[d.rank])
        else:
            self.g_mask.manual_seed(mask_seed(int(state["config"]["train"]["seed"]), d.rank, self.step))
        self.g_data.set_state(rng["g_data"])
        task.load_state_dict(state.get("task") or {})
        perm, self.pos = loop.get("perm"), int(loop.get("pos", 0))
        if perm is None or len(perm) != task.n_train:
            print(f"masklab: checkpoint step {self.step} has no data order for {task.n_train} rows (written by an "
                  f"older masklab); a new epoch order is drawn from the restored generator", file=sys.stderr)
            perm, self.pos = _no_order(), 0  # the loop draws a new permutation at once
        self.perm = perm  # int32 as saved (int64 from older checkpoints)
        self.val_first = float(loop.get("val_first", math.nan))
        self.val_last = float(loop.get("val_last", math.nan))
        # Last, so nothing above (model build, loading) moves them: dropout etc. continue where they were.
        torch.set_rng_state(state["torch_rng"])
        if self.device.type == "cuda" and "cuda" in rng:
            torch.cuda.set_rng_state_all(rng["cuda"])
