"""What the audio tasks, their previews and the audio-text pairs share: the mask grid over a
log-mel window (:class:`Grid`), the run's masks of a batch of windows (:func:`draw_masks`), the
spectrogram sample arrays, the scored cells and the trivial predictors, and the pre-flight checks
of a strategy and of probe masks."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from engine.audio.features import ClipFeatures, FeatureSpec, Window, window_frames
from engine.config import AudioConfig, RunConfig
from engine.data import representative
from engine.errors import ConfigError
from engine.masking import attention_inputs, draw_mask, get_masking, strategies_on
from engine.tasks.checks import masking_problem

EVAL_MAX_ROWS = 1024  # val metrics use at most this many val clips (first window each)
EVAL_CHUNK = 128
PROBE_ROWS = 128  # clips whose windows probe a config in the pre-flight check
FEATURE_CHUNK = 128
PCM = 32767.0


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
    SpecAugment's widths in mel bins and frames, :func:`grid_masking`; ``attention``: uniform random
    scores from ``generator``, no model gives an audio run attention, :func:`engine.masking.attention_inputs`)."""
    masking, shape = grid_masking(cfg, grid), (len(w.rows), *grid.shape)
    return draw_mask(masking, shape, generator, grid.eligible(w), ratio=cfg.masking.ratio if ratio is None else ratio,
                     voiced=grid.voiced(w), **attention_inputs(masking, shape, generator))


def vis_rows(ds, n: int) -> np.ndarray:
    """The dataset rows a run shows in its samples and every preview shows: ``n`` validation clips
    (train clips when there is no validation split) chosen by :func:`engine.data.representative`."""
    rows = ds.indices("val" if ds.info.n_val else "train")
    return rows[representative(ds.labels[rows], n)]


def first_windows(ds, rows: np.ndarray, spec: FeatureSpec, grid: Grid) -> tuple[ClipFeatures, Window]:
    """The first window of each clip in ``rows``, log-mel not normalised (mean 0, std 1)."""
    feats = ClipFeatures([ds.clip(int(i)) for i in rows], spec, stats=(np.zeros(spec.n_mels), np.ones(spec.n_mels)))
    return feats, feats.window(torch.arange(len(rows)), torch.zeros(len(rows), dtype=torch.int64), grid.frames)


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
