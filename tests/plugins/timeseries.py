"""A whole modality registered from outside engine/: 1-D time series, masked-value modelling.

It proves that a modality is a plug-in: nothing under engine/ names it, and one registration (this
module in ``$MASKLAB_PLUGINS=tests.plugins.timeseries``) gives it

- a grid kind, ``steps-1d``, that *is a* ``seq-1d`` (so the span masker, written for tokens and
  frames, masks time steps without an edit to it);
- a dataset class (:class:`SeriesDataset`: float32 values ``[N, T]``, stored like every dataset);
- an importer that claims CSV files of numbers only (a text CSV still goes to the text importer),
  one series per row, an optional first ``label`` column (header ``label,...``);
- a task (``series_mae``): a small Transformer encoder sees every step (the masked ones as 0 plus a
  mask channel) and predicts the values of the masked steps, MSE over them; ``evaluate`` gives
  ``val_loss`` and ``val_mse``, with the trivial baselines ``mean`` (the train mean, 0 after the
  normalisation) and ``interp`` (linear interpolation between the nearest visible steps); probe
  features (the encoder's mean token), fine-tune inputs and reconstruction figures.

References: He et al. 2022 (masked autoencoding, loss on the masked positions only); Zerveas et
al. 2021, "A Transformer-based Framework for Multivariate Time Series Representation Learning"
(masked-value pretraining of a Transformer encoder on time series).
"""

from __future__ import annotations

import csv
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import numpy as np
import torch
from torch import nn

from engine.access.policy import permission
from engine.data import load_dataset
from engine.data.archive import import_outcome, import_target
from engine.data.dataset import DatasetInfo, LabelledRows, seeded_split
from engine.data.ingest import SourcePlan, check_options
from engine.data.storage import read_info, save_dataset, utc_now
from engine.errors import ConfigError, DatasetError
from engine.eval.finetune import FinetuneInputs, pooled_features
from engine.masking import draw_mask, get_masking, strategies_on
from engine.modalities import Importer, Modality, register_modality
from engine.modalities.grids import register_grid_kind
from engine.models import build_model, register_model
from engine.objectives import Objective
from engine.store.samples import Sample
from engine.tasks import Task, register_task
from engine.tasks.checks import masking_problem

MODALITY = "timeseries"
GRID = "steps-1d"
HEAD_ROWS = 5
"""Rows a CSV's first look reads to decide whether it is a CSV of numbers."""


# --- data -------------------------------------------------------------------------------------------


