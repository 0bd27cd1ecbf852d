"""Audio tasks: masked spectrogram modeling (``audio_mae``) and masked frame prediction (``audio_frames``).

Both see the run's log-mel windows (:mod:`engine.audio.features`: ``data.audio`` sets the mel bins,
window, hop and the window length ``clip_seconds``; per-bin normalisation from the train split;
short clips padded with silence that is never masked nor scored, long clips cut into a random
window in training).

- ``audio_mae`` (AudioMAE, Huang et al. 2022): the spectrogram ``[1, F, T]`` is cut into
  ``P_f x P_t`` patches (``model.patch_size`` mel bins x ``task_params.patch_frames`` frames, square
  by default) on a ``[B, F/P_f, T/P_t]`` grid; any 2-D audio strategy masks it (random patches at
  80% as AudioMAE, SpecAugment time / frequency bands, periodic, voiced columns); the
  ``audio_mae_vit`` model (MAE's encoder on the visible patches, light decoder) predicts every patch;
  the objective (MSE or L1, optionally per-patch normalised) scores the masked patches.
- ``audio_frames`` (wav2vec 2.0 / data2vec style): tokens of ``model.patch_size`` frames on a
  ``[B, T/k]`` grid; 1-D strategies (``span_starts`` as wav2vec 2.0, ``span``, random, time bands,
  periodic, voiced segments) choose the hidden tokens; the ``frame_transformer`` encoder sees every
  token with masked ones replaced by a mask embedding and predicts either the masked frames
  (``task_params.target: mel``, segment reconstruction) or the features of an EMA teacher
  (``target: ema``, data2vec; the teacher is updated in :meth:`after_step` and checkpointed with
  the weights). With the EMA target a readout head on the detached encoder output learns the
  frames (its MSE is added to the loss as ``loss/readout``; it does not reach the encoder), so the
  run still shows reconstructions.

Side inputs: ``voiced`` (energy voice activity per frame, any voiced frame in a patch column or a
token) is computed from the waveform of every clip once. ``eligible`` = the positions that hold a
frame of the clip (a patch column or token whose first frame is real).

Validation (on at most :data:`EVAL_MAX_ROWS` val clips, first window, fixed masks from
``train.seed + 10_000``): ``val_loss`` (the objective), ``val_spec_mse`` (the headline: mean
squared error of the predicted normalised log-mel over the masked real cells, comparable across
models and targets), next to ``baseline/mean_spec_mse`` (every masked cell = its bin's train mean)
and ``baseline/interp_spec_mse`` (linear interpolation in time between the nearest visible frames
of the same mel bin) on the same masks. Samples: ``train.num_vis`` representative val clips' spectrograms
(original, masked, reconstructed) and Griffin-Lim audio of the original and of the reconstruction.
Frozen features (probes): the encoder on every window of a clip with nothing masked, the mean and
standard deviation of the clip's tokens (padding excluded), windows averaged.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field, model_validator

from engine.audio.features import ClipFeatures, DatasetClips, FeatureSpec, Window, feature_store, window_frames
from engine.config import AudioConfig, RunConfig
from engine.errors import ConfigError, DatasetError
from engine.masking import draw_mask, get_masking, strategies_on
from engine.store.samples import Sample
from engine.tasks import register_task
from engine.tasks.base import Task

EVAL_MAX_ROWS = 1024  # val metrics use at most this many val clips (first window each)
EVAL_CHUNK = 128
PROBE_ROWS = 128  # clips whose windows probe a config in the pre-flight check
FEATURE_CHUNK = 128
PCM = 32767.0


class AudioMAEParams(BaseModel):
    """Parameters of ``audio_mae``: the patch's time side."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    patch_frames: int | None = Field(None, ge=1, le=64,
                                     description="frames per patch (time side); None = model.patch_size (square patches)")


