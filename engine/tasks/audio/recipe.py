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

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field

from engine.audio.features import ClipFeatures, DatasetClips, FeatureSpec, Window, feature_store
from engine.config import AudioConfig, RunConfig
from engine.data import load_dataset
from engine.data.sampling import eval_rows
from engine.errors import ConfigError, DatasetError
from engine.eval.audio_baselines import logmel_stats
from engine.eval.finetune import FinetuneInputs, pooled_features
from engine.eval.reconstruction import SpectralSums
from engine.methods.collapse import TARGET_STD
from engine.methods.teacher import target_std
from engine.models import build_model
from engine.models.audio_frames import FrameParams  # audio_frames' task_params, kept with the model they build
from engine.objectives import Objective, masked_mse
from engine.store.samples import Sample
from engine.tasks.audio.common import (
    EVAL_CHUNK,
    EVAL_MAX_ROWS,
    FEATURE_CHUNK,
    PROBE_ROWS,
    SPEC_BASELINES,
    Grid,
    check_masks,
    check_strategy,
    draw_masks,
    first_windows,
    interp_time,
    spec_and_grid,
    spec_baseline_sse,
    spec_sse,
    spectrogram_arrays,
    vis_rows,
)
from engine.tasks.base import Task
from engine.tasks.registry import register_task


class AudioMAEParams(BaseModel):
    """Parameters of ``audio_mae``: the patch's time side."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    patch_frames: int | None = Field(None, ge=1, le=64,
                                     description="frames per patch (time side); None = model.patch_size (square patches)")


class AudioTask(Task):
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
    def spec_and_grid(cls, cfg: RunConfig, rate: int) -> tuple[FeatureSpec, Grid]:
        """The feature settings and mask grid of ``cfg`` at ``rate`` Hz (:func:`~engine.tasks.audio.common.spec_and_grid`
        with this task's patch and grid dimensions)."""
        return spec_and_grid(cfg.data.audio, rate, *cls.patch(cfg), cls.grid_dims)

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
        rate = int(info.stats.get("sample_rate", 0))
        if rate <= 0:
            raise DatasetError(f"data.dataset: {info.name!r} has no sample rate in its metadata; import it again")
        spec, grid = cls.spec_and_grid(cfg, rate)
        check_strategy(cfg, grid, cls.name)
        ds = load_dataset(cfg.data.dataset, workspace)
        if ds.info.n_train == 0:
            raise ConfigError(f"data.dataset: {ds.info.name!r} has no train clips")
        _, w = first_windows(ds, ds.indices("train")[:PROBE_ROWS], spec, grid)
        check_masks(cfg, grid, w, f"{cls.unit}es" if cls.unit == "patch" else f"{cls.unit}s")

    # --- run time ---------------------------------------------------------------------------------

    def __init__(self, cfg: RunConfig, device: torch.device, workspace=None):
        self.cfg, self.device = cfg, device
        ds = load_dataset(cfg.data.dataset, workspace)
        self._ds = ds
        self.class_names = tuple(ds.info.class_names)
        self.spec, self.grid = self.spec_and_grid(cfg, ds.rate)
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
        rows = eval_rows(self._ds, split, max_rows)
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
        """The first window of each clip the probes read (:func:`engine.data.sampling.eval_rows`); the encoder's tokens
        pooled as the probes pool them (mean and standard deviation, padding left out)."""
        ds = self._ds
        rows = {s: torch.as_tensor(eval_rows(ds, s, max_rows)) for s in ("train", "val")}

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
        baseline), ``X float32 [N, 2F]`` for the clips of each split that
        :meth:`features` reads."""
        out = []
        for split in ("train", "val"):
            rows = eval_rows(self._ds, split, max_rows)
            out.append((logmel_stats(self.feats, rows), self._ds.labels[rows].astype(np.int64)))
        return out[0], out[1]


@register_task
class AudioMAETask(AudioTask):
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
class AudioFramesTask(AudioTask):
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

        readout = masked_mse(out["mel_pred"], out["mel_target"], out["mask"])
        return loss + readout, {**logs, "loss/readout": float(readout.detach()),
                                TARGET_STD: target_std(out["target"], out["mask"])}  # the collapse watch

    def _predict(self, w, mask):
        out = self.model(self._model_in(w), mask.flatten(1).to(self.device))
        tokens = out["pred"] if "mel_pred" not in out else out["mel_pred"]
        return out, self.model.untokenize(tokens.float())[:, 0]