@dataclass(eq=False)
class SeriesDataset(LabelledRows):
    """Series of one length: ``values`` float32 ``[N, T]``, ``labels`` int64 ``[N]``, ``split`` uint8 ``[N]``."""

    ARRAYS: ClassVar[tuple[str, ...]] = ("values", "labels", "split")
    DTYPES: ClassVar[dict[str, type]] = {**LabelledRows.DTYPES, "values": np.float32}

    info: DatasetInfo
    values: np.ndarray
    labels: np.ndarray
    split: np.ndarray

    def tensors(self, split: str, limit: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """``(x float32 [n, T], y int64 [n])`` of the split's first ``limit`` rows."""
        rows = self.indices(split)[:limit]
        return torch.from_numpy(np.array(self.values[rows], np.float32)), torch.from_numpy(self.labels[rows].astype(np.int64))

    @classmethod
    def _own_problems(cls, info, arrays, n):
        v = arrays["values"]
        if v.dtype != np.float32 or v.ndim != 2 or v.shape[0] != n or not np.isfinite(v).all():
            return [f"values {v.dtype} {v.shape}, expected finite float32 ({n}, T)"]
        return []


def _read_rows(path: Path, label: str) -> tuple[bool, list[list[str]]]:
    """``(has_label_column, rows of cells)`` of a CSV; the header, when there is one, is left out."""
    with open(path, newline="", encoding="utf-8") as f:
        rows = [r for r in csv.reader(f) if r and any(c.strip() for c in r)]
    if not rows:
        raise DatasetError(f"{label}: no rows")
    header = not _numeric(rows[0])
    return header and rows[0][0].strip().lower() == "label", rows[1:] if header else rows


def _numeric(cells: list[str]) -> bool:
    try:
        [float(c) for c in cells]
    except ValueError:
        return False
    return True


def claims_csv(path: Path) -> bool:
    """Whether a ``.csv`` is a CSV of numbers: its first :data:`HEAD_ROWS` rows, after an optional
    header whose first cell is ``label``, are all numbers."""
    try:
        with open(path, newline="", encoding="utf-8") as f:
            rows = [r for _, r in zip(range(HEAD_ROWS), csv.reader(f)) if r]
    except (OSError, UnicodeDecodeError, csv.Error):
        return False
    if not rows:
        return False
    header = not _numeric(rows[0])
    if header and rows[0][0].strip().lower() != "label":
        return False
    body = rows[1:] if header else rows
    return bool(body) and all(_numeric(r) for r in body)


def read_series(path: Path, label: str) -> tuple[np.ndarray, np.ndarray, tuple[str, ...]]:
    """``(values float32 [N, T], labels int64 [N], class_names)`` of a CSV of numbers.

    Raises:
        DatasetError: a cell that is not a number, or rows of different lengths (naming the line).
    """
    labelled, rows = _read_rows(path, label)
    vals, labs = [], []
    for i, r in enumerate(rows, start=1):
        if not _numeric(r):
            raise DatasetError(f"{label}: row {i} holds a cell that is not a number")
        nums = [float(c) for c in r]
        labs.append(nums[0] if labelled else 0.0)
        vals.append(nums[1:] if labelled else nums)
    if len({len(v) for v in vals}) != 1:
        raise DatasetError(f"{label}: rows have different lengths {sorted({len(v) for v in vals})}; one series per row, all as long")
    classes = sorted({int(x) for x in labs})
    names = tuple(str(c) for c in classes) if labelled else ("series",)
    y = np.array([classes.index(int(x)) for x in labs], np.int64)
    return np.asarray(vals, np.float32), y, names


@dataclass
class SeriesImportReport:
    """What an import did (the fields every import report has)."""

    source: str
    dataset: DatasetInfo | None
    accepted: int
    rejected: list[tuple[str, str]] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)

    def summary(self) -> str:
        d = self.dataset
        return f"{self.source}: {self.accepted} series of {d.stats['length']} steps -> dataset {d.name!r}" if d else "nothing imported"


def inspect_series(path: Path, options, label: str):
    """The :class:`~engine.data.ingest.SourcePlan` of a CSV of numbers."""
    check_options(options, label, "series_csv", "a CSV of numbers")
    x, y, names = read_series(path, label)
    return SourcePlan(label, MODALITY, "csv of numbers", class_names=names, n_items=len(x),
                      label_counts={n: int((y == i).sum()) for i, n in enumerate(names)},
                      preview=[{"label": names[y[i]], "values": " ".join(f"{v:g}" for v in x[i, :8])} for i in range(min(5, len(x)))],
                      notes=[f"{x.shape[1]} steps per series, one series per row"])


@permission("data.import", import_target, import_outcome)
def import_series(path: str | os.PathLike[str], name: str | None = None, options=None, *, workspace=None,
                  overwrite: bool = False, source_label: str | None = None) -> SeriesImportReport:
    """Import a CSV of numbers as dataset ``name`` (seeded stratified split).

    Raises:
        DatasetError: as :func:`read_series`; an invalid or existing name.
    """
    path, label = Path(path), source_label or str(path)
    check_options(options, label, "series_csv", "a CSV of numbers")
    x, y, names = read_series(path, label)
    split = seeded_split(y, options.val_fraction, options.seed)
    info = DatasetInfo(name=name or path.stem.lower(), modality=MODALITY, source=f"upload:{path.name}", image_shape=None,
                       class_names=names, n_train=int((split == 0).sum()), n_val=int((split == 1).sum()),
                       created_at=utc_now(), description=f"{len(x)} series of {x.shape[1]} steps",
                       stats={"length": int(x.shape[1])})
    folder = save_dataset(SeriesDataset(info, x, y, split), workspace, overwrite=overwrite)

    return SeriesImportReport(label, read_info(folder), len(x))


