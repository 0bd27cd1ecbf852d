"""What New run and Mask lab show of an audio config before a run: the run's visualisation
windows with the masks the run will draw (:func:`preview`), and a train batch's masks for Mask
lab's statistics (:func:`train_masks`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from engine.audio.features import FeatureSpec
from engine.config import RunConfig
from engine.data import load_dataset, representative
from engine.errors import ConfigError
from engine.tasks.audio.common import Grid, draw_masks, first_windows, vis_rows
from engine.tasks.audio.recipe import AudioTask
from engine.tasks.registry import get_task


def task_class(name: str) -> type[AudioTask]:
    """The audio task registered as ``name``.

    Raises:
        ConfigError: an unknown task, or one that is not an audio task (naming the ``task`` field).
    """
    t = get_task(name)
    if not issubclass(t, AudioTask):
        raise ConfigError(f"task: {name!r} is not an audio task")
    return t


def _spec_and_grid(cfg: RunConfig, rate: int) -> tuple[FeatureSpec, Grid]:
    return task_class(cfg.task).spec_and_grid(cfg, rate)


@dataclass(frozen=True)
class AudioPreview:
    """What the dashboard shows of an audio config before a run: the run's first ``n`` validation
    windows (exactly the run's sample rows and masks).

    Attributes:
        spec: float32 ``[N, F, T]`` log-mel (natural log, not normalised); real: bool ``[N, T]``;
        mask: bool ``[N, *grid]``; cells: bool ``[N, F, T]`` the masked mel bins x frames;
        waves: float32 ``[N, S]`` the windows' samples; labels: int64 ``[N]``; sample_rate: Hz;
        grid: the :class:`Grid`; transcripts: one per row (``""`` without).
    """

    spec: np.ndarray
    real: np.ndarray
    mask: np.ndarray
    cells: np.ndarray
    waves: np.ndarray
    labels: np.ndarray
    sample_rate: int
    grid: Grid
    transcripts: list[str]


def preview(cfg: RunConfig, n: int, workspace=None) -> AudioPreview:
    """The run's visualisation windows and masks for ``cfg`` (what its samples will show).

    The masks are ``draw_mask`` of the first windows of :func:`vis_rows` from
    ``torch.Generator().manual_seed(train.seed)``, the call the run's :meth:`AudioTask.sample`
    makes (masks depend on the frames' positions and voicing, not on the normalisation).

    Raises:
        DatasetError, ConfigError: unknown dataset, a grid or strategy that does not fit.
    """
    ds = load_dataset(cfg.data.dataset, workspace)
    spec, grid = _spec_and_grid(cfg, ds.rate)
    rows = vis_rows(ds, n)
    feats, w = first_windows(ds, rows, spec, grid)
    mask = draw_masks(cfg, grid, w, torch.Generator().manual_seed(cfg.train.seed))
    waves = np.stack([feats.wave_window(ds.clip(int(i)), 0, grid.frames) for i in rows]) if len(rows) else \
        np.zeros((0, (grid.frames - 1) * spec.hop), np.float32)  # fmt: skip
    return AudioPreview(w.spec.numpy(), w.real.numpy(), mask.numpy(), grid.cells(mask).numpy(), waves,
                        ds.labels[rows].astype(np.int64), spec.sample_rate, grid,
                        [ds.transcript(int(i)) for i in rows])  # fmt: skip


def train_masks(cfg: RunConfig, n: int, workspace=None) -> tuple[torch.Tensor, torch.Tensor]:
    """Masks of ``cfg`` over the first windows of ``n`` train clips (:func:`engine.data.representative`),
    from ``torch.Generator().manual_seed(train.seed)``, for Mask lab's statistics.

    Returns:
        ``(mask [n, *grid] bool, eligible [n, *grid] bool)``.
    """
    ds = load_dataset(cfg.data.dataset, workspace)
    spec, grid = _spec_and_grid(cfg, ds.rate)
    rows = ds.indices("train")
    _, w = first_windows(ds, rows[representative(ds.labels[rows], n)], spec, grid)
    return draw_masks(cfg, grid, w, torch.Generator().manual_seed(cfg.train.seed)), grid.eligible(w)
