"""Masked image modeling (``task: image_mim``): MAE or SimMIM on an image dataset's patch grid.

Units are ``P x P`` patches on the ``[B, h, w]`` grid; the masking strategy is any image strategy
of :mod:`engine.masking` (superpixels get their segments from the batch's own images); the model is
``mae_vit`` (He et al. 2022: encoder on visible patches, light decoder) or ``simmim_vit`` (Xie et
al. 2022: encoder over all patches with mask tokens, linear head); the objective is any pixel loss
(``mse``, ``l1``) on the masked patches, optionally against per-patch normalised pixels. Other
methods (``task_params``, :class:`engine.models.mae_methods.ImageParams`; the model is then
:class:`~engine.models.mae_methods.MethodMAE`): a HOG target (MaskFeat), an EMA teacher's latent target
(data2vec; ``target_std`` logged for the collapse watch), noise instead of hiding (denoising), a
``contrastive`` term between two masked views, and attention-guided masking (the teacher's class-token
attention as the ``attention`` strategy's side input; validated on random masks at the same ratio).

Validation: ``val_loss`` is the objective on at most :data:`EVAL_MAX_ROWS` fixed validation images
with fixed masks drawn once at ``masking.ratio`` (so the curve stays comparable along a schedule).
Samples: ``train.num_vis`` validation images chosen by :func:`engine.data.representative` (class by
class, the same rows for every seed) with :func:`engine.masking.preview_masks`, exactly what New run
and Mask lab preview.
"""

from __future__ import annotations

import copy

import numpy as np
import torch

from engine.config import RunConfig
from engine.data import load_dataset
from engine.data.sampling import eval_rows, representative
from engine.errors import ConfigError
from engine.eval.finetune import FinetuneInputs, pooled_features
from engine.eval.image_baselines import BASELINES, all_baselines, masked_pixel_sse, psnr
from engine.eval.reconstruction import image_quality
from engine.masking import draw_mask, get_masking, grid_shape, image_side_inputs, preview_masks, strategies_on
from engine.methods.collapse import TARGET_STD
from engine.methods.hog import hog_picture
from engine.methods.teacher import target_std
from engine.models import build_model, image_method
from engine.models.mae_methods import ImageParams, MethodMAE
from engine.objectives import Objective, masked_mse, normalize_patches
from engine.pretrained.runs import FittedImages, check_init, init_model, input_shape
from engine.store.samples import Sample
from engine.tasks.base import Task
from engine.tasks.checks import masking_problem
from engine.tasks.registry import register_task
from engine.training.feed import image_feed
from engine.training.perf import to_device

EVAL_MAX_ROWS = 2048  # val loss is averaged over at most this many fixed val images
#: ... and over at most this many patches in all (a ViT-B/16 at 224x224, 196 patches: 668 images).
EVAL_MAX_PATCHES = 2048 * 64
EVAL_CHUNK = 256
#: The biharmonic baseline is computed on the first this many eval images (about 8 ms per 28x28 image)...
BIHARMONIC_MAX_ROWS = 512
#: ... and on at most this many pixels in all (all 512 up to 32x32; 10 images of 224x224).
BIHARMONIC_MAX_PIXELS = BIHARMONIC_MAX_ROWS * 32 * 32
#: Float values of train images the mean-image and kNN baselines compare with (``4 *`` this many bytes):
#: 65,536 images at 28x28x1, so every Fashion-MNIST train image (:meth:`ImageMIMTask.baseline_reference`).
BASELINE_MAX_VALUES = 65_536 * 28 * 28
#: Masks drawn to probe a config (rows of the probe batch); real images for strategies that need them.
PROBE_ROWS = 256
PROBE_IMAGES = 64
DEFAULT_PATCH = 2