def _run_import(path, name, options, **kw):
    for k in ("image_size", "fill", "geometry", "pad_fill", "progress"):
        kw.pop(k, None)
    return import_series(path, name, options, **kw)


# --- model ------------------------------------------------------------------------------------------


class SeriesTransformer(nn.Module):
    """A small Transformer encoder over scalar steps: ``x [B, T]`` and ``mask [B, T]`` (True = hidden)
    -> ``{"pred", "target", "mask"}`` with ``D = 1`` per step. Hidden steps enter as 0 with the mask
    as a second channel; a learned position embedding per step."""

    def __init__(self, length: int, dim: int = 32, depth: int = 2, heads: int = 4):
        super().__init__()
        self.embed = nn.Linear(2, dim)
        self.pos = nn.Parameter(torch.randn(1, length, dim) * 0.02)
        layer = nn.TransformerEncoderLayer(dim, heads, 2 * dim, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, depth, enable_nested_tensor=False)
        self.head = nn.Linear(dim, 1)

    def forward_encoder(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """``[B, T]``, ``[B, T]`` -> tokens ``[B, T, D]``."""
        m = mask.float()
        return self.encoder(self.embed(torch.stack([x * (1 - m), m], -1)) + self.pos)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> dict[str, torch.Tensor]:
        pred = self.head(self.forward_encoder(x, mask))
        return {"pred": pred, "target": x.unsqueeze(-1), "mask": mask}

    @torch.no_grad()
    def features(self, x: torch.Tensor) -> torch.Tensor:
        """Mean encoder token of the unmasked series: ``[B, T]`` -> ``[B, D]``."""
        return self.forward_encoder(x, torch.zeros_like(x, dtype=torch.bool)).mean(1)


PRESETS = {"tiny": {"dim": 32, "depth": 2, "heads": 4}}


@register_model("series_transformer", PRESETS)
def _build(cfg, *, length: int) -> SeriesTransformer:
    return SeriesTransformer(length, **PRESETS[cfg.model.preset])


# --- baselines --------------------------------------------------------------------------------------


def interp_visible(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Each hidden step linearly interpolated between its nearest visible neighbours (held at the
    ends; 0 for a row with no visible step). ``[B, T]`` -> ``[B, T]``."""
    out = torch.zeros_like(x)
    t = np.arange(x.shape[1])
    for i in range(len(x)):
        vis = ~mask[i].numpy()
        if vis.any():
            out[i] = torch.from_numpy(np.interp(t, t[vis], x[i].numpy()[vis]).astype(np.float32))
    return out


# --- task -------------------------------------------------------------------------------------------


@register_task
class SeriesMAETask(Task):
    name = "series_mae"
    modality = MODALITY
    archs = ("series_transformer",)
    default_loss = "mse"
    unit = "step"
    sample_kind = "series"
    summary = "masked-value modelling of time series with a small Transformer (Zerveas et al. 2021)"

    @classmethod
    def check(cls, cfg, info, workspace=None) -> None:
        s = get_masking(cfg.masking.strategy)
        if not s.works_on(GRID):
            raise ConfigError(f"masking.strategy: {s.name!r} does not mask time steps; "
                              f"strategies for them: {', '.join(strategies_on(GRID))}")
        probe = draw_mask(cfg.masking, (64, info.stats["length"]), torch.Generator().manual_seed(0))
        problem = masking_problem(cfg.masking, probe, unit="steps")
        if problem:
            raise ConfigError(problem)

    def __init__(self, cfg, device, workspace=None):
        self.cfg, self.device = cfg, device
        self._ds = ds = load_dataset(cfg.data.dataset, workspace)
        x, _ = ds.tensors("train")
        self.mean, self.std = float(x.mean()), float(x.std()) or 1.0
        self.x = self._norm(x).to(device)
        self.xv, self.yv = ds.tensors("val")
        self.xv = self._norm(self.xv).to(device)
        self.model = build_model(cfg, length=self.x.shape[1]).to(device)
        self.objective = Objective.from_config(cfg.objective, self.outputs(cfg))
        self.n_train = len(self.x)
        self.batch_size = min(cfg.train.batch_size, self.n_train)
        g = torch.Generator().manual_seed(cfg.train.seed + 10_000)
        self.val_mask = draw_mask(cfg.masking, tuple(self.xv.shape), g).to(device)

    def _norm(self, x: torch.Tensor) -> torch.Tensor:
        return (x - self.mean) / self.std

    def run_info(self) -> dict:
        return {"dataset_hash": self._ds.info.source_hash, "model_dims": {"length": int(self.x.shape[1])}}

    def train_loss(self, idx, generator, ratio):
        xb = self.x[idx.to(self.device)]
        mask = draw_mask(self.cfg.masking, tuple(xb.shape), generator, ratio=ratio).to(self.device)
        loss, _ = self.objective(self.model(xb, mask))
        return loss, {"mask_ratio": float(mask.float().mean())}

    def _predictions(self) -> dict[str, torch.Tensor]:
        """Every predictor's values ``[N_val, T]`` on the fixed val masks: ``trained`` and the baselines."""
        with torch.no_grad():
            trained = self.model(self.xv, self.val_mask)["pred"].squeeze(-1).cpu()
        xv, m = self.xv.cpu(), self.val_mask.cpu()
        return {"trained": trained, "mean": torch.zeros_like(xv), "interp": interp_visible(xv, m)}

    def _scores(self, pred: torch.Tensor) -> dict[str, float]:
        m = self.val_mask.cpu()
        d = (pred - self.xv.cpu())[m]
        return {"mse": float(d.pow(2).mean()), "mae": float(d.abs().mean())}

    def evaluate(self) -> dict[str, float]:
        was = self.model.training
        self.model.eval()
        with torch.no_grad():
            loss, _ = self.objective(self.model(self.xv, self.val_mask))
        self.model.train(was)
        return {"val_loss": float(loss), "val_mse": self._scores(self._predictions()["trained"])["mse"]}

    def baselines(self) -> dict[str, float]:
        preds = self._predictions()
        return {f"baseline/{k}": self._scores(preds[k])["mse"] for k in ("mean", "interp")}

    def reconstruction_quality(self) -> dict[str, dict[str, float]]:
        """MSE and MAE (normalised units) over the masked val steps: the model, ``mean`` and ``interp``."""
        was = self.model.training
        self.model.eval()
        out = {k: self._scores(p) for k, p in self._predictions().items()}
        self.model.train(was)
        return out

    def sample(self, step):
        with torch.no_grad():
            pred = self.model(self.xv[:4], self.val_mask[:4])["pred"].squeeze(-1).cpu().numpy()
        return Sample(step, "series", {"values": self.xv[:4].cpu().numpy(), "pred": pred,
                                        "mask": self.val_mask[:4].cpu().numpy()})

    def features(self, split, max_rows=None):
        x, y = self._ds.tensors(split, limit=max_rows)
        feats = self.model.features(self._norm(x).to(self.device)).float().cpu().numpy()
        return feats.astype(np.float32), y.numpy()

    def raw_features(self, max_rows=None):
        return tuple((self._norm(x).numpy().astype(np.float32), y.numpy())
                     for x, y in (self._ds.tensors(s, limit=max_rows) for s in ("train", "val")))

    def finetune_inputs(self, max_rows=None):
        xs = {s: self._ds.tensors(s, limit=max_rows) for s in ("train", "val")}

        def encode(model, split, pos):
            return pooled_features(model)(self._norm(xs[split][0][pos]).to(next(model.parameters()).device))

        return FinetuneInputs(xs["train"][1].numpy(), xs["val"][1].numpy(), encode)


# --- the one registration ----------------------------------------------------------------------------

register_grid_kind(GRID, 1, ("seq-1d",), "time steps of a series [B, T]")
register_modality(Modality(
    MODALITY, lambda: SeriesDataset, grids=(GRID,), summary="1-D time series, one per CSV row", ui="tests.plugins.timeseries_ui",
    importers=(Importer("series_csv", inspect_series, _run_import, files=(".csv",), claims_file=claims_csv,
                        columns=False, order=45),),
))