class FrameParams(BaseModel):
    """Parameters of ``audio_frames``: the prediction target and data2vec's teacher."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    target: Literal["mel", "ema"] = Field("mel", description="mel: the masked frames; ema: an EMA teacher's features "
                                                             "(data2vec)")
    top_k: int = Field(2, ge=1, description="teacher blocks averaged into the target (data2vec: 8 of 12)")
    ema_decay: float = Field(0.999, ge=0.0, le=1.0, description="teacher decay tau at the start (data2vec: 0.999)")
    ema_decay_end: float = Field(0.9999, ge=0.0, le=1.0, description="tau after the anneal (data2vec: 0.9999)")
    ema_anneal_steps: int = Field(1000, ge=0, description="steps of the linear anneal of tau (data2vec: 30,000)")

    @model_validator(mode="after")
    def _order(self) -> "FrameParams":
        if self.ema_decay_end < self.ema_decay:
            raise ValueError(f"ema_decay_end ({self.ema_decay_end}) must be >= ema_decay ({self.ema_decay})")
        return self


# --------------------------------------------------------------------------- grid mapping


@dataclass(frozen=True)
class Grid:
    """How a window of ``T`` frames and ``F`` mel bins maps to the task's mask grid.

    Attributes:
        n_mels: F; frames: T; pf, pt: mel bins and frames per position (``pf == F`` for frame tokens);
        dims: 2 (``[B, F/pf, T/pt]`` patches) or 1 (``[B, T/pt]`` tokens).
    """

    n_mels: int
    frames: int
    pf: int
    pt: int
    dims: int

    @property
    def shape(self) -> tuple[int, ...]:
        """The grid without the batch: ``(F/pf, T/pt)`` or ``(T/pt,)``."""
        t = self.frames // self.pt
        return (self.n_mels // self.pf, t) if self.dims == 2 else (t,)

    def columns(self, frames_bool: torch.Tensor, how: str) -> torch.Tensor:
        """``[B, T]`` bool per frame -> ``[B, T/pt]`` per time column: its first frame (``"first"``) or any."""
        cols = frames_bool.reshape(frames_bool.shape[0], -1, self.pt)
        return cols[..., 0] if how == "first" else cols.any(dim=-1)

    def eligible(self, w: Window) -> torch.Tensor:
        """``[B, *shape]`` bool: positions whose first frame is a frame of the clip (not padding)."""
        col = self.columns(w.real, "first")
        return col[:, None, :].expand(-1, self.shape[0], -1).contiguous() if self.dims == 2 else col

    def voiced(self, w: Window) -> torch.Tensor:
        """``[B, T/pt]`` bool: time columns with a voiced frame (the ``voiced`` side input)."""
        return self.columns(w.voiced, "any")

    def cells(self, mask: torch.Tensor) -> torch.Tensor:
        """A ``[B, *shape]`` (or flat ``[B, L]``) mask -> ``[B, F, T]`` bool over mel bins x frames."""
        B = mask.shape[0]
        m = mask.reshape(B, *self.shape)
        if self.dims == 1:
            m = m[:, None, :]
        m = m.repeat_interleave(self.pt, dim=2)
        return m.repeat_interleave(self.pf, dim=1) if self.dims == 2 else m.expand(B, self.n_mels, self.frames)


def interp_time(spec: torch.Tensor, visible: torch.Tensor) -> torch.Tensor:
    """Linear interpolation along time of each mel bin between its nearest visible cells.

    Args:
        spec: ``[B, F, T]``; visible: ``[B, F, T]`` bool.

    Returns:
        ``[B, F, T]``: visible cells unchanged; a hidden cell between visible ones interpolated,
        before the first / after the last visible one copied from it, 0 (the bin's train mean in
        normalised units) in a bin with no visible cell.
    """
    B, Fm, T = spec.shape
    t = torch.arange(T).expand(B, Fm, T)
    prev = torch.where(visible, t, torch.full_like(t, -1)).cummax(dim=2).values
    nxt = torch.where(visible, t, torch.full_like(t, T)).flip(2).cummin(dim=2).values.flip(2)
    has_p, has_n = prev >= 0, nxt < T
    vp = spec.gather(2, prev.clamp(0, T - 1))
    vn = spec.gather(2, nxt.clamp(0, T - 1))
    w = (t - prev).float() / (nxt - prev).clamp_min(1).float()
    out = torch.where(has_p & has_n, vp + (vn - vp) * w, torch.where(has_p, vp, torch.where(has_n, vn, torch.zeros_like(spec))))
    return torch.where(visible, spec, out)


# --------------------------------------------------------------------------- previews (UI, pre-flight)


def _spec_and_grid(cfg: RunConfig, info_rate: int) -> tuple[FeatureSpec, Grid]:
    task = get_task_class(cfg.task)
    return spec_and_grid(cfg.data.audio, info_rate, *task.patch(cfg), task.grid_dims)


def spec_and_grid(audio: AudioConfig, rate: int, pf: int, pt: int, dims: int) -> tuple[FeatureSpec, Grid]:
    """The feature settings of ``data.audio`` at ``rate`` Hz and the mask grid of ``pf`` mel bins x
    ``pt`` frames per position (``dims`` 2: patches; 1: frame tokens, ``pf`` ignored).

    Raises:
        ConfigError: as :meth:`FeatureSpec.from_config`, or ``pf`` does not divide ``data.audio.n_mels``.
    """
    spec = FeatureSpec.from_config(audio, rate)
    T = window_frames(audio, spec, pt)
    if dims == 2 and spec.n_mels % pf:
        fits = [p for p in range(1, spec.n_mels + 1) if spec.n_mels % p == 0]
        raise ConfigError(f"model.patch_size: {pf} does not divide the {spec.n_mels} mel bins (data.audio.n_mels); "
                          f"sizes that fit: {', '.join(map(str, fits))}")
    return spec, Grid(spec.n_mels, T, pf if dims == 2 else spec.n_mels, pt, dims)


def get_task_class(name: str) -> type["_AudioTask"]:
    from engine.tasks import get_task

    t = get_task(name)
    if not issubclass(t, _AudioTask):
        raise ConfigError(f"task: {name!r} is not an audio task")
    return t


#: SpecAugment's width parameters, in the paper's units, and the grid's cell size along their axis:
#: F in mel bins (``Grid.pf`` per row), T in frames (``Grid.pt`` per column).
SPEC_WIDTHS = {"F": "pf", "T": "pt"}


def grid_masking(cfg: RunConfig, grid: Grid):
    """``cfg.masking`` with SpecAugment's ``F`` (mel bins) and ``T`` (frames) counted in the grid's
    positions: ``F // pf`` rows and ``T // pt`` columns (whole patches or frame tokens; a width
    smaller than one position hides none). ``p`` is a fraction and ``mF``/``mT`` are counts, so
    they stand. Other strategies, and grids of single bins and frames, are returned as they are."""
    params = cfg.masking.params or {}
    scaled = {k: int(params[k]) // getattr(grid, cell) for k, cell in SPEC_WIDTHS.items()
              if k in params and getattr(grid, cell) > 1}
    if not scaled or cfg.masking.strategy not in ("specaugment", "time_mask", "freq_mask"):
        return cfg.masking
    return cfg.masking.model_copy(update={"params": {**params, **scaled}})


def draw_masks(cfg: RunConfig, grid: Grid, w: Window, generator: torch.Generator, ratio: float | None = None) -> torch.Tensor:
    """The run's masks of a batch of windows: ``[B, *grid.shape]`` bool (padding never masked;
    SpecAugment's widths in mel bins and frames, :func:`grid_masking`)."""
    return draw_mask(grid_masking(cfg, grid), (len(w.rows), *grid.shape), generator, grid.eligible(w),
                     ratio=cfg.masking.ratio if ratio is None else ratio, voiced=grid.voiced(w))


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


