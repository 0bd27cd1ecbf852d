"""New run: configure a masked-autoencoder run, preview its masks on real images, launch it.

The preview calls ``engine.masking.preview_masks`` with the config being edited: the very masks the
run will use for its reconstruction grid. Launching only calls ``engine.launcher.submit``, which
starts a background worker process and returns at once.
"""

from __future__ import annotations

import json

import streamlit as st
import torch

from app.components import guarded, image_rows, mask_overlay
from app.components.datasets import dataset_infos, get_view
from app.components.masks import HANDOFF_KEY, default_patch, guarded_mask, masking_controls, patch_label, patch_sizes
from engine.checks import check_run
from engine.config import RunConfig
from engine.launcher import submit
from engine.masking import get_masking, preview_masks
from engine.models import get_model_spec

DEFAULTS = RunConfig()


@st.cache_data(max_entries=32, ttl=60, show_spinner=False)
def preflight(cfg_json: str) -> tuple[int, int, int]:
    """``engine.checks.check_run`` of a config (JSON), cached for a minute: with superpixels it
    segments 64 real images, too slow to repeat on every rerun. Errors are not cached."""
    return check_run(RunConfig.from_dict(json.loads(cfg_json)))

st.title("New run")
infos = guarded(dataset_infos) or {}
if not infos:
    st.warning("No dataset available: import one on the Data page.")
    st.stop()

# Settings sent by Mask lab ("Use in New run"). They stay in the session: widgets are created with
# them as defaults under keys suffixed by the hand-off's generation, so a new hand-off gets fresh
# widgets while reruns keep the user's edits.
handoff = st.session_state.get(HANDOFF_KEY) or {}
gen = int(handoff.get("gen", 0))
if handoff and st.session_state.get("nr_handoff_gen") != gen:
    st.session_state["nr_handoff_gen"] = gen
    if handoff.get("dataset") in infos:
        st.session_state["nr_dataset"] = handoff["dataset"]

form, preview = st.columns([1, 2], gap="large")
with form:
    dataset = st.selectbox("Dataset", list(infos), key="nr_dataset")
    c, h, w = infos[dataset].image_shape
    carried = handoff if handoff.get("dataset") == dataset else {}
    sizes = patch_sizes(h, w)
    p0 = carried["patch_size"] if carried.get("patch_size") in sizes else default_patch(sizes, h)
    patch = st.selectbox("Patch size", sizes, index=sizes.index(p0), key=f"nr_patch_{h}x{w}_{gen}",
                         format_func=lambda p: patch_label(p, h, w))  # fmt: skip
    with st.container(border=True):
        masking = masking_controls("image", 2, f"nr_m{gen}", carried.get("masking"))  # the MAE model takes patch grids
        st.page_link("../pages/mask_lab.py", label="Compare strategies in Mask lab", icon="🎭")
    PRESETS = get_model_spec(DEFAULTS.model.arch).presets
    presets = list(PRESETS)
    preset = st.selectbox(
        "Model preset", presets, index=presets.index(DEFAULTS.model.preset) if DEFAULTS.model.preset in presets else 0,
        format_func=lambda k: f"{k}  (width {PRESETS[k].get('embed_dim', '?')}, depth {PRESETS[k].get('depth', '?')})",
    )  # fmt: skip
    t = DEFAULTS.train
    a, b = st.columns(2)
    steps = a.number_input("Steps", min_value=1, max_value=1_000_000, value=t.steps, step=100)
    batch = b.number_input("Batch size", min_value=1, max_value=65536, value=t.batch_size, step=16)
    lr = a.number_input("Learning rate", min_value=1e-6, max_value=10.0, value=t.lr, step=1e-4, format="%.5f")
    seed = b.number_input("Seed", min_value=0, max_value=2**31 - 1, value=int(carried.get("seed", t.seed)),
                          help="also fixes the preview masks")  # fmt: skip
    eval_every = a.number_input("Eval interval (steps)", min_value=1, max_value=1_000_000, value=t.eval_interval)
    run_name = b.text_input("Run name", placeholder="optional", max_chars=200)

cfg_dict = {
    "name": run_name.strip(),
    "data": {"dataset": dataset},
    "masking": masking if masking is not None else DEFAULTS.masking.model_dump(mode="json"),
    "model": {"preset": preset, "patch_size": int(patch)},
    "train": {
        "steps": int(steps), "batch_size": int(batch), "lr": float(lr), "seed": int(seed),
        "eval_interval": int(eval_every), "warmup_steps": min(DEFAULTS.train.warmup_steps, int(steps) // 10),
    },
}  # fmt: skip
cfg = guarded(RunConfig.from_dict, cfg_dict)

with preview:
    st.subheader("Mask preview")
    view = guarded(get_view, dataset)
    masks = None
    if cfg is not None and view is not None:  # side inputs (e.g. superpixels) from the preview images, as in training
        masks = guarded_mask(preview_masks, cfg, (c, h, w), len(view.preview), images=torch.from_numpy(view.preview))
    if masks is not None:
        per = masks[0].numel()
        st.caption(
            f"The first {len(view.preview)} validation images of **{dataset}** with the masks this run "
            f"will use for its reconstruction grid ({cfg.masking.strategy}): {int(masks[0].sum())} of {per} "
            "patches masked" + ("." if get_masking(cfg.masking.strategy).exact else " in the first image.")
            + (f" These are drawn at masking.ratio {cfg.masking.ratio:g}, the start of the {cfg.masking.schedule} "
               f"schedule; training ramps to {cfg.masking.final_ratio:g} (see the curve in Mask lab)."
               if cfg.masking.schedule != "constant" else "")
        )
        rows = [("Original", view.preview.transpose(0, 2, 3, 1)), ("Masked input", mask_overlay(view.preview, masks))]
        image_rows(rows, captions=view.preview_captions)

    st.divider()
    # The launcher's own pre-flight check, run before the click, so a config it would refuse (e.g.
    # masks that hide every patch of most samples) is explained here and Launch stays disabled.
    ready = cfg is not None and guarded(preflight, json.dumps(cfg.to_dict(), sort_keys=True)) is not None
    if st.button("Launch", type="primary", disabled=not ready):
        run_id = guarded(submit, cfg)
        if run_id is not None:
            st.session_state["nr_launched"] = run_id
    launched = st.session_state.get("nr_launched")
    if launched:
        st.success(f"Launched run **{launched}**: it trains in a background process.")
        l1, l2 = st.columns(2)
        with l1:
            st.page_link("../pages/run_detail.py", label="Open run detail", icon="🔍", query_params={"run": launched})
        with l2:
            st.page_link("../pages/runs.py", label="Compare runs", icon="📈")
    with st.expander("Resolved config"):
        st.json(cfg.to_dict() if cfg is not None else cfg_dict)
