"""Images in the dashboard: dataset samples, the patch-model fields of New run, mask previews on
real images, the reconstruction grid of a run, and Mask lab's image lab.

Conventions (see :mod:`app.components.images`): dataset images uint8 ``(N, H, W, C)``; model-side
images float ``(N, C, H, W)`` in [0, 1]; masks bool ``(N, h, w)``, True = masked.
"""

from __future__ import annotations

import json

import numpy as np
import streamlit as st
import torch

from app.components.charts import counts_chart
from app.components.compare import draw_columns, shared_inputs, stack_column
from app.components.datasets import get_view
from app.components.errors import guarded
from app.components.images import (
    as_rgb,
    chw_to_hwc_uint8,
    error_map,
    heat_map,
    image_grid,
    image_rows,
    mask_overlay,
    masked_only,
    recon_rows,
    upscale,
)
from app.components.importing import geometry_options, name_encoding_field
from app.components.masks import guarded_mask, lab_statistics, masking_controls, patch_select, train_batch
from app.components.media import png_url
from app.components.method_form import contrastive_weight, method_base, method_select, with_contrastive
from app.components.urlstate import dig, index_of
from app.modalities import ModalityUI, SampleView, register_ui
from app.modalities.text import cached_model, checkpoint_picker
from engine.api import (
    MaskingConfig,
    MasklabError,
    cls_attention,
    counted,
    distance_to_visible,
    fit_images,
    get_masking,
    get_model_spec,
    grid_shape,
    latest_checkpoint_step,
    list_runs,
    load_samples,
    read_metrics,
    read_task_info,
    sample_steps,
    source_input_shape,
)
from engine.eval.inference import checkpoint_path
from engine.masking import draw_mask, image_side_inputs, preview_masks
from engine.masking.stats import mask_stats, masks_per_second
from engine.tasks.checks import masking_problem
from engine.tasks.image.inference import reconstruct
from engine.tasks.image.recipe import recipe_for


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


def train_defaults(info, task: str) -> dict:
    """The training fields New run proposes for an image dataset (steps, batch size, learning rate,
    warmup, eval and checkpoint intervals): the measured recipe of its image size
    (:func:`engine.tasks.image.recipe.recipe_for`), whichever image task ``task`` is."""
    return recipe_for(info.image_shape)["train"]


def run_fields(info, task: str, key: str, carried: dict) -> dict:
    """New run's image fields: masking, patch size (only sizes that tile the images and that this
    masking can train with), architecture, loss, normalised-pixel target, preset. The widgets'
    defaults are ``carried`` (a partial run config, from the URL), else the measured recipe of the
    image size (:func:`engine.tasks.image.recipe_for`). Returns the partial config dict."""
    c, h, w = info.image_shape
    recipe = recipe_for(info.image_shape)
    with st.container(border=True):
        masking = masking_controls("image", 2, key, carried.get("masking"))  # patch grids
        st.page_link("../pages/mask_lab.py", label="Compare strategies in Mask lab")
    patch = int(patch_select(info, masking, key, dig(carried, "model.patch_size", recipe["model"]["patch_size"])))
    method = method_select(task, key, carried)
    arch = "simmim_vit" if method == "simmim" else "mae_vit"
    presets = get_model_spec(arch).presets
    names = list(presets)
    preset = st.selectbox("Model preset", names, key=f"{key}_preset_{arch}_{h}x{w}",
                          index=index_of(names, dig(carried, "model.preset", recipe["model"]["preset"])),
                          format_func=lambda k: f"{k}  (width {presets[k]['embed_dim']}, depth {presets[k]['depth']})")
    model = {"arch": arch, "preset": preset, "patch_size": patch}
    base = method_base(task, method, {"masking": masking, "model": model}, carried)
    tp = dict(base.get("task_params") or {})
    objective: dict = {"norm_pix_loss": False}
    recon = "mse"
    if tp.get("target", "pixel") == "pixel":
        losses = ["mse", "l1"]
        recon = st.selectbox("Loss on the masked patches", losses, key=f"{key}_loss_{arch}",
                             index=index_of(losses, dig(carried, "objective.loss"), 0 if arch == "mae_vit" else 1))
        objective["norm_pix_loss"] = st.checkbox(
            "Normalised-pixel target", key=f"{key}_normpix_{h}x{w}",
            value=bool(dig(carried, "objective.norm_pix_loss", recipe["objective"]["norm_pix_loss"])),
            help="score each patch against its own mean/std-normalised pixels (MAE sec. 4); the run then reports no "
                 "pixel MSE (de-normalising a prediction needs the hidden patch's own statistics)")
    for name, value in _method_params(method, tp, key, presets[preset]["depth"], patch).items():
        tp[name] = value
    weight = contrastive_weight(key, carried, disabled=arch != "mae_vit",
                                why="SimMIM has no pooled views to contrast; MAE methods do" if arch != "mae_vit" else "")
    return {"task": task, "masking": masking, "model": model, "objective": with_contrastive(objective, recon, weight),
            "task_params": tp}


