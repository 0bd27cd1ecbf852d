"""Mask lab: try every masking strategy on real data before training with it.

Pick a dataset, a grid (patch size for images) and a strategy with its parameters; the page shows
the masks a run with these settings would use on its fixed validation images (the very
``engine.masking.preview_masks`` the training loop calls), then statistics of a batch of masks
drawn on real train images: the actual ratio per sample, the sizes of contiguous masked regions,
how often each position is masked, and how many masks per second the strategy draws.
"Use in New run" carries the settings to the New run page. Nothing here trains.

The page dispatches on the dataset's modality (:data:`LABS`); images are the one modality today.
"""

from __future__ import annotations

import json

import streamlit as st
import torch

from app.components import guarded, image_rows, mask_overlay
from app.components.datasets import dataset_infos, get_view
from app.components.masks import (
    HANDOFF_KEY,
    default_patch,
    guarded_mask,
    mask_stats_panel,
    masking_controls,
    patch_label,
    patch_sizes,
    schedule_chart,
    train_batch,
)
from engine.config import MaskingConfig, RunConfig
from engine.checks import masking_problem
from engine.masking import draw_mask, get_masking, grid_shape, image_side_inputs, preview_masks, ratio_at
from engine.masking.stats import MaskStats, mask_stats, masks_per_second

DEFAULTS = RunConfig()


@st.cache_data(max_entries=16, ttl=900, show_spinner="Drawing masks…")
def image_mask_stats(
    masking_json: str, images_key: tuple, _images, patch: int, seed: int
) -> tuple[MaskStats, float, str | None]:
    """Masks of ``_images`` (float ``[N, C, H, W]``) drawn as a run would (side inputs from the
    images), their statistics, the masks/s of a training batch's masking at this batch shape
    (side inputs such as superpixels included: a run computes them for every batch), and
    ``engine.checks.masking_problem`` of the masks (None when a run could train on them).
    ``images_key`` identifies the images for the cache (dataset, version, N)."""
    cfg = MaskingConfig.model_validate(json.loads(masking_json))
    x = torch.from_numpy(_images)
    h, w = grid_shape(tuple(x.shape[2:]), patch)
    shape = (len(x), h, w)
    side = image_side_inputs(cfg, x, patch)
    mask = draw_mask(cfg, shape, torch.Generator().manual_seed(seed), **side)

    def one_batch() -> torch.Tensor:
        return draw_mask(cfg, shape, torch.Generator().manual_seed(seed), **image_side_inputs(cfg, x, patch))

    rate = masks_per_second(one_batch, min_time=0.2, warmup=False)
    return mask_stats(mask), rate, masking_problem(cfg, mask)