def vis_rows(ds, n: int) -> np.ndarray:
    """The dataset rows a run shows in its samples and every preview shows: ``n`` validation clips
    (train clips when there is no validation split) chosen by :func:`engine.data.representative`."""
    from engine.data import representative

    rows = ds.indices("val" if ds.info.n_val else "train")
    return rows[representative(ds.labels[rows], n)]


def preview(cfg: RunConfig, n: int, workspace=None) -> AudioPreview:
    """The run's visualisation windows and masks for ``cfg`` (what its samples will show).

    The masks are ``draw_mask`` of the first windows of :func:`vis_rows` from
    ``torch.Generator().manual_seed(train.seed)``, the call the run's :meth:`_AudioTask.sample`
    makes (masks depend on the frames' positions and voicing, not on the normalisation).

    Raises:
        DatasetError, ConfigError: unknown dataset, a grid or strategy that does not fit.
    """
    from engine.data import load_dataset

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


def first_windows(ds, rows: np.ndarray, spec: FeatureSpec, grid: Grid) -> tuple[ClipFeatures, Window]:
    """The first window of each clip in ``rows``, log-mel not normalised (mean 0, std 1)."""
    feats = ClipFeatures([ds.clip(int(i)) for i in rows], spec, stats=(np.zeros(spec.n_mels), np.ones(spec.n_mels)))
    return feats, feats.window(torch.arange(len(rows)), torch.zeros(len(rows), dtype=torch.int64), grid.frames)


def train_masks(cfg: RunConfig, n: int, workspace=None) -> tuple[torch.Tensor, torch.Tensor]:
    """Masks of ``cfg`` over the first windows of ``n`` train clips (:func:`engine.data.representative`),
    from ``torch.Generator().manual_seed(train.seed)``, for Mask lab's statistics.

    Returns:
        ``(mask [n, *grid] bool, eligible [n, *grid] bool)``.
    """
    from engine.data import load_dataset, representative

    ds = load_dataset(cfg.data.dataset, workspace)
    spec, grid = _spec_and_grid(cfg, ds.rate)
    rows = ds.indices("train")
    _, w = first_windows(ds, rows[representative(ds.labels[rows], n)], spec, grid)
    return draw_masks(cfg, grid, w, torch.Generator().manual_seed(cfg.train.seed)), grid.eligible(w)