def _method_params(method: str, tp: dict, key: str, depth: int, patch: int) -> dict:
    """The fields of the method's own parameters (the teacher, the HOG cells, the noise), defaulting to
    ``tp`` (:func:`app.components.method_form.method_base`: the carried config's values of the same
    method, else the method's own)."""
    def given(name, default):
        return tp.get(name, default)

    out: dict = {}
    if method == "data2vec":
        a, b = st.columns(2)
        with a:
            out["top_k"] = int(st.number_input("Teacher blocks averaged (top_k)", 1, depth, min(int(given("top_k", 2)), depth),
                                               key=f"{key}_top_k", help="data2vec's K: the target averages the "
                                               "teacher's last K blocks, each instance-normalised"))
        with b:
            out["ema_decay"] = float(st.number_input("Teacher decay at the start", 0.9, 0.99999, float(given("ema_decay", 0.998)),
                                                     step=0.0005, format="%g", key=f"{key}_ema",
                                                     help="tau: teacher <- tau * teacher + (1 - tau) * student; "
                                                          "annealed to task_params.ema_decay_end"))
        out["ema_decay_end"] = max(out["ema_decay"], float(given("ema_decay_end", 0.9999)))
    elif method == "maskfeat":
        cells = [c for c in range(1, min(patch, 4) + 1) if patch % c == 0]
        out["hog_cells"] = st.selectbox("HOG cells per patch side", cells, index=index_of(cells, given("hog_cells", 1)),
                                        key=f"{key}_hog_cells",
                                        help="1: one 9-bin histogram per patch; 2: four (2x2 cells)")
    elif method == "denoise":
        out["noise_sigma"] = float(st.slider("Noise sigma (pixel units)", 0.05, 2.0, float(given("noise_sigma", 0.5)), 0.05,
                                             key=f"{key}_sigma", help="Gaussian noise added to the selected patches, "
                                             "which stay visible; the clean pixels are the target"))
    return out


def mask_preview(cfg, info) -> None:
    """The run's fixed validation images with the masks it uses for its reconstruction grid."""
    view = guarded(get_view, info.name)
    if view is None:
        return
    c, h, w = info.image_shape
    images = torch.from_numpy(view.preview)
    fitted = guarded(source_input_shape, cfg) if cfg.model.init_from else None
    if fitted is not None and tuple(fitted) != (c, h, w):  # an imported architecture's input: as the run fits them
        images = fit_images(images.float(), fitted)
        c, h, w = fitted
        st.caption(f"Shown at the model's input, {h}x{w} pixels, as the run fits this dataset's images.")
    masks = guarded_mask(preview_masks, cfg, (c, h, w), len(view.preview), images=images)
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
    if "attention" in get_masking(cfg.masking.strategy).needs:
        st.caption(RANDOM_ATTENTION_NOTE)
    shown = images.numpy()
    rows = [("Original", shown.transpose(0, 2, 3, 1)), ("Masked input", mask_overlay(shown, masks))]
    image_rows(rows, captions=view.preview_captions)


#: Images per row of the main reconstruction view (each fills a quarter of the page width).
MAIN_COLUMNS = 4
#: Upscaling target of the main view's images (nearest neighbour; 28x28 -> 308 px, 8x8 -> 320 px).
MAIN_PX = 320


def step_picker(run_id: str, steps: list[int], key: str) -> int:
    """A slider over the saved evaluation steps; it follows the newest step while left at the
    newest one (a live run adds steps), and stays where the viewer put it otherwise."""
    last_key = f"{key}_newest"
    if st.session_state.get(key) not in steps or st.session_state.get(key) == st.session_state.get(last_key):
        st.session_state[key] = steps[-1]
    st.session_state[last_key] = steps[-1]
    return st.select_slider("Evaluation step", steps, key=key,
                            help="every saved evaluation of this run: the same images and masks at each step")


def pick_sample(sample, run, key: str):
    """The run's sample at the evaluation step chosen with :func:`step_picker` (shown only when the
    run saved more than one); ``sample`` (its newest) when there is no choice or no run."""
    if run is None:
        return sample
    steps = guarded(sample_steps, run.run_id) or [sample.step]
    if len(steps) > 1:
        step = step_picker(run.run_id, steps, f"{key}_{run.run_id}")
        if step != sample.step:
            return guarded(load_samples, run.run_id, step) or sample
    return sample