def image_lab(dataset: str, info, handoff: dict, form, out) -> None:
    """The lab for an image dataset: a patch grid ``[B, h, w]``, masks drawn over real images.
    ``form`` and ``out`` are the page's two columns (controls, results)."""
    c, h, w = info.image_shape
    with form:
        sizes = patch_sizes(h, w)
        p0 = handoff.get("patch_size") if handoff.get("patch_size") in sizes else default_patch(sizes, h)
        patch = st.selectbox("Patch size", sizes, index=sizes.index(p0), key=f"ml_patch_{h}x{w}",
                             format_func=lambda p: patch_label(p, h, w))  # fmt: skip
        masking = masking_controls("image", 2, "ml", handoff.get("masking"))
        a, b = st.columns(2)
        seed = a.number_input("Seed", min_value=0, max_value=2**31 - 1, value=int(handoff.get("seed", DEFAULTS.train.seed)),
                              key="ml_seed", help="fixes the masks (train.seed of a run)")  # fmt: skip
        n = b.number_input("Batch for statistics", min_value=8, max_value=4096, value=256, step=64, key="ml_n",
                           help="masks drawn over this many real train images")  # fmt: skip
    if masking is None:
        return
    cfg = guarded(RunConfig.from_dict, {
        "data": {"dataset": dataset}, "masking": masking,
        "model": {"patch_size": int(patch)}, "train": {"seed": int(seed)},
    })  # fmt: skip
    with form:
        if st.button("Use in New run", type="primary", disabled=cfg is None, key="ml_use",
                     help="open New run with this dataset, patch size, seed and masking"):  # fmt: skip
            prev = st.session_state.get(HANDOFF_KEY) or {}
            st.session_state[HANDOFF_KEY] = {
                "gen": int(prev.get("gen", 0)) + 1, "dataset": dataset, "patch_size": int(patch),
                "seed": int(seed), "masking": cfg.masking.model_dump(mode="json"),
            }  # fmt: skip
            st.switch_page("../pages/new_run.py")
        with st.expander("masking config"):
            st.json(cfg.masking.model_dump(mode="json") if cfg is not None else masking)
    if cfg is None:
        return

    with out:
        st.subheader("Masks on real images")
        view = guarded(get_view, dataset)
        if view is not None:
            x = torch.from_numpy(view.preview)
            masks = guarded_mask(preview_masks, cfg, (c, h, w), len(x), images=x)
            if masks is not None:
                st.caption(
                    f"The first {len(x)} validation images of **{dataset}** with the masks a run with these "
                    f"settings uses for its reconstruction grid (seed {seed})."
                )
                rows = [("Original", view.preview.transpose(0, 2, 3, 1)), ("Masked input", mask_overlay(view.preview, masks))]
                image_rows(rows, captions=view.preview_captions)

        st.subheader("Statistics")
        images = guarded(train_batch, info, int(n))
        if images is not None:
            res = guarded_mask(image_mask_stats, json.dumps(cfg.masking.model_dump(mode="json"), sort_keys=True),
                               (dataset, info.created_at, len(images)), images, int(patch), int(seed))  # fmt: skip
            if res is not None:
                stats, rate, problem = res
                if problem:
                    st.warning(f"A run with these settings would be refused: {problem}")
                uses_ratio = get_masking(cfg.masking.strategy).uses_ratio
                at = (f" at ratio {cfg.masking.ratio:g}" + (" (step 0 of the schedule)" if cfg.masking.schedule != "constant" else "")
                      if uses_ratio else " (this strategy's parameters set its budget; the mask ratio is not used)")
                st.caption(
                    f"{stats.batch_size} masks of {h // patch}x{w // patch} patches drawn over real train images of "
                    f"**{dataset}**{at}."
                )  # fmt: skip
                mask_stats_panel(stats, rate)

        if cfg.masking.schedule != "constant":
            steps = st.columns([1, 2])[0].number_input("Run length (steps)", min_value=1, max_value=1_000_000, value=DEFAULTS.train.steps,
                                    step=100, key="ml_steps", help="train.steps of the run, for the schedule")  # fmt: skip
            st.altair_chart(schedule_chart(lambda s: ratio_at(cfg.masking, s, int(steps)), int(steps)), width="stretch")


#: Lab renderer per dataset modality; text and audio plug in here.
LABS = {"image": image_lab}

st.title("Mask lab")
infos = guarded(dataset_infos) or {}
if not infos:
    st.warning("No dataset available: import one on the Data page.")
    st.stop()
handoff = st.session_state.get(HANDOFF_KEY) or {}  # the last settings sent to New run, if any
names = list(infos)
form, out = st.columns([1, 2.3], gap="large")
with form:
    dataset = st.selectbox(
        "Dataset", names, key="ml_dataset", index=names.index(handoff["dataset"]) if handoff.get("dataset") in names else 0,
        format_func=lambda k: f"{k}  ({infos[k].modality}, {'x'.join(map(str, infos[k].image_shape))})",
    )  # fmt: skip
info = infos[dataset]
lab = LABS.get(info.modality)
if lab is None:
    form.info(f"Mask lab does not support {info.modality} datasets yet.")
    st.stop()
lab(dataset, info, handoff if handoff.get("dataset") == dataset else {}, form, out)