def spectrogram_arrays(feats: ClipFeatures, grid: Grid, w: Window, mask: torch.Tensor, pred: torch.Tensor,
                       clips: list[np.ndarray]) -> dict[str, np.ndarray]:
    """What a sample stores of a batch of windows and a model's prediction (the arrays the
    dashboard's audio views draw and play).

    Args:
        feats: the run's features; grid: its mask grid; w: the windows (``B`` clips, first window);
        mask: ``[B, *grid.shape]`` bool; pred: predicted normalised log-mel ``[B, F, T]``;
        clips: the ``B`` clips' waveforms (float32, for the original's player).

    Returns:
        ``spec``, ``pred``: float16 ``[B, F, T]`` natural-log mel (denormalised); ``mask``: bool
        ``[B, F, T]`` the hidden cells of the clip (never padding); ``grid_mask``: ``mask`` on the
        grid; ``real``: bool ``[B, T]``; ``wave``, ``wave_gl``, ``wave_recon``: int16 ``[B, (T - 1) * hop]``
        the window's samples, Griffin-Lim of the original spectrogram and of the reconstruction
        (the prediction at hidden cells, the original elsewhere).
    """
    pred = pred.float().cpu()
    hidden = grid.cells(mask) & w.real[:, None, :]
    pasted = torch.where(hidden, pred, w.spec)
    spec, rec = feats.denormalize(w.spec), feats.denormalize(pasted)
    inv = feats.logmel_fn
    n = (grid.frames - 1) * feats.spec.hop
    waves = np.stack([feats.wave_window(c, 0, grid.frames) for c in clips]) if clips else np.zeros((0, n), np.float32)
    as16 = lambda x: np.round(np.clip(x, -1, 1) * PCM).astype(np.int16)  # noqa: E731
    return {"spec": spec.numpy().astype(np.float16), "pred": feats.denormalize(pred).numpy().astype(np.float16),
            "mask": hidden.numpy(), "grid_mask": mask.numpy(), "real": w.real.numpy(), "wave": as16(waves),
            "wave_gl": as16(inv.invert(spec, n).numpy()), "wave_recon": as16(inv.invert(rec, n).numpy())}


def spec_sse(pred: torch.Tensor, spec: torch.Tensor, cells: torch.Tensor, real: torch.Tensor) -> tuple[float, int]:
    """Squared error of a predicted normalised log-mel ``pred [B, F, T]`` against ``spec [B, F, T]``
    over the hidden cells ``cells [B, F, T]`` that hold frames of the clip (``real [B, T]``; padding
    is never scored): ``(sum, cells scored)``, to pool over batches (the ``val_spec_mse`` rule)."""
    scored = cells & real[:, None, :]
    return float(((pred.float().cpu() - spec) ** 2)[scored].sum()), int(scored.sum())


def check_strategy(cfg: RunConfig, grid: Grid, task: str) -> None:
    """Refuse a ``masking.strategy`` that does not apply to ``grid`` (audio patches or frame tokens) of ``task``."""
    s = get_masking(cfg.masking.strategy)
    kind = "spec-2d" if grid.dims == 2 else "frames-1d"
    if not s.works_on(kind):
        raise ConfigError(f"masking.strategy: {s.name!r} does not apply to the {'patch grid' if grid.dims == 2 else 'frame tokens'} "
                          f"of {task}; strategies for it: {', '.join(strategies_on(kind))}")


def check_masks(cfg: RunConfig, grid: Grid, w: Window, units: str) -> None:
    """A probe batch of real windows ``w`` gets trainable masks (:func:`engine.tasks.checks.masking_problem`
    over the positions that hold frames; ``units``: their plural for the message) at
    ``masking.ratio`` and, with a schedule, ``masking.final_ratio``.

    Raises:
        ConfigError: naming the field to change.
    """
    from engine.tasks.checks import masking_problem

    ratios = [cfg.masking.ratio] + ([cfg.masking.final_ratio] if cfg.masking.schedule != "constant" else [])
    for r in ratios:
        probe = draw_masks(cfg, grid, w, torch.Generator().manual_seed(0), r)
        problem = masking_problem(cfg.masking, probe, ratio=r, unit=units, eligible=grid.eligible(w))
        if problem:
            raise ConfigError(problem + _width_note(cfg, grid))