def _pixel_figures(run_id: str, step: int) -> dict[str, float]:
    """The run's ``val_mse`` / ``val_psnr`` logged at ``step`` (empty when not logged)."""
    df = guarded(read_metrics, [run_id], ["val_mse", "val_psnr"], max_points=None)
    if df is None or df.empty:
        return {}
    at = df[df.step == step]
    return dict(zip(at.key, at.value))


def samples_view(sample, run) -> None:
    """A run's reconstructions at one saved evaluation (a slider goes over all of them): the
    reconstruction with the visible patches pasted back, large (the main view, with each image's
    masked-patch MSE), then one row each of the originals, masked inputs, the prediction at the
    masked patches only, and the error map."""
    sample = pick_sample(sample, run, "recon_step")
    names = sample.meta.get("class_names", [])
    images, mask = sample["images"], sample["mask"]
    classes = [names[int(y)] if 0 <= int(y) < len(names) else str(int(y)) for y in sample["labels"]]
    config = run.config if run is not None else {}
    masking = config.get("masking", {})
    fixed = (f" (fixed masks at masking.ratio {masking.get('ratio')}, the start of its "
             f"{masking.get('schedule')} schedule)") if masking.get("schedule", "constant") != "constant" else ""
    figures = _pixel_figures(run.run_id, sample.step) if run is not None else {}
    overall = (f" · pixel MSE over all validation masks at this step {figures['val_mse']:.4f} "
               f"(PSNR {figures['val_psnr']:.1f} dB)") if "val_mse" in figures else ""
    st.caption(
        f"Step {sample.step} · {len(images)} fixed validation images · patch {sample.meta.get('patch_size')} px · "
        f"{masking.get('strategy', 'random')} masking · "
        f"{int(mask[0].sum())} of {mask[0].size} patches masked in the first image{fixed}{overall}"
    )
    target = (config.get("task_params") or {}).get("target", "pixel")
    if target != "pixel":
        what = "HOG features" if target == "hog" else "a teacher's latent features"
        st.caption(f"This run predicts {what} of the masked patches; the pixels shown come from a readout head trained on the decoder's "
                   "detached features (it does not train the encoder), a view of what the features hold.")
    if (config.get("task_params") or {}).get("corruption") == "noise":
        st.caption("This run adds Gaussian noise (sigma "
                   f"{(config.get('task_params') or {}).get('noise_sigma')}) to the selected patches instead of hiding "
                   "them: the 'masked' patches below were seen noisy, and their clean pixels are the target.")
    if (config.get("objective") or {}).get("norm_pix_loss"):
        st.caption("This run predicts per-patch normalised pixels: the images below are de-normalised with each "
                   "hidden patch's true mean and std, as MAE's figures do, so they peek at the answer.")
    rows = dict(recon_rows(images, mask, sample["pred_img"], sample["pasted"]))
    _, mse = error_map(images, sample["pasted"], mask)
    main = "Reconstruction + visible patches"
    st.markdown(f"**{main}**")
    image_grid(rows.pop(main), [f"{c} · MSE {m:.3f}" for c, m in zip(classes, mse)], columns=MAIN_COLUMNS,
               target_px=MAIN_PX)
    image_rows(list(rows.items()) + _method_rows(sample, images), captions=classes)


def _method_rows(sample, images) -> list[tuple[str, np.ndarray]]:
    """The rows a method adds to the reconstructions: the teacher's attention that chose an
    attention-guided mask, and a HOG run's pictures (the image's HOG; the predicted HOG at the
    masked patches beside the true HOG at the visible ones)."""
    rows = []
    if "attention" in sample.arrays:
        rows.append(("Teacher's class-token attention (the masks hide the most or least attended)",
                     heat_map(sample["attention"], images.shape[2:])))
    if "hog_img" in sample.arrays:
        rows.append(("HOG of the image (the MaskFeat target)", sample["hog_img"]))
        rows.append(("HOG predicted at the masked patches, true at the visible ones", sample["hog_pred"]))
    return rows


@st.cache_data(max_entries=16, ttl=900, show_spinner="Drawing masks…")
def _mask_stats(masking_json: str, images_key: tuple, _images, patch: int, seed: int, attention_key: tuple = (),
                _attention=None):
    """Masks of ``_images`` (float ``[N, C, H, W]``) drawn as a run would (side inputs from the
    images), their statistics, masks/s at this batch shape, and the pre-flight problem, if any.
    ``images_key`` identifies the images for the cache (dataset, version, N); ``_attention``
    (``[N, h*w]``, identified by ``attention_key``: run, step) the scores of ``attention`` (None:
    random scores drawn from the seed)."""
    cfg = MaskingConfig.model_validate(json.loads(masking_json))
    x = torch.from_numpy(_images)
    att = None if _attention is None else torch.from_numpy(_attention)
    h, w = grid_shape(tuple(x.shape[2:]), patch)
    shape = (len(x), h, w)

    def one_batch() -> torch.Tensor:
        g = torch.Generator().manual_seed(seed)
        return draw_mask(cfg, shape, g, **image_side_inputs(cfg, x, patch, att, generator=g))

    mask = one_batch()
    rate = masks_per_second(one_batch, min_time=0.2, warmup=False)
    return mask_stats(mask), rate, masking_problem(cfg, mask)


