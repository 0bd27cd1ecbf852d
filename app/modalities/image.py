"""Images in the dashboard: dataset samples, the patch-model fields of New run, mask previews on
real images, the reconstruction grid of a run, and Mask lab's image lab.

Conventions (see :mod:`app.components.images`): dataset images uint8 ``(N, H, W, C)``; model-side
images float ``(N, C, H, W)`` in [0, 1]; masks bool ``(N, h, w)``, True = masked.
"""

from __future__ import annotations

import json

import streamlit as st
import torch

from app.components.charts import counts_chart
from app.components.datasets import get_view
from app.components.errors import guarded
from app.components.images import image_grid, image_rows, mask_overlay, recon_rows
from app.components.masks import guarded_mask, mask_stats_panel, masking_controls, patch_select, train_batch
from app.components.urlstate import dig, index_of
from engine.config import MaskingConfig
from engine.masking import draw_mask, get_masking, grid_shape, image_side_inputs, preview_masks
from engine.models import get_model_spec


def data_section(info) -> None:
    """The Data page body for an image dataset: size metrics, a sample grid, class counts."""
    view = guarded(get_view, info.name)
    if view is None:
        return
    m = st.columns(5)
    m[0].metric("Train images", f"{info.n_train:,}")
    m[1].metric("Val images", f"{info.n_val:,}")
    m[2].metric("Classes", len(info.class_names))
    m[3].metric("Image size", f"{info.image_shape[1]}x{info.image_shape[2]}")
    m[4].metric("Channels", info.image_shape[0])
    st.subheader("Samples")
    image_grid(view.samples, view.sample_captions)
    st.subheader("Images per class and split")
    left, right = st.columns([2, 3])
    table = view.counts.pivot(index="class_name", columns="split", values="count").reindex(info.class_names)
    table["total"] = table.sum(axis=1)
    left.dataframe(table, width="stretch")
    right.altair_chart(counts_chart(view.counts), width="stretch")


def run_fields(info, task: str, key: str, carried: dict) -> dict:
    """New run's image fields: masking, patch size (only sizes that tile the images and that this
    masking can train with), architecture, loss, normalised-pixel target, preset. ``carried``: a
    partial run config whose values are the widgets' defaults (from the URL). Returns the partial
    config dict."""
    with st.container(border=True):
        masking = masking_controls("image", 2, key, carried.get("masking"))  # patch grids
        st.page_link("../pages/mask_lab.py", label="Compare strategies in Mask lab")
    patch = patch_select(info, masking, key, dig(carried, "model.patch_size"))
    archs = ["mae_vit", "simmim_vit"]  # full-width selects: their option texts are not cut off
    arch = st.selectbox("Model", archs, key=f"{key}_arch", index=index_of(archs, dig(carried, "model.arch")),
                        format_func=lambda k: {"mae_vit": "MAE (encoder + light decoder)",
                                               "simmim_vit": "SimMIM (encoder + linear head)"}[k])  # fmt: skip
    presets = get_model_spec(arch).presets
    preset = st.selectbox("Model preset", list(presets), key=f"{key}_preset_{arch}",
                          index=index_of(list(presets), dig(carried, "model.preset")),
                          format_func=lambda k: f"{k}  (width {presets[k]['embed_dim']}, depth {presets[k]['depth']})")
    losses = ["mse", "l1"]
    loss = st.selectbox("Loss on the masked patches", losses, key=f"{key}_loss_{arch}",
                        index=index_of(losses, dig(carried, "objective.loss"), 0 if arch == "mae_vit" else 1))
    norm = st.checkbox("Normalised-pixel target", value=bool(dig(carried, "objective.norm_pix_loss", False)),
                       key=f"{key}_normpix", help="score each patch against its own mean/std-normalised pixels (MAE sec. 4)")
    return {"task": task, "masking": masking, "model": {"arch": arch, "preset": preset, "patch_size": int(patch)},
            "objective": {"loss": loss, "norm_pix_loss": bool(norm)}}


