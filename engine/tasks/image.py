"""Masked image modeling (``task: image_mim``): MAE or SimMIM on an image dataset's patch grid.

Units are ``P x P`` patches on the ``[B, h, w]`` grid; the masking strategy is any image strategy
of :mod:`engine.masking` (superpixels get their segments from the batch's own images); the model is
``mae_vit`` (He et al. 2022: encoder on visible patches, light decoder) or ``simmim_vit`` (Xie et
al. 2022: encoder over all patches with mask tokens, linear head); the objective is any pixel loss
(``mse``, ``l1``) on the masked patches, optionally against per-patch normalised pixels.

Validation: ``val_loss`` is the objective on at most :data:`EVAL_MAX_ROWS` fixed validation images
with fixed masks drawn once at ``masking.ratio`` (so the curve stays comparable along a schedule).
Samples: ``train.num_vis`` validation images chosen by :func:`engine.data.representative` (class by
class, the same rows for every seed) with :func:`engine.masking.preview_masks`, exactly what New run
and Mask lab preview.
"""

from __future__ import annotations

import numpy as np
import torch

from engine.config import RunConfig
from engine.data.sampling import representative
from engine.errors import ConfigError
from engine.masking import draw_mask, get_masking, grid_shape, image_side_inputs, preview_masks, strategies_for
from engine.store.samples import Sample
from engine.tasks import register_task
from engine.tasks.base import Task

EVAL_MAX_ROWS = 2048  # val loss is averaged over at most this many fixed val images
EVAL_CHUNK = 256
#: Masks drawn to probe a config (rows of the probe batch); real images for strategies that need them.
PROBE_ROWS = 256
PROBE_IMAGES = 64
DEFAULT_PATCH = 2