def _widths(cfg: RunConfig, grid: Grid) -> tuple[list[str], list[str]]:
    """SpecAugment's widths that ``grid`` counts in positions (:func:`grid_masking`): their keys
    (``"F"``, ``"T"``) and, for each, ``"F=27 mel bins = 3 rows of 8 mel bins"``."""
    used, given = grid_masking(cfg, grid).params or {}, cfg.masking.params or {}
    unit = {"F": ("mel bins", "rows"), "T": ("frames", "columns" if grid.dims == 2 else "frame tokens")}
    keys = [k for k in SPEC_WIDTHS if k in given and used.get(k) != given.get(k)]
    return keys, [f"{k}={given[k]} {unit[k][0]} = {used[k]} {unit[k][1]} of {getattr(grid, SPEC_WIDTHS[k])} "
                  f"{unit[k][0]}" for k in keys]


def width_text(cfg: RunConfig, grid: Grid) -> str:
    """What SpecAugment's widths come to on ``grid`` (:func:`grid_masking`), for the dashboard's
    caption: ``"F=27 mel bins = 3 rows of 8 mel bins; T=40 frames = 5 columns of 8 frames"``. ``""``
    for other strategies and for a width the grid does not scale (a frame-token grid's F, or a grid
    of single bins and frames)."""
    return "; ".join(_widths(cfg, grid)[1])


def _width_note(cfg: RunConfig, grid: Grid) -> str:
    """For SpecAugment on a grid of patches or frame tokens: what its F and T come to there."""
    changed, notes = _widths(cfg, grid)
    if not changed:
        return ""
    units = {"F": "mel bins", "T": "frames"}
    fix = " or ".join(f"{k} >= {getattr(grid, SPEC_WIDTHS[k])}" for k in changed)
    counts = "count" if len(changed) > 1 else "counts"
    return (f" ({'; '.join(notes)}: {' and '.join(changed)} {counts} {' and '.join(units[k] for k in changed)}; "
            f"{fix} hides whole ones)")


SPEC_BASELINES = ("mean_spec", "interp_spec")
"""Trivial predictors of hidden log-mel cells: each bin's train mean; :func:`interp_time`."""


def spec_baseline_sse(spec: torch.Tensor, cells: torch.Tensor, real: torch.Tensor) -> dict[str, tuple[float, int]]:
    """:func:`spec_sse` of each of :data:`SPEC_BASELINES` on normalised log-mel ``spec [B, F, T]``
    with hidden ``cells [B, F, T]`` (``real [B, T]``: frames of the clip): ``mean_spec`` predicts 0
    (the bin's train mean in normalised units), ``interp_spec`` interpolates in time between the
    visible real cells of the same bin."""
    visible = ~cells & real[:, None, :]
    return {"mean_spec": spec_sse(torch.zeros_like(spec), spec, cells, real),
            "interp_spec": spec_sse(interp_time(spec, visible), spec, cells, real)}


# --------------------------------------------------------------------------- the tasks


