"""A training process's place in a data-parallel run (:class:`DistContext`), and each rank's mask seed.

The loop (:mod:`engine.training.loop`) talks to the other ranks only through this context; launching
the ranks is :mod:`engine.runner.torchrun`'s job. With the default context (:data:`SINGLE`) every
method is a no-op and nothing of ``torch.distributed`` is imported.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, Callable

import torch
import torch.distributed as tdist
from torch.nn.parallel import DistributedDataParallel


def mask_seed(seed: int, rank: int, step: int = 0) -> int:
    """Seed of the training-mask generator of ``rank`` (from step ``step`` on).

    Rank 0 at step 0 gets ``seed`` itself, so a single-process run draws exactly the masks it
    always drew; every other (rank, step) gets a seed in ``[0, 2**63)`` from SHA-256 of
    ``(seed, rank, step)``: different streams per rank, the same on every re-run. ``step`` > 0 is
    used only when a resume changes the number of ranks (the checkpoint has no state for the new ones).
    """
    if rank == 0 and step == 0:
        return int(seed)
    digest = hashlib.sha256(f"masklab-mask:{int(seed)}:{int(rank)}:{int(step)}".encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


@dataclass(frozen=True)
class DistContext:
    """This process's place in a run: ``rank`` of ``world_size`` processes, ``local_rank`` on its
    node, whether it is the ``writer`` (:mod:`engine.runner.torchrun`: the one rank that writes the run folder), and its ``device`` (None: from
    ``train.device``). The default is the single process: every method is then a no-op."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    writer: bool = True
    device: Any = None

    def any(self, flag: bool) -> bool:
        """True if ``flag`` is True on any rank (an all-reduce MAX; every rank must call it)."""
        if self.world_size == 1:
            return bool(flag)
        t = torch.tensor([1.0 if flag else 0.0], device=self._comm_device())
        tdist.all_reduce(t, op=tdist.ReduceOp.MAX)
        return bool(t.item() > 0)

    def mean(self, values: list[float]) -> list[float]:
        """Each value averaged over the ranks (one all-reduce; every rank must call it)."""
        if self.world_size == 1:
            return list(values)
        t = torch.tensor(values, dtype=torch.float64 if self._comm_device().type == "cpu" else torch.float32,
                         device=self._comm_device())
        tdist.all_reduce(t)
        return (t / self.world_size).tolist()

    def gather_state(self, state) -> list:
        """Every rank's ``state`` (a CPU tensor, e.g. a generator state), in rank order; every rank must call it."""
        if self.world_size == 1:
            return [state]
        out: list = [None] * self.world_size
        tdist.all_gather_object(out, state)
        return out

    def wrap(self, task) -> Callable:
        """``task.train_loss``, under DistributedDataParallel when there are several ranks: the
        task's model is held by a module whose forward is the task's loss, so DDP averages the
        gradients of every task without the task knowing (``find_unused_parameters``: a task may
        leave some parameters out of a step)."""
        if self.world_size == 1:
            return task.train_loss
        class TaskStep(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.model = task.model  # registered: DDP syncs and averages its parameters

            def forward(self, idx, generator, ratio):
                return task.train_loss(idx, generator, ratio)

        on_cuda = self._comm_device().type == "cuda"
        return DistributedDataParallel(TaskStep(), device_ids=[self._comm_device()] if on_cuda else None,
                                       find_unused_parameters=True)

    def _comm_device(self):
        return self.device if self.device is not None else torch.device("cpu")


SINGLE = DistContext()
