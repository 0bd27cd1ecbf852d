"""Where a training run's output goes: the loop writes only through the :class:`Writers` it is given.

:func:`engine.training.loop.fit` knows no file path (as litgpt's loop logs through an injected
logger): metrics go to a :class:`MetricsSink`, checkpoints (a
:meth:`~engine.training.state.TrainState.state_dict`) to a :class:`CheckpointSink`, reconstruction
samples to a :class:`SampleSink` and the task's run info (``task.json``) to a :class:`RunInfoSink`.

:func:`run_writers` is the default set, the files of a run folder (what the worker and every rank
of a torchrun launch pass); :func:`memory_writers` keeps everything in memory (tests, benches).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import torch

from engine.errors import DatasetError
from engine.runner.resume import TASK_INFO, check_same_data
from engine.store.checkpoints import save_checkpoint
from engine.store.samples import save_samples
from engine.workspace import atomic_write_json


class MetricsSink(Protocol):
    """Where the loop sends metrics: ``log`` every step, ``flush`` before slow work."""

    def log(self, step: int, metrics: dict[str, float]) -> None: ...

    def flush(self) -> None: ...


class CheckpointSink(Protocol):
    """Keeps checkpoints: ``save(step, state)`` with ``state`` a ``TrainState.state_dict()``."""

    def save(self, step: int, state: dict[str, Any]) -> None: ...


class SampleSink(Protocol):
    """Keeps reconstruction samples (:class:`engine.store.samples.Sample`)."""

    def save(self, sample) -> None: ...


class RunInfoSink(Protocol):
    """Keeps what the task reports of its data (:meth:`engine.tasks.Task.run_info`, ``task.json``)."""

    def check_resume(self, info: dict) -> None:
        """Raise DatasetError when ``info`` names other data than the run started with."""

    def write(self, info: dict) -> None: ...


@dataclass
class Writers:
    """Everything :func:`engine.training.loop.fit` writes goes through one of these."""

    metrics: MetricsSink
    checkpoints: CheckpointSink
    samples: SampleSink
    info: RunInfoSink


# --- the files of a run folder --------------------------------------------------------------------------------


class _Taken:
    """A state already taken, handed to :func:`engine.store.checkpoints.save_checkpoint` (which asks
    the model and optimiser for ``state_dict()`` and the config for ``to_dict()``)."""

    def __init__(self, state):
        self.state = state

    def state_dict(self):
        return self.state

    def to_dict(self):
        return self.state


@dataclass
class CheckpointFiles:
    """``<run_dir>/checkpoints/step-NNNNNNN/`` (:mod:`engine.store.checkpoints`), the newest ``keep``
    complete ones kept."""

    run_dir: Path
    keep: int = 2

    def save(self, step: int, state: dict[str, Any]) -> None:
        """Raises StorageError (disk full...): the earlier checkpoints are untouched."""

        live = torch.get_rng_state()
        torch.set_rng_state(state["torch_rng"])  # save_checkpoint stores the global RNG it finds
        try:
            save_checkpoint(self.run_dir, step, _Taken(state["model"]), _Taken(state["optimizer"]),
                            _Taken(state["config"]), state["rng"], keep=self.keep, loop=state["loop"],
                            task_state=state["task"])
        finally:
            torch.set_rng_state(live)


@dataclass
class SampleFiles:
    """``<run_dir>/samples/`` (:func:`engine.store.samples.save_samples`)."""

    run_dir: Path

    def save(self, sample) -> None:
        save_samples(self.run_dir, sample)


@dataclass
class RunInfoFile:
    """``<run_dir>/task.json``."""

    run_dir: Path

    def check_resume(self, info: dict) -> None:
        """Raises DatasetError: ``info``'s ``dataset_hash`` differs from the one in ``task.json``."""
        check_same_data(self.run_dir, info.get("dataset_hash") or "")

    def write(self, info: dict) -> None:
        atomic_write_json(Path(self.run_dir) / TASK_INFO, info)


def run_writers(run_dir: Path, metrics: MetricsSink, *, keep_checkpoints: int = 2) -> Writers:
    """The default writers of a run folder: ``metrics`` (e.g. the run's
    :class:`engine.store.metrics.MetricsWriter`), checkpoints (the newest ``keep_checkpoints``
    kept), samples and ``task.json`` under ``run_dir``."""
    run_dir = Path(run_dir)
    return Writers(metrics, CheckpointFiles(run_dir, keep_checkpoints), SampleFiles(run_dir), RunInfoFile(run_dir))


# --- in memory ------------------------------------------------------------------------------------------------


@dataclass
class MemoryMetrics:
    """``rows``: every ``(step, metrics)`` logged, in order; ``flushes``: how many flushes."""

    rows: list[tuple[int, dict[str, float]]] = field(default_factory=list)
    flushes: int = 0

    def log(self, step: int, metrics: dict[str, float]) -> None:
        self.rows.append((step, dict(metrics)))

    def flush(self) -> None:
        self.flushes += 1


@dataclass
class MemoryCheckpoints:
    """``states``: step -> a deep copy of the saved state (the live model keeps changing), newest ``keep``."""

    keep: int = 2
    states: dict[int, dict[str, Any]] = field(default_factory=dict)

    def save(self, step: int, state: dict[str, Any]) -> None:
        self.states[step] = copy.deepcopy(state)
        for old in sorted(self.states)[: -self.keep]:
            del self.states[old]


@dataclass
class MemorySamples:
    samples: list = field(default_factory=list)

    def save(self, sample) -> None:
        self.samples.append(sample)


@dataclass
class MemoryRunInfo:
    info: dict | None = None

    def check_resume(self, info: dict) -> None:
        """Raises DatasetError as :meth:`RunInfoFile.check_resume` does."""
        before = (self.info or {}).get("dataset_hash") or ""
        now = info.get("dataset_hash") or ""
        if before and now and before != now:
            raise DatasetError(f"run info: its dataset changed since the run started (content hash {before[:12]}, "
                               f"now {now[:12]})")

    def write(self, info: dict) -> None:
        self.info = dict(info)


def memory_writers(keep_checkpoints: int = 2) -> Writers:
    """Writers that keep everything in memory (:class:`MemoryMetrics`, :class:`MemoryCheckpoints`...)."""
    return Writers(MemoryMetrics(), MemoryCheckpoints(keep_checkpoints), MemorySamples(), MemoryRunInfo())


class NullSink:
    """The metrics sink of the ranks that do not write (a metrics writer that drops everything)."""

    def log(self, step: int, metrics: dict[str, float]) -> None:
        pass

    def flush(self) -> None:
        pass