#: The recipes New run proposes and the example configs use (configs/mae-*.yaml), by image size
#: ``(H, W)``: partial run configs (model, objective, train) measured with bench/image_quality.py
#: at random masking 0.75 to fit 5 minutes of one CPU thread (figures in bench/README.md).
RECIPES: dict[tuple[int, int], dict] = {
    # scikit-learn digits: 4x4 patches of 2x2 px
    (8, 8): {"model": {"arch": "mae_vit", "preset": "tiny", "patch_size": 2},
             "objective": {"loss": "mse", "norm_pix_loss": False},
             "train": {"steps": 2400, "batch_size": 128, "lr": 2e-3, "warmup_steps": 100, "eval_interval": 200,
                       "checkpoint_interval": 800}},
    # Fashion-MNIST, MNIST: 4x4 patches of 7x7 px
    (28, 28): {"model": {"arch": "mae_vit", "preset": "tiny", "patch_size": 7},
               "objective": {"loss": "mse", "norm_pix_loss": False},
               "train": {"steps": 2000, "batch_size": 128, "lr": 2e-3, "warmup_steps": 100, "eval_interval": 250,
                         "checkpoint_interval": 1000}},
}
#: Grid side (patches) of the generic recipe for other sizes: few tokens keep a CPU run short.
GENERIC_GRID_SIDE = 8


