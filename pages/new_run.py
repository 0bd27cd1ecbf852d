"""New run: configure a masked-autoencoder run, preview its masks on real images, launch it.

The preview calls ``engine.masking.preview_masks`` with the config being edited: the very masks the
run will use for its reconstruction grid. Launching only calls ``engine.launcher.submit``, which
starts a background worker process and returns at once.
"""

from __future__ import annotations

import streamlit as st

from app.components import guarded, image_rows, mask_overlay
from app.components.datasets import dataset_infos, get_view
from engine.config import RunConfig
from engine.errors import ConfigError
from engine.launcher import submit
from engine.masking import grid_shape, preview_masks
from engine.models import PRESETS

DEFAULTS = RunConfig()


def patch_sizes(h: int, w: int) -> list[int]:
    """Patch sizes that tile an ``h x w`` image (``grid_shape`` accepts them)."""
    out = []
    for p in range(1, min(h, w) + 1):
        try:
            grid_shape((h, w), p)
        except ConfigError:
            continue
        out.append(p)
    return out


def default_patch(sizes: list[int], h: int) -> int:
    """The config default when it fits with at most 8 patches a side (8x8 digits: P=2), else the
    size whose grid side is closest to 8 (28x28: P=4, 7x7 patches), which keeps CPU runs short."""
    if DEFAULTS.model.patch_size in sizes and h // DEFAULTS.model.patch_size <= 8:
        return DEFAULTS.model.patch_size
    return min(sizes, key=lambda p: (abs(h // p - 8), p))


st.title("New run")
infos = guarded(dataset_infos) or {}
if not infos:
    st.warning("No dataset available: import one on the Data page.")
    st.stop()

form, preview = st.columns([1, 2], gap="large")
with form:
    dataset = st.selectbox("Dataset", list(infos), key="nr_dataset")
    c, h, w = infos[dataset].image_shape
    sizes = patch_sizes(h, w)
    patch = st.selectbox(
        "Patch size", sizes, index=sizes.index(default_patch(sizes, h)), key=f"nr_patch_{h}x{w}",
        format_func=lambda p: f"{p} px  →  {h // p}x{w // p} = {(h // p) * (w // p)} patch"
        + ("es" if (h // p) * (w // p) != 1 else ""),
    )  # fmt: skip
    ratio = st.slider("Mask ratio", 0.05, 0.95, DEFAULTS.masking.ratio, 0.05, help="fraction of patches hidden")
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
    seed = b.number_input("Seed", min_value=0, max_value=2**31 - 1, value=t.seed, help="also fixes the preview masks")
    eval_every = a.number_input("Eval interval (steps)", min_value=1, max_value=1_000_000, value=t.eval_interval)
    run_name = b.text_input("Run name", placeholder="optional", max_chars=200)

cfg_dict = {
    "name": run_name.strip(),
    "data": {"dataset": dataset},
    "masking": {"strategy": DEFAULTS.masking.strategy, "ratio": float(ratio)},
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
    masks = guarded(preview_masks, cfg, (c, h, w), len(view.preview)) if cfg is not None and view is not None else None
    if masks is not None:
        per = masks[0].numel()
        st.caption(
            f"The first {len(view.preview)} validation images of **{dataset}** with the masks this run "
            f"will use for its reconstruction grid: {int(masks[0].sum())} of {per} patches masked."
        )
        rows = [("Original", view.preview.transpose(0, 2, 3, 1)), ("Masked input", mask_overlay(view.preview, masks))]
        image_rows(rows, captions=view.preview_captions)

    st.divider()
    if st.button("Launch", type="primary", disabled=cfg is None):
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