class _AudioTask(Task):
    """What both audio tasks share: features, windows, masks, validation, samples, probes."""

    modality = "audio"
    default_loss = "mse"
    sample_kind = "audio_spec"
    train_defaults = {"steps": 1000, "batch_size": 32, "lr": 1.5e-3, "warmup_steps": 50, "eval_interval": 100}
    data_sections = ("audio",)
    headline = ("val_spec_mse", "min")
    grid_dims: int = 2
    default_patch: int = 8

    @classmethod
    def quality_notes(cls, config: dict) -> list[str]:
        """How the figures next to the baselines were measured, for the dashboard's table."""
        return [f"log-mel MSE over the masked frames of the clips (never the padding), in units of each mel bin's "
                f"train standard deviation, on at most {EVAL_MAX_ROWS} validation clips (first window)",
                "baselines: mean spec = each bin's train mean; interp spec = linear interpolation in time "
                "between the nearest visible frames"]

    # --- config time ------------------------------------------------------------------------------

    @classmethod
    def resolve(cls, cfg: RunConfig) -> None:
        """Base defaults, plus ``data.audio`` (defaults when unset) and ``model.patch_size``."""
        if cfg.data.audio is None:
            cfg.data.audio = AudioConfig()
        if cfg.model.patch_size is None:
            cfg.model.patch_size = cls.default_patch
        super().resolve(cfg)

    @classmethod
    def patch(cls, cfg: RunConfig) -> tuple[int, int]:
        """``(P_f, P_t)``: mel bins and frames per grid position."""
        return cfg.model.patch_size, cfg.model.patch_size

    @classmethod
    def check(cls, cfg: RunConfig, info, workspace=None) -> None:
        """The features fit the dataset's rate, the patch tiles the window, the strategy applies to
        the task's grid, and a probe batch of real windows gets trainable masks
        (:func:`engine.tasks.checks.masking_problem` over the positions that hold frames) at
        ``masking.ratio`` and, with a schedule, ``masking.final_ratio``."""
        from engine.data import load_dataset

        rate = int(info.stats.get("sample_rate", 0))
        if rate <= 0:
            raise DatasetError(f"data.dataset: {info.name!r} has no sample rate in its metadata; import it again")
        spec, grid = _spec_and_grid(cfg, rate)
        check_strategy(cfg, grid, cls.name)
        ds = load_dataset(cfg.data.dataset, workspace)
        if ds.info.n_train == 0:
            raise ConfigError(f"data.dataset: {ds.info.name!r} has no train clips")
        _, w = first_windows(ds, ds.indices("train")[:PROBE_ROWS], spec, grid)
        check_masks(cfg, grid, w, f"{cls.unit}es" if cls.unit == "patch" else f"{cls.unit}s")

    # --- run time ---------------------------------------------------------------------------------

    def __init__(self, cfg: RunConfig, device: torch.device, workspace=None):
        from engine.data import load_dataset
        from engine.models import build_model
        from engine.objectives import Objective

        self.cfg, self.device = cfg, device
        ds = load_dataset(cfg.data.dataset, workspace)
        self._ds = ds
        self.class_names = tuple(ds.info.class_names)
        self.spec, self.grid = _spec_and_grid(cfg, ds.rate)
        self.train_rows = ds.indices("train")
        if len(self.train_rows) == 0:
            raise DatasetError(f"data.dataset: {ds.info.name!r} has no train clips")
        self.val_rows = ds.indices("val") if ds.info.n_val else self.train_rows  # tiny sets: evaluate on train
        # Frames kept in <workspace>/features (memory-mapped; computed at the first run on this
        # dataset and spec), so this process's memory does not grow with the dataset.
        self.feats = ClipFeatures(DatasetClips(ds), self.spec, stats_rows=self.train_rows,
                                  store=feature_store(ds.info.source_hash, self.spec, len(ds), workspace))
        self.n_train = len(self.train_rows)
        self.batch_size = min(cfg.train.batch_size, self.n_train)
        g = self.grid
        self.model = build_model(cfg, n_mels=g.n_mels, frames=g.frames, patch=(g.pf, g.pt)).to(device)
        self.objective = Objective.from_config(cfg.objective, self.outputs(cfg))
        ev = torch.as_tensor(self.val_rows[:EVAL_MAX_ROWS])
        gen = torch.Generator().manual_seed(cfg.train.seed + 10_000)
        self.eval_batches = []
        for i in range(0, len(ev), EVAL_CHUNK):
            w = self.feats.window(ev[i : i + EVAL_CHUNK], torch.zeros(len(ev[i : i + EVAL_CHUNK]), dtype=torch.int64), g.frames)
            self.eval_batches.append((w, draw_masks(cfg, g, w, gen)))

    def run_info(self) -> dict:
        return {"dataset_hash": self._ds.info.source_hash, "sample_rate": self.spec.sample_rate, "n_train": self.n_train,
                "n_mels": self.grid.n_mels, "frames": self.grid.frames, "grid": list(self.grid.shape),
                "model_dims": {"n_mels": self.grid.n_mels, "frames": self.grid.frames, "patch": [self.grid.pf, self.grid.pt]},
                "norm_mean": [round(float(v), 6) for v in self.feats.mean],
                "norm_std": [round(float(v), 6) for v in self.feats.std]}  # fmt: skip

    def _model_in(self, w: Window) -> torch.Tensor:
        return w.spec[:, None].to(self.device)  # (B, 1, F, T)

    def train_loss(self, idx, generator, ratio):
        rows = torch.as_tensor(self.train_rows)[idx]
        starts = self.feats.random_starts(rows, self.grid.frames, generator)
        w = self.feats.window(rows, starts, self.grid.frames)
        mask = draw_masks(self.cfg, self.grid, w, generator, ratio)
        out = self.model(self._model_in(w), mask.flatten(1).to(self.device))
        loss, parts = self.objective(out)
        logs = {f"loss/{k}": v for k, v in parts.items()}
        loss, logs = self._extra_loss(out, loss, logs)
        eligible = self.grid.eligible(w)
        return loss, {"mask_ratio": mask.sum() / eligible.sum().clamp_min(1), **logs}

    def _extra_loss(self, out, loss, logs):
        """Terms a task adds to its objective (the EMA target's readout). Default: none."""
        return loss, logs

    def _predict(self, w: Window, mask: torch.Tensor) -> tuple[dict, torch.Tensor]:
        """``(model outputs, predicted normalised log-mel [B, F, T])`` of a batch of windows."""
        raise NotImplementedError

    @torch.no_grad()
    def evaluate(self) -> dict[str, float]:
        total = sq = n = cells = 0.0
        for w, mask in self.eval_batches:
            out, pred = self._predict(w, mask)
            loss, _ = self.objective(out)
            total += float(loss) * len(mask)
            n += len(mask)
            s, c = spec_sse(pred, w.spec, self.grid.cells(mask), w.real)
            sq, cells = sq + s, cells + c
        return {"val_loss": total / max(n, 1), "val_spec_mse": sq / max(cells, 1)}

    @torch.no_grad()
    def baselines(self) -> dict[str, float]:
        """Spectral MSE on the same val masks of ``mean_spec`` (each masked cell = its mel bin's
        train mean, 0 in normalised units) and ``interp_spec`` (:func:`interp_time` from the visible cells)."""
        sse = dict.fromkeys(SPEC_BASELINES, 0.0)
        cells = 0
        for w, mask in self.eval_batches:
            for k, (s, c) in spec_baseline_sse(w.spec, self.grid.cells(mask), w.real).items():
                sse[k] += s
            cells += c
        return {f"baseline/{k}_mse": v / max(cells, 1) for k, v in sse.items()}

    @torch.no_grad()
    def sample(self, step: int) -> Sample:
        """``train.num_vis`` val clips (:func:`vis_rows`, first window) with :func:`preview`'s masks: log-mel
        of the original, the prediction, the masked cells, and Griffin-Lim audio (int16) of the
        original spectrogram and of the reconstruction with the visible cells pasted back."""
        rows = torch.as_tensor(vis_rows(self._ds, self.cfg.train.num_vis))
        w = self.feats.window(rows, torch.zeros(len(rows), dtype=torch.int64), self.grid.frames)
        mask = draw_masks(self.cfg, self.grid, w, torch.Generator().manual_seed(self.cfg.train.seed))
        _, pred = self._predict(w, mask)
        arrays = spectrogram_arrays(self.feats, self.grid, w, mask, pred, [self._ds.clip(int(r)) for r in rows])
        return Sample(step=step, kind="audio_spec", arrays={
            **arrays, "labels": self._ds.labels[rows.numpy()].astype(np.int64),
        }, meta={"class_names": list(self.class_names), "sample_rate": self.spec.sample_rate, "hop": self.spec.hop,
                 "grid": list(self.grid.shape), "patch": [self.grid.pf, self.grid.pt], "unit": self.unit,
                 "transcripts": [self._ds.transcript(int(r)) for r in rows]})  # fmt: skip

    def _keep(self, w: Window) -> torch.Tensor:
        return self.grid.eligible(w).flatten(1)

    @torch.no_grad()
    def features(self, split: str, max_rows: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Every window of each clip through the encoder (nothing masked), the mean and standard
        deviation of the window's tokens (padding excluded; statistics pooling, the same statistics
        as the log-mel baseline :func:`engine.eval.logmel_stats`), the windows averaged weighted by
        their real frames. ``([N, 2D], [N])``."""
        rows = self._ds.indices(split)[:max_rows]
        row, start = self.feats.windows(rows, self.grid.frames)
        out, weight = [], []
        was = self.model.training
        self.model.eval()
        for i in range(0, len(row), FEATURE_CHUNK):
            w = self.feats.window(row[i : i + FEATURE_CHUNK], start[i : i + FEATURE_CHUNK], self.grid.frames)
            out.append(self.model.features(self._model_in(w), self._keep(w).to(self.device), stats=True).float().cpu())
            weight.append(w.real.sum(dim=1).float())
        self.model.train(was)
        if not out:
            return np.zeros((0, 1), np.float32), np.zeros(0, np.int64)
        f, wt = torch.cat(out), torch.cat(weight)
        pos = {int(r): k for k, r in enumerate(rows)}
        idx = torch.tensor([pos[int(r)] for r in row])
        num = torch.zeros(len(rows), f.shape[1]).index_add_(0, idx, f * wt[:, None])
        den = torch.zeros(len(rows)).index_add_(0, idx, wt).clamp_min(1e-9)
        return (num / den[:, None]).numpy().astype(np.float32), self._ds.labels[rows].astype(np.int64)

    def finetune_inputs(self, max_rows: int | None = None):
        """The first window of each of the first ``max_rows`` clips per split; the encoder's tokens
        pooled as the probes pool them (mean and standard deviation, padding left out)."""
        from engine.eval.finetune import FinetuneInputs, pooled_features

        ds = self._ds
        rows = {s: torch.as_tensor(ds.indices(s)[:max_rows]) for s in ("train", "val")}

        def encode(model, split, pos):
            r = rows[split][pos]
            w = self.feats.window(r, torch.zeros(len(r), dtype=torch.int64), self.grid.frames)
            dev = next(model.parameters()).device
            return pooled_features(model)(w.spec[:, None].to(dev), self._keep(w).to(dev), stats=True)

        return FinetuneInputs(ds.labels[rows["train"].numpy()].astype(np.int64),
                              ds.labels[rows["val"].numpy()].astype(np.int64), encode)

    @torch.no_grad()
    def reconstruction_quality(self) -> dict[str, dict[str, float]]:
        """Spectral error (:class:`engine.eval.reconstruction.SpectralSums`) of the checkpoint,
        ``mean_spec`` and ``interp_spec`` over the masked real cells of the fixed validation windows."""
        from engine.eval.reconstruction import SpectralSums

        sums = {k: SpectralSums() for k in ("trained", "mean_spec", "interp_spec")}
        mean, std = self.feats.mean.float(), self.feats.std.float()
        for w, mask in self.eval_batches:
            _, pred = self._predict(w, mask)
            hidden = self.grid.cells(mask)
            scored = hidden & w.real[:, None, :]
            visible = ~hidden & w.real[:, None, :]
            preds = {"trained": pred.float().cpu(), "mean_spec": torch.zeros_like(w.spec),
                     "interp_spec": interp_time(w.spec, visible)}
            for name, p in preds.items():
                sums[name].add(p, w.spec, scored, mean, std)
        return {k: v.figures() for k, v in sums.items()}

    def raw_features(self, max_rows: int | None = None):
        """The raw-input baseline of the evaluation: each clip's mean and standard deviation of every
        normalised log-mel bin over its frames (:func:`engine.eval.logmel_stats`, SUPERB's FBANK
        baseline), ``X float32 [N, 2F]`` for the first ``max_rows`` clips of each split (the rows
        :meth:`features` uses)."""
        from engine.eval.audio_baselines import logmel_stats

        out = []
        for split in ("train", "val"):
            rows = self._ds.indices(split)[:max_rows]
            out.append((logmel_stats(self.feats, rows), self._ds.labels[rows].astype(np.int64)))
        return out[0], out[1]


@register_task
class AudioMAETask(_AudioTask):
    """Masked spectrogram patches with an AudioMAE ViT. See the module docstring."""

    name = "audio_mae"
    archs = ("audio_mae_vit",)
    unit = "patch"
    params = AudioMAEParams
    grid_dims = 2
    default_patch = 8
    summary = "masked spectrogram patches: AudioMAE, ViT encoder on the visible patches (Huang et al. 2022)"

    @classmethod
    def patch(cls, cfg: RunConfig) -> tuple[int, int]:
        pt = AudioMAEParams(**cfg.task_params).patch_frames
        return cfg.model.patch_size, pt or cfg.model.patch_size

    def _predict(self, w, mask):
        out = self.model(self._model_in(w), mask.flatten(1).to(self.device))
        pred = out["pred"].float()
        if self.model.norm_pix_loss:  # back to the spectrogram with each true patch's statistics (as MAE's display)
            t = self.model.patchify(self._model_in(w)).float()
            pred = pred * (t.var(dim=-1, keepdim=True) + 1e-6).sqrt() + t.mean(dim=-1, keepdim=True)
        return out, self.model.unpatchify(pred)[:, 0]


@register_task
class AudioFramesTask(_AudioTask):
    """Masked frame prediction (mel frames or an EMA teacher's features). See the module docstring."""

    name = "audio_frames"
    archs = ("frame_transformer",)
    unit = "frame token"
    params = FrameParams
    grid_dims = 1
    default_patch = 2
    summary = ("masked frame prediction: frames or an EMA teacher's features from the rest "
               "(wav2vec 2.0, Baevski et al. 2020; data2vec, Baevski et al. 2022)")

    @classmethod
    def outputs(cls, cfg: RunConfig) -> set[str]:
        return {"pred", "target", "mask"}

    def after_step(self, step: int) -> None:
        """data2vec's teacher update (nothing for the mel target)."""
        self.model.ema_update(step)

    def _extra_loss(self, out, loss, logs):
        if "mel_pred" not in out:
            return loss, logs
        from engine.objectives import masked_mse

        readout = masked_mse(out["mel_pred"], out["mel_target"], out["mask"])
        return loss + readout, {**logs, "loss/readout": float(readout.detach())}

    def _predict(self, w, mask):
        out = self.model(self._model_in(w), mask.flatten(1).to(self.device))
        tokens = out["pred"] if "mel_pred" not in out else out["mel_pred"]
        return out, self.model.untokenize(tokens.float())[:, 0]