def recipe_for(image_shape: tuple[int, int, int]) -> dict:
    """What New run proposes for an image dataset of ``image_shape = (C, H, W)``: a partial run config
    ``{"model": {...}, "objective": {...}, "train": {...}}`` (a fresh copy).

    Sizes in :data:`RECIPES` get their measured recipe; any other size gets the 8x8 recipe's
    model, objective and training with the patch size whose grid side is closest to
    :data:`GENERIC_GRID_SIDE` (the smaller patch on a tie); it is not measured.
    """
    _, H, W = image_shape
    if (H, W) in RECIPES:
        return copy.deepcopy(RECIPES[(H, W)])
    r = copy.deepcopy(RECIPES[(8, 8)])
    sizes = [p for p in range(1, min(H, W) + 1) if H % p == 0 and W % p == 0]
    r["model"]["patch_size"] = min(sizes, key=lambda p: (abs(min(H, W) // p - GENERIC_GRID_SIDE), p))
    return r


@register_task
class ImageMIMTask(Task):
    """Masked image modeling on patch grids (MAE / SimMIM). See the module docstring."""

    name = "image_mim"
    modality = "image"
    sample_kind = "image"
    interactive = "masking"  # train_defaults: per image size (the image UI's recipe)
    archs = ("mae_vit", "simmim_vit")
    init_from_arch = "mae_vit"  # an imported MAE (engine.pretrained.runs)
    params = ImageParams  # the method: target, corruption, teacher (engine.models.mae_methods)
    default_loss = "mse"
    unit = "patch"
    #: Pixel-space figures shown next to the headline, with their baselines ``baseline/<name>/mse``
    #: and ``/psnr`` (see :meth:`evaluate`); absent for ``norm_pix_loss`` runs.
    figures = (("val_mse", "min"), ("val_psnr", "max"))

    @classmethod
    def quality_notes(cls, config: dict) -> list[str]:
        """How the figures next to the baselines were measured, for the dashboard's table."""
        notes = [f"biharmonic on the first {BIHARMONIC_MAX_ROWS} validation images only (tens of ms each; fewer of "
                 f"images over 32x32 pixels, {BIHARMONIC_MAX_PIXELS:,} pixels in all)",
                 "pixel figures clip predictions to [0, 1]"]
        if (config.get("objective") or {}).get("norm_pix_loss"):
            notes.append("no pixel MSE for this run: it predicts per-patch normalised pixels, and turning them "
                         "into pixels needs each hidden patch's own mean and std (the answer)")
        return notes
    summary = ("masked image modeling: MAE (He et al. 2022) or SimMIM (Xie et al. 2022) on image patches; pixel, HOG "
               "(MaskFeat) or latent (data2vec) targets, denoising, a contrastive term (the Method below)")

    @classmethod
    def resolve(cls, cfg: RunConfig) -> None:
        """Base defaults, plus ``model.patch_size`` (2 when unset) and no tokenizer."""
        if cfg.model.patch_size is None:
            cfg.model.patch_size = DEFAULT_PATCH
        if cfg.data.tokenizer is not None:
            raise ConfigError("data.tokenizer: image tasks have no tokenizer; remove it")
        super().resolve(cfg)
        prm, attention, contrastive = image_method(cfg)
        if not prm.plain(attention, contrastive) and cfg.model.arch != "mae_vit":
            raise ConfigError(f"task_params: the {prm.target} target, {prm.corruption} corruption, attention-guided "
                              f"masking and a contrastive term run on mae_vit, not {cfg.model.arch}; set model.arch "
                              "to mae_vit")
        if not prm.plain(attention, contrastive) and cfg.model.init_from:
            raise ConfigError("model.init_from: an imported model or a fork trains the pixel target with masking "
                              "only; start this method from a fresh model")

    @classmethod
    def outputs(cls, cfg: RunConfig) -> set[str]:
        """Pixels (or the method's target) and, on mae_vit, two views' embeddings for a contrastive term."""
        out = {"pred", "target", "mask"}
        return out | {"emb_a", "emb_b", "logit_scale"} if cfg.model.arch in ("", "mae_vit") else out

    @classmethod
    def init_fit(cls, cfg: RunConfig, rec: dict, name: str) -> None:
        """An imported MAE fixes the patch size and whether it predicts per-patch normalised pixels."""
        patch = rec["arch_config"]["patch_size"]
        if cfg.model.patch_size != patch:
            raise ConfigError(f"model.patch_size: {name} has {patch}x{patch} patches; set model.patch_size to {patch}")
        norm_pix = bool(rec["arch_config"].get("norm_pix_loss", False))
        if cfg.objective.norm_pix_loss != norm_pix:
            raise ConfigError(f"objective.norm_pix_loss: {name} was trained with norm_pix_loss {norm_pix}; "
                              f"set it to {str(norm_pix).lower()}")

    @classmethod
    def init_view(cls, rec: dict) -> dict:
        """MAE's random masking at 0.75, the model's patch size and norm-pix setting."""
        return {"model": {"patch_size": int(rec["arch_config"]["patch_size"])},
                "objective": {"norm_pix_loss": bool(rec["arch_config"].get("norm_pix_loss", False))},
                "masking": {"strategy": "random", "ratio": 0.75}}

    @classmethod
    def check(cls, cfg: RunConfig, info, workspace=None) -> None:
        """Patch size tiles the images, the strategy applies to image patch grids, and a probe batch
        of its masks can train (:func:`engine.tasks.checks.masking_problem`) at ``masking.ratio`` and, with
        a schedule, at ``masking.final_ratio``."""
        _, H, W = info.image_shape
        if cfg.model.init_from and (rec := check_init(cfg, cls, workspace).record) is not None:
            _, H, W = input_shape(rec)  # the images are fitted to the imported model's input
        h, w = grid_shape((H, W), cfg.model.patch_size)
        strategy = get_masking(cfg.masking.strategy)
        if not strategy.works_on("patch-2d"):
            raise ConfigError(f"masking.strategy: {strategy.name!r} does not apply to image patch grids; "
                              f"strategies for images: {', '.join(strategies_on('patch-2d'))}")
        n, images = PROBE_ROWS, None
        if strategy.needs:  # e.g. superpixels: probe with real images of the dataset (SLIC ~1 ms each)
            ds = load_dataset(cfg.data.dataset, workspace)
            if (ds.info.image_shape[1], ds.info.image_shape[2]) != (H, W):
                ds = FittedImages(ds, (ds.info.image_shape[0], H, W))
            images = ds.tensors("train", limit=PROBE_IMAGES)[0]
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
        self.cfg, self.device = cfg, device
        t = cfg.train
        ds = load_dataset(cfg.data.dataset, workspace)
        self.model_dims, self.input_fit, self.init_report = {}, "", {}
        rec = check_init(cfg, type(self), workspace).record if cfg.model.init_from else None
        if rec is not None:  # an imported MAE's architecture: the images fitted to its input
            ds = FittedImages(ds, input_shape(rec))
            self.input_fit = ds.note
        self.class_names = tuple(ds.info.class_names)
        # Row indices only: a batch reads its own rows (train_batch), so a memory-mapped dataset of
        # any size costs the batch, not the split (bench/data_memory.py).
        self.train_rows = ds.indices("train")
        val_rows = ds.indices("val")
        if len(val_rows) == 0:  # tiny uploads may have no val split: evaluate on train images
            val_rows = self.train_rows
        C, H, W = ds.info.image_shape
        self.image_shape = (C, H, W)
        self.grid = grid_shape(self.image_shape[1:], cfg.model.patch_size)
        if cfg.model.init_from:  # an imported MAE, or a parent run's checkpoint
            model, self.model_dims, self.init_report = init_model(
                cfg, lambda: build_model(cfg, image_shape=self.image_shape), workspace)
        else:
            model = build_model(cfg, image_shape=self.image_shape)
        self.model = model.to(device)
        self.objective = Objective.from_config(cfg.objective, self.outputs(cfg))
        self.method, self.attention, self.contrastive = image_method(cfg)
        # The reconstruction terms alone score the pixel baselines (a contrastive term has no baseline).
        recon = [(t.loss, t.weight) for t in cfg.objective.terms if t.loss != "contrastive"] or (
            [] if cfg.objective.terms else [(cfg.objective.loss, 1.0)])
        self.recon_objective = Objective(recon) if recon and self.method.target == "pixel" else None
        self.n_train = len(self.train_rows)
        self.batch_size = min(t.batch_size, self.n_train)
        self._ds = ds
        # uint8 pixels to the device (kept there when they fit), converted there: training.feed
        self._feed = image_feed(ds, self.train_rows, device)
        self.x_eval = ds.rows_tensors(val_rows[:eval_max_rows(self.grid)])[0].to(device)
        vis = val_rows[representative(ds.labels[val_rows], t.num_vis)]  # class-stratified, as every view
        x_vis, y_vis = ds.rows_tensors(vis)
        self.vis_x = x_vis.to(device)
        self.vis_labels = y_vis.numpy()
        # == the New run preview
        self.vis_mask = preview_masks(cfg, self.image_shape, len(self.vis_x), images=x_vis).flatten(1).to(device)
        self.needs_images = bool(get_masking(cfg.masking.strategy).needs)
        # The same val masks at every eval, drawn once (superpixels of the val images are computed once).
        # Attention-guided masking is validated on random masks at its ratio: fixed masks from the
        # initial teacher would mean nothing later, and random ones keep val_loss comparable across methods.
        g_eval = torch.Generator().manual_seed(t.seed + 10_000)
        draw = self._draw if not self.attention else (lambda xb, g, r: to_device(draw_mask(
            cfg.masking.model_copy(update={"strategy": "random", "params": {}}), (len(xb), *self.grid), g,
            ratio=r).flatten(1), self.device))
        self.eval_masks = [draw(self.x_eval[i : i + EVAL_CHUNK], g_eval, cfg.masking.ratio)
                           for i in range(0, len(self.x_eval), EVAL_CHUNK)]

    def run_info(self) -> dict:
        """The dataset's hash, the image shape the model reads, train rows; for an imported model
        also its record (``model_dims``) and how the images were fitted to it (``input_fit``); for a run
        with ``model.init_from``, what was loaded (``init``)."""
        info = {"dataset_hash": getattr(self._ds.info, "source_hash", ""), "image_shape": list(self.image_shape),
                "n_train": self.n_train}
        if self.model_dims:
            info["model_dims"] = self.model_dims
        if self.input_fit:
            info["input_fit"] = self.input_fit
        if self.init_report:
            info["init"] = self.init_report
        return info

    def _draw(self, xb: torch.Tensor, g: torch.Generator, ratio: float) -> torch.Tensor:
        """``[len(xb), L]`` bool masks for a batch (side inputs such as superpixels from its images;
        for attention-guided masking the EMA teacher's class-token attention on them)."""
        kw = {}
        if self.attention:
            kw["attention"] = self.attention_map(xb)
        side = image_side_inputs(self.cfg.masking, xb.float().cpu() if self.needs_images else None,
                                 self.cfg.model.patch_size, **kw)
        return to_device(draw_mask(self.cfg.masking, (len(xb), *self.grid), g, ratio=ratio, **side).flatten(1), self.device)

    @torch.no_grad()
    def attention_map(self, xb: torch.Tensor) -> torch.Tensor:
        """The EMA teacher's class-token attention on the patches of ``xb``: float ``[B, h, w]`` on the CPU."""
        from engine.methods.attention import cls_attention  # noqa: PLC0415 (only attention-guided runs read it)

        return cls_attention(self.model, xb.float(), encoder=self.model.teacher).reshape(len(xb), *self.grid).float().cpu()

    def _forward(self, xb: torch.Tensor, mask: torch.Tensor, noise: torch.Tensor | None = None,
                 mask_b: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        """The model's outputs; a method's extra inputs only where the model takes them."""
        if not isinstance(self.model, MethodMAE):
            return self.model(xb, mask)
        return self.model(xb, mask, noise=noise, mask_b=mask_b)

    def _method_loss(self, out, loss, logs):
        """The readout's pixel MSE (non-pixel targets, on detached features) and the latent target's spread."""
        if "px_pred" in out:
            readout = masked_mse(out["px_pred"], out["px_target"], out["mask"])
            loss = loss + readout
            logs["loss/readout"] = readout.detach()
        if self.method.target == "latent":
            logs[TARGET_STD] = target_std(out["target"], out["mask"])
        return loss, logs

    def train_batch(self, idx: torch.Tensor) -> torch.Tensor:
        """The images of train rows ``idx`` (int64 ``[B]``, positions in the train split), float32
        ``[B, C, H, W]`` in [0, 1] on the task's device; reads only those rows of the dataset
        (:class:`engine.training.feed.ImageFeed`; fitted images of an imported model: on the host)."""
        if self._feed is not None:
            return self._feed.batch(idx)
        return self._ds.rows_tensors(self.train_rows[idx.cpu().numpy()])[0].to(self.device, non_blocking=True)

    def train_loss(self, idx, generator, ratio):
        xb = self.train_batch(idx)
        mask = self._draw(xb, generator, ratio)
        noise = mask_b = None
        if self.method.corruption == "noise":
            noise = torch.randn(len(xb), mask.shape[1], self.model.patchify(xb[:1]).shape[-1],
                                generator=generator, device=generator.device).to(xb.device) * self.method.noise_sigma
        if self.contrastive:
            mask_b = self._draw(xb, generator, ratio)
        out = self._forward(xb, mask, noise, mask_b)
        loss, parts = self.objective(out)
        logs = {"mask_ratio": mask.float().mean(), **{f"loss/{k}": v for k, v in parts.items()}}
        return self._method_loss(out, loss, logs)

    def after_step(self, step: int) -> None:
        """The EMA teacher's update (latent targets, attention-guided masking); nothing otherwise."""
        if getattr(self.model, "teacher", None) is not None:
            self.model.ema_update(step)

    @torch.no_grad()
    def baselines(self) -> dict[str, float]:
        """Trivial predictors on the same fixed val masks (:mod:`engine.eval.image_baselines`):
        ``mean_image`` (the training mean image), ``visible_mean`` (each image's mean visible pixel),
        ``biharmonic`` (biharmonic inpainting; on the first :data:`BIHARMONIC_MAX_ROWS` eval images
        only, with their masks, as it costs tens of ms per 28x28 image) and ``knn`` (the mean of the
        10 training images nearest on the visible pixels). ``mean_image`` and ``knn`` use the train
        images of :meth:`baseline_reference` (every train image up to Fashion-MNIST's size).

        Returns:
            For each name: ``baseline/<name>`` scored with the run's objective (normalised pixels
            when ``norm_pix_loss``: prediction and target are both normalised per patch), and
            ``baseline/<name>/mse``, ``baseline/<name>/psnr``: masked-patch pixel MSE ([0, 1] units)
            and PSNR in dB (:func:`engine.eval.image_baselines.psnr` of the pooled MSE), comparable
            across objectives and with the run's ``val_mse`` / ``val_psnr``.
        """
        P = self.cfg.model.patch_size
        x_ref = self.baseline_reference()
        names = BASELINES + (("noisy_input",) if self.method.corruption == "noise" else ())
        totals = {b: [0.0, 0, 0.0, 0] for b in names}  # objective sum, images, pixel sse, values
        for i, mask in zip(range(0, len(self.x_eval), EVAL_CHUNK), self.eval_masks):
            xb = self.x_eval[i : i + EVAL_CHUNK]
            target = self.model.patchify(xb.float())
            preds = all_baselines(xb, mask, x_ref, P, biharmonic_rows=max(0, biharmonic_rows(self.image_shape[1:]) - i))
            if self.method.corruption == "noise":  # the corrupted input itself, the denoiser's trivial answer
                preds["noisy_input"] = (target + self.model.fixed_noise(xb, i)).clamp(0, 1)
            for name, pred in preds.items():
                n = len(pred)
                loss = (self.recon_objective(self._scored(pred, target[:n], mask[:n]))[0]
                        if self.recon_objective is not None else float("nan"))
                sse, count = masked_pixel_sse(pred, target[:n], mask[:n])
                t = totals[name]
                t[0], t[1], t[2], t[3] = t[0] + float(loss) * n, t[1] + n, t[2] + sse, t[3] + count
        out = {}
        for name, (obj, n, sse, count) in totals.items():
            if n:
                mse = sse / max(count, 1)
                out.update({f"baseline/{name}/mse": mse, f"baseline/{name}/psnr": psnr(mse)})
                if self.recon_objective is not None and not self.contrastive:  # the run's own loss, same units
                    out[f"baseline/{name}"] = obj / n
        return out

    def baseline_reference(self) -> torch.Tensor:
        """The train images the ``mean_image`` and ``knn`` baselines use: the first
        ``BASELINE_MAX_VALUES // (C * H * W)`` train rows in stored order (imports store rows
        shuffled, so a seeded random sample), every train row of a smaller split (Fashion-MNIST's
        60,000 at 28x28 are all used). Float32 ``[n, C, H, W]`` in [0, 1] on the device: bounded
        (about 200 MB), whatever the dataset's size."""
        return self._ds.rows_tensors(self.train_rows[:self.baseline_reference_rows()])[0].to(self.device)

    def baseline_reference_rows(self) -> int:
        """How many train rows :meth:`baseline_reference` reads (the first ones, in stored order)."""
        return min(len(self.train_rows), max(1, BASELINE_MAX_VALUES // int(np.prod(self.image_shape))))

    def _scored(self, pred: torch.Tensor, target: torch.Tensor, mask: torch.Tensor) -> dict[str, torch.Tensor]:
        """The objective's inputs for a pixel-space prediction ``[N, L, P*P*C]``, in the model's units:
        prediction and target put through the model's input normalisation (an imported MAE's
        processor), then normalised per patch when ``norm_pix_loss`` (the run's target)."""
        if getattr(self.model, "input_norm", False):
            m = self.model
            pred, target = (m.patchify(m.normalize_input(m.unpatchify(t.float()))) for t in (pred, target))
        if self.cfg.objective.norm_pix_loss:
            pred, target = normalize_patches(pred.float()), normalize_patches(target)
        return {"pred": pred, "target": target, "mask": mask}

    @torch.no_grad()
    def evaluate(self) -> dict[str, float]:
        """``val_loss`` (the objective on the fixed val masks, averaged per image) and, when the model
        predicts pixels (``norm_pix_loss`` off), ``val_mse`` and ``val_psnr``: the masked-patch
        pixel MSE of the prediction clipped to [0, 1], pooled over every masked pixel, and its PSNR
        in dB, the figures the baselines report as ``baseline/<name>/mse`` and ``/psnr``.

        With ``norm_pix_loss`` the model predicts each patch normalised by the hidden patch's own
        mean and standard deviation; turning that into pixels needs those statistics, which only the
        target has (MAE's figures use them, and so does the display in :meth:`sample`). Such a
        figure would peek at the answer, so no pixel figure is reported for these runs.
        """
        total, n, sse, count = 0.0, 0, 0.0, 0
        pixels = not self.cfg.objective.norm_pix_loss
        for i, mask in zip(range(0, len(self.x_eval), EVAL_CHUNK), self.eval_masks):
            xb = self.x_eval[i : i + EVAL_CHUNK]
            noise = self.model.fixed_noise(xb, i) if isinstance(self.model, MethodMAE) else None
            out = self._forward(xb, mask, noise, mask if self.contrastive else None)
            loss, _ = self.objective(out)
            total += float(loss) * len(xb)
            n += len(xb)
            if pixels:
                pred, target = out.get("px_pred", out["pred"]), out.get("px_target", out["target"])
                if getattr(self.model, "input_norm", False):  # back to pixels in [0, 1] (an imported MAE's processor)
                    pred = self.model.patchify(self.model.to_pixels(self.model.unpatchify(pred.float())))
                    target = self.model.patchify(xb.float())
                s, c = masked_pixel_sse(pred, target, mask)
                sse, count = sse + s, count + c
        metrics = {"val_loss": total / max(n, 1)}
        if self.method.target == "latent":  # the teacher's target spread on the same images (collapse watch)
            metrics["val_" + TARGET_STD] = float(target_std(self.model.teacher_targets(self.x_eval[:EVAL_CHUNK].float())))
        if pixels and count:
            metrics.update(val_mse=sse / count, val_psnr=psnr(sse / count))
        return metrics

    @torch.no_grad()
    def sample(self, step: int) -> Sample:
        """The fixed visualisation images: masks, prediction, pasted reconstruction; attention-guided
        masks are drawn again from the teacher's attention now (``attention``: its map); a HOG run adds
        the HOG pictures of the images and of the prediction at the masked patches (``hog_img``,
        ``hog_pred``)."""
        arrays = {}
        if self.attention:
            att = self.attention_map(self.vis_x)
            g = torch.Generator().manual_seed(self.cfg.train.seed)
            side = image_side_inputs(self.cfg.masking, None, self.cfg.model.patch_size, attention=att)
            self.vis_mask = draw_mask(self.cfg.masking, (len(self.vis_x), *self.grid), g, **side).flatten(1).to(self.device)
            arrays["attention"] = att.numpy()
        rec = self.model.reconstruct(self.vis_x, self.vis_mask)
        meta = {"class_names": list(self.class_names), "patch_size": self.cfg.model.patch_size}
        if self.method.target == "hog":
            p = self.method
            out = self.model(self.vis_x, self.vis_mask, every_patch=True)
            shown = torch.where(self.vis_mask[..., None], out["pred"].float().clamp_min(0), out["target"].float())
            arrays["hog_img"] = hog_picture(out["target"], self.grid, p.hog_bins, p.hog_cells)
            arrays["hog_pred"] = hog_picture(shown, self.grid, p.hog_bins, p.hog_cells)
        return Sample(step=step, kind="image", arrays={
            "images": self.vis_x.float().cpu().numpy(), "mask": self.vis_mask.view(-1, *self.grid).cpu().numpy(),
            "pred_img": rec["pred_img"].float().cpu().numpy(), "pasted": rec["pasted"].float().cpu().numpy(),
            "labels": self.vis_labels.astype(np.int64), **arrays,
        }, meta=meta)

    @torch.no_grad()
    def features(self, split: str, max_rows: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        rows = eval_rows(self._ds, split, max_rows)  # read chunk by chunk: the split is never converted whole
        out = [self.model.features(self._ds.rows_tensors(rows[i : i + EVAL_CHUNK])[0].to(self.device)).float().cpu()
               for i in range(0, len(rows), EVAL_CHUNK)]
        feats = torch.cat(out).numpy() if out else np.zeros((0, 1), np.float32)
        return feats.astype(np.float32), self._ds.labels[rows].astype(np.int64)

    def finetune_inputs(self, max_rows: int | None = None):
        """The images of each split that the probes read (:func:`engine.data.sampling.eval_rows`)."""
        xs = {s: self._ds.rows_tensors(eval_rows(self._ds, s, max_rows)) for s in ("train", "val")}

        def encode(model, split, pos):
            return pooled_features(model)(xs[split][0][pos].to(next(model.parameters()).device))

        return FinetuneInputs(xs["train"][1].numpy().astype(np.int64), xs["val"][1].numpy().astype(np.int64), encode)

    def reconstruction_quality(self) -> dict[str, dict[str, float]]:
        """SSIM of the pasted reconstruction and of every image baseline
        (:func:`engine.eval.reconstruction.image_quality`); ``{}`` for a ``norm_pix_loss`` run."""
        return image_quality(self)

    def raw_features(self, max_rows: int | None = None):
        """The pixels in [0, 1], flattened: ``X float32 [N, C*H*W]`` per split (see :meth:`Task.raw_features`)."""
        out = []
        for split in ("train", "val"):
            x, y = self._ds.rows_tensors(eval_rows(self._ds, split, max_rows))
            out.append((x.flatten(1).numpy(), y.numpy().astype(np.int64)))
        return out[0], out[1]


def eval_max_rows(grid: tuple[int, int]) -> int:
    """Fixed validation images of a run on an ``h x w`` patch grid: :data:`EVAL_MAX_ROWS`, fewer when
    they would hold over :data:`EVAL_MAX_PATCHES` patches (at least 64)."""
    return max(64, min(EVAL_MAX_ROWS, EVAL_MAX_PATCHES // max(1, grid[0] * grid[1])))


def biharmonic_rows(hw) -> int:
    """Images the biharmonic baseline inpaints: :data:`BIHARMONIC_MAX_ROWS` of up to 32x32 pixels,
    fewer of larger images (:data:`BIHARMONIC_MAX_PIXELS` in all; at least 8)."""
    H, W = (int(v) for v in hw)
    return max(8, min(BIHARMONIC_MAX_ROWS, BIHARMONIC_MAX_PIXELS // max(1, H * W)))
