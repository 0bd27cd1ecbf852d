"""Mask lab: try every masking strategy on real data before training with it.

Pick a dataset and a strategy with its parameters (and the modality's grid: a patch size for
images, a tokenizer for text); the page shows the masks a run with these settings would use on its
fixed validation samples (the very functions the training loop calls), then statistics of a batch
of masks drawn on real train samples: the actual ratio per sample, the sizes of contiguous masked
regions, how often each position is masked, and how many masks per second the strategy draws.
"Use in New run" carries the settings to the New run page. Nothing here trains.

The controls and results come from the dataset modality's view (``app.modalities``).
"""

from __future__ import annotations

import streamlit as st

from app.components import guarded
from app.components.datasets import dataset_infos
from app.components.masks import HANDOFF_KEY, schedule_chart
from app.modalities import ui_for
from engine.config import RunConfig
from engine.masking import ratio_at

DEFAULTS = RunConfig()

st.title("Mask lab")
infos = guarded(dataset_infos) or {}
if not infos:
    st.warning("No dataset available: import one on the Data page.")
    st.stop()
handoff = st.session_state.get(HANDOFF_KEY) or {}  # the last settings sent to New run, if any
names = list(infos)
if "ml_dataset" not in st.session_state:  # a shared link, else the last hand-off, opens that dataset
    first = next((d for d in (st.query_params.get("dataset"), handoff.get("dataset")) if d in infos), names[0])
    st.session_state["ml_dataset"] = first
form, out = st.columns([1, 2.3], gap="large")
with form:
    dataset = st.selectbox(
        "Dataset", names, key="ml_dataset",
        format_func=lambda k: f"{k}  ({infos[k].modality}"
        + (f", {'x'.join(map(str, infos[k].image_shape))})" if infos[k].image_shape else ")"),
    )  # fmt: skip
info = infos[dataset]
st.query_params["dataset"] = dataset
ui = ui_for(info.modality)
if ui is None:
    form.info(f"Mask lab does not support {info.modality} datasets yet.")
    st.stop()
carried = handoff if handoff.get("dataset") == dataset else {}
with form:
    controls = ui.lab_controls(info, carried, "ml")
    a, b = st.columns(2)
    seed = a.number_input("Seed", min_value=0, max_value=2**31 - 1, value=int(carried.get("seed", DEFAULTS.train.seed)),
                          key="ml_seed", help="fixes the masks (train.seed of a run)")  # fmt: skip
    n = b.number_input("Batch for statistics", min_value=8, max_value=4096, value=256, step=64, key="ml_n",
                       help="masks drawn over this many real train samples")  # fmt: skip
if controls.get("masking") is None:
    st.stop()
cfg = guarded(RunConfig.from_dict, {**controls, "data": {"dataset": dataset, **controls.get("data", {})},
                                    "train": {"seed": int(seed)}})  # fmt: skip
with form:
    if st.button("Use in New run", type="primary", disabled=cfg is None, key="ml_use",
                 help="open New run with this dataset, task, grid, seed and masking"):  # fmt: skip
        prev = st.session_state.get(HANDOFF_KEY) or {}
        st.session_state[HANDOFF_KEY] = {
            "gen": int(prev.get("gen", 0)) + 1, "dataset": dataset, "task": cfg.task, "patch_size": cfg.model.patch_size,
            "seed": int(seed), "masking": cfg.masking.model_dump(mode="json"),
            "tokenizer": cfg.data.tokenizer.model_dump() if cfg.data.tokenizer else None,
        }  # fmt: skip
        st.switch_page("../pages/new_run.py")
    with st.expander("masking config"):
        st.json(cfg.masking.model_dump(mode="json") if cfg is not None else controls.get("masking"))
if cfg is None:
    st.stop()
with out:
    ui.lab_results(cfg, info, int(n))
    if cfg.masking.schedule != "constant":
        steps = st.columns([1, 2])[0].number_input("Run length (steps)", min_value=1, max_value=1_000_000,
                                                   value=DEFAULTS.train.steps, step=100, key="ml_steps",
                                                   help="train.steps of the run, for the schedule")  # fmt: skip
        st.altair_chart(schedule_chart(lambda s: ratio_at(cfg.masking, s, int(steps)), int(steps)), width="stretch")