@register_task
class ImageMIMTask(Task):
    """Masked image modeling on patch grids (MAE / SimMIM). See the module docstring."""

    name = "image_mim"
    modality = "image"
    archs = ("mae_vit", "simmim_vit")
    default_loss = "mse"
    unit = "patch"
    summary = "masked image modeling: MAE (He et al. 2022) or SimMIM (Xie et al. 2022) on image patches"

    @classmethod
    def resolve(cls, cfg: RunConfig) -> None:
        """Base defaults, plus ``model.patch_size`` (2 when unset) and no tokenizer."""
        if cfg.model.patch_size is None:
            cfg.model.patch_size = DEFAULT_PATCH
        if cfg.data.tokenizer is not None:
            raise ConfigError("data.tokenizer: image tasks have no tokenizer; remove it")
        super().resolve(cfg)

    @classmethod
    def check(cls, cfg: RunConfig, info, workspace=None) -> None:
        """Patch size tiles the images, the strategy applies to image patch grids, and a probe batch
        of its masks can train (:func:`engine.checks.masking_problem`) at ``masking.ratio`` and, with
        a schedule, at ``masking.final_ratio``."""
        from engine.checks import masking_problem
        from engine.data import load_dataset

        _, H, W = info.image_shape
        h, w = grid_shape((H, W), cfg.model.patch_size)
        strategy = get_masking(cfg.masking.strategy)
        if 2 not in strategy.grid_dims or "image" not in strategy.modalities:
            raise ConfigError(f"masking.strategy: {strategy.name!r} does not apply to image patch grids; "
                              f"strategies for images: {', '.join(strategies_for('image', 2))}")
        n, images = PROBE_ROWS, None
        if strategy.needs:  # e.g. superpixels: probe with real images of the dataset (SLIC ~1 ms each)
            images = load_dataset(cfg.data.dataset, workspace).tensors("train")[0][:PROBE_IMAGES].float()
            n = len(images)
        side = image_side_inputs(cfg.masking, images, cfg.model.patch_size)
        ratios = [cfg.masking.ratio] + ([cfg.masking.final_ratio] if cfg.masking.schedule != "constant" else [])
        for r in ratios:
            probe = draw_mask(cfg.masking, (n, h, w), torch.Generator().manual_seed(0), ratio=r, **side)
            problem = masking_problem(cfg.masking, probe, ratio=r, unit="patches")
            if problem:
                raise ConfigError(problem)

    # --- run time ---------------------------------------------------------------------------------

    def __init__(self, cfg: RunConfig, device: torch.device, workspace=None):
        from engine.data import load_dataset
        from engine.models import build_model
        from engine.objectives import Objective

        self.cfg, self.device = cfg, device
        t = cfg.train
        ds = load_dataset(cfg.data.dataset, workspace)
        self.class_names = tuple(ds.info.class_names)
        x_train, y_train = ds.tensors("train")
        x_val, y_val = ds.tensors("val")
        if len(x_val) == 0:  # tiny uploads may have no val split: evaluate on train images
            x_val, y_val = x_train, y_train
        self.image_shape = tuple(x_train.shape[1:])
        self.grid = grid_shape(self.image_shape[1:], cfg.model.patch_size)
        self.model = build_model(cfg, image_shape=self.image_shape).to(device)
        self.objective = Objective.from_config(cfg.objective, self.outputs(cfg))
        self.n_train = len(x_train)
        self.batch_size = min(t.batch_size, self.n_train)
        self._ds = ds
        self.x_train = x_train.to(device)
        self.x_eval = x_val[:EVAL_MAX_ROWS].to(device)
        vis = torch.from_numpy(representative(y_val.numpy(), t.num_vis))  # class-stratified, as every view
        self.vis_x = x_val[vis].to(device)
        self.vis_labels = y_val[vis].numpy()
        # == the New run preview
        self.vis_mask = preview_masks(cfg, self.image_shape, len(self.vis_x), images=x_val[vis]).flatten(1).to(device)
        self.needs_images = bool(get_masking(cfg.masking.strategy).needs)
        # The same val masks at every eval, drawn once (superpixels of the val images are computed once).
        g_eval = torch.Generator().manual_seed(t.seed + 10_000)
        self.eval_masks = [self._draw(self.x_eval[i : i + EVAL_CHUNK], g_eval, cfg.masking.ratio)
                           for i in range(0, len(self.x_eval), EVAL_CHUNK)]

    def run_info(self) -> dict:
        return {"dataset_hash": getattr(self._ds.info, "source_hash", ""), "image_shape": list(self.image_shape),
                "n_train": self.n_train}

    def _draw(self, xb: torch.Tensor, g: torch.Generator, ratio: float) -> torch.Tensor:
        """``[len(xb), L]`` bool masks for a batch (side inputs such as superpixels from its images)."""
        side = image_side_inputs(self.cfg.masking, xb.float().cpu() if self.needs_images else None,
                                 self.cfg.model.patch_size)
        return draw_mask(self.cfg.masking, (len(xb), *self.grid), g, ratio=ratio, **side).flatten(1).to(self.device)

    def train_loss(self, idx, generator, ratio):
        xb = self.x_train[idx.to(self.device)]
        mask = self._draw(xb, generator, ratio)
        loss, parts = self.objective(self.model(xb, mask))
        return loss, {"mask_ratio": mask.float().mean(), **{f"loss/{k}": v for k, v in parts.items()}}

    @torch.no_grad()
    def baselines(self) -> dict[str, float]:
        """The run's objective on the same fixed val masks for predictions that need no learning:
        ``baseline/mean_image`` (the training mean image at every masked patch)."""
        from engine.eval.image_baselines import mean_image_patches, patchify

        total, n = 0.0, 0
        P = self.cfg.model.patch_size
        norm = self.cfg.objective.norm_pix_loss
        for i, mask in zip(range(0, len(self.x_eval), EVAL_CHUNK), self.eval_masks):
            xb = self.x_eval[i : i + EVAL_CHUNK]
            pred = mean_image_patches(self.x_train, len(xb), P)
            target = patchify(xb, P)
            if norm:
                from engine.objectives import normalize_patches

                pred, target = normalize_patches(pred), normalize_patches(target)
            loss, _ = self.objective({"pred": pred, "target": target, "mask": mask})
            total += float(loss) * len(xb)
            n += len(xb)
        return {"baseline/mean_image": total / max(n, 1)}

    @torch.no_grad()
    def evaluate(self) -> dict[str, float]:
        total, n = 0.0, 0
        for i, mask in zip(range(0, len(self.x_eval), EVAL_CHUNK), self.eval_masks):
            xb = self.x_eval[i : i + EVAL_CHUNK]
            loss, _ = self.objective(self.model(xb, mask))
            total += float(loss) * len(xb)
            n += len(xb)
        return {"val_loss": total / max(n, 1)}

    @torch.no_grad()
    def sample(self, step: int) -> Sample:
        rec = self.model.reconstruct(self.vis_x, self.vis_mask)
        return Sample(step=step, kind="image", arrays={
            "images": self.vis_x.float().cpu().numpy(), "mask": self.vis_mask.view(-1, *self.grid).cpu().numpy(),
            "pred_img": rec["pred_img"].float().cpu().numpy(), "pasted": rec["pasted"].float().cpu().numpy(),
            "labels": self.vis_labels.astype(np.int64),
        }, meta={"class_names": list(self.class_names), "patch_size": self.cfg.model.patch_size})

    @torch.no_grad()
    def features(self, split: str, max_rows: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        x, y = self._ds.tensors(split)
        x, y = x[:max_rows], y[:max_rows]
        out = [self.model.features(x[i : i + EVAL_CHUNK].to(self.device)).float().cpu() for i in range(0, len(x), EVAL_CHUNK)]
        feats = torch.cat(out).numpy() if out else np.zeros((0, 1), np.float32)
        return feats.astype(np.float32), y.numpy().astype(np.int64)