def lab_controls(info, carried: dict, key: str) -> dict:
    """Mask lab's image controls: the masking and the patch grid (``carried``: a partial run config
    of defaults); returns the partial config."""
    masking = masking_controls("image", 2, key, carried.get("masking"))
    patch = patch_select(info, masking, key, dig(carried, "model.patch_size"))
    return {"task": "image_mim", "masking": masking, "model": {"patch_size": int(patch)}}


def lab_results(cfg, info, n: int, url=None) -> None:
    """Mask lab's image results: the run's masks on real images, then batch statistics. For the
    ``attention`` strategy, an "Attention from" select first (:func:`attention_source`; kept in
    ``url``'s ``attention``, an :class:`app.components.urlstate.Scope`), and the masks shown beside
    the chosen checkpoint's attention maps (:func:`attention_preview`)."""
    st.subheader("Masks on real images")
    source = None
    if "attention" in get_masking(cfg.masking.strategy).needs:
        source = attention_source(cfg, info, url)
    elif url is not None:
        url.put("attention", None)  # another strategy: no stale choice in the URL
    if source is None or not attention_preview(cfg, info, source):
        source = None
        mask_preview(cfg, info)
    st.subheader("Statistics")
    mask_stats_section(cfg, info, n, source)


def mask_stats_section(cfg, info, n: int, source: str | None = None) -> None:
    """Statistics of ``cfg.masking`` drawn over ``n`` real train images of ``info`` (any dataset
    with images): the pre-flight's verdict, then :func:`app.components.masks.lab_statistics`.
    ``source``: the run whose checkpoint's attention ranks the patches (``attention``; None: random
    scores)."""
    c, h, w = info.image_shape
    patch = cfg.model.patch_size
    images = guarded(train_batch, info, int(n))
    if images is None:
        return
    att, att_key, via = None, (), ""
    if "attention" in get_masking(cfg.masking.strategy).needs:
        got = checkpoint_attention(source, images, (info.name, info.created_at, "train", len(images))) if source else None
        if got is not None:
            att, att_key = got[0], (source, got[1])
            via = (f" The attention of run {source} (checkpoint of step {got[1]}), computed once for the batch "
                   "(not counted in masks/s).")
        else:
            via = " The attention: random scores (no checkpoint)."
    res = guarded_mask(_mask_stats, json.dumps(cfg.masking.model_dump(mode="json"), sort_keys=True),
                       (info.name, info.created_at, len(images)), images, int(patch), int(cfg.train.seed),
                       att_key, att)  # fmt: skip
    uses_ratio = get_masking(cfg.masking.strategy).uses_ratio
    at = (f" at ratio {cfg.masking.ratio:g}" + (" (step 0 of the schedule)" if cfg.masking.schedule != "constant" else "")
          if uses_ratio else " (this strategy's parameters set its budget; the mask ratio is not used)")
    grid = f"{h // patch}x{w // patch} patches ({patch}x{patch} px each)"
    lab_statistics(res, lambda stats: f"{stats.batch_size} masks of {grid} drawn over real train images of "
                   f"**{info.name}**{at}.{via}", strategy=cfg.masking.strategy)


# --------------------------------------------------------------------------- attention (AttMask)

#: What the previews say when ``attention`` ranks random scores (New run, Mask lab without a checkpoint).
RANDOM_ATTENTION_NOTE = (
    "Attention: from no checkpoint here, so these masks rank random scores (a uniform random mask of the same "
    "count). Mask lab shows them ranked by a trained MAE run's class-token attention: pick the run in "
    "\"Attention from\".")
#: The "Attention from" choice of no checkpoint (its value in the URL).
NO_CHECKPOINT = "random"


def attention_runs(info, patch: int) -> tuple[list, int]:
    """The runs whose attention Mask lab can show on ``info``'s images with ``patch`` px patches:
    completed ``image_mim`` runs of an MAE (``model.arch`` ``mae_vit``) whose model reads images of
    the dataset's size (its ``task.json`` ``image_shape``) cut into patches of the same size, newest
    first; and how many of the same image size were left out for another patch size."""
    _, H, W = info.image_shape
    runs, other_patch = [], 0
    for rec in list_runs(max_age_s=1.0):
        c = rec.config
        if rec.status != "completed" or c.get("task") != "image_mim" or dig(c, "model.arch") != "mae_vit":
            continue
        shape = _input_shape(rec.run_id, str(rec.path))
        if shape is None or tuple(shape[1:]) != (H, W):
            continue
        if dig(c, "model.patch_size") != patch:
            other_patch += 1
            continue
        runs.append(rec)
    return runs, other_patch