def mask_preview(cfg, info) -> None:
    """The run's fixed validation images with the masks it uses for its reconstruction grid."""
    view = guarded(get_view, info.name)
    if view is None:
        return
    c, h, w = info.image_shape
    masks = guarded_mask(preview_masks, cfg, (c, h, w), len(view.preview), images=torch.from_numpy(view.preview))
    if masks is None:
        return
    per = masks[0].numel()
    st.caption(
        f"The {len(view.preview)} fixed validation images of **{info.name}** (chosen class by class) with the "
        f"masks this run will use for its reconstruction grid ({cfg.masking.strategy}): {int(masks[0].sum())} of {per} "
        "patches masked" + ("." if get_masking(cfg.masking.strategy).exact else " in the first image.")
        + (f" These are drawn at masking.ratio {cfg.masking.ratio:g}, the start of the {cfg.masking.schedule} "
           f"schedule; training ramps to {cfg.masking.final_ratio:g} (see the curve in Mask lab)."
           if cfg.masking.schedule != "constant" else "")
    )
    rows = [("Original", view.preview.transpose(0, 2, 3, 1)), ("Masked input", mask_overlay(view.preview, masks))]
    image_rows(rows, captions=view.preview_captions)


def samples_view(sample, run) -> None:
    """A run's reconstruction grid at one step: original, masked input, reconstruction,
    reconstruction with the visible patches pasted back."""
    names = sample.meta.get("class_names", [])
    images, mask = sample["images"], sample["mask"]
    captions = [names[int(y)] if 0 <= int(y) < len(names) else str(int(y)) for y in sample["labels"]]
    masking = (run.config.get("masking", {}) if run is not None else {})
    fixed = (f" (fixed masks at masking.ratio {masking.get('ratio')}, the start of its "
             f"{masking.get('schedule')} schedule)") if masking.get("schedule", "constant") != "constant" else ""
    st.caption(
        f"Step {sample.step} · {len(images)} fixed validation images · patch {sample.meta.get('patch_size')} px · "
        f"{masking.get('strategy', 'random')} masking · "
        f"{int(mask[0].sum())} of {mask[0].size} patches masked in the first image{fixed}"
    )
    image_rows(recon_rows(images, mask, sample["pred_img"], sample["pasted"]), captions=captions)


@st.cache_data(max_entries=16, ttl=900, show_spinner="Drawing masks…")
def _mask_stats(masking_json: str, images_key: tuple, _images, patch: int, seed: int):
    """Masks of ``_images`` (float ``[N, C, H, W]``) drawn as a run would (side inputs from the
    images), their statistics, masks/s at this batch shape, and the pre-flight problem, if any.
    ``images_key`` identifies the images for the cache (dataset, version, N)."""
    from engine.checks import masking_problem
    from engine.masking.stats import mask_stats, masks_per_second

    cfg = MaskingConfig.model_validate(json.loads(masking_json))
    x = torch.from_numpy(_images)
    h, w = grid_shape(tuple(x.shape[2:]), patch)
    shape = (len(x), h, w)
    mask = draw_mask(cfg, shape, torch.Generator().manual_seed(seed), **image_side_inputs(cfg, x, patch))

    def one_batch() -> torch.Tensor:
        return draw_mask(cfg, shape, torch.Generator().manual_seed(seed), **image_side_inputs(cfg, x, patch))

    rate = masks_per_second(one_batch, min_time=0.2, warmup=False)
    return mask_stats(mask), rate, masking_problem(cfg, mask)


def lab_controls(info, carried: dict, key: str) -> dict:
    """Mask lab's image controls: the masking and the patch grid (``carried``: a partial run config
    of defaults); returns the partial config."""
    masking = masking_controls("image", 2, key, carried.get("masking"))
    patch = patch_select(info, masking, key, dig(carried, "model.patch_size"))
    return {"task": "image_mim", "masking": masking, "model": {"patch_size": int(patch)}}


def lab_results(cfg, info, n: int) -> None:
    """Mask lab's image results: the run's masks on real images, then batch statistics."""
    c, h, w = info.image_shape
    patch = cfg.model.patch_size
    st.subheader("Masks on real images")
    mask_preview(cfg, info)
    st.subheader("Statistics")
    images = guarded(train_batch, info, int(n))
    if images is None:
        return
    res = guarded_mask(_mask_stats, json.dumps(cfg.masking.model_dump(mode="json"), sort_keys=True),
                       (info.name, info.created_at, len(images)), images, int(patch), int(cfg.train.seed))  # fmt: skip
    if res is None:
        return
    stats, rate, problem = res
    if problem:
        st.warning(f"A run with these settings would be refused: {problem}")
    uses_ratio = get_masking(cfg.masking.strategy).uses_ratio
    at = (f" at ratio {cfg.masking.ratio:g}" + (" (step 0 of the schedule)" if cfg.masking.schedule != "constant" else "")
          if uses_ratio else " (this strategy's parameters set its budget; the mask ratio is not used)")
    st.caption(f"{stats.batch_size} masks of {h // patch}x{w // patch} patches drawn over real train images of "
               f"**{info.name}**{at}.")
    mask_stats_panel(stats, rate)