@st.cache_data(max_entries=1024, show_spinner=False)
def _input_shape(run_id: str, run_dir: str) -> tuple[int, ...] | None:
    """The ``(C, H, W)`` a completed run's model reads (its ``task.json``), or None when unreadable."""
    try:
        return tuple(int(v) for v in read_task_info(run_dir)["image_shape"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def attention_source(cfg, info, url=None) -> str | None:
    """Mask lab's "Attention from" select: the runs of :func:`attention_runs` (the newest first and
    by default) and "random scores (no checkpoint)". Returns the chosen run id, or None."""
    patch = int(cfg.model.patch_size)
    runs, other_patch = attention_runs(info, patch)
    names = {r.run_id: f"{r.name} · {r.run_id} · {r.config.get('data', {}).get('dataset')} · step {r.step}"
             for r in runs}
    options = [*names, NO_CHECKPOINT]
    label = "Attention from"
    help_ = ("the completed MAE runs (image_mim, mae_vit) on images of this size with the same patch size: the class "
             "token's attention to each patch in the last encoder block of their latest checkpoint, averaged over heads, "
             "ranks the patches (AttMask). Random scores rank them without a checkpoint.")
    kw = dict(options=options, key=f"ml_attention_{info.name}_{patch}", help=help_,
              format_func=lambda k: names.get(k, "random scores (no checkpoint)"))
    if url is None:
        choice = st.selectbox(label, index=0, **kw)
    else:
        choice = url.widget(st.selectbox, label, "attention", default=options[0], cast=str, **kw)
    if not runs:
        st.caption("No completed MAE run on images of this size with this patch size yet: train one (New run, "
                   "image_mim with the MAE model) to rank patches by its attention."
                   + (f" {other_patch} such run{'s' if other_patch != 1 else ''} used another patch size: choose "
                      "it to list them." if other_patch else ""))
    return None if choice == NO_CHECKPOINT else choice


@st.cache_data(max_entries=16, ttl=900, show_spinner="Computing the attention…")
def _attention_of(run_id: str, step: int, mtime: float, images_key: tuple, _images) -> np.ndarray:
    """:func:`engine.methods.attention.cls_attention` of the run's checkpoint at ``step`` on
    ``_images`` (float ``[N, C, H, W]``, fitted to the model's input), ``[N, L]`` float32. The
    model comes from :func:`app.modalities.text.cached_model`; ``images_key`` (dataset, version,
    split, N) identifies the images for the cache, ``mtime`` a rewritten checkpoint."""
    model = cached_model(run_id, step, mtime).model
    x = torch.from_numpy(np.ascontiguousarray(_images, dtype=np.float32))
    shape = (int(model.in_chans), *(int(v) for v in model.img_size))
    if tuple(x.shape[1:]) != shape:
        x = fit_images(x, shape)
    return cls_attention(model, x).cpu().numpy()


def checkpoint_attention(run_id: str, images, images_key: tuple) -> tuple[np.ndarray, int] | None:
    """``(attention [N, L], step)`` of run ``run_id``'s latest checkpoint on ``images``, or None after
    an ``st.error`` that says why (no checkpoint kept, a damaged or unreadable one)."""
    try:
        step = latest_checkpoint_step(run_id)
        if step is None:
            st.error(f"Cannot show the attention of run {run_id}: it keeps no complete checkpoint (deleted, or never "
                     "written), so there is no model to read it from. Pick another run, or random scores.")
            return None
        mtime = (checkpoint_path(run_id, step) / "model.safetensors").stat().st_mtime
        return _attention_of(run_id, int(step), mtime, images_key, images), int(step)
    except (MasklabError, OSError, ValueError) as e:
        st.error(f"Cannot show the attention of run {run_id}: {e}. Pick another run, or random scores.")
        return None


def attention_preview(cfg, info, run_id: str) -> bool:
    """The fixed validation images, each beside the class-token attention map of run ``run_id``'s
    latest checkpoint (a heat map on the patch grid, brighter = more attended) and the mask that
    ranking gives (:func:`engine.masking.preview_masks` with those scores). Returns False (after an
    ``st.error``) when the attention cannot be computed, so the caller shows the random-score preview."""
    view = guarded(get_view, info.name)
    if view is None:
        return True
    c, H, W = info.image_shape
    images = torch.from_numpy(view.preview)
    got = checkpoint_attention(run_id, view.preview, (info.name, info.created_at, "preview", len(images)))
    if got is None:
        return False
    att, step = got
    h, w = grid_shape((H, W), cfg.model.patch_size)
    att = torch.from_numpy(att).reshape(len(images), h, w)
    masks = guarded_mask(preview_masks, cfg, (c, H, W), len(images), images=images, attention=att)
    if masks is None:
        return True
    prm = get_masking(cfg.masking.strategy).parse_params(cfg.masking.params)
    which = "most" if prm.mode == "most" else "least"
    mixed = f", {prm.random_share:.0%} of them drawn at random instead" if prm.random_share else ""
    st.caption(f"Each of the {len(images)} fixed validation images of **{info.name}**, the class token's attention to "
               f"each patch in the last encoder block of run {run_id} (checkpoint of step {step}; heads averaged; each "
               f"map stretched from its least attended patch, black, to its most attended, pale yellow), and the mask it gives: the "
               f"{int(masks[0].sum())} {which} attended of {h * w} patches{mixed}. The first image's patches get "
               f"{float(att[0].min()):.1%} to {float(att[0].max()):.1%} of its attention (uniform: {1 / (h * w):.1%}).")
    shown = images.numpy()
    triples = np.stack([as_rgb(chw_to_hwc_uint8(shown)), heat_map(att.numpy(), (H, W)), mask_overlay(shown, masks)],
                       axis=1)  # (N, 3, H, W, 3): image, attention, mask side by side
    names = view.preview_captions
    captions = [f"{t} · {names[i]}" if t == "image" else t for i in range(len(images))
                for t in ("image", "attention", "masked")]
    image_grid(triples.reshape(-1, *triples.shape[2:]), captions, columns=6)
    return True


# --------------------------------------------------------------------------- interactive masking

#: Grids with more patches a side than this get the box tool only (a toggle per patch would not fit).
MAX_TOGGLE_SIDE = 16


def _set_rows(prefix: str, hidden) -> None:
    """Put a ``[h, w]`` bool mask into the per-row patch toggles (an ``on_click`` callback)."""
    for r, row in enumerate(hidden):
        st.session_state[f"{prefix}_row{r}"] = [int(c) for c in np.flatnonzero(row)]


def _random_rows(prefix: str, h: int, w: int) -> None:
    """Hide a new random 75% of the patches (MAE's ratio), a different draw at each click."""
    draws = st.session_state.get(f"{prefix}_draws", 0) + 1
    st.session_state[f"{prefix}_draws"] = draws
    rng = np.random.default_rng(draws)
    _set_rows(prefix, rng.permutation(h * w).reshape(h, w) < round(0.75 * h * w))


def _hide_box(prefix: str, hidden, rows: str, cols: str) -> None:
    """Hide the box of patches chosen with the two range sliders, on top of the current mask."""
    (r0, r1), (c0, c1) = st.session_state[rows], st.session_state[cols]
    out = np.array(hidden, bool)
    out[r0 - 1 : r1, c0 - 1 : c1] = True
    _set_rows(prefix, out)


def _patch_toggles(prefix: str, h: int, w: int) -> np.ndarray:
    """One row of toggle buttons per patch row (``st.pills``, multi-select; a selected button is a
    hidden patch), numbered row-major from 1. Returns the ``[h, w]`` bool mask they set."""
    hidden = np.zeros((h, w), bool)
    digits = len(str(h * w))
    for r in range(h):
        picked = st.pills(f"Patch row {r + 1}", list(range(w)), selection_mode="multi", key=f"{prefix}_row{r}",
                          format_func=lambda c, r=r: f"{r * w + c + 1:0{digits}d}", label_visibility="collapsed")
        hidden[r, list(picked or [])] = True
    return hidden


def _url_mask(value, h: int, w: int) -> np.ndarray | None:
    """The ``[h, w]`` bool mask of a URL's ``hidden`` (row-major patch indices, ``[0, 5, 6]``), or
    None when it is absent or not a list (indices outside the grid are dropped)."""
    if not isinstance(value, list):
        return None
    flat = np.zeros(h * w, bool)
    flat[[k for k in value if isinstance(k, int) and not isinstance(k, bool) and 0 <= k < h * w]] = True
    return flat.reshape(h, w)


def masking_box(run, sample, url) -> None:
    """Run detail's interactive masking for image runs: pick one of the run's fixed validation
    images, hide or show patches (a toggle per patch, laid out as the patch grid, or a box), and
    see a kept checkpoint's reconstruction at once (:func:`engine.tasks.image.reconstruct`, in the
    dashboard process, the model cached as the text fill-in box caches it). The checkpoint, the
    image and the patches hidden are kept in ``url`` (an :class:`app.components.urlstate.Scope`:
    ``ckpt``, ``image``, ``hidden``: row-major patch indices), read on the box's first draw."""
    st.subheader("Mask it yourself")
    if sample is None or sample.kind != "image":
        st.info("The box needs the run's validation images: they are saved with its first evaluation (step 0).")
        return
    with st.container(key=f"mim_box_{run.run_id}"):
        loaded = checkpoint_picker(run, f"mim_ckpt_{run.run_id}", url)
        if loaded is None:
            return
        images, masks = sample["images"], sample["mask"]
        names = sample.meta.get("class_names", [])
        classes = [names[int(y)] if 0 <= int(y) < len(names) else str(int(y)) for y in sample["labels"]]
        i = url.widget(st.selectbox, "Validation image", "image", default=0, cast=int, options=list(range(len(images))),
                       key=f"mim_img_{run.run_id}", format_func=lambda k: f"{k + 1} · {classes[k]}")
        h, w = masks.shape[1:]
        prefix = f"mim_{run.run_id}_{i}"
        first = f"mim_{run.run_id}_drawn"  # the box's first draw in this session (a reload): the URL's mask
        if f"{prefix}_row0" not in st.session_state:
            asked = _url_mask(url.get("hidden"), h, w) if first not in st.session_state else None
            _set_rows(prefix, masks[i] if asked is None else asked)  # else the run's own mask of this image
        st.session_state[first] = True
        current = np.array([[c in (st.session_state.get(f"{prefix}_row{r}") or []) for c in range(w)]
                            for r in range(h)])
        left, right = st.columns([2, 3], gap="large")
        with left:
            b = st.columns(3)
            b[0].button("Run's mask", key=f"{prefix}_reset", on_click=_set_rows, args=(prefix, masks[i]))
            b[1].button("Show all", key=f"{prefix}_none", on_click=_set_rows, args=(prefix, np.zeros((h, w), bool)))
            b[2].button("Random 75%", key=f"{prefix}_random", on_click=_random_rows, args=(prefix, h, w))
            if max(h, w) <= MAX_TOGGLE_SIDE:
                st.caption("Click a patch number to hide it (highlighted = hidden), again to show it.")
                hidden = _patch_toggles(prefix, h, w)
            else:
                hidden = current
            rows, cols = f"{prefix}_box_rows", f"{prefix}_box_cols"
            with st.expander("Hide a box of patches", expanded=max(h, w) > MAX_TOGGLE_SIDE):
                st.slider("Patch rows", 1, h, (1, max(1, h // 2)), key=rows)
                st.slider("Patch columns", 1, w, (1, max(1, w // 2)), key=cols)
                st.button("Hide this box", key=f"{prefix}_box", on_click=_hide_box, args=(prefix, hidden, rows, cols))
        url.put("hidden", [int(k) for k in np.flatnonzero(hidden)])
        with right:
            out = reconstruct(loaded, images[i], hidden)
            x, m = images[i : i + 1], hidden[None]
            _, mse = error_map(x, out["pasted"][None], m)
            image_grid(np.concatenate([mask_overlay(x, m), as_rgb(chw_to_hwc_uint8(out["pasted"][None])),
                                       masked_only(out["pred_img"][None], m), as_rgb(chw_to_hwc_uint8(x))]),
                       ["Model input", "Reconstruction + visible patches", "Prediction at hidden patches", "Original"],
                       columns=2, target_px=MAIN_PX)
            n = int(hidden.sum())
            st.caption(f"{n} of {h * w} patches hidden · checkpoint of step {loaded.step}"
                       + (f" · MSE at the hidden patches {mse[0]:.4f}" if n else " · nothing hidden, nothing to predict"))


def compare_view(samples: dict, n: int = 6) -> list[tuple[str, np.ndarray]]:
    """The Compare page's reconstruction grid: rows are the first ``n`` fixed validation images
    (the same rows for runs on the same dataset: :func:`engine.data.representative`), columns are
    the original, then per run its masked input and its reconstruction with the visible patches
    pasted back, at each run's latest samples; where the runs' images differ (other datasets or
    sizes), each run's own original comes before its two columns. ``samples``: run label ->
    ``Sample`` of kind ``image``. Returns the ``(caption, uint8 column image)`` pairs drawn (the HTML
    report reuses them)."""
    if not samples:
        return []
    first, k, same = shared_inputs(samples, "images", n)
    columns = [("original", chw_to_hwc_uint8(first["images"][:k]))] if same else []
    for label, s in samples.items():
        if not same:
            columns.append((f"{label} · original", chw_to_hwc_uint8(s["images"][:k])))
        columns.append((f"{label} · masked (step {s.step})", mask_overlay(s["images"][:k], s["mask"][:k])))
        columns.append((f"{label} · reconstruction (step {s.step})", chw_to_hwc_uint8(s["pasted"][:k])))
    if not same:
        st.caption("These runs' fixed validation images differ (other datasets or image sizes): each column shows "
                   "its own run's images, after its own original.")
    drawn = [(c, stack_column(np.stack([upscale(np.asarray(im), 96) for im in imgs]))) for c, imgs in columns]
    draw_columns(drawn, per_row=9, fewest=5)
    return drawn


def matrix_cells(sample, rows: int) -> list[dict]:
    """The reconstruction matrix's cells (:mod:`app.components.matrix`) of the first ``rows``
    images: the original, the reconstruction with the visible patches pasted back and the error map
    at the masked patches, as PNG data URLs at the images' own size, and each image's masked-patch MSE."""
    k = min(rows, len(sample["images"]))
    images, mask = sample["images"][:k], sample["mask"][:k]
    err, mse = error_map(images, sample["pasted"][:k], mask)
    originals, pasted = as_rgb(chw_to_hwc_uint8(images)), as_rgb(chw_to_hwc_uint8(sample["pasted"][:k]))
    return [{"original": png_url(originals[i]), "recon": png_url(pasted[i]), "error": png_url(err[i]),
             "note": f"MSE {mse[i]:.4f}" if np.isfinite(mse[i]) else ""} for i in range(k)]


def patch_errors(images: np.ndarray, pred: np.ndarray, P: int) -> np.ndarray:
    """Per-patch mean squared error ``[N, h, w]`` of ``pred`` against ``images`` (``[N, C, H, W]``,
    predictions clipped to [0, 1]), patches of ``P`` pixels."""
    n, c, H, W = images.shape
    sq = (np.clip(pred, 0, 1) - images) ** 2
    return sq.reshape(n, c, H // P, P, W // P, P).mean(axis=(1, 3, 5))


def nearest_visible(hidden: np.ndarray) -> np.ndarray:
    """For each unit of ``hidden`` (bool ``[N, h, w]``) the flat index of its nearest visible unit in
    the same image (Chebyshev, the first in row order on ties); -1 in an image with none visible."""
    n, h, w = hidden.shape
    ys, xs = np.divmod(np.arange(h * w), w)
    out = np.full((n, h * w), -1, np.int64)
    for i in range(n):
        vis = np.flatnonzero(~hidden[i].ravel())
        if len(vis):
            d = np.maximum(np.abs(ys[:, None] - ys[vis][None]), np.abs(xs[:, None] - xs[vis][None]))
            out[i] = vis[d.argmin(axis=1)]
    return out.reshape(n, h, w)


def distance_errors(sample):
    """The distance plot's data (:mod:`app.components.distance`): each patch's Chebyshev distance to
    the nearest visible patch, and the masked-patch MSE of the reconstruction, of the visible-pixel
    mean and of the nearest visible patch copied in (two trivial baselines on the same images)."""
    images, pasted, hidden = sample["images"].astype(np.float32), sample["pasted"].astype(np.float32), sample["mask"]
    n, c, H, W = images.shape
    P = H // hidden.shape[1]
    dist = distance_to_visible(hidden, (1, 2))
    pix = np.repeat(np.repeat(hidden, P, axis=1), P, axis=2)[:, None]  # [N, 1, H, W]
    seen = np.where(pix, np.nan, images)
    mean = np.nan_to_num(np.nanmean(seen, axis=(2, 3), keepdims=True)) * np.ones_like(images)
    src = nearest_visible(hidden)
    patches = images.reshape(n, c, H // P, P, W // P, P).transpose(0, 2, 4, 1, 3, 5).reshape(n, -1, c, P, P)
    copied = np.take_along_axis(patches, np.maximum(src, 0).reshape(n, -1, 1, 1, 1), axis=1)
    copied = copied.reshape(n, H // P, W // P, c, P, P).transpose(0, 3, 1, 4, 2, 5).reshape(n, c, H, W)
    errors = {"this run": patch_errors(images, pasted, P), "visible-pixel mean": patch_errors(images, mean, P),
              "nearest visible patch": patch_errors(images, copied, P)}
    return dist, errors, "patches (Chebyshev)", "pixel MSE at the hidden patch"


def describe(info) -> str:
    """The dataset in a few words for the Data page's selector: images and their size."""
    return f"{counted(info.n_train + info.n_val, 'image')}, {'x'.join(map(str, info.image_shape[1:]))} px"


def import_fields(plan, key: str) -> tuple[dict, dict]:
    """The Data page's options for a zip or folder of images: the member-name encoding, and how the
    images become square (:func:`app.components.importing.geometry_options`)."""
    keywords = geometry_options(key)
    return name_encoding_field(key), keywords


register_ui(ModalityUI(
    "image", data_section=data_section, run_fields=run_fields, mask_preview=mask_preview, lab_controls=lab_controls,
    lab_results=lab_results, describe=describe, train_defaults=train_defaults, import_fields=import_fields, item="image",
    plan_item="image file", samples=(SampleView("image", "Reconstructions", samples_view, compare_view, matrix_cells, distance_errors),),
    boxes={"masking": masking_box},
))  # fmt: skip
